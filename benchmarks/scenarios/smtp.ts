// Mail over SMTP, measured the way a sender sends: N emails through POST /api/send/batch (100 a request, one
// recipient each, a small html part with one link), svc's SMTP_URL at a discarding smtp-server in its own
// process on loopback; the figure is emails received by the relay per second, from the first POST to the
// last message in. Beside it, the peer: nodemailer's pooled transport (the same connection count) sending
// the same messages to the same relay, as a ten-line script would. Two variants: plain (no sender domain),
// and a verified domain (DKIM signature, and a VERP envelope sender per recipient), the peer signing with
// nodemailer's own dkim option. svc's /metrics gives the time of each stage (svc_mail_stage_seconds).
import type { ChildProcess } from 'node:child_process'
import { generateKeyPairSync } from 'node:crypto'
import { iso } from '../../src/domain/clock.js'
import { newId } from '../../src/domain/ids.js'
import { limitsOf } from '../../src/domain/plans.js'
import { seal } from '../../src/domain/secrets.js'
import { DEFAULT_SMTP_POOL_SIZE } from '../../src/mail/smtp-transport.js'
import { batchBodies, costOf, CpuWatch, log, notes, pick, postBatches, recordCost, recordCpu, reportLogged, results, SIZES, startSvc, stopSvc, type Sample } from '../lib/context.js'
import { ask, sleep, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { summarize } from '../lib/stats.js'
import { removeDir, Seeder, SVC_SECRET, tempDataDir } from '../lib/svc.js'

export interface SmtpFigures {
  plain: { svc: number; peer: number }
  signed: { svc: number; peer: number }
  /** Single sends at a pace the mailer keeps up with: POST → relay, in ms. */
  latency?: { rate: number; sends: number; arrived: number; p50: number; p99: number; max: number; p99From202: number }
}

const DOMAIN = 'bench.example.com'
export interface RelayStats extends Msg { messages: number; recipients: number; signed: number; first: number; last: number }

type StageTotals = Record<string, { sum: number; count: number }>

/** The per-stage sums and counts of svc_mail_stage_seconds, read from /metrics. */
export async function stageTotals (origin: string): Promise<StageTotals> {
  const text = await (await fetch(`${origin}/metrics`)).text()
  const out: Record<string, { sum: number; count: number }> = {}
  for (const m of text.matchAll(/^svc_mail_stage_seconds_(sum|count)\{stage="([a-z]+)"\} ([0-9.e+-]+)$/gm)) {
    const s = out[m[2]!] ??= { sum: 0, count: 0 }
    s[m[1] as 'sum' | 'count'] = Number(m[3])
  }
  return out
}

/** Each stage's mean time and number of observations between two readings of stageTotals. */
export function stageLine (before: StageTotals, after: StageTotals): string {
  return Object.entries(after).map(([stage, a]) => {
    const b = before[stage] ?? { sum: 0, count: 0 }
    const n = a.count - b.count
    return n > 0 ? `${stage} ${fmt((a.sum - b.sum) * 1000 / n, 2)} ms × ${fmt(n)}` : ''
  }).filter(Boolean).join(', ')
}

/** svc's default pool size (SMTP_POOL_SIZE), for both sides. */
export const SMTP_CONNECTIONS = DEFAULT_SMTP_POOL_SIZE

/**
 * Emails each side sends before it is measured, unmeasured: the peer's process runs every repeat and is
 * warm from the second on, while svc starts afresh for each; both are measured warm, as a running service
 * and a long-running script are.
 */
export const SMTP_WARMUP = 1000

/** Waits until the relay has `count` messages, or nothing arrives for SIZES.stallMs. */
export async function relayHas (relay: ChildProcess, count: number, label: string): Promise<RelayStats> {
  let s: RelayStats
  let lastCount = -1
  let lastChange = Date.now()
  for (;;) {
    s = await ask<RelayStats>(relay, { type: 'stats' })
    if (s.messages >= count) return s
    if (s.messages !== lastCount) { lastCount = s.messages; lastChange = Date.now() }
    if (Date.now() - lastChange > SIZES.stallMs) {
      log(`    ! ${label}: no progress for ${SIZES.stallMs / 1000} s at ${fmt(s.messages)} of ${fmt(count)}`)
      return s
    }
    await sleep(20)
  }
}

/**
 * Sends `count` unmeasured emails through svc (100 to a request, four requests in flight) and waits until
 * the relay has them all, and a moment more for their outcomes to be recorded; the relay's counts start
 * again after.
 */
export async function warmUp (relay: ChildProcess, origin: string, key: string, count: number, label: string, from?: string): Promise<void> {
  await ask(relay, { type: 'reset' })
  await postBatches(origin, key, batchBodies(count, from), 4)
  await relayHas(relay, count, `${label} warm-up`)
  // The warm-up's last outcomes are recorded before the clock starts.
  await sleep(200)
  await ask(relay, { type: 'reset' })
}

async function svcRun (relay: ChildProcess, port: number, count: number, signed: boolean, rep: number): Promise<Sample & { stages: string }> {
  const dir = tempDataDir()
  const seeder = new Seeder(dir, 'http://127.0.0.1:9')
  const account = await seeder.account()
  const key = await seeder.apiKey(account)
  if (signed) {
    const pair = generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'der' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } })
    const id = newId('dom')
    const now = iso(Date.now())
    await seeder.store.insertDomain({
      id, accountId: account, name: DOMAIN, selector: 'bench', publicKey: pair.publicKey.toString('base64'), privateKey: seal(SVC_SECRET, 'dkim private key', id, pair.privateKey),
      status: 'verified', records: { dkim: 'verified', return_path: 'verified', spf: 'verified', dmarc: 'verified', receiving: 'pending' }, receiving: false,
      createdAt: now, updatedAt: now, lastCheckedAt: now, verifiedAt: now,
    }, limitsOf('pro').domains)
  }
  await seeder.close()
  const label = signed ? 'smtp-dkim-verp' : 'smtp-plain'
  const svc = await startSvc(dir, { SMTP_URL: `smtp://127.0.0.1:${port}`, SMTP_POOL_SIZE: String(SMTP_CONNECTIONS) }, label)
  try {
    await warmUp(relay, svc.origin, key, SMTP_WARMUP, label, signed ? `Bench <news@${DOMAIN}>` : undefined)
    const before = await stageTotals(svc.origin)
    const watch = new CpuWatch({ svc: svc.pid })
    const started = Date.now()
    const t0 = performance.now()
    // Four requests in flight, as a sender's batch job would.
    const statuses = await postBatches(svc.origin, key, batchBodies(count, signed ? `Bench <news@${DOMAIN}>` : undefined), 4)
    const accepted = performance.now() - t0
    const s = await relayHas(relay, count, label)
    const report = watch.stop()
    const after = await stageTotals(svc.origin)
    const seconds = (s.last - started) / 1000
    const rate = s.messages / seconds
    const foreign = recordCpu(label, report)
    recordCost({ what: `smtp: ${signed ? 'DKIM + VERP' : 'plain'} (svc)`, per: 'email', count: s.messages, procs: costOf(report, s.messages, { name: 'svc', pid: svc.pid, deliveryTids: [] }) })
    const stages = stageLine(before, after)
    log(`    svc ${label} ${rep + 1}: ${fmt(rate)} emails/s (${fmt(s.messages)}/${fmt(count)} at the relay${signed ? `, ${fmt(s.signed)} DKIM-signed` : ''}, ${fmt(s.recipients)} recipients; ` +
      `202s in ${fmt(accepted)} ms, the first at the relay after ${fmt(s.first - started)} ms; statuses ${JSON.stringify(statuses)})`)
    log(`      stages (mean per observation): ${stages}`)
    return { value: rate, foreign, stages }
  } finally {
    await stopSvc(svc)
    reportLogged(label, svc)
    removeDir(dir)
  }
}

