// `npm run bench` (full) and `npm run bench -- --quick`: every figure of ARCHITECTURE.md's performance
// targets, measured in one run beside this machine's ceiling and the peers, with each target met or missed.
//
// Every load generator, peer and sink is a process of its own; svc runs as `node dist/src/server.js` and is
// measured from outside: its throughput by what the sink verified, its memory by /proc/<pid>/status.
// Options: --quick, --only=<scenario,…> (ceiling naive engine queue api latency slow scale), --sink-workers=N.
import { execFileSync, type ChildProcess } from 'node:child_process'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  ask, commandExists, cpuBetween, forkTracked, freePort, machineBusy, memoryOf, procFile, sampleCpu, sleep, spawnTracked, startProc, stopChild,
  type CpuSample, type CpuUse, type Msg,
} from './lib/procs.js'
import { fmt, judge, svgChart, table, targetRows, type Target } from './lib/report.js'
import { median, summarize } from './lib/stats.js'
import { deliveryCounts, removeDir, Seeder, startSvc, stopSvc, tempDataDir, WINDOW, type SvcProcess } from './lib/svc.js'

// ── options and sizes ──────────────────────────────────────────────────────────────────────────────────

const argv = process.argv.slice(2)
const QUICK = argv.includes('--quick')
const ONLY = new Set((argv.find((a) => a.startsWith('--only='))?.slice(7) ?? '').split(',').filter(Boolean))
const SINK_WORKERS = Number(argv.find((a) => a.startsWith('--sink-workers='))?.slice(15) ?? 1)
const wanted = (name: string) => ONLY.size === 0 || ONLY.has(name)

const SIZES = QUICK
  ? {
      reps: 1, ceilingMs: 3000, naiveMs: 2000, engineEvents: 20_000, queueJobs: 10_000, queueReps: 1,
      apiWarmupMs: 1000, apiMs: 3000, apiReps: 1, apiConcurrency: 64,
      latencyWarmupMs: 2000, latencyMs: 6000, recipients: 5,
      slowEventsPerAccount: 100, scaleAccounts: 100, scaleEventsPerAccount: 100, scaleCapMs: 60_000,
    }
  : {
      reps: 3, ceilingMs: 5000, naiveMs: 4000, engineEvents: 100_000, queueJobs: 50_000, queueReps: 2,
      apiWarmupMs: 2000, apiMs: 8000, apiReps: 3, apiConcurrency: 64,
      latencyWarmupMs: 3000, latencyMs: 20_000, recipients: 5,
      slowEventsPerAccount: 500, scaleAccounts: 1000, scaleEventsPerAccount: 100, scaleCapMs: 330_000,
    }

const log = (line: string) => process.stdout.write(line + '\n')

// ── the sink ───────────────────────────────────────────────────────────────────────────────────────────

interface ClassStats { count: number; first: number; last: number }
interface SinkStats extends Msg {
  fast: ClassStats; slow: ClassStats; bad: number; duplicates: number
  arrivals: number[]; latencies: number[]; types: string[]; perSecond: Record<string, number>; pids: number[]
}

let sink: ChildProcess | undefined
let sinkOrigin = ''
let sinkPids: number[] = []

async function startSink (): Promise<void> {
  const child = forkTracked(procFile('sink'), [String(SINK_WORKERS)])
  sink = child
  const ready = await new Promise<Msg>((resolve, reject) => {
    child.once('message', (m: Msg) => resolve(m))
    child.once('exit', (code) => reject(new Error(`sink exited (${code})`)))
  })
  sinkOrigin = `http://127.0.0.1:${String(ready.port)}`
  sinkPids = (await ask<{ pids: number[] }>(child, { type: 'info' })).pids
}

const sinkConfig = (secrets: string[], opts: { latency?: boolean; slowMs?: number } = {}) =>
  ask(sink!, { type: 'config', secrets, latency: opts.latency === true, slowMs: opts.slowMs ?? 5000 })
const sinkStats = (samples = false) => ask<SinkStats>(sink!, { type: 'stats', samples })

/** Deliveries per second between the first and the last verified arrival. */
function rateOf (c: ClassStats): number {
  return c.count > 1 && c.last > c.first ? (c.count - 1) / ((c.last - c.first) / 1000) : NaN
}

