// What every scenario shares: the options and sizes of this run, the sink and how to read it, CPU
// accounting, svc runs on a seeded data directory, and the record the run writes at the end.
import type { ChildProcess } from 'node:child_process'
import { ask, cpuBetween, forkTracked, machineBusy, memoryOf, procFile, sampleCpu, sleep, stopChild, type CpuSample, type CpuUse, type Msg } from './procs.js'
import { fmt } from './report.js'
import { deliveryCounts, startSvc, stopSvc } from './svc.js'

// ── options and sizes ──────────────────────────────────────────────────────────────────────────────────

export const argv = process.argv.slice(2)
export const QUICK = argv.includes('--quick')
export const ONLY = new Set((argv.find((a) => a.startsWith('--only='))?.slice(7) ?? '').split(',').filter(Boolean))
export const SINK_WORKERS = Math.max(1, Number(argv.find((a) => a.startsWith('--sink-workers='))?.slice(15) ?? 1))
export const wanted = (name: string) => ONLY.size === 0 || ONLY.has(name)

export const SIZES = QUICK
  ? {
      reps: 1, ceilingMs: 3000, naiveMs: 2000, engineEvents: 20_000, queueJobs: 10_000, queueReps: 1,
      apiWarmupMs: 1000, apiMs: 3000, apiReps: 1, apiConcurrency: 64,
      latencyWarmupMs: 2000, latencyMs: 5000, recipients: 5,
      slowEventsPerAccount: 100, slowReps: 1,
      scaleAccounts: 100, scaleEventsPerAccount: 100, scaleCapMs: 30_000, stallMs: 10_000,
    }
  : {
      reps: 3, ceilingMs: 5000, naiveMs: 4000, engineEvents: 100_000, queueJobs: 50_000, queueReps: 2,
      apiWarmupMs: 2000, apiMs: 8000, apiReps: 3, apiConcurrency: 64,
      latencyWarmupMs: 3000, latencyMs: 20_000, recipients: 5,
      slowEventsPerAccount: 300, slowReps: 2,
      scaleAccounts: 1000, scaleEventsPerAccount: 100, scaleCapMs: 300_000, stallMs: 20_000,
    }

export const log = (line: string) => process.stdout.write(line + '\n')

// ── what the run records ───────────────────────────────────────────────────────────────────────────────

export type CpuReport = Record<string, CpuUse>
export const results: Record<string, unknown> = {}
export const cpu: Record<string, CpuReport[]> = {}
export const notes: string[] = []

export function recordCpu (scenario: string, report: CpuReport): void {
  ;(cpu[scenario] ??= []).push(report)
  log(`    cpu (share of one core): ${cpuLine(report)}`)
  const foreign = report.foreign?.total ?? 0
  if (foreign > 0.25) {
    const line = `${scenario}: other processes on this machine used ${fmt(foreign * 100)} % of a core meanwhile; that figure is noisy`
    if (!notes.includes(line)) notes.push(line)
  }
}

function cpuLine (report: CpuReport): string {
  return Object.entries(report).map(([name, c]) => {
    const threads = c.others.length > 0 && c.total - c.main > 0.05
      ? ` (main thread ${fmt(c.main * 100)} %, busiest others ${c.others.map((o) => fmt(o * 100)).join('/')} %)`
      : ''
    return `${name} ${fmt(c.total * 100)} %${threads}`
  }).join(', ')
}

/** CPU used by each named process between construction and stop(), and by everything else on the machine. */
export class CpuWatch {
  private readonly start = new Map<string, { pid: number; s: CpuSample }>()
  private readonly busy0 = machineBusy()
  private readonly t0 = performance.now()

  constructor (procs: Record<string, number | undefined>) {
    for (const [name, pid] of Object.entries(procs)) if (pid !== undefined) this.start.set(name, { pid, s: sampleCpu(pid) })
  }

  /** Shares of one core; `foreign` is what every other process on the machine used meanwhile. */
  stop (): CpuReport {
    const out: CpuReport = {}
    for (const [name, { pid, s }] of this.start) out[name] = cpuBetween(pid, s, sampleCpu(pid))
    const seconds = (performance.now() - this.t0) / 1000
    const ours = Object.values(out).reduce((n, c) => n + c.total, 0)
    // The harness itself (it mostly sleeps between polls) is counted in `foreign`: an upper bound.
    const foreign = Math.max(0, (machineBusy() - this.busy0) / seconds - ours)
    out.foreign = { total: foreign, main: foreign, others: [] }
    return out
  }
}

/** How busy the machine is with other work before we start: `seconds` of sampling, share of one core. */
export async function foreignLoad (seconds = 2): Promise<number> {
  const b0 = machineBusy()
  const c0 = process.cpuUsage()
  await sleep(seconds * 1000)
  const own = (process.cpuUsage(c0).user + process.cpuUsage(c0).system) / 1e6
  return Math.max(0, (machineBusy() - b0 - own) / seconds)
}

// ── the sink ───────────────────────────────────────────────────────────────────────────────────────────

export interface ClassStats { count: number; first: number; last: number }
export interface SinkStats extends Msg {
  fast: ClassStats; slow: ClassStats; bad: number; duplicates: number
  arrivals: number[]; latencies: number[]; types: string[]; perSecond: Record<string, number>; pids: number[]
}

let sink: ChildProcess | undefined
export let sinkOrigin = ''
let sinkPids: number[] = []

