// Mail over SMTP with a 1 MiB attachment: N emails through POST /api/send/batch (8 a request: each carries
// the file in base64, 1.4 MB), one recipient each, svc's SMTP_URL at the discarding relay of the mail-over-
// SMTP scenario; beside it, nodemailer's pooled transport (the same connection count) sending the same
// messages with the same file. svc's path holds more than the peer's: the file comes in over HTTP, is
// decoded, hashed and stored (fsynced) before the 202, read back and encoded once per email. Then the same
// file to 50 recipients an email: each gets a copy of its own (its tracking and unsubscribe link), and the
// file's base64 is made once per email, so svc's CPU per email grows by the copies' SMTP writes, not by 50
// encodings of the file.
import { randomBytes } from 'node:crypto'
import type { ChildProcess } from 'node:child_process'
import { costOf, CpuWatch, log, notes, pick, postBatches, recordCost, recordCpu, reportLogged, results, startSvc, stopSvc, QUICK, type Sample } from '../lib/context.js'
import { ask, memoryOf, sleep, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { removeDir, Seeder, tempDataDir, type SvcProcess } from '../lib/svc.js'
import { relayHas, SMTP_CONNECTIONS, stageLine, stageTotals } from './smtp.js'

export interface SmtpAttachmentFigures {
  /** Emails a second at the relay, each with the 1 MiB file. */
  svc: number
  peer: number
  /** svc's CPU per email (µs, all threads): one recipient, and 50 recipients (a copy each). */
  cpuPerEmail1: number
  cpuPerEmail50: number
  /** The extra CPU of each further copy, in µs: (cpuPerEmail50 - cpuPerEmail1) / 49. */
  cpuPerExtraCopy: number
  /** The SMTP leg alone: emails accepted beforehand and due at once, at the relay a second (svcLegRun). */
  leg?: number
  /** 20 sends of a 20 MiB file each, posted at once: svc's peak RSS (VmHWM), in MiB, and its RSS before. */
  memory?: { sends: number; fileMiB: number; peakMiB: number; beforeMiB: number; seconds: number; retried: number }
}

const FILE_BYTES = 1024 * 1024
const PER_REQUEST = 8

function bodies (count: number, content: string, recipients: number, scheduledAt?: string): string[] {
  const out: string[] = []
  for (let start = 0; start < count; start += PER_REQUEST) {
    out.push(JSON.stringify(Array.from({ length: Math.min(PER_REQUEST, count - start) }, (_, j) => {
      const i = start + j
      const to = recipients === 1 ? `someone${i}@example.com` : Array.from({ length: recipients }, (_, r) => `reader${r}.${i}@example.com`)
      return {
        to, subject: `Benchmark message ${i}`,
        html: `<p>Hello from the svc benchmark, message ${i}.</p><p><a href="https://example.com/docs">Read the docs</a></p>`,
        attachments: [{ filename: 'report.pdf', content }],
        ...(scheduledAt !== undefined ? { scheduledAt } : {}),
      }
    })))
  }
  return out
}

/** svc on a fresh data directory with one account and key, its SMTP_URL at the relay, for `run`; then stopped and removed. */
async function withSvc<T> (port: number, label: string, env: Record<string, string>, run: (svc: SvcProcess, key: string) => Promise<T>): Promise<T> {
  const dir = tempDataDir()
  const seeder = new Seeder(dir, 'http://127.0.0.1:9')
  const account = await seeder.account()
  const key = await seeder.apiKey(account)
  await seeder.close()
  const svc = await startSvc(dir, { SMTP_URL: `smtp://127.0.0.1:${port}`, SMTP_POOL_SIZE: String(SMTP_CONNECTIONS), ...env }, label)
  try {
    return await run(svc, key)
  } finally {
    await stopSvc(svc)
    reportLogged(label, svc)
    removeDir(dir)
  }
}

/** A few emails with the file, unmeasured, through to the relay. */
async function warmUp (relay: ChildProcess, svc: SvcProcess, key: string, content: string, label: string): Promise<void> {
  await ask(relay, { type: 'reset' })
  await postBatches(svc.origin, key, bodies(PER_REQUEST * 2, content, 1), 2)
  await relayHas(relay, PER_REQUEST * 2, `${label} warm-up`)
}

async function svcRun (relay: ChildProcess, port: number, count: number, content: string, recipients: number, label: string): Promise<Sample & { cpuPerEmail: number }> {
  return await withSvc(port, label, {}, async (svc, key) => {
    await warmUp(relay, svc, key, content, label)
    await ask(relay, { type: 'reset' })
    const before = await stageTotals(svc.origin)
    const watch = new CpuWatch({ svc: svc.pid })
    const started = Date.now()
    const statuses = await postBatches(svc.origin, key, bodies(count, content, recipients), 4)
    const s = await relayHas(relay, count * recipients, label)
    const report = watch.stop()
    const after = await stageTotals(svc.origin)
    const rate = s.messages / recipients / ((s.last - started) / 1000)
    const foreign = recordCpu(label, report)
    const emails = s.messages / recipients
    const cost = costOf(report, emails, { name: 'svc', pid: svc.pid, deliveryTids: [] })
    recordCost({ what: `smtp + 1 MiB file, ${recipients} recipient${recipients > 1 ? 's' : ''} (svc)`, per: 'email', count: emails, procs: cost })
    log(`    svc ${label}: ${fmt(rate)} emails/s (${fmt(s.messages)} messages at the relay for ${fmt(count)} emails × ${recipients}; statuses ${JSON.stringify(statuses)})`)
    log(`      stages (mean per observation): ${stageLine(before, after)}`)
    return { value: rate, foreign, cpuPerEmail: cost.svc?.total ?? NaN }
  })
}

async function peerRun (peer: ChildProcess, relay: ChildProcess, port: number, count: number, content: string): Promise<Sample> {
  await ask(relay, { type: 'reset' })
  const watch = new CpuWatch({ peer: peer.pid })
  const r = await ask<Msg>(peer, { type: 'send', port, count, connections: SMTP_CONNECTIONS, from: 'svc <no-reply@localhost>', attachment: content }, 300_000)
  const report = watch.stop()
  const s = await ask<{ messages: number } & Msg>(relay, { type: 'stats' })
  const rate = s.messages / Number(r.seconds)
  const foreign = recordCpu('smtp-attachment-peer', report)
  recordCost({ what: 'smtp + 1 MiB file (nodemailer peer)', per: 'email', count: s.messages, procs: costOf(report, s.messages) })
  log(`    peer smtp-attachment: ${fmt(rate)} emails/s (${fmt(s.messages)}/${fmt(count)} at the relay, ${Number(r.failed)} failed)`)
  return { value: rate, foreign }
}

/**
 * The SMTP leg alone: the same emails accepted beforehand, all scheduled for one second T (far enough
 * ahead for the posts to finish), so that from T svc does what the peer does — read each email's file,
 * encode it, send it — and nothing of the intake. The rate is emails at the relay ÷ (last arrival − T).
 */
async function svcLegRun (relay: ChildProcess, port: number, count: number, content: string, leadMs: number): Promise<Sample & { late: boolean }> {
  const label = 'smtp-attachment-leg'
  return await withSvc(port, label, {}, async (svc, key) => {
    await warmUp(relay, svc, key, content, label)
    // A whole second, so that every email is due at the same instant.
    const T = Math.ceil((Date.now() + leadMs) / 1000) * 1000
    const statuses = await postBatches(svc.origin, key, bodies(count, content, 1, new Date(T).toISOString()), 4)
    const accepted = Date.now()
    const late = accepted >= T
    await ask(relay, { type: 'reset' })
    await sleep(Math.max(0, T - Date.now()))
    const watch = new CpuWatch({ svc: svc.pid })
    const s = await relayHas(relay, count, label)
    const report = watch.stop()
    const rate = s.messages / ((s.last - T) / 1000)
    const foreign = recordCpu(label, report)
    const cost = costOf(report, s.messages, { name: 'svc', pid: svc.pid, deliveryTids: [] })
    recordCost({ what: 'smtp + 1 MiB file, accepted before, due at once (svc)', per: 'email', count: s.messages, procs: cost })
    log(`    svc ${label}: ${fmt(rate)} emails/s from T (${fmt(s.messages)}/${fmt(count)} at the relay; accepted ${fmt((T - accepted) / 1000, 1)} s before T; statuses ${JSON.stringify(statuses)})`)
    if (late) log(`    ! ${label}: the posts ended after T: the figure holds intake too`)
    return { value: rate, foreign, late }
  })
}

const LARGE_SENDS = 20
const LARGE_FILE_BYTES = 20 * 1024 * 1024

/**
 * Twenty sends of a 20 MiB file each, posted at once (ATTACHMENTS_MAX_BYTES raised to take them; the send
 * body limit follows it): svc's peak resident set while it reads, stores and relays them, against its
 * resident set before. SEND_BYTES_IN_FLIGHT (32 MiB) lets one such body in at a time; a send answered
 * 503 comes back after its Retry-After, as a client would.
 */
async function largeSends (relay: ChildProcess, port: number): Promise<NonNullable<SmtpAttachmentFigures['memory']>> {
  return await withSvc(port, 'smtp-attachment-memory', { ATTACHMENTS_MAX_BYTES: String(LARGE_FILE_BYTES) }, async (svc, key) => {
    await ask(relay, { type: 'reset' })
    const content = randomBytes(LARGE_FILE_BYTES).toString('base64')
    const beforeMiB = memoryOf(svc.pid)?.rssMiB ?? NaN
    let retried = 0
    const started = Date.now()
    await Promise.all(Array.from({ length: LARGE_SENDS }, async (_, i) => {
      const body = JSON.stringify({ to: `large${i}@example.com`, subject: `Large ${i}`, text: 'The file is attached.', attachments: [{ filename: 'archive.bin', content }] })
      for (;;) {
        const res = await fetch(`${svc.origin}/api/send`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key }, body })
        await res.arrayBuffer()
        if (res.status === 202) return
        if (res.status !== 503) throw new Error(`a 20 MiB send was answered ${res.status}`)
        retried++
        await sleep(Number(res.headers.get('retry-after') ?? 5) * 1000)
      }
    }))
    const s = await relayHas(relay, LARGE_SENDS, 'smtp-attachment-memory')
    const seconds = (s.last - started) / 1000
    const peakMiB = memoryOf(svc.pid)?.peakMiB ?? NaN
    log(`    svc 20 × 20 MiB sends at once: peak RSS ${fmt(peakMiB)} MiB (${fmt(beforeMiB)} MiB before), ${fmt(s.messages)} at the relay in ${fmt(seconds)} s, ${retried} answered 503 and sent again`)
    return { sends: LARGE_SENDS, fileMiB: LARGE_FILE_BYTES / 1024 / 1024, peakMiB, beforeMiB, seconds, retried }
  })
}