/** Polls the sink until `expected` verified arrivals (of `cls`), a stall of `stallMs`, or `capMs`. */
async function waitForSink (expected: number, opts: { cls?: 'fast' | 'slow'; stallMs?: number; capMs?: number; onTick?: () => void } = {}): Promise<SinkStats> {
  const cls = opts.cls ?? 'fast'
  const stallMs = opts.stallMs ?? 20_000
  const deadline = Date.now() + (opts.capMs ?? 600_000)
  let last = -1
  let lastChange = Date.now()
  for (;;) {
    const s = await sinkStats()
    const n = s[cls].count
    if (n >= expected) return s
    if (n !== last) { last = n; lastChange = Date.now() }
    if (Date.now() - lastChange > stallMs) { log(`    ! no progress for ${stallMs / 1000} s at ${fmt(n)} of ${fmt(expected)}: stopping the wait`); return s }
    if (Date.now() > deadline) { log(`    ! time cap reached at ${fmt(n)} of ${fmt(expected)}`); return s }
    opts.onTick?.()
    await sleep(100)
  }
}

// ── CPU: where the time goes ─────────────────────────────────────────────────────────────────────────

type CpuReport = Record<string, CpuUse>
class CpuWatch {
  private readonly start = new Map<string, { pid: number; s: CpuSample }>()
  private readonly busy0 = machineBusy()
  private readonly t0 = performance.now()
  constructor (procs: Record<string, number | undefined>) {
    for (const [name, pid] of Object.entries(procs)) if (pid !== undefined) this.start.set(name, { pid, s: sampleCpu(pid) })
  }

  /** Each process's share of one core, and `foreign`: what everything else on the machine used meanwhile. */
  stop (): CpuReport {
    const out: CpuReport = {}
    for (const [name, { pid, s }] of this.start) out[name] = cpuBetween(pid, s, sampleCpu(pid))
    const seconds = (performance.now() - this.t0) / 1000
    const ours = Object.values(out).reduce((n, c) => n + c.total, 0)
    const foreign = Math.max(0, (machineBusy() - this.busy0) / seconds - ours)
    out.foreign = { total: foreign, main: foreign, others: [] }
    return out
  }
}

function sinkProcs (): Record<string, number> {
  // With one worker the primary serves; with more, the primary only relays stats.
  if (sinkPids.length === 1) return { sink: sinkPids[0]! }
  return Object.fromEntries(sinkPids.slice(1).map((pid, i) => [`sink${i + 1}`, pid]))
}

function cpuLine (cpu: CpuReport): string {
  return Object.entries(cpu).map(([name, c]) => {
    const threads = c.others.length > 0 && c.total - c.main > 0.05 ? ` (main ${fmt(c.main * 100)} %, other threads ${c.others.map((o) => fmt(o * 100)).join('/')} %)` : ''
    return `${name} ${fmt(c.total * 100)} %${threads}`
  }).join(', ')
}

// ── the scenarios ───────────────────────────────────────────────────────────────────────────────────────

const results: Record<string, unknown> = {}
const cpu: Record<string, CpuReport[]> = {}
const notes: string[] = []

function recordCpu (scenario: string, report: CpuReport): void {
  ;(cpu[scenario] ??= []).push(report)
  log(`    cpu (share of one core): ${cpuLine(report)}`)
}

const SECRET = 'whsec_bench-ceiling-secret-0000000000000000000000'

async function ceiling (): Promise<number> {
  log(`- ceiling: one undici process, ${WINDOW} in flight, signed POSTs to the bare sink (${SIZES.reps} × ${SIZES.ceilingMs / 1000} s)`)
  const gen = await startProc('ceiling')
  const rates: number[] = []
  try {
    for (let r = 0; r < SIZES.reps; r++) {
      await sinkConfig([SECRET])
      const watch = new CpuWatch({ loadgen: gen.pid, ...sinkProcs() })
      const run = await ask<Msg>(gen, { type: 'run', url: `${sinkOrigin}/h/0`, secret: SECRET, concurrency: WINDOW, durationMs: SIZES.ceilingMs, max: 10_000_000 })
      const report = watch.stop()
      const s = await sinkStats()
      const rate = rateOf(s.fast)
      rates.push(rate)
      log(`    run ${r + 1}: ${fmt(rate)} verified/s (${fmt(s.fast.count)} verified, ${s.bad} bad, ${Number(run.failed)} failed)`)
      recordCpu('ceiling', report)
    }
  } finally {
    await stopChild(gen, 2000)
  }
  results.ceiling = { perSecond: median(rates), runs: rates, concurrency: WINDOW }
  return median(rates)
}

