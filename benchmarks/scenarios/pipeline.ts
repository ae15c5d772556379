// The whole pipeline as a developer runs it: N emails through POST /api/send/batch (100 a request, one
// recipient each) → svc's mailer (the sandbox transport, development defaults: the newest 200 written to
// DATA_DIR/sandbox) → one email.sent webhook per email, verified at the sink. The rate is webhooks verified
// per second from the first POST to the last arrival; it is set beside the ceiling and the naive peer of
// the same run. Run twice: with the sandbox's files (SANDBOX_KEEP=200, the default) and without
// (SANDBOX_KEEP=0), so the sandbox's cost shows. Then the p99 of send → webhook at half the rate, open loop.
// Each svc is warmed first with PIPELINE_WARMUP unmeasured emails through the same path (their webhooks
// arrived, the mailer done with them), as the mail-over-SMTP scenario warms both its sides: a service runs
// for days, and a cold svc spends the first seconds of a short window compiling its own code (V8's compiler
// threads were about a quarter of svc's CPU in a cold 20,000-email window). 2,000 were not enough: with
// them, `perf` still found 13 % of svc's samples in the window in TurboFan, against 4 % after 12,000, and
// svc's CPU per email (against the sink's per webhook) was 6-9 % lower after 10,000 (benchmarks/HISTORY.md,
// round 9). The ceiling's and the naive peer's processes run all their repeats, so theirs are warm too.
import { batchBodies, costOf, CpuWatch, deliveryThreadIds, log, notes, pick, postBatches, recordCost, recordCpu, reportLogged, results, sendBodies, sinkConfig, sinkOrigin, sinkProcs, sinkStats, SIZES, startSvc, stopSvc, waitForSink, type Sample } from '../lib/context.js'
import { stageLine, stageTotals } from './smtp.js'
import { ask, sleep, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { summarize } from '../lib/stats.js'
import { removeDir, Seeder, tempDataDir } from '../lib/svc.js'

export interface PipelineFigures { rate: number; rateNoSandboxFiles: number; p99: number; rateDelivered: number }

type Hooked = 'email.sent' | 'email.delivered'

/** Emails through the whole path before each measured window, unmeasured. */
export const PIPELINE_WARMUP = 10_000

/** Recipients the mailer has settled (svc_mail_recipient_outcomes_total, every outcome), from /metrics. */
async function mailerSettled (origin: string): Promise<number> {
  const text = await (await fetch(`${origin}/metrics`)).text()
  let n = 0
  for (const m of text.matchAll(/^svc_mail_recipient_outcomes_total\{[^}]*\} ([0-9.e+]+)$/gm)) n += Number(m[1])
  return n
}

/** Warms svc with `count` emails: posted, their webhooks verified at the sink, and the mailer done with them. */
async function warm (svc: { origin: string; unexpectedExit: () => string | undefined }, key: string, count: number): Promise<void> {
  const before = (await sinkStats()).fast.count
  await postBatches(svc.origin, key, batchBodies(count), 32)
  const got = await waitForSink(before + count, { capMs: 120_000, abort: () => svc.unexpectedExit() })
  if (!got.complete) throw new Error(`the warm-up's ${count} webhooks did not all arrive`)
  const deadline = Date.now() + 120_000
  while (await mailerSettled(svc.origin) < count) {
    if (Date.now() > deadline) throw new Error(`the mailer did not settle the warm-up's ${count} emails`)
    await sleep(50)
  }
}

async function seeded (event: Hooked = 'email.sent'): Promise<{ dir: string; key: string; secrets: string[] }> {
  const dir = tempDataDir()
  const seeder = new Seeder(dir, sinkOrigin)
  const account = await seeder.account()
  await seeder.webhook(account, { events: [event] })
  const key = await seeder.apiKey(account)
  await seeder.close()
  return { dir, key, secrets: seeder.secrets }
}

async function rateRun (count: number, sandboxKeep: string, rep: number, event: Hooked = 'email.sent'): Promise<Sample> {
  const { dir, key, secrets } = await seeded(event)
  const label = `pipeline-keep${sandboxKeep}${event === 'email.sent' ? '' : '-delivered'}`
  await sinkConfig(secrets)
  const svc = await startSvc(dir, { SANDBOX_KEEP: sandboxKeep }, label)
  try {
    await warm(svc, key, PIPELINE_WARMUP)
    const deliveryTids = await deliveryThreadIds(svc.origin)
    const before = (await sinkStats()).fast.count
    const watch = new CpuWatch({ svc: svc.pid, ...sinkProcs() })
    const started = Date.now()
    // 32 requests in flight (3,200 emails), as a sender's batch job would push.
    const statuses = await postBatches(svc.origin, key, batchBodies(count), 32)
    const stats = await waitForSink(before + count, { capMs: 300_000, abort: () => svc.unexpectedExit() })
    const report = watch.stop()
    const got = stats.fast.count - before
    const rate = got / ((stats.fast.last - started) / 1000)
    const foreign = recordCpu(label, report)
    recordCost({ what: `pipeline: send → sandbox → ${event} webhook (SANDBOX_KEEP=${sandboxKeep})`, per: 'email', count: got, procs: costOf(report, got, { name: 'svc', pid: svc.pid, deliveryTids }) })
    log(`    ${label} ${rep + 1}: ${fmt(rate)} emails/s end to end (${fmt(got)}/${fmt(count)} ${event} verified${stats.complete ? '' : ' INCOMPLETE'}, ${stats.bad} bad, ${stats.duplicates} duplicates; statuses ${JSON.stringify(statuses)})`)
    return { value: stats.complete ? rate : NaN, foreign }
  } finally {
    await stopSvc(svc)
    reportLogged(label, svc)
    removeDir(dir)
  }
}

