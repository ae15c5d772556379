// The ceiling: one process, one thread, `concurrency` undici POSTs in flight over a keep-alive pool, each
// HMAC-signed, against the bare sink; no persistence, nothing else. What the sink verifies is the figure.
// It uses undici's leanest path (a Pool of `concurrency` connections, requests by path): measured here,
// that is ~40 % more requests per CPU second than `request(url, { dispatcher: agent })`, so the ceiling is
// what one thread can really do, not what one style of calling it does.
import { Pool } from 'undici'
import { serve, type Msg } from '../lib/procs.js'
import { headers, payloads } from '../lib/sign.js'

async function run (msg: Msg): Promise<Record<string, unknown>> {
  const url = new URL(String(msg.url))
  const secret = String(msg.secret)
  const concurrency = Number(msg.concurrency)
  const deadline = performance.now() + Number(msg.durationMs)
  const max = Number(msg.max)
  const bodies = payloads(4096)
  const pool = new Pool(url.origin, { connections: concurrency, keepAliveTimeout: 30_000 })
  let sent = 0
  let ok = 0
  let failed = 0
  const started = performance.now()
  const lane = async () => {
    while (performance.now() < deadline && sent < max) {
      const i = sent++
      const body = bodies[i % bodies.length]!
      try {
        const res = await pool.request({ path: url.pathname, method: 'POST', headers: headers(secret, body, `c-${process.pid}-${i}`), body })
        await res.body.dump()
        if (res.statusCode >= 200 && res.statusCode < 300) ok++
        else failed++
      } catch {
        failed++
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, lane))
  const elapsedMs = performance.now() - started
  await pool.close()
  return { sent, ok, failed, elapsedMs }
}

serve(async (msg) => {
  if (msg.type === 'run') return run(msg)
  throw new Error(`unknown message ${msg.type}`)
})