async function naive (): Promise<number> {
  log(`- naive peer: a sequential fetch loop with node:crypto signing (${SIZES.reps} × ${SIZES.naiveMs / 1000} s)`)
  const gen = await startProc('naive')
  const rates: number[] = []
  try {
    for (let r = 0; r < SIZES.reps; r++) {
      await sinkConfig([SECRET])
      const watch = new CpuWatch({ loadgen: gen.pid, ...sinkProcs() })
      await ask(gen, { type: 'run', url: `${sinkOrigin}/h/0`, secret: SECRET, durationMs: SIZES.naiveMs, max: 10_000_000 })
      const report = watch.stop()
      const s = await sinkStats()
      rates.push(rateOf(s.fast))
      log(`    run ${r + 1}: ${fmt(rateOf(s.fast))} verified/s`)
      recordCpu('naive', report)
    }
  } finally {
    await stopChild(gen, 2000)
  }
  results.naive = { perSecond: median(rates), runs: rates }
  return median(rates)
}

interface SvcRun {
  rate: number; delivered: number; expected: number; peakRssMiB: number; duplicates: number; bad: number; exitCode: number | null
  /** Deliveries by status in the store after svc stopped, and the last errors of those that failed an attempt. */
  persisted: Record<string, number>; errors: Record<string, number>
}

/** Starts svc on a seeded data dir, waits for `expected` fast deliveries at the sink, stops it, checks the store. */
async function runSvcOn (dir: string, secrets: string[], expected: number, scenario: string, opts: {
  capMs?: number; stallMs?: number; watchRss?: (rssMiB: number) => void; slowMs?: number; stopGraceMs?: number
} = {}): Promise<SvcRun & { stats: SinkStats }> {
  await sinkConfig(secrets, { slowMs: opts.slowMs ?? 5000 })
  const svc = await startSvc(dir)
  let stopped: { peakRssMiB: number; exitCode: number | null } | undefined
  let stats: SinkStats
  try {
    const watch = new CpuWatch({ svc: svc.pid, ...sinkProcs() })
    let lastRssAt = 0
    stats = await waitForSink(expected, {
      ...(opts.capMs !== undefined ? { capMs: opts.capMs } : {}),
      ...(opts.stallMs !== undefined ? { stallMs: opts.stallMs } : {}),
      onTick: () => {
        if (!opts.watchRss || Date.now() - lastRssAt < 1000) return
        lastRssAt = Date.now()
        const m = memoryOf(svc.pid)
        if (m) opts.watchRss(m.rssMiB)
      },
    })
    recordCpu(scenario, watch.stop())
  } finally {
    stopped = await stopSvc(svc, opts.stopGraceMs ?? 40_000)
  }
  let persisted: Record<string, number> = {}
  let errors: Record<string, number> = {}
  try {
    ({ byStatus: persisted, errors } = deliveryCounts(dir))
  } catch (err) {
    notes.push(`${scenario}: could not read delivery counts: ${String(err)}`)
  }
  if (Object.keys(errors).length > 0) notes.push(`${scenario}: failed attempts in the store: ${JSON.stringify(errors)}`)
  return {
    rate: rateOf(stats.fast), delivered: stats.fast.count, expected, peakRssMiB: stopped.peakRssMiB, persisted, errors,
    duplicates: stats.duplicates, bad: stats.bad, exitCode: stopped.exitCode, stats,
  }
}

function describeRun (r: SvcRun): string {
  const persisted = Object.entries(r.persisted).map(([k, v]) => `${k} ${fmt(v)}`).join(', ')
  return `${fmt(r.rate)} verified/s (${fmt(r.delivered)}/${fmt(r.expected)} verified, ${r.bad} bad, ${r.duplicates} duplicates; ` +
    `peak RSS ${fmt(r.peakRssMiB)} MiB; in the store after stop: ${persisted || 'n/a'}; exit ${r.exitCode})` +
    (Object.keys(r.errors).length > 0 ? `\n      last errors of failed attempts: ${JSON.stringify(r.errors)}` : '')
}

async function engine (): Promise<number> {
  log(`- engine end to end: ${fmt(SIZES.engineEvents)} stored events, 1 webhook → svc → verified 2xx (${SIZES.reps} runs)`)
  const runs: SvcRun[] = []
  for (let r = 0; r < SIZES.reps; r++) {
    const dir = tempDataDir()
    try {
      const seeder = new Seeder(dir, sinkOrigin)
      const account = await seeder.account()
      await seeder.webhook(account)
      await seeder.events([account], SIZES.engineEvents)
      await seeder.close()
      const run = await runSvcOn(dir, seeder.secrets, SIZES.engineEvents, 'engine')
      runs.push(run)
      log(`    run ${r + 1}: ${describeRun(run)}`)
    } finally {
      removeDir(dir)
    }
  }
  const rate = median(runs.map((r) => r.rate))
  results.engine = { perSecond: rate, runs: runs.map(({ rate, delivered, expected, peakRssMiB, persisted, errors, duplicates, bad }) => ({ rate, delivered, expected, peakRssMiB, persisted, errors, duplicates, bad })) }
  return rate
}