export async function smtpAttachment (): Promise<SmtpAttachmentFigures> {
  const count = QUICK ? 200 : 600
  const wide = QUICK ? 10 : 20
  const reps = QUICK ? 1 : 3
  const content = randomBytes(FILE_BYTES).toString('base64')
  log(`- mail over SMTP with a 1 MiB attachment: ${fmt(count)} emails (${PER_REQUEST} a request) → the discarding relay, beside nodemailer's pooled transport ` +
    `(${SMTP_CONNECTIONS} connections) sending the same file; then ${fmt(wide)} emails to 50 recipients each; ${reps} repeat(s)`)
  const relay = await startProc('relay')
  const peer = await startProc('smtp-peer')
  const port = Number((await ask<Msg>(relay, { type: 'info' })).port)
  const svcRuns: Sample[] = []
  const peerRuns: Sample[] = []
  const cpu1: number[] = []
  let cpu50: number
  let memory: SmtpAttachmentFigures['memory']
  let leg: (Sample & { late: boolean }) | undefined
  try {
    await ask<Msg>(peer, { type: 'send', port, count: 20, connections: SMTP_CONNECTIONS, from: 'svc <no-reply@localhost>', attachment: content }, 300_000)
    for (let rep = 0; rep < reps; rep++) {
      peerRuns.push(await peerRun(peer, relay, port, count, content))
      const one = await svcRun(relay, port, count, content, 1, 'smtp-attachment')
      svcRuns.push(one)
      cpu1.push(one.cpuPerEmail)
    }
    // The intake of the whole-path run sets the lead: twice its time, and 5 s more.
    const intakeMs = svcRuns.length > 0 && Number.isFinite(svcRuns[0]!.value) ? (count / svcRuns[0]!.value) * 1000 : 60_000
    leg = await svcLegRun(relay, port, count, content, 2 * intakeMs + 5000)
    cpu50 = (await svcRun(relay, port, wide, content, 50, 'smtp-attachment-50')).cpuPerEmail
    memory = await largeSends(relay, port)
  } finally {
    await stopChild(relay, 2000)
    await stopChild(peer, 2000)
  }
  const sorted = cpu1.filter(Number.isFinite).sort((a, b) => a - b)
  const cpuPerEmail1 = sorted[Math.floor(sorted.length / 2)] ?? NaN
  const fig: SmtpAttachmentFigures = {
    svc: pick('smtp + 1 MiB file (svc)', svcRuns), peer: pick('smtp + 1 MiB file (peer)', peerRuns),
    cpuPerEmail1, cpuPerEmail50: cpu50, cpuPerExtraCopy: (cpu50 - cpuPerEmail1) / 49,
    ...(memory !== undefined ? { memory } : {}),
    ...(leg !== undefined && !leg.late ? { leg: leg.value } : {}),
  }
  log(`    svc CPU per email: ${fmt(fig.cpuPerEmail1)} µs with 1 recipient, ${fmt(fig.cpuPerEmail50)} µs with 50 (${fmt(fig.cpuPerExtraCopy)} µs per further copy)`)
  results.smtpAttachment = { ...fig, emails: count, wideEmails: wide, fileBytes: FILE_BYTES, connections: SMTP_CONNECTIONS, runs: { svc: svcRuns, peer: peerRuns } }
  if (!Number.isFinite(fig.svc)) notes.push('smtp-attachment: svc was not measured')
  return fig
}
