// POST /api/send (API-key auth, validation, suppression check, the email and its email.sent event in one
// durable write) against a bare Fastify route with the same TypeBox schema and no work. Both in their own
// processes; one undici closed loop at fixed concurrency drives them alternately.
import { costOf, CpuWatch, log, recordCost, pick, QUIET, recordCpu, reportLogged, results, sendBodies, sinkOrigin, SIZES, startSvc, stopSvc } from '../lib/context.js'
import { ask, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { median } from '../lib/stats.js'
import { removeDir, Seeder, tempDataDir, type SvcProcess } from '../lib/svc.js'

export interface ApiFigures { rps: number; p50: number; p99: number; statuses: Record<string, number>; foreign?: number }

/**
 * svc measured three ways on three data directories, in the same run and interleaved rep by rep:
 * - `svc`: all in one process (SVC_ROLES default), the mailer sending every accepted email meanwhile;
 * - `apiOnly`: SVC_ROLES=api, with a second process (SVC_ROLES=mailer,delivery) on the same data
 *   directory doing the mailing;
 * - `sharedLimits`: all in one, RATE_LIMIT_STORE=store (the per-key limit counted in SQLite).
 * While one variant is measured the others' processes are paused (SIGSTOP), so that their mail backlog
 * does not take the CPU from it.
 */
export async function api (): Promise<{ svc: ApiFigures; bare: ApiFigures; apiOnly: ApiFigures; sharedLimits: ApiFigures }> {
  log(`- API: POST /api/send (auth + durable write) vs a bare Fastify route with its schema; undici closed loop, ` +
    `${SIZES.apiConcurrency} in flight, ${SIZES.apiReps} × ${SIZES.apiMs / 1000} s after ${SIZES.apiWarmupMs / 1000} s warm-up; ` +
    'svc all in one, API only (mailer + engine in another process), all in one with rate limits in the store')
  const load = await startProc('load')
  const bare = await startProc('bare-route')
  const barePort = Number((await ask<Msg>(bare, { type: 'info' })).port)
  const variants = [
    { name: 'svc', label: 'api', procs: [{}] },
    { name: 'apiOnly', label: 'api-only', procs: [{ SVC_ROLES: 'api', NODE_ID: 'bench-api' }, { SVC_ROLES: 'mailer,delivery', NODE_ID: 'bench-worker' }] },
    { name: 'sharedLimits', label: 'api-shared-limits', procs: [{ RATE_LIMIT_STORE: 'store' }] },
  ] as const
  const running: Array<{ name: string; dir: string; key: string; svcs: SvcProcess[] }> = []
  const bareRuns: ApiFigures[] = []
  const runs: Record<string, ApiFigures[]> = { svc: [], apiOnly: [], sharedLimits: [] }
  const pause = (except: string) => {
    for (const v of running) for (const p of v.svcs) p.child.kill(v.name === except ? 'SIGCONT' : 'SIGSTOP')
  }
  try {
    for (const v of variants) {
      // One Pro account with an API key and no webhooks: the figure is the API's (svc's mailer still sends
      // every accepted email through the sandbox transport in the background, as it would in production).
      const dir = tempDataDir()
      const entry = { name: v.name, dir, key: '', svcs: [] as SvcProcess[] }
      running.push(entry)
      const seeder = new Seeder(dir, sinkOrigin)
      const account = await seeder.account()
      entry.key = await seeder.apiKey(account)
      await seeder.close()
      for (const [i, env] of v.procs.entries()) entry.svcs.push(await startSvc(dir, env, i === 0 ? v.label : `${v.label}-worker`))
    }
    const common = { path: '/api/send', bodies: sendBodies(1), durationMs: SIZES.apiMs, warmupMs: SIZES.apiWarmupMs, concurrency: SIZES.apiConcurrency }
    const figures = (m: Msg): ApiFigures => {
      const lat = m.latency as { p50: number; p99: number }
      return { rps: Number(m.rps), p50: lat.p50, p99: lat.p99, statuses: m.statuses as Record<string, number> }
    }
    for (let r = 0; r < SIZES.apiReps; r++) {
      pause('none')
      const watch = new CpuWatch({ loadgen: load.pid, bare: bare.pid })
      const b = figures(await ask<Msg>(load, { type: 'closed', origin: `http://127.0.0.1:${barePort}`, headers: { 'content-type': 'application/json' }, ...common }, 120_000))
      const bareReport = watch.stop()
      b.foreign = recordCpu('api-bare', bareReport)
      // The CPU window includes the closed loop's warm-up, at the same full load: per request, rate × window.
      recordCost({ what: 'api: bare route', per: 'request', count: b.rps * bareReport.bare!.seconds, procs: costOf(bareReport, b.rps * bareReport.bare!.seconds) })
      bareRuns.push(b)
      const line = [`bare ${fmt(b.rps)} req/s (p99 ${fmt(b.p99, 1)} ms)`]
      for (const v of running) {
        pause(v.name)
        const procs: Record<string, number | undefined> = { loadgen: load.pid }
        v.svcs.forEach((p, i) => { procs[i === 0 ? 'svc' : 'svc-worker'] = p.pid })
        const w = new CpuWatch(procs)
        const s = figures(await ask<Msg>(load, { type: 'closed', origin: v.svcs[0]!.origin, headers: { 'content-type': 'application/json', 'x-api-key': v.key }, ...common }, 120_000))
        const report = w.stop()
        s.foreign = recordCpu(`api-${v.name}`, report)
        const sends = s.rps * report.loadgen!.seconds
        recordCost({ what: `api: POST /api/send (${v.name})`, per: 'send', count: sends, procs: costOf(report, sends, { name: 'svc', pid: v.svcs[0]!.pid, deliveryTids: [] }) })
        runs[v.name]!.push(s)
        line.push(`${v.name} ${fmt(s.rps)} req/s (p50 ${fmt(s.p50, 1)} ms, p99 ${fmt(s.p99, 1)} ms; statuses ${JSON.stringify(s.statuses)})`)
      }
      log(`    run ${r + 1}: ${line.join(', ')}`)
    }
  } finally {
    pause('all')
    await stopChild(load, 2000)
    await stopChild(bare, 2000)
    for (const v of running) {
      for (const [i, p] of v.svcs.entries()) {
        // Resumed first: a stopped process would only die at stopSvc's SIGKILL, 40 s later and without
        // writing its --cpu-prof profile.
        p.child.kill('SIGCONT')
        await stopSvc(p)
        reportLogged(i === 0 ? `api ${v.name}` : `api ${v.name} worker`, p)
      }
      removeDir(v.dir)
    }
  }
  // Repeats on a busy machine are left out when quieter ones exist (see pick()).
  const med = (name: string, all: ApiFigures[]): ApiFigures => {
    const quiet = all.filter((r) => (r.foreign ?? 0) <= QUIET)
    const chosen = quiet.length > 0 ? quiet : all
    return {
      rps: pick(name, all.map((r) => ({ value: r.rps, foreign: r.foreign ?? 0 }))),
      p50: median(chosen.map((r) => r.p50)), p99: median(chosen.map((r) => r.p99)), statuses: all.at(-1)!.statuses,
    }
  }
  const out = {
    svc: med('api svc', runs.svc!), bare: med('api bare route', bareRuns),
    apiOnly: med('api svc, API role only', runs.apiOnly!), sharedLimits: med('api svc, rate limits in the store', runs.sharedLimits!),
  }
  results.api = {
    ...out, runs: { svc: runs.svc, bare: bareRuns, apiOnly: runs.apiOnly, sharedLimits: runs.sharedLimits }, concurrency: SIZES.apiConcurrency,
    body: 'one recipient, a subject and a short text part', account: 'Pro, no webhooks, RATE_LIMIT_API_PER_SECOND raised to 1e8',
    variants: 'svc: all in one; apiOnly: SVC_ROLES=api beside a SVC_ROLES=mailer,delivery process on the same data directory; sharedLimits: all in one with RATE_LIMIT_STORE=store',
  }
  return out
}