async function redisPing (port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1')
    s.setTimeout(500)
    s.once('connect', () => s.write('PING\r\n'))
    s.once('data', (d) => { resolve(d.toString().startsWith('+PONG')); s.destroy() })
    s.once('error', () => resolve(false))
    s.once('timeout', () => { resolve(false); s.destroy() })
  })
}

async function queuePeer (): Promise<number> {
  if (!commandExists('redis-server')) {
    log('- queue peer: SKIPPED: redis-server is not installed (apt-get install -y redis-server)')
    notes.push('queue peer skipped: redis-server is not installed')
    results.queue = { skipped: 'redis-server is not installed' }
    return NaN
  }
  log(`- queue peer: BullMQ on redis-server (appendonly, appendfsync always), worker concurrency ${WINDOW}, ${fmt(SIZES.queueJobs)} enqueued jobs (${SIZES.queueReps} runs)`)
  const dir = mkdtempSync(join(os.tmpdir(), 'svc-bench-redis-'))
  const port = await freePort()
  // Durability like svc's (synchronous=FULL): a write Redis acknowledged is on disk. AOF, fsync always.
  const redis = spawnTracked('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always',
    '--daemonize', 'no', '--loglevel', 'warning', '--protected-mode', 'yes',
  ], { stdio: ['ignore', 'ignore', 'inherit'] })
  const peer = await startProc('queue-peer')
  const rates: number[] = []
  try {
    const deadline = Date.now() + 10_000
    while (!await redisPing(port)) {
      if (Date.now() > deadline || redis.exitCode !== null) throw new Error('redis-server did not start')
      await sleep(50)
    }
    for (let r = 0; r < SIZES.queueReps; r++) {
      await sinkConfig([SECRET])
      const enq = await ask<Msg>(peer, { type: 'enqueue', redisPort: port, count: SIZES.queueJobs, url: `${sinkOrigin}/h/0` }, 300_000)
      const watch = new CpuWatch({ worker: peer.pid, redis: redis.pid, ...sinkProcs() })
      const done = await ask<Msg>(peer, { type: 'work', redisPort: port, secret: SECRET, expected: SIZES.queueJobs, concurrency: WINDOW, timeoutMs: 300_000 }, 320_000)
      const report = watch.stop()
      const s = await sinkStats()
      rates.push(rateOf(s.fast))
      log(`    run ${r + 1}: ${fmt(rateOf(s.fast))} verified/s (${fmt(s.fast.count)} verified, ${fmt(Number(done.completed))} completed, ${fmt(Number(done.failed))} failed; enqueued in ${fmt(Number(enq.elapsedMs) / 1000, 1)} s)`)
      recordCpu('queue', report)
    }
  } finally {
    await stopChild(peer, 5000)
    await stopChild(redis, 5000)
    removeDir(dir)
  }
  results.queue = { perSecond: median(rates), runs: rates, redis: 'appendonly yes, appendfsync always, save ""', concurrency: WINDOW }
  return median(rates)
}

function sendBodies (recipients: number): string[] {
  return Array.from({ length: 256 }, (_, i) => JSON.stringify({
    to: recipients === 1 ? `someone${i}@example.com` : Array.from({ length: recipients }, (_, j) => `someone${i}-${j}@example.com`),
    subject: `Benchmark message ${i}`,
    text: 'Hello from the svc benchmark. This is the plain-text part of a small transactional email.',
  }))
}

interface ApiFigures { rps: number; p50: number; p99: number; statuses: Record<string, number> }

