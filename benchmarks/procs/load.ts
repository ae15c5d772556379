// The HTTP load generator, in its own process: undici over a keep-alive pool.
//   closed: `concurrency` requests always in flight for `durationMs` (after `warmupMs` not counted);
//           the figure is req/s and latency percentiles of what answered in the window.
//   open:   requests started at a fixed `rate` per second whatever the answers do (no coordinated
//           omission); used to raise events at a fixed rate.
import { Pool } from 'undici'
import { openLoop } from '../lib/open-loop.js'
import { serve, type Msg } from '../lib/procs.js'
import { summarize } from '../lib/stats.js'

interface Common { origin: string; path: string; headers: Record<string, string>; bodies: string[]; durationMs: number; warmupMs: number }

function common (msg: Msg): Common {
  return {
    origin: String(msg.origin),
    path: String(msg.path),
    headers: msg.headers as Record<string, string>,
    bodies: msg.bodies as string[],
    durationMs: Number(msg.durationMs),
    warmupMs: Number(msg.warmupMs ?? 0),
  }
}

async function closed (msg: Msg): Promise<Record<string, unknown>> {
  const c = common(msg)
  const concurrency = Number(msg.concurrency)
  const pool = new Pool(c.origin, { connections: concurrency, keepAliveTimeout: 30_000 })
  const statuses: Record<string, number> = {}
  const latencies: number[] = []
  let i = 0
  let errors = 0
  const t0 = performance.now()
  const measureFrom = t0 + c.warmupMs
  const end = measureFrom + c.durationMs
  let counted = 0
  const lane = async () => {
    while (performance.now() < end) {
      const body = c.bodies[i++ % c.bodies.length]!
      const s = performance.now()
      try {
        const res = await pool.request({ path: c.path, method: 'POST', headers: c.headers, body })
        await res.body.dump()
        const e = performance.now()
        if (s >= measureFrom && e <= end) {
          counted++
          latencies.push(e - s)
          statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1
        }
      } catch {
        errors++
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, lane))
  await pool.close()
  return { requests: counted, rps: counted / (c.durationMs / 1000), latency: summarize(latencies), statuses, errors }
}

async function open (msg: Msg): Promise<Record<string, unknown>> {
  const c = common(msg)
  const rate = Number(msg.rate)
  const maxInFlight = Number(msg.maxInFlight ?? 4096)
  const pool = new Pool(c.origin, { connections: Number(msg.connections ?? 64), keepAliveTimeout: 30_000 })
  const statuses: Record<string, number> = {}
  const latencies: number[] = []
  let inFlight = 0
  let errors = 0
  const wall0 = Date.now()
  const t0 = performance.now()
  const fire = (i: number) => {
    const body = c.bodies[i % c.bodies.length]!
    inFlight++
    const s = performance.now()
    pool.request({ path: c.path, method: 'POST', headers: c.headers, body })
      .then(async (res) => {
        await res.body.dump()
        if (s - t0 >= c.warmupMs) latencies.push(performance.now() - s)
        statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1
      }, () => { errors++ })
      .finally(() => { inFlight-- })
  }
  const { issued, skipped } = await openLoop({ rate, untilMs: c.warmupMs + c.durationMs, t0, maxInFlight, inFlight: () => inFlight, fire })
  const sentFor = performance.now() - t0
  const waitUntil = performance.now() + 15_000
  while (inFlight > 0 && performance.now() < waitUntil) await new Promise((r) => setTimeout(r, 10))
  await pool.close()
  return { issued, skipped, achievedRate: issued / (sentFor / 1000), latency: summarize(latencies), statuses, errors, startedAt: wall0 }
}

serve(async (msg) => {
  if (msg.type === 'closed') return closed(msg)
  if (msg.type === 'open') return open(msg)
  throw new Error(`unknown message ${msg.type}`)
})
