// Mail through a real relay: Debian's Postfix on loopback (a private instance, test/helpers/postfix.ts)
// is SMTP_URL, and relays every message to the discarding smtp-server of the mail-over-SMTP scenario.
// The figure is messages at the far side per second, from the first POST (the first sendMail for the
// peer) to the last message in: what a sender whose relay is their own Postfix gets. Beside it, the
// peer: nodemailer's pooled transport at svc's pool size, the same messages, to the same Postfix.
// Postfix writes each message to its queue (and to disk) before it answers 250: on these machines it
// takes a few hundred a second, far below what svc or the peer could send, so both should come out at
// Postfix's rate, and the ratio says whether svc keeps a real relay as busy as a script does.
// Skipped, with a note, where Postfix is not installed or the benchmark does not run as root.
import type { ChildProcess } from 'node:child_process'
import { postfixMissing, runPostfix, type Postfix } from '../../test/helpers/postfix.js'
import { batchBodies, CpuWatch, log, notes, pick, postBatches, recordCpu, reportLogged, results, SIZES, startSvc, stopSvc, type Sample } from '../lib/context.js'
import { ask, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { removeDir, Seeder, tempDataDir } from '../lib/svc.js'
import { relayHas, SMTP_CONNECTIONS, stageLine, stageTotals, warmUp } from './smtp.js'

export interface PostfixFigures { svc: number; peer: number }

/** Emails each side sends through Postfix before it is measured. */
const WARMUP = 200

/** The relay behind Postfix counts what reaches the far side. */
const farSideHas = relayHas

async function svcRun (relay: ChildProcess, postfix: Postfix, count: number, rep: number): Promise<Sample> {
  const dir = tempDataDir()
  const seeder = new Seeder(dir, 'http://127.0.0.1:9')
  const key = await seeder.apiKey(await seeder.account())
  await seeder.close()
  const label = 'postfix-svc'
  const svc = await startSvc(dir, { SMTP_URL: postfix.url, SMTP_POOL_SIZE: String(SMTP_CONNECTIONS) }, label)
  try {
    await warmUp(relay, svc.origin, key, WARMUP, label)
    const before = await stageTotals(svc.origin)
    const watch = new CpuWatch({ svc: svc.pid })
    const started = Date.now()
    const statuses = await postBatches(svc.origin, key, batchBodies(count), 4)
    const s = await farSideHas(relay, count, label)
    const foreign = recordCpu(label, watch.stop())
    const rate = s.messages / ((s.last - started) / 1000)
    log(`    svc through Postfix ${rep + 1}: ${fmt(rate)} emails/s (${fmt(s.messages)}/${fmt(count)} at the far side; statuses ${JSON.stringify(statuses)})`)
    log(`      stages (mean per observation): ${stageLine(before, await stageTotals(svc.origin))}`)
    return { value: s.messages >= count ? rate : NaN, foreign }
  } finally {
    await stopSvc(svc)
    reportLogged(label, svc)
    removeDir(dir)
  }
}

async function peerRun (peer: ChildProcess, relay: ChildProcess, postfix: Postfix, count: number, rep: number): Promise<Sample> {
  await ask(relay, { type: 'reset' })
  const watch = new CpuWatch({ peer: peer.pid })
  const started = Date.now()
  const r = await ask<Msg>(peer, { type: 'send', port: postfix.port, count, connections: SMTP_CONNECTIONS, from: 'svc <no-reply@localhost>' }, 300_000)
  // Postfix has answered 250 for each; the figure is taken where svc's is, at the far side.
  const s = await farSideHas(relay, count, 'postfix-peer')
  const foreign = recordCpu('postfix-peer', watch.stop())
  const rate = s.messages / ((s.last - started) / 1000)
  log(`    peer through Postfix ${rep + 1}: ${fmt(rate)} emails/s (${fmt(s.messages)}/${fmt(count)} at the far side, ${Number(r.failed)} failed)`)
  return { value: s.messages >= count ? rate : NaN, foreign }
}

export async function postfix (): Promise<PostfixFigures | undefined> {
  const missing = postfixMissing()
  if (missing !== null) {
    notes.push(`through Postfix: not measured (${missing})`)
    log(`- through Postfix: skipped (${missing})`)
    return undefined
  }
  const count = SIZES.postfixEmails
  log(`- through Postfix: ${fmt(count)} emails via POST /api/send/batch → a private Postfix on loopback → the discarding smtp-server; ` +
    `beside nodemailer's pooled transport (${SMTP_CONNECTIONS} connections) to the same Postfix; ${SIZES.reps} repeats, each side warmed with ${fmt(WARMUP)} emails`)
  const relay = await startProc('relay')
  const peer = await startProc('smtp-peer')
  const relayPort = Number((await ask<Msg>(relay, { type: 'info' })).port)
  const pf = await runPostfix({ relayPort })
  const runs: Record<'svc' | 'peer', Sample[]> = { svc: [], peer: [] }
  try {
    await ask(relay, { type: 'reset' })
    await ask<Msg>(peer, { type: 'send', port: pf.port, count: WARMUP, connections: SMTP_CONNECTIONS, from: 'svc <no-reply@localhost>' }, 300_000)
    await farSideHas(relay, WARMUP, 'postfix-peer warm-up')
    for (let rep = 0; rep < SIZES.reps; rep++) {
      runs.peer.push(await peerRun(peer, relay, pf, count, rep))
      runs.svc.push(await svcRun(relay, pf, count, rep))
    }
  } finally {
    await pf.stop()
    await stopChild(relay, 2000)
    await stopChild(peer, 2000)
  }
  const fig = { svc: pick('through Postfix (svc)', runs.svc), peer: pick('through Postfix (peer)', runs.peer) }
  results.postfix = { ...fig, emails: count, connections: SMTP_CONNECTIONS, runs }
  return fig
}