async function p99Run (rate: number): Promise<number> {
  const load = await startProc('load')
  const { dir, key, secrets } = await seeded()
  await sinkConfig(secrets, { latency: true })
  const svc = await startSvc(dir, { SANDBOX_KEEP: '200' }, 'pipeline-latency')
  try {
    const request = { type: 'open', origin: svc.origin, path: '/api/send', headers: { 'content-type': 'application/json', 'x-api-key': key }, bodies: sendBodies(1), connections: 64 }
    const warmupMs = SIZES.latencyWarmupMs
    const durationMs = Math.min(SIZES.latencyMs, 10_000)
    const warm = await ask<Msg>(load, { ...request, rate: rate / 4, durationMs: 2000, warmupMs: 0 }, 120_000)
    const warmed = Number((warm.statuses as Record<string, number>)['202'] ?? 0)
    await waitForSink(warmed, { capMs: 60_000, abort: () => svc.unexpectedExit() })
    // What svc spends per email at this pace, and how its mailer took them (claimed, or handed over).
    const deliveryTids = await deliveryThreadIds(svc.origin)
    const stagesBefore = await stageTotals(svc.origin)
    const watch = new CpuWatch({ svc: svc.pid, ...sinkProcs() })
    const sent = await ask<Msg>(load, { ...request, rate, durationMs, warmupMs }, 120_000)
    const accepted = Number((sent.statuses as Record<string, number>)['202'] ?? 0)
    await waitForSink(warmed + accepted, { capMs: 60_000, abort: () => svc.unexpectedExit() })
    const report = watch.stop()
    recordCost({ what: 'pipeline at ½ rate: single sends → sandbox → email.sent webhook', per: 'email', count: accepted, procs: costOf(report, accepted, { name: 'svc', pid: svc.pid, deliveryTids }) })
    log(`    at ½ rate, mail stages (mean per observation): ${stageLine(stagesBefore, await stageTotals(svc.origin))}`)
    const all = await sinkStats(true)
    const from = Number(sent.startedAt) + warmupMs
    const lat = summarize(all.latencies.filter((_, i) => all.arrivals[i]! >= from && all.arrivals[i]! < from + durationMs))
    log(`    p99 at ${fmt(rate)} sends/s (half the rate, open loop, ${durationMs / 1000} s after ${warmupMs / 1000} s): send → email.sent webhook p50 ${fmt(lat.p50, 1)} ms, p99 ${fmt(lat.p99, 1)} ms, max ${fmt(lat.max, 1)} ms (${fmt(lat.n)} samples)`)
    return lat.p99
  } finally {
    await stopSvc(svc)
    reportLogged('pipeline-latency', svc)
    await stopChild(load, 2000)
    removeDir(dir)
  }
}

export async function pipeline (): Promise<PipelineFigures> {
  const count = SIZES.pipelineEmails
  log(`- pipeline: ${fmt(count)} emails via POST /api/send/batch → mailer (sandbox, development defaults) → email.sent webhooks; ` +
    `with the sandbox's files (SANDBOX_KEEP=200) and without (0); ${SIZES.reps} repeats, each svc warmed with ${fmt(PIPELINE_WARMUP)} unmeasured emails; then p99 at half the rate`)
  const withFiles: Sample[] = []
  const without: Sample[] = []
  // email.sent is raised when svc accepts the email (202), so its webhook does not wait for the mailer,
  // which runs beside it for CPU. email.delivered is raised once the transport (here the sandbox) has
  // taken the email: its figure is the whole path through the mailer.
  const delivered: Sample[] = []
  for (let rep = 0; rep < SIZES.reps; rep++) {
    withFiles.push(await rateRun(count, '200', rep))
    without.push(await rateRun(count, '0', rep))
    delivered.push(await rateRun(count, '200', rep, 'email.delivered'))
  }
  const rate = pick('pipeline (SANDBOX_KEEP=200)', withFiles)
  const rateNoSandboxFiles = pick('pipeline (SANDBOX_KEEP=0)', without)
  const rateDelivered = pick('pipeline to email.delivered (SANDBOX_KEEP=200)', delivered)
  log(`    through the mailer (email.delivered webhooks, SANDBOX_KEEP=200): ${fmt(rateDelivered)} emails/s (median)`)
  let p99 = NaN
  if (Number.isFinite(rate)) p99 = await p99Run(rate / 2)
  else notes.push('pipeline: no rate, so no p99 at half of it')
  results.pipeline = { rate, rateNoSandboxFiles, rateDelivered, p99, emails: count, withFiles, without, delivered }
  return { rate, rateNoSandboxFiles, p99, rateDelivered }
}