export async function startSink (): Promise<void> {
  const child = forkTracked(procFile('sink'), [String(SINK_WORKERS)])
  sink = child
  const ready = await new Promise<Msg>((resolve, reject) => {
    child.once('message', (m: Msg) => resolve(m))
    child.once('exit', (code) => reject(new Error(`sink exited (${code})`)))
  })
  sinkOrigin = `http://127.0.0.1:${String(ready.port)}`
  sinkPids = (await ask<{ pids: number[] }>(child, { type: 'info' })).pids
}

export async function stopSink (): Promise<void> {
  if (!sink) return
  try { await ask(sink, { type: 'stop' }, 5000) } catch { /* killed below */ }
  await stopChild(sink, 2000)
}

export const sinkConfig = (secrets: string[], opts: { latency?: boolean; slowMs?: number } = {}) =>
  ask(sink!, { type: 'config', secrets, latency: opts.latency === true, slowMs: opts.slowMs ?? 5000 })
export const sinkStats = (samples = false) => ask<SinkStats>(sink!, { type: 'stats', samples })

/** The processes that serve the sink's requests (with a cluster, the primary only relays stats). */
export function sinkProcs (): Record<string, number> {
  if (sinkPids.length === 1) return { sink: sinkPids[0]! }
  return Object.fromEntries(sinkPids.slice(1).map((pid, i) => [`sink${i + 1}`, pid]))
}

/** Deliveries per second between the first and the last verified arrival. */
export function rateOf (c: ClassStats): number {
  return c.count > 1 && c.last > c.first ? (c.count - 1) / ((c.last - c.first) / 1000) : NaN
}

/** Polls the sink until `expected` verified arrivals (of `cls`), no progress for `stallMs`, or `capMs`. */
export async function waitForSink (expected: number, opts: { cls?: 'fast' | 'slow'; stallMs?: number; capMs?: number; onTick?: () => void } = {}): Promise<SinkStats> {
  const cls = opts.cls ?? 'fast'
  const stallMs = opts.stallMs ?? SIZES.stallMs
  const deadline = Date.now() + (opts.capMs ?? 600_000)
  let last = -1
  let lastChange = Date.now()
  for (;;) {
    const s = await sinkStats()
    const n = s[cls].count
    if (n >= expected) return s
    if (n !== last) { last = n; lastChange = Date.now() }
    if (Date.now() - lastChange > stallMs) {
      log(`    ! no progress for ${stallMs / 1000} s at ${fmt(n)} of ${fmt(expected)}: stopping the wait`)
      return s
    }
    if (Date.now() > deadline) {
      log(`    ! time cap reached at ${fmt(n)} of ${fmt(expected)}`)
      return s
    }
    opts.onTick?.()
    await sleep(100)
  }
}

// ── svc on a seeded data directory ───────────────────────────────────────────────────────────────────

export interface SvcRun {
  rate: number; delivered: number; expected: number; peakRssMiB: number; duplicates: number; bad: number; exitCode: number | null
  /** Deliveries by status in the store after svc stopped, and the last errors of those that failed an attempt. */
  persisted: Record<string, number>; errors: Record<string, number>
  stats: SinkStats
}

/** Starts svc on a seeded data dir, waits for `expected` fast deliveries at the sink, stops it, reads the store. */
export async function runSvcOn (dir: string, secrets: string[], expected: number, scenario: string, opts: {
  capMs?: number; watchRss?: (rssMiB: number) => void; stopGraceMs?: number
} = {}): Promise<SvcRun> {
  await sinkConfig(secrets)
  const svc = await startSvc(dir)
  let stopped: { peakRssMiB: number; exitCode: number | null } | undefined
  let stats: SinkStats
  try {
    const watch = new CpuWatch({ svc: svc.pid, ...sinkProcs() })
    let lastRssAt = 0
    stats = await waitForSink(expected, {
      ...(opts.capMs !== undefined ? { capMs: opts.capMs } : {}),
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
  if (stats.duplicates > 0) notes.push(`${scenario}: the sink saw ${stats.duplicates} duplicate deliveries (same X-Svc-Delivery twice)`)
  return {
    rate: rateOf(stats.fast), delivered: stats.fast.count, expected, peakRssMiB: stopped.peakRssMiB, persisted, errors,
    duplicates: stats.duplicates, bad: stats.bad, exitCode: stopped.exitCode, stats,
  }
}

export function describeRun (r: SvcRun): string {
  const persisted = Object.entries(r.persisted).map(([k, v]) => `${k} ${fmt(v)}`).join(', ')
  return `${fmt(r.rate)} verified/s (${fmt(r.delivered)}/${fmt(r.expected)} verified, ${r.bad} bad, ${r.duplicates} duplicates; ` +
    `peak RSS ${fmt(r.peakRssMiB)} MiB; in the store after stop: ${persisted || 'n/a'}; exit ${r.exitCode})` +
    (Object.keys(r.errors).length > 0 ? `\n      last errors of failed attempts: ${JSON.stringify(r.errors)}` : '')
}

/** The summary of a run kept in the JSON record (the sink's raw stats stay out). */
export function keep (r: SvcRun): Omit<SvcRun, 'stats'> {
  const { stats: _stats, ...rest } = r
  return rest
}

/** POST /api/send bodies: small transactional emails, to one or `recipients` addresses. */
export function sendBodies (recipients: number): string[] {
  return Array.from({ length: 256 }, (_, i) => JSON.stringify({
    to: recipients === 1 ? `someone${i}@example.com` : Array.from({ length: recipients }, (_, j) => `someone${i}-${j}@example.com`),
    subject: `Benchmark message ${i}`,
    text: 'Hello from the svc benchmark. This is the plain-text part of a small transactional email.',
  }))
}

export { startSvc, stopSvc }