async function api (): Promise<{ svc: ApiFigures; bare: ApiFigures }> {
  log(`- API: POST /api/send (auth + durable write) vs a bare Fastify route with its schema; closed loop, ${SIZES.apiConcurrency} in flight (${SIZES.apiReps} × ${SIZES.apiMs / 1000} s after ${SIZES.apiWarmupMs / 1000} s warm-up)`)
  const load = await startProc('load')
  const bare = await startProc('bare-route')
  const barePort = Number((await ask<Msg>(bare, { type: 'info' })).port)
  const dir = tempDataDir()
  let svc: SvcProcess | undefined
  const bareRuns: ApiFigures[] = []
  const svcRuns: ApiFigures[] = []
  const bodies = sendBodies(1)
  try {
    const seeder = new Seeder(dir, sinkOrigin)
    const account = await seeder.account()
    const key = await seeder.apiKey(account)
    await seeder.close()
    svc = await startSvc(dir)
    const common = { path: '/api/send', bodies, durationMs: SIZES.apiMs, warmupMs: SIZES.apiWarmupMs, concurrency: SIZES.apiConcurrency }
    const figures = (m: Msg): ApiFigures => {
      const lat = m.latency as { p50: number; p99: number }
      return { rps: Number(m.rps), p50: lat.p50, p99: lat.p99, statuses: m.statuses as Record<string, number> }
    }
    for (let r = 0; r < SIZES.apiReps; r++) {
      let watch = new CpuWatch({ loadgen: load.pid, bare: bare.pid })
      const b = figures(await ask<Msg>(load, { type: 'closed', origin: `http://127.0.0.1:${barePort}`, headers: { 'content-type': 'application/json' }, ...common }, 120_000))
      recordCpu('api-bare', watch.stop())
      watch = new CpuWatch({ loadgen: load.pid, svc: svc.pid })
      const s = figures(await ask<Msg>(load, { type: 'closed', origin: svc.origin, headers: { 'content-type': 'application/json', 'x-api-key': key }, ...common }, 120_000))
      recordCpu('api-svc', watch.stop())
      bareRuns.push(b)
      svcRuns.push(s)
      log(`    run ${r + 1}: bare ${fmt(b.rps)} req/s (p99 ${fmt(b.p99, 1)} ms), svc ${fmt(s.rps)} req/s (p50 ${fmt(s.p50, 1)} ms, p99 ${fmt(s.p99, 1)} ms; statuses ${JSON.stringify(s.statuses)})`)
    }
  } finally {
    await stopChild(load, 2000)
    await stopChild(bare, 2000)
    if (svc) await stopSvc(svc)
    removeDir(dir)
  }
  const med = (runs: ApiFigures[]): ApiFigures => ({
    rps: median(runs.map((r) => r.rps)), p50: median(runs.map((r) => r.p50)), p99: median(runs.map((r) => r.p99)), statuses: runs.at(-1)!.statuses,
  })
  const out = { svc: med(svcRuns), bare: med(bareRuns) }
  results.api = { ...out, runs: { svc: svcRuns, bare: bareRuns }, concurrency: SIZES.apiConcurrency, body: 'one recipient, subject, text' }
  return out
}

