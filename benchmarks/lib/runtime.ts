// What svc's own /metrics says about its main thread over a window: event-loop delay (prom-client's
// default metrics, whose histogram restarts at each scrape) and garbage collection (cumulative, so the
// window is the difference of two scrapes), and the store's flushes to disk (svc_store_disk_flush_seconds:
// the fdatasync every durable write, and so every event, waits for). Used to explain a latency figure, not
// to make one.
import { request } from 'undici'

interface GcTotals { count: number; seconds: number; over100ms: number }
interface FlushTotals { count: number; seconds: number; buckets: Array<[number, number]> }
export interface RuntimeScrape { lagMaxMs: number; lagP99Ms: number; gc: Record<string, GcTotals>; flush: FlushTotals }

async function scrape (origin: string, timeoutMs: number): Promise<string> {
  // A stalled svc does not answer: the scrape gives up rather than wait with it.
  const res = await request(`${origin}/metrics`, { signal: AbortSignal.timeout(timeoutMs) })
  return res.body.text()
}

function value (text: string, name: string): number {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)$`, 'm').exec(text)
  return m ? Number(m[1]) : NaN
}

export async function runtimeScrape (origin: string, timeoutMs = 30_000): Promise<RuntimeScrape> {
  const text = await scrape(origin, timeoutMs)
  const gc: Record<string, GcTotals> = {}
  const upTo100ms: Record<string, number> = {}
  const line = /^nodejs_gc_duration_seconds_(sum|count|bucket)\{([^}]*)\} ([0-9.eE+-]+)$/gm
  for (const m of text.matchAll(line)) {
    const kind = /kind="([^"]+)"/.exec(m[2]!)?.[1] ?? 'unknown'
    const totals = gc[kind] ??= { count: 0, seconds: 0, over100ms: 0 }
    if (m[1] === 'sum') totals.seconds = Number(m[3])
    else if (m[1] === 'count') totals.count = Number(m[3])
    else if (/le="0\.1"/.test(m[2]!)) upTo100ms[kind] = Number(m[3])
  }
  for (const [kind, t] of Object.entries(gc)) t.over100ms = t.count - (upTo100ms[kind] ?? 0)
  const buckets: Array<[number, number]> = []
  for (const m of text.matchAll(/^svc_store_disk_flush_seconds_bucket\{le="([^"]+)"\} ([0-9.eE+-]+)$/gm)) {
    buckets.push([m[1] === '+Inf' ? Infinity : Number(m[1]), Number(m[2])])
  }
  return {
    lagMaxMs: value(text, 'nodejs_eventloop_lag_max_seconds') * 1000,
    lagP99Ms: value(text, 'nodejs_eventloop_lag_p99_seconds') * 1000,
    gc,
    flush: { count: value(text, 'svc_store_disk_flush_seconds_count') || 0, seconds: value(text, 'svc_store_disk_flush_seconds_sum') || 0, buckets },
  }
}

/** The bucket bound (ms) under which a share q of the window's flushes fell (a histogram gives no finer). */
function flushQuantileMs (before: FlushTotals, after: FlushTotals, q: number): number | null {
  const count = after.count - before.count
  if (count <= 0) return null
  for (const [le, n] of after.buckets) {
    const was = before.buckets.find(([l]) => l === le)?.[1] ?? 0
    if (n - was >= q * count) return le * 1000
  }
  return null
}

/** The GC done between two scrapes, by kind, and the event-loop delay seen since the first. */
export function runtimeWindow (before: RuntimeScrape, after: RuntimeScrape) {
  const gc: Record<string, { count: number; ms: number; over100ms: number }> = {}
  for (const [kind, t] of Object.entries(after.gc)) {
    const b = before.gc[kind] ?? { count: 0, seconds: 0, over100ms: 0 }
    gc[kind] = { count: t.count - b.count, ms: Math.round((t.seconds - b.seconds) * 1000), over100ms: t.over100ms - b.over100ms }
  }
  const flushes = after.flush.count - before.flush.count
  const diskFlush = flushes > 0
    ? {
        count: flushes,
        meanMs: Math.round(((after.flush.seconds - before.flush.seconds) / flushes) * 10_000) / 10,
        p50AtMostMs: flushQuantileMs(before.flush, after.flush, 0.5),
        p99AtMostMs: flushQuantileMs(before.flush, after.flush, 0.99),
      }
    : undefined
  return { eventLoopDelayMaxMs: after.lagMaxMs, eventLoopDelayP99Ms: after.lagP99Ms, gc, ...(diskFlush ? { diskFlush } : {}) }
}