/** Single sends paced well below the mailer's capacity, for the latency phase. */
export const SMTP_LATENCY = { rate: 100, sends: 500 }

/**
 * Send → relay at a pace svc keeps up with: single POST /api/send requests, open loop at SMTP_LATENCY.rate
 * a second (plain, after the warm-up), each with its own subject; the relay notes when each arrives. The
 * clock starts when the POST is sent (and, second figure, when its 202 came back) and stops at the relay.
 * This is the path the hand-off to the local mailer (src/mail/hand-off.ts) serves: no claim in between.
 */
async function latencyRun (relay: ChildProcess, port: number): Promise<NonNullable<SmtpFigures['latency']>> {
  const dir = tempDataDir()
  const seeder = new Seeder(dir, 'http://127.0.0.1:9')
  const account = await seeder.account()
  const key = await seeder.apiKey(account)
  await seeder.close()
  const label = 'smtp-latency'
  const svc = await startSvc(dir, { SMTP_URL: `smtp://127.0.0.1:${port}`, SMTP_POOL_SIZE: String(SMTP_CONNECTIONS) }, label)
  try {
    await warmUp(relay, svc.origin, key, SMTP_WARMUP, label)
    const { rate, sends } = SMTP_LATENCY
    const sentAt: number[] = []
    const answeredAt: number[] = []
    const statuses: Record<string, number> = {}
    const requests: Array<Promise<void>> = []
    const t0 = Date.now()
    for (let i = 0; i < sends; i++) {
      const due = t0 + (i * 1000) / rate
      const wait = due - Date.now()
      if (wait > 0) await sleep(wait)
      sentAt[i] = Date.now()
      const body = JSON.stringify({ to: `someone${i}@example.com`, subject: `lat ${i}`, html: `<p>Hello, message ${i}.</p><p><a href="https://example.com/docs">Read the docs</a></p>` })
      requests.push(fetch(`${svc.origin}/api/send`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key }, body }).then(async (res) => {
        await res.arrayBuffer()
        answeredAt[i] = Date.now()
        statuses[res.status] = (statuses[res.status] ?? 0) + 1
      }))
    }
    await Promise.all(requests)
    await relayHas(relay, sends, label)
    const arrivals = new Map((await ask<Msg>(relay, { type: 'arrivals' })).arrivals as Array<[string, number]>)
    const fromPost: number[] = []
    const from202: number[] = []
    for (let i = 0; i < sends; i++) {
      const at = arrivals.get(`lat ${i}`)
      if (at === undefined) continue
      fromPost.push(at - sentAt[i]!)
      from202.push(at - answeredAt[i]!)
    }
    const post = summarize(fromPost)
    const out = { rate, sends, arrived: post.n, p50: post.p50, p99: post.p99, max: post.max, p99From202: summarize(from202).p99 }
    log(`    svc ${label}: ${fmt(sends)} single sends at ${rate}/s (plain): POST → relay p50 ${fmt(out.p50)} ms, p99 ${fmt(out.p99)} ms, max ${fmt(out.max)} ms; ` +
      `202 → relay p99 ${fmt(out.p99From202)} ms (${fmt(out.arrived)}/${fmt(sends)} arrived; statuses ${JSON.stringify(statuses)})`)
    if (out.arrived < sends) notes.push(`smtp latency: ${sends - out.arrived} of ${sends} single sends did not reach the relay`)
    return out
  } finally {
    await stopSvc(svc)
    reportLogged(label, svc)
    removeDir(dir)
  }
}