async function latency (engineRate: number): Promise<number> {
  const R = SIZES.recipients
  const deliveryRate = engineRate / 2
  const sendRate = deliveryRate / (2 * R)
  log(`- latency: events raised by POST /api/send (${R} recipients: ${R} email.sent + ${R} email.delivered events each) at ${fmt(sendRate)} sends/s = ${fmt(deliveryRate)} deliveries/s (half the engine's ${fmt(engineRate)}/s), ${SIZES.latencyMs / 1000} s after ${SIZES.latencyWarmupMs / 1000} s warm-up`)
  if (!Number.isFinite(engineRate)) {
    notes.push('latency not measured: no engine rate')
    return NaN
  }
  const load = await startProc('load')
  const dir = tempDataDir()
  try {
    const seeder = new Seeder(dir, sinkOrigin)
    const account = await seeder.account()
    await seeder.webhook(account, { events: ['email.sent', 'email.delivered'] })
    const key = await seeder.apiKey(account)
    await seeder.close()
    await sinkConfig(seeder.secrets, { latency: true })
    const svc = await startSvc(dir)
    let peak = NaN
    try {
      const watch = new CpuWatch({ svc: svc.pid, loadgen: load.pid, ...sinkProcs() })
      const sent = await ask<Msg>(load, {
        type: 'open', origin: svc.origin, path: '/api/send', headers: { 'content-type': 'application/json', 'x-api-key': key },
        bodies: sendBodies(R), rate: sendRate, durationMs: SIZES.latencyMs, warmupMs: SIZES.latencyWarmupMs, connections: 64,
      }, 120_000)
      const accepted = Number((sent.statuses as Record<string, number>)['202'] ?? 0)
      const stats = await waitForSink(accepted * 2 * R, { stallMs: 10_000, capMs: 60_000 })
      recordCpu('latency', watch.stop())
      const all = await sinkStats(true)
      const from = Number(sent.startedAt) + SIZES.latencyWarmupMs
      const to = Number(sent.startedAt) + SIZES.latencyWarmupMs + SIZES.latencyMs
      const inWindow = (i: number) => all.arrivals[i]! >= from && all.arrivals[i]! < to
      const window = all.latencies.filter((_, i) => inWindow(i))
      const lat = summarize(window)
      const byType: Record<string, ReturnType<typeof summarize>> = {}
      for (const type of new Set(all.types)) byType[type] = summarize(all.latencies.filter((_, i) => inWindow(i) && all.types[i] === type))
      // Arrivals per second over the whole run: does svc keep up with the rate, or does a backlog grow?
      const perSecond = Object.entries(all.perSecond).sort(([a], [b]) => Number(a) - Number(b)).map(([, n]) => n)
      const achieved = window.length / (SIZES.latencyMs / 1000)
      const sendLat = sent.latency as { p50: number; p99: number }
      log(`    by event type: ${Object.entries(byType).map(([k, v]) => `${k} p50 ${fmt(v.p50, 1)} / p99 ${fmt(v.p99, 1)} ms (${fmt(v.n)})`).join(', ')}`)
      log(`    deliveries per second at the sink: ${perSecond.map((n) => fmt(n)).join(' ')}`)
      log(`    ${fmt(window.length)} deliveries in the window (${fmt(achieved)}/s; ${fmt(stats.fast.count)}/${fmt(accepted * 2 * R)} in all, ${stats.bad} bad): event → delivery p50 ${fmt(lat.p50, 1)} ms, p99 ${fmt(lat.p99, 1)} ms, max ${fmt(lat.max, 1)} ms; send p99 ${fmt(sendLat.p99, 1)} ms; ${fmt(Number(sent.skipped))} sends skipped`)
      results.latency = {
        p50: lat.p50, p90: lat.p90, p99: lat.p99, max: lat.max, samples: lat.n, targetDeliveryRate: deliveryRate, achievedDeliveryRate: achieved,
        sendRate, achievedSendRate: Number(sent.achievedRate), sendLatency: sent.latency, sendStatuses: sent.statuses, recipientsPerSend: R,
        delivered: stats.fast.count, expected: accepted * 2 * R, byType, perSecond,
        eventSource: 'POST /api/send to the sandbox transport (in-process events, as in production)',
      }
      peak = lat.p99
    } finally {
      await stopSvc(svc)
    }
    return peak
  } finally {
    await stopChild(load, 2000)
    removeDir(dir)
  }
}

async function slow (): Promise<{ alone: number; beside: number }> {
  const E = SIZES.slowEventsPerAccount
  log(`- slow endpoint: 99 fast webhooks alone, then beside 1 answering in 5 s (10 accounts × ${fmt(E)} events → ${fmt(99 * E)} fast deliveries)`)
  const phase = async (withSlow: boolean): Promise<SvcRun & { slowCount: number }> => {
    const dir = tempDataDir()
    try {
      const seeder = new Seeder(dir, sinkOrigin)
      const accounts: string[] = []
      for (let a = 0; a < 10; a++) {
        const account = await seeder.account()
        accounts.push(account)
        for (let h = 0; h < (a === 0 ? 9 : 10); h++) await seeder.webhook(account, { events: ['email.delivered'] })
        if (a === 0 && withSlow) await seeder.webhook(account, { slow: true, events: ['email.delivered'] })
      }
      await seeder.events(accounts, E)
      await seeder.close()
      const run = await runSvcOn(dir, seeder.secrets, 99 * E, withSlow ? 'slow-beside' : 'slow-alone', { stopGraceMs: 30_000 })
      return { ...run, slowCount: run.stats.slow.count }
    } finally {
      removeDir(dir)
    }
  }
  const alone = await phase(false)
  log(`    99 fast alone: ${describeRun(alone)}`)
  const beside = await phase(true)
  log(`    99 fast beside the slow one: ${describeRun(beside)}; the slow one answered ${fmt(beside.slowCount)} meanwhile`)
  results.slow = {
    alone: { rate: alone.rate, delivered: alone.delivered, persisted: alone.persisted, errors: alone.errors, duplicates: alone.duplicates },
    beside: { rate: beside.rate, delivered: beside.delivered, persisted: beside.persisted, errors: beside.errors, duplicates: beside.duplicates, slowAnswered: beside.slowCount },
    fastDeliveries: 99 * E, slowDelayMs: 5000,
  }
  return { alone: alone.rate, beside: beside.rate }
}

