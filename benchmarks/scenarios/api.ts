// POST /api/send (API-key auth, validation, suppression check, the email and its email.sent event in one
// durable write) against a bare Fastify route with the same TypeBox schema and no work. Both in their own
// processes; one undici closed loop at fixed concurrency drives them alternately.
import { CpuWatch, log, pick, QUIET, recordCpu, reportLogged, results, sendBodies, sinkOrigin, SIZES, startSvc, stopSvc } from '../lib/context.js'
import { ask, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { median } from '../lib/stats.js'
import { removeDir, Seeder, tempDataDir, type SvcProcess } from '../lib/svc.js'

export interface ApiFigures { rps: number; p50: number; p99: number; statuses: Record<string, number>; foreign?: number }

export async function api (): Promise<{ svc: ApiFigures; bare: ApiFigures }> {
  log(`- API: POST /api/send (auth + durable write) vs a bare Fastify route with its schema; undici closed loop, ` +
    `${SIZES.apiConcurrency} in flight, ${SIZES.apiReps} × ${SIZES.apiMs / 1000} s after ${SIZES.apiWarmupMs / 1000} s warm-up`)
  const load = await startProc('load')
  const bare = await startProc('bare-route')
  const barePort = Number((await ask<Msg>(bare, { type: 'info' })).port)
  const dir = tempDataDir()
  let svc: SvcProcess | undefined
  const bareRuns: ApiFigures[] = []
  const svcRuns: ApiFigures[] = []
  try {
    // One Pro account with an API key and no webhooks: the figure is the API's (svc's mailer still sends
    // every accepted email through the sandbox transport in the background, as it would in production).
    const seeder = new Seeder(dir, sinkOrigin)
    const account = await seeder.account()
    const key = await seeder.apiKey(account)
    await seeder.close()
    svc = await startSvc(dir, {}, 'api')
    const common = { path: '/api/send', bodies: sendBodies(1), durationMs: SIZES.apiMs, warmupMs: SIZES.apiWarmupMs, concurrency: SIZES.apiConcurrency }
    const figures = (m: Msg): ApiFigures => {
      const lat = m.latency as { p50: number; p99: number }
      return { rps: Number(m.rps), p50: lat.p50, p99: lat.p99, statuses: m.statuses as Record<string, number> }
    }
    for (let r = 0; r < SIZES.apiReps; r++) {
      let watch = new CpuWatch({ loadgen: load.pid, bare: bare.pid })
      const b = figures(await ask<Msg>(load, { type: 'closed', origin: `http://127.0.0.1:${barePort}`, headers: { 'content-type': 'application/json' }, ...common }, 120_000))
      b.foreign = recordCpu('api-bare', watch.stop())
      watch = new CpuWatch({ loadgen: load.pid, svc: svc.pid })
      const s = figures(await ask<Msg>(load, { type: 'closed', origin: svc.origin, headers: { 'content-type': 'application/json', 'x-api-key': key }, ...common }, 120_000))
      s.foreign = recordCpu('api-svc', watch.stop())
      bareRuns.push(b)
      svcRuns.push(s)
      log(`    run ${r + 1}: bare ${fmt(b.rps)} req/s (p99 ${fmt(b.p99, 1)} ms), svc ${fmt(s.rps)} req/s ` +
        `(p50 ${fmt(s.p50, 1)} ms, p99 ${fmt(s.p99, 1)} ms; statuses ${JSON.stringify(s.statuses)})`)
    }
  } finally {
    await stopChild(load, 2000)
    await stopChild(bare, 2000)
    if (svc) {
      await stopSvc(svc)
      reportLogged('api', svc)
    }
    removeDir(dir)
  }
  // Repeats on a busy machine are left out when quieter ones exist (see pick()).
  const med = (name: string, all: ApiFigures[]): ApiFigures => {
    const quiet = all.filter((r) => (r.foreign ?? 0) <= QUIET)
    const runs = quiet.length > 0 ? quiet : all
    return {
      rps: pick(name, all.map((r) => ({ value: r.rps, foreign: r.foreign ?? 0 }))),
      p50: median(runs.map((r) => r.p50)), p99: median(runs.map((r) => r.p99)), statuses: all.at(-1)!.statuses,
    }
  }
  const out = { svc: med('api svc', svcRuns), bare: med('api bare route', bareRuns) }
  results.api = {
    ...out, runs: { svc: svcRuns, bare: bareRuns }, concurrency: SIZES.apiConcurrency,
    body: 'one recipient, a subject and a short text part', account: 'Pro, no webhooks, RATE_LIMIT_API_PER_SECOND raised to 1e8',
  }
  return out
}
