// What every scenario shares: the options and sizes of this run, the sink and how to read it, CPU
// accounting, svc runs on a seeded data directory, and the record the run writes at the end.
import type { ChildProcess } from 'node:child_process'
import { ask, cpuBetween, forkTracked, machineBusy, memoryOf, procFile, sampleCpu, sleep, stopChild, type CpuSample, type CpuUse, type Msg } from './procs.js'
import { fmt } from './report.js'
import { summarizeDir, type ProfileSummary } from './profile.js'
import { readSqlCost, sqlCostLines, type SqlCost } from './sql-cost.js'
import { median } from './stats.js'
import { deliveryCounts, startSvc, stopSvc, type SvcProcess } from './svc.js'

// ── options and sizes ──────────────────────────────────────────────────────────────────────────────────

export const argv = process.argv.slice(2)
export const QUICK = argv.includes('--quick')
export const ONLY = new Set((argv.find((a) => a.startsWith('--only='))?.slice(7) ?? '').split(',').filter(Boolean))
export const SINK_WORKERS = Math.max(1, Number(argv.find((a) => a.startsWith('--sink-workers='))?.slice(15) ?? 1))
export const wanted = (name: string) => ONLY.size === 0 || ONLY.has(name)
/** Profile svc (Node's --cpu-prof) in every scenario and print each thread's top functions. */
export const CPU_PROF = argv.includes('--cpu-prof')
/** Time svc's SQL statements on its main thread (see sql-cost.ts) and print the costliest after each svc run. */
export const SQL_COST = argv.includes('--sql-cost')
/**
 * Every webhook of the engine and scale scenarios has a filter (a domain and a tag), and every event an
 * email that it takes: routing looks each email up and checks it (issue 37). Compare with a run without.
 */
export const FILTERS = argv.includes('--filters')
/** The filter --filters puts on those webhooks, and the email every event then has (both conditions match). */
export const BENCH_FILTER = { domains: ['bench.example'], tags: [{ name: 'kind', value: 'receipt' }] }
export const BENCH_EMAIL = { from: 'Bench <orders@bench.example>', tags: [{ name: 'tenant', value: 't-1' }, { name: 'kind', value: 'receipt' }] }

export const SIZES = QUICK
  ? {
      reps: 1, ceilingMs: 3000, naiveMs: 2000, engineEvents: 20_000, queueJobs: 10_000, queueReps: 1,
      apiWarmupMs: 1000, apiMs: 3000, apiReps: 1, apiConcurrency: 64,
      latencyPrewarmMs: 2000, latencyWarmupMs: 3000, latencyMs: 5000, recipients: 5,
      slowEventsPerAccount: 100, slowReps: 1,
      scaleAccounts: 100, scaleEventsPerAccount: 100, scaleCapMs: 30_000, stallMs: 10_000, scaleStallMs: 30_000,
      advWarmupMs: 1000, advMs: 3000, advGraceMs: 2000, advARate: 2, advBRate: 50,
      smtpEmails: 2000, pipelineEmails: 5000, postfixEmails: 500,
    }
  : {
      reps: 3, ceilingMs: 5000, naiveMs: 4000, engineEvents: 100_000, queueJobs: 50_000, queueReps: 2,
      apiWarmupMs: 2000, apiMs: 8000, apiReps: 3, apiConcurrency: 64,
      latencyPrewarmMs: 5000, latencyWarmupMs: 5000, latencyMs: 20_000, recipients: 5,
      slowEventsPerAccount: 300, slowReps: 2,
      scaleAccounts: 1000, scaleEventsPerAccount: 100, scaleCapMs: 240_000, stallMs: 20_000, scaleStallMs: 60_000,
      advWarmupMs: 2000, advMs: 8000, advGraceMs: 5000, advARate: 2, advBRate: 50,
      smtpEmails: 5000, pipelineEmails: 20_000, postfixEmails: 2000,
    }

export const log = (line: string) => process.stdout.write(line + '\n')

// ── what the run records ───────────────────────────────────────────────────────────────────────────────

export type CpuReport = Record<string, CpuUse>
export const results: Record<string, unknown> = {}
export const cpu: Record<string, CpuReport[]> = {}
export const notes: string[] = []