async function scale (): Promise<{ rate: number; peakRssMiB: number }> {
  const A = SIZES.scaleAccounts
  const P = SIZES.scaleEventsPerAccount
  const total = A * 10 * P
  log(`- scale: ${fmt(A * 10)} webhooks (${fmt(A)} Pro accounts × 10), ${fmt(total)} pending deliveries in the store before svc starts (cap ${SIZES.scaleCapMs / 1000} s)`)
  const dir = tempDataDir()
  try {
    const t0 = performance.now()
    const seeder = new Seeder(dir, sinkOrigin)
    const accounts: string[] = []
    for (let a = 0; a < A; a++) {
      const account = await seeder.account()
      accounts.push(account)
      await Promise.all(Array.from({ length: 10 }, () => seeder.webhook(account, { events: ['email.delivered'] })))
    }
    await seeder.events(accounts, P)
    const routed = await seeder.routeAll()
    await seeder.close()
    log(`    seeded ${fmt(routed)} pending deliveries in ${fmt((performance.now() - t0) / 1000, 1)} s`)
    const rss: number[] = []
    const run = await runSvcOn(dir, seeder.secrets, total, 'scale', { capMs: SIZES.scaleCapMs, watchRss: (m) => rss.push(m) })
    log(`    ${describeRun(run)}`)
    log(`    RSS each second (MiB): ${rss.map((m) => fmt(m)).join(' ')}`)
    results.scale = {
      webhooks: A * 10, pending: routed, rate: run.rate, delivered: run.delivered, complete: run.delivered >= total,
      peakRssMiB: run.peakRssMiB, rssEverySecondMiB: rss, persisted: run.persisted, errors: run.errors, duplicates: run.duplicates,
    }
    return { rate: run.rate, peakRssMiB: run.peakRssMiB }
  } finally {
    removeDir(dir)
  }
}

// ── the run ───────────────────────────────────────────────────────────────────────────────────────────

function machine (): Record<string, unknown> {
  let kernel = ''
  try { kernel = execFileSync('uname', ['-sr'], { encoding: 'utf8' }).trim() } catch { /* not unix */ }
  return {
    cores: os.availableParallelism(), cpuModel: os.cpus()[0]?.model ?? 'unknown', memoryMiB: Math.round(os.totalmem() / 1048576),
    node: process.version, platform: `${os.platform()} ${os.arch()}`, kernel,
  }
}