async function peerRun (peer: ChildProcess, relay: ChildProcess, port: number, count: number, dkim: { domainName: string; keySelector: string; privateKey: string } | undefined, rep: number): Promise<Sample> {
  await ask(relay, { type: 'reset' })
  const watch = new CpuWatch({ peer: peer.pid })
  const r = await ask<Msg>(peer, { type: 'send', port, count, connections: SMTP_CONNECTIONS, from: dkim ? `Bench <news@${DOMAIN}>` : 'svc <no-reply@localhost>', dkim, verp: dkim !== undefined }, 300_000)
  const report = watch.stop()
  const s = await ask<RelayStats>(relay, { type: 'stats' })
  const rate = s.messages / Number(r.seconds)
  const label = dkim ? 'smtp-peer-dkim-verp' : 'smtp-peer-plain'
  const foreign = recordCpu(label, report)
  recordCost({ what: `smtp: ${dkim ? 'DKIM + VERP' : 'plain'} (nodemailer peer)`, per: 'email', count: s.messages, procs: costOf(report, s.messages) })
  log(`    peer ${label} ${rep + 1}: ${fmt(rate)} emails/s (${fmt(s.messages)}/${fmt(count)} at the relay, ${Number(r.failed)} failed)`)
  return { value: rate, foreign }
}

export async function smtp (): Promise<SmtpFigures> {
  const count = SIZES.smtpEmails
  log(`- mail over SMTP: ${fmt(count)} emails via POST /api/send/batch (100 a request) → a discarding smtp-server process; ` +
    `beside nodemailer's pooled transport (${SMTP_CONNECTIONS} connections), plain and DKIM + VERP; ${SIZES.reps} repeats, each side warmed with ${fmt(SMTP_WARMUP)} unmeasured emails; ` +
    `then ${fmt(SMTP_LATENCY.sends)} single sends at ${SMTP_LATENCY.rate}/s, POST → relay`)
  const relay = await startProc('relay')
  const peer = await startProc('smtp-peer')
  const port = Number((await ask<Msg>(relay, { type: 'info' })).port)
  const pair = generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'der' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } })
  const dkim = { domainName: DOMAIN, keySelector: 'bench', privateKey: pair.privateKey }
  const runs: Record<string, Sample[]> = { svcPlain: [], peerPlain: [], svcSigned: [], peerSigned: [] }
  let latency: SmtpFigures['latency']
  try {
    for (const signing of [undefined, dkim]) {
      await ask(relay, { type: 'reset' })
      await ask<Msg>(peer, { type: 'send', port, count: SMTP_WARMUP, connections: SMTP_CONNECTIONS, from: signing ? `Bench <news@${DOMAIN}>` : 'svc <no-reply@localhost>', dkim: signing, verp: signing !== undefined }, 300_000)
    }
    for (let rep = 0; rep < SIZES.reps; rep++) {
      runs.peerPlain!.push(await peerRun(peer, relay, port, count, undefined, rep))
      runs.svcPlain!.push(await svcRun(relay, port, count, false, rep))
      runs.peerSigned!.push(await peerRun(peer, relay, port, count, dkim, rep))
      runs.svcSigned!.push(await svcRun(relay, port, count, true, rep))
    }
    latency = await latencyRun(relay, port)
  } finally {
    await stopChild(relay, 2000)
    await stopChild(peer, 2000)
  }
  const fig: SmtpFigures = {
    plain: { svc: pick('smtp plain (svc)', runs.svcPlain!), peer: pick('smtp plain (peer)', runs.peerPlain!) },
    signed: { svc: pick('smtp DKIM + VERP (svc)', runs.svcSigned!), peer: pick('smtp DKIM + VERP (peer)', runs.peerSigned!) },
    ...(latency !== undefined ? { latency } : {}),
  }
  results.smtp = { ...fig, emails: count, connections: SMTP_CONNECTIONS, runs }
  if (!Number.isFinite(fig.plain.svc)) notes.push('smtp: svc was not measured')
  return fig
}