/** Keeps a window's CPU report and prints it; returns `foreign` (cores used by everything else meanwhile). */
export function recordCpu (scenario: string, report: CpuReport): number {
  ;(cpu[scenario] ??= []).push(report)
  log(`    cpu (share of one core): ${cpuLine(report)}`)
  const foreign = report.foreign?.total ?? 0
  if (foreign > 0.25) {
    const line = `${scenario}: other processes (or the kernel, for ours: loopback TCP, disk journal) used ${fmt(foreign * 100)} % of a core meanwhile`
    if (!notes.includes(line)) notes.push(line)
  }
  return foreign
}

// ── cost: CPU microseconds per delivery (or per request) ───────────────────────────────────────────────

/** CPU µs per item of one process, split by thread where it matters (svc: main, delivery threads, the rest). */
export interface Cost { total: number; main: number; delivery?: number; other?: number }
export interface CostRow {
  /** What was measured, in words (the scenario and its size). */
  what: string
  /** What one item is: a delivery, a POST, a send. */
  per: string
  /** Items counted over the window. */
  count: number
  /** µs per item, by process. */
  procs: Record<string, Cost>
}
export const costs: CostRow[] = []

/**
 * µs of CPU per item for each process of `report`. svc's threads are told apart by id: the main thread is
 * the process id, the delivery threads are the ones svc names in /metrics, and `other` is the rest (V8's
 * GC and compiler helpers, libuv's pool). /proc counts in ticks (10 ms): windows of a second or more.
 */
export function costOf (report: CpuReport, count: number, svc?: { name: string; pid: number; deliveryTids: number[] }): Record<string, Cost> {
  const out: Record<string, Cost> = {}
  const us = (seconds: number) => count > 0 ? seconds * 1e6 / count : NaN
  for (const [name, use] of Object.entries(report)) {
    if (name === 'foreign') continue
    const all = Object.values(use.threadSeconds).reduce((n, v) => n + v, 0)
    if (svc && name === svc.name) {
      const main = use.threadSeconds[svc.pid] ?? 0
      const delivery = svc.deliveryTids.reduce((n, tid) => n + (use.threadSeconds[tid] ?? 0), 0)
      out[name] = { total: us(all), main: us(main), delivery: us(delivery), other: us(all - main - delivery) }
    } else {
      out[name] = { total: us(all), main: us(use.main * use.seconds) }
    }
  }
  return out
}

/** The delivery threads' OS ids, as svc gives them in /metrics (empty when it cannot say, or does not answer). */
export async function deliveryThreadIds (origin: string): Promise<number[]> {
  try {
    const res = await fetch(`${origin}/metrics`, { signal: AbortSignal.timeout(2000) })
    const text = await res.text()
    return [...text.matchAll(/^svc_delivery_worker_thread_id\{[^}]*\} (\d+)$/gm)].map((m) => Number(m[1]))
  } catch {
    return []
  }
}

export function recordCost (row: CostRow): void {
  costs.push(row)
  const parts = Object.entries(row.procs).map(([name, c]) => {
    const split = c.delivery !== undefined ? ` (main ${fmt(c.main, 1)}, delivery threads ${fmt(c.delivery, 1)}, other threads ${fmt(c.other ?? NaN, 1)})` : ''
    return `${name} ${fmt(c.total, 1)}${split}`
  })
  log(`    cpu µs per ${row.per} (${fmt(row.count)} counted): ${parts.join('; ')}`)
}

/** Above this much other work on the machine (in cores) during a repeat, the repeat is left out when a quieter one exists. */
export const QUIET = 0.5

export interface Sample { value: number; foreign: number }

/**
 * The median of the repeats measured while the machine was quiet (other work under QUIET of a core);
 * of all repeats when none was. Left-out repeats stay in the record, and a note says so.
 */