async function main (): Promise<void> {
  const started = new Date()
  const m = machine()
  log(`svc benchmarks, ${QUICK ? 'quick' : 'full'} run, ${started.toISOString()}`)
  log(`machine: ${String(m.cores)} cores (${String(m.cpuModel)}), ${fmt(Number(m.memoryMiB))} MiB, Node ${process.version}`)
  await startSink()
  log(`sink: ${SINK_WORKERS} process${SINK_WORKERS > 1 ? 'es (cluster)' : ''} on ${sinkOrigin}`)

  const ceilingRate = wanted('ceiling') ? await ceiling() : NaN
  const naiveRate = wanted('naive') ? await naive() : NaN
  const engineRate = wanted('engine') || wanted('latency') || wanted('scale') ? await engine() : NaN
  const queueRate = wanted('queue') ? await queuePeer() : NaN
  const apiFig = wanted('api') ? await api() : undefined
  const p99 = wanted('latency') ? await latency(engineRate) : NaN
  const slowFig = wanted('slow') ? await slow() : undefined
  const scaleFig = wanted('scale') ? await scale() : undefined

  const t = (key: string, name: string, value: number, op: Target['op'], target: number, unit: string, detail: string): Target =>
    ({ key, name, value, op, target, unit, met: judge(value, op, target), detail })
  const targets: Target[] = [
    t('engine_vs_ceiling', 'engine ÷ ceiling', engineRate / ceilingRate, '>=', 0.6, '×', `${fmt(engineRate)}/s vs ${fmt(ceilingRate)}/s`),
    t('engine_vs_naive', 'engine ÷ naive peer', engineRate / naiveRate, '>=', 5, '×', `${fmt(engineRate)}/s vs ${fmt(naiveRate)}/s`),
    t('engine_vs_queue', 'engine ÷ queue peer (BullMQ)', engineRate / queueRate, '>', 1, '×', `${fmt(engineRate)}/s vs ${fmt(queueRate)}/s`),
    t('api_vs_bare', 'POST /api/send ÷ bare route', (apiFig?.svc.rps ?? NaN) / (apiFig?.bare.rps ?? NaN), '>=', 0.5, '×',
      `${fmt(apiFig?.svc.rps ?? NaN)} vs ${fmt(apiFig?.bare.rps ?? NaN)} req/s; p99 ${fmt(apiFig?.svc.p99 ?? NaN, 1)} ms`),
    t('latency_p99', 'p99 event → delivery at ½ max rate', p99, '<', 50, 'ms', `at ${fmt(engineRate / 2)} deliveries/s`),
    t('scale_rss', `peak RSS, ${fmt(SIZES.scaleAccounts * 10)} webhooks / ${fmt(SIZES.scaleAccounts * 10 * SIZES.scaleEventsPerAccount)} pending`, scaleFig?.peakRssMiB ?? NaN, '<', 512, 'MiB', 'VmHWM of the svc process'),
    t('scale_rate', `throughput, ${fmt(SIZES.scaleAccounts * 10)} webhooks ÷ 1 webhook`, (scaleFig?.rate ?? NaN) / engineRate, '>=', 0.5, '×', `${fmt(scaleFig?.rate ?? NaN)}/s vs ${fmt(engineRate)}/s`),
    t('slow_isolation', '99 fast beside a 5 s one ÷ alone', (slowFig?.beside ?? NaN) / (slowFig?.alone ?? NaN), '>=', 0.9, '×', `${fmt(slowFig?.beside ?? NaN)}/s vs ${fmt(slowFig?.alone ?? NaN)}/s`),
  ]

  const figures = [
    ['figure', 'value'],
    ['ceiling: 1 undici process → bare sink, signed', `${fmt(ceilingRate)} /s`],
    ['naive peer: sequential fetch loop, signed', `${fmt(naiveRate)} /s`],
    ['queue peer: BullMQ + Redis (AOF fsync always) → sink', Number.isFinite(queueRate) ? `${fmt(queueRate)} /s` : 'skipped / n/a'],
    ['svc engine: stored event → verified 2xx, 1 webhook', `${fmt(engineRate)} /s`],
    ['bare Fastify route, same schema', apiFig ? `${fmt(apiFig.bare.rps)} req/s (p99 ${fmt(apiFig.bare.p99, 1)} ms)` : 'n/a'],
    ['svc POST /api/send, auth + durable write', apiFig ? `${fmt(apiFig.svc.rps)} req/s (p50 ${fmt(apiFig.svc.p50, 1)} ms, p99 ${fmt(apiFig.svc.p99, 1)} ms)` : 'n/a'],
    ['svc event → delivery at ½ max rate', Number.isFinite(p99) ? `p99 ${fmt(p99, 1)} ms` : 'n/a'],
    ['svc 99 fast webhooks alone / beside a 5 s one', slowFig ? `${fmt(slowFig.alone)} /s / ${fmt(slowFig.beside)} /s` : 'n/a'],
    [`svc ${fmt(SIZES.scaleAccounts * 10)} webhooks, ${fmt(SIZES.scaleAccounts * 10 * SIZES.scaleEventsPerAccount)} pending`, scaleFig ? `${fmt(scaleFig.rate)} /s, peak RSS ${fmt(scaleFig.peakRssMiB)} MiB` : 'n/a'],
  ]

  const stamp = started.toISOString().replace(/[:.]/g, '-')
  const name = `${stamp}${QUICK ? '-quick' : ''}${ONLY.size > 0 ? '-partial' : ''}`
  const dir = fileURLToPath(new URL('../../benchmarks/results/', import.meta.url))
  mkdirSync(dir, { recursive: true })
  const record = {
    startedAt: started.toISOString(), finishedAt: new Date().toISOString(), mode: QUICK ? 'quick' : 'full',
    scenarios: ONLY.size > 0 ? [...ONLY] : 'all', command: `npm run bench${argv.length ? ' -- ' + argv.join(' ') : ''}`,
    machine: m, sizes: SIZES, sinkProcesses: SINK_WORKERS, concurrency: WINDOW,
    figures: results, targets, cpu, notes,
  }
  writeFileSync(join(dir, `${name}.json`), JSON.stringify(record, null, 2) + '\n')
  writeFileSync(join(dir, `${name}.svg`), svgChart(targets, `svc benchmarks: ${QUICK ? 'quick' : 'full'} run, ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC`,
    `${String(m.cores)} cores, ${String(m.cpuModel)}, Node ${process.version}; ratios measured in one run`))

  log('')
  log(table(figures))
  log('')
  log(table(targetRows(targets)))
  if (notes.length > 0) log('\nnotes:\n' + notes.map((n) => `- ${n}`).join('\n'))
  log(`\nwrote benchmarks/results/${name}.json and .svg (${fmt((Date.now() - started.getTime()) / 1000)} s)`)
}

try {
  await main()
} finally {
  if (sink) {
    try { await ask(sink, { type: 'stop' }, 5000) } catch { /* killed below */ }
    await stopChild(sink, 2000)
  }
}
process.exit(0)
