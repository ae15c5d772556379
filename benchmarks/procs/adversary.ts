// Two accounts against one svc, in their own process: account A sends one adversarial body (see
// lib/adversarial.ts) at a fixed rate, account B makes ordinary sends at a fixed rate (open loops: a
// request starts on time whatever the answers do, so a stalled svc shows as waiting, not as fewer requests).
//   warmup: B alone, not counted (JIT, connections).
//   attack: A and B together for `durationMs`; then up to `graceMs` for the answers still due, after which
//           what is unanswered is abandoned and counted as such, its wait so far as a lower bound.
import { setMaxListeners } from 'node:events'
import { Pool } from 'undici'
import { ADVERSARIAL_BODY_BYTES, SHAPES } from '../lib/adversarial.js'
import { serve, type Msg } from '../lib/procs.js'
import { summarize } from '../lib/stats.js'

interface Side {
  sent: number
  skipped: number
  statuses: Record<string, number>
  /** Failed without an answer (connection reset and the like). */
  errors: number
  /** Still waiting when the phase was abandoned. */
  unanswered: number
  latencies: number[]
  /** The longest wait of an unanswered request (ms), a lower bound of its latency. */
  longestUnansweredMs: number
}

const newSide = (): Side => ({ sent: 0, skipped: 0, statuses: {}, errors: 0, unanswered: 0, latencies: [], longestUnansweredMs: 0 })

interface Loop { side: Side; pool: Pool; path: string; headers: Record<string, string>; body: () => string; rate: number; maxInFlight: number }

/** Open-loop requests at `rate`/s for `ms`, then waits up to `graceMs` for answers, then abandons the rest. */
async function run (loops: Loop[], ms: number, graceMs: number): Promise<void> {
  const abandon = new AbortController()
  // One signal for every request of the phase (they are abandoned together).
  setMaxListeners(0, abandon.signal)
  const t0 = performance.now()
  const issued = loops.map(() => 0)
  const inFlight = loops.map(() => 0)
  const fire = (i: number) => {
    const loop = loops[i]!
    loop.side.sent++
    inFlight[i]!++
    const started = performance.now()
    loop.pool.request({ path: loop.path, method: 'POST', headers: loop.headers, body: loop.body(), signal: abandon.signal })
      .then(async (res) => {
        await res.body.dump()
        loop.side.latencies.push(performance.now() - started)
        loop.side.statuses[res.statusCode] = (loop.side.statuses[res.statusCode] ?? 0) + 1
      }, () => {
        const waited = performance.now() - started
        if (abandon.signal.aborted) {
          loop.side.unanswered++
          loop.side.latencies.push(waited)
          loop.side.longestUnansweredMs = Math.max(loop.side.longestUnansweredMs, waited)
        } else {
          loop.side.errors++
        }
      })
      .finally(() => { inFlight[i]!-- })
  }
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const elapsed = performance.now() - t0
      if (elapsed >= ms) {
        clearInterval(timer)
        resolve()
        return
      }
      loops.forEach((loop, i) => {
        const due = Math.floor((elapsed / 1000) * loop.rate)
        while (issued[i]! < due) {
          issued[i]!++
          if (inFlight[i]! >= loop.maxInFlight) loop.side.skipped++
          else fire(i)
        }
      })
    }, 2)
  })
  const giveUpAt = performance.now() + graceMs
  while (inFlight.some((n) => n > 0) && performance.now() < giveUpAt) await new Promise((r) => setTimeout(r, 10))
  abandon.abort()
  while (inFlight.some((n) => n > 0)) await new Promise((r) => setTimeout(r, 5))
}

function report (side: Side) {
  const { latencies, ...rest } = side
  return { ...rest, latency: summarize(latencies) }
}

let pools: { origin: string; a: Pool; b: Pool } | undefined

serve(async (msg: Msg) => {
  const origin = String(msg.origin)
  if (pools?.origin !== origin) {
    // A new svc: the connections to the last one are dropped.
    if (pools) await Promise.all([pools.a.destroy(), pools.b.destroy()])
    // A and B apart, so that A's stuck requests hold none of B's connections; no undici timeouts (the
    // phases end what is left).
    const options = { connections: 64, keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 }
    pools = { origin, a: new Pool(origin, options), b: new Pool(origin, options) }
  }
  const bBodies = msg.bBodies as string[]
  let nb = 0
  const b: Loop = {
    side: newSide(), pool: pools.b, path: '/api/send', headers: { 'content-type': 'application/json', 'x-api-key': String(msg.keyB) },
    body: () => bBodies[nb++ % bBodies.length]!, rate: Number(msg.bRate), maxInFlight: 2000,
  }
  if (msg.type === 'warmup') {
    await run([b], Number(msg.durationMs), 2000)
    return { b: report(b.side) }
  }
  if (msg.type === 'attack') {
    const make = SHAPES[String(msg.shape)]
    if (!make) throw new Error(`unknown shape ${String(msg.shape)}`)
    const adversarial = make(ADVERSARIAL_BODY_BYTES)
    const a: Loop = {
      side: newSide(), pool: pools.a, path: '/api/send', headers: { 'content-type': 'application/json', 'x-api-key': String(msg.keyA) },
      body: () => adversarial.body, rate: Number(msg.aRate), maxInFlight: Number(msg.aMaxInFlight ?? 8),
    }
    await run([a, b], Number(msg.durationMs), Number(msg.graceMs))
    return { shape: adversarial.shape, what: adversarial.what, bodyBytes: Buffer.byteLength(adversarial.body), a: report(a.side), b: report(b.side) }
  }
  throw new Error(`unknown message ${msg.type}`)
})