export function pick (name: string, samples: Sample[]): number {
  const quiet = samples.filter((s) => s.foreign <= QUIET && Number.isFinite(s.value))
  const used = quiet.length > 0 ? quiet : samples
  if (quiet.length > 0 && quiet.length < samples.length) {
    notes.push(`${name}: ${samples.length - quiet.length} of ${samples.length} repeats left out of the median (other work on the machine used more than ${QUIET * 100} % of a core meanwhile)`)
  } else if (quiet.length === 0 && samples.length > 0) {
    notes.push(`${name}: every repeat ran on a busy machine (other work above ${QUIET * 100} % of a core): the figure is noisy`)
  }
  return median(used.map((s) => s.value))
}

function cpuLine (report: CpuReport): string {
  return Object.entries(report).map(([name, c]) => {
    const threads = c.others.length > 0 && c.total - c.main > 0.05
      ? ` (main thread ${fmt(c.main * 100)} %, busiest others ${c.others.map((o, i) => `${c.otherNames?.[i] ?? ''} ${fmt(o * 100)} %`).join(', ')})`
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

  /**
   * Shares of one core; `foreign` is the rest of the machine's busy time meanwhile: other processes, and
   * kernel work not charged to ours (softirq of loopback TCP, the filesystem journal's threads).
   */
  stop (): CpuReport {
    const out: CpuReport = {}
    for (const [name, { pid, s }] of this.start) out[name] = cpuBetween(pid, s, sampleCpu(pid))
    const seconds = (performance.now() - this.t0) / 1000
    const ours = Object.values(out).reduce((n, c) => n + c.total, 0)
    // The harness itself (it mostly sleeps between polls) is counted in `foreign`: an upper bound.
    const foreign = Math.max(0, (machineBusy() - this.busy0) / seconds - ours)
    out.foreign = { total: foreign, main: foreign, others: [], otherNames: [], seconds, threadSeconds: {} }
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

export interface Waited extends SinkStats {
  /** Every expected delivery arrived. */
  complete: boolean
  /** When the wait ended (ms): the last arrival if complete, else when it gave up (a stall or the cap). */
  endedAt: number
}

/**
 * Deliveries per second. Complete: between the first and the last verified arrival. Incomplete: from the
 * first arrival to when the wait gave up, so that a stall counts against the figure instead of vanishing.
 */
export function rateOfWait (w: Waited, cls: 'fast' | 'slow' = 'fast'): number {
  const c = w[cls]
  if (w.complete) return rateOf(c)
  return c.count > 1 && w.endedAt > c.first ? (c.count - 1) / ((w.endedAt - c.first) / 1000) : NaN
}

/** Polls the sink until `expected` verified arrivals (of `cls`), no progress for `stallMs`, or `capMs`. */
export async function waitForSink (expected: number, opts: {
  cls?: 'fast' | 'slow'; stallMs?: number; capMs?: number; onTick?: () => void
  /** Checked on every poll: a reason to stop waiting at once (svc is gone). */
  abort?: () => string | undefined
} = {}): Promise<Waited> {
  const cls = opts.cls ?? 'fast'
  const stallMs = opts.stallMs ?? SIZES.stallMs
  const deadline = Date.now() + (opts.capMs ?? 600_000)
  let last = -1
  let lastChange = Date.now()
  for (;;) {
    const s = await sinkStats()
    const n = s[cls].count
    if (n >= expected) return { ...s, complete: true, endedAt: s[cls].last }
    if (n !== last) { last = n; lastChange = Date.now() }
    if (Date.now() - lastChange > stallMs) {
      log(`    ! no progress for ${stallMs / 1000} s at ${fmt(n)} of ${fmt(expected)}: stopping the wait (the stall counts in the rate)`)
      return { ...s, complete: false, endedAt: Date.now() }
    }
    if (Date.now() > deadline) {
      log(`    ! time cap reached at ${fmt(n)} of ${fmt(expected)}`)
      return { ...s, complete: false, endedAt: Date.now() }
    }
    const reason = opts.abort?.()
    if (reason !== undefined) {
      log(`    ! ${reason}: stopping the wait at ${fmt(n)} of ${fmt(expected)}`)
      return { ...s, complete: false, endedAt: Date.now() }
    }
    opts.onTick?.()
    await sleep(100)
  }
}

// ── svc on a seeded data directory ───────────────────────────────────────────────────────────────────

export interface SvcRun {
  rate: number; delivered: number; expected: number; complete: boolean; peakRssMiB: number; duplicates: number; bad: number; exitCode: number | null
  /** Deliveries by status in the store after svc stopped, and the last errors of those that failed an attempt. */
  persisted: Record<string, number>; errors: Record<string, number>
  /** svc's warn and error log lines, by message. */
  logged: Record<string, number>
  /** Other work on the machine during the run, in cores. */
  foreign: number
  /** CPU µs per delivery verified in the measured window, by process (svc split by thread). */
  cost: Record<string, Cost>
  stats: Waited
}

/** Starts svc on a seeded data dir, waits for `expected` fast deliveries at the sink, stops it, reads the store. */
export async function runSvcOn (dir: string, secrets: string[], expected: number, scenario: string, opts: {
  capMs?: number; stallMs?: number; watchRss?: (rssMiB: number) => void; stopGraceMs?: number
  /** How the cost table names this run (default: the scenario). */
  costLabel?: string
} = {}): Promise<SvcRun> {
  await sinkConfig(secrets)
  const svc = await startSvc(dir, {}, scenario)
  let stopped: { peakRssMiB: number; exitCode: number | null } | undefined
  let stats: Waited
  let foreign: number
  let cost: Record<string, Cost>
  let counted: number
  try {
    const before = (await sinkStats()).fast.count
    const watch = new CpuWatch({ svc: svc.pid, ...sinkProcs() })
    let lastRssAt = 0
    stats = await waitForSink(expected, {
      ...(opts.capMs !== undefined ? { capMs: opts.capMs } : {}),
      ...(opts.stallMs !== undefined ? { stallMs: opts.stallMs } : {}),
      abort: () => svc.unexpectedExit(),
      onTick: () => {
        if (!opts.watchRss || Date.now() - lastRssAt < 1000) return
        lastRssAt = Date.now()
        const m = memoryOf(svc.pid)
        if (m) opts.watchRss(m.rssMiB)
      },
    })
    const report = watch.stop()
    foreign = recordCpu(scenario, report)
    // Per delivery verified in the window (those before it, while svc started, are not in its CPU either).
    counted = stats.fast.count - before
    cost = costOf(report, counted, { name: 'svc', pid: svc.pid, deliveryTids: await deliveryThreadIds(svc.origin) })
    recordCost({ what: opts.costLabel ?? scenario, per: 'delivery', count: counted, procs: cost })
  } finally {
    stopped = await stopSvc(svc, opts.stopGraceMs ?? 40_000)
  }
  const logged = reportLogged(scenario, svc)
  let persisted: Record<string, number> = {}
  let errors: Record<string, number> = {}
  try {
    ({ byStatus: persisted, errors } = deliveryCounts(dir))
  } catch (err) {
    notes.push(`${scenario}: could not read delivery counts: ${String(err)}`)
  }
  if (Object.keys(errors).length > 0) notes.push(`${scenario}: failed attempts in the store: ${JSON.stringify(errors)}`)
  // Every delivery the sink verified was answered 2xx: after a clean stop the store should say succeeded.
  const verified = stats.fast.count + stats.slow.count - stats.duplicates
  const succeeded = persisted.succeeded ?? 0
  if (Object.keys(persisted).length > 0 && succeeded < verified) {
    notes.push(`${scenario}: ${fmt(verified - succeeded)} deliveries verified 2xx at the sink are not "succeeded" in the store after svc stopped (${JSON.stringify(persisted)}): they will be sent again`)
  }
  if (stats.duplicates > 0) notes.push(`${scenario}: the sink saw ${stats.duplicates} duplicate deliveries (same X-Svc-Delivery twice)`)
  return {
    rate: rateOfWait(stats), delivered: stats.fast.count, expected, complete: stats.complete, peakRssMiB: stopped.peakRssMiB, persisted, errors, logged, foreign, cost,
    duplicates: stats.duplicates, bad: stats.bad, exitCode: stopped.exitCode, stats,
  }
}

/** Puts svc's warnings and errors (counted by message) in the log and the notes; returns them. */
export const profiles: Record<string, ProfileSummary[]> = {}

/** With --cpu-prof: summarizes the profiles svc wrote when it stopped (one per thread). */
export function reportProfiles (scenario: string, svc: SvcProcess): void {
  if (svc.profileDir === undefined) return
  const summaries = summarizeDir(svc.profileDir)
  profiles[`${scenario} (${svc.profileDir})`] = summaries
  for (const p of summaries) {
    log(`    profile ${p.file.split('/').slice(-2).join('/')}: ${fmt(p.totalMs)} ms, ${p.idlePct} % idle; busiest (self time):`)
    for (const t of p.top.slice(0, 8)) log(`      ${String(t.pct).padStart(5)} %  ${t.fn}`)
  }
}

/** With --sql-cost: each svc run's statements, the costliest first (for the record). */
export const sqlCosts: Record<string, SqlCost[]> = {}

/** With --sql-cost: the costliest statements svc's main thread ran, over its whole run (warm-up included). */
export function reportSqlCost (scenario: string, svc: SvcProcess): void {
  if (svc.sqlCostFile === undefined) return
  const costs = readSqlCost(svc.sqlCostFile)
  sqlCosts[`${scenario} (${svc.sqlCostFile})`] = costs
  if (costs.length === 0) {
    log(`    sql cost: svc wrote none to ${svc.sqlCostFile}`)
    return
  }
  const total = costs.reduce((sum, c) => sum + c.ms, 0)
  log(`    sql cost on svc's main thread over its whole run (warm-up included): ${fmt(total)} ms in all; the costliest:`)
  for (const line of sqlCostLines(costs, 8)) log(`      ${line}`)
}

export function reportLogged (scenario: string, svc: SvcProcess): Record<string, number> {
  reportProfiles(scenario, svc)
  reportSqlCost(scenario, svc)
  const exit = svc.unexpectedExit()
  if (exit !== undefined) {
    log(`    ! ${exit}: the figure is void (${svc.output().trim().split('\n').slice(-1)[0] ?? ''})`)
    notes.push(`${scenario}: ${exit}; its figure is void`)
  }
  const logged = svc.logged()
  if (Object.keys(logged).length > 0) {
    const top = Object.entries(logged).sort(([, a], [, b]) => b - a).slice(0, 4).map(([m, n]) => `${n} × ${m}`).join('; ')
    log(`    svc logged: ${top}`)
    notes.push(`${scenario}: svc logged ${top}`)
  }
  return logged
}

export function describeRun (r: SvcRun): string {
  const persisted = Object.entries(r.persisted).map(([k, v]) => `${k} ${fmt(v)}`).join(', ')
  return `${fmt(r.rate)} verified/s${r.complete ? '' : ' INCOMPLETE'} (${fmt(r.delivered)}/${fmt(r.expected)} verified, ${r.bad} bad, ${r.duplicates} duplicates; ` +
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

/**
 * POST /api/send/batch bodies for `count` emails, 100 to a request: one recipient each, a small html part
 * with one link (what the mail scenarios send), from `from` when given.
 */
export function batchBodies (count: number, from?: string): string[] {
  const out: string[] = []
  for (let start = 0; start < count; start += 100) {
    out.push(JSON.stringify(Array.from({ length: Math.min(100, count - start) }, (_, j) => ({
      ...(from !== undefined ? { from } : {}),
      to: `someone${start + j}@example.com`, subject: `Benchmark message ${start + j}`,
      html: `<p>Hello from the svc benchmark, message ${start + j}.</p><p><a href="https://example.com/docs">Read the docs</a></p>`,
    }))))
  }
  return out
}

/** Posts `bodies` to /api/send/batch with `inFlight` requests at once, as a sender's batch job would; the statuses, counted. */
export async function postBatches (origin: string, key: string, bodies: string[], inFlight: number): Promise<Record<string, number>> {
  let next = 0
  const statuses: Record<string, number> = {}
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (next < bodies.length) {
      const body = bodies[next++]!
      const res = await fetch(`${origin}/api/send/batch`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key }, body })
      await res.arrayBuffer()
      statuses[res.status] = (statuses[res.status] ?? 0) + 1
    }
  }))
  return statuses
}

export { startSvc, stopSvc }
