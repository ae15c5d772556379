// The naive peer: what a first version looks like. A sequential loop: sign with node:crypto, `fetch`,
// await the answer, next. No persistence (it would only be slower).
import { serve, type Msg } from '../lib/procs.js'
import { headers, payloads } from '../lib/sign.js'

async function run (msg: Msg): Promise<Record<string, unknown>> {
  const url = String(msg.url)
  const secret = String(msg.secret)
  const deadline = performance.now() + Number(msg.durationMs)
  const max = Number(msg.max)
  const bodies = payloads(1024)
  let sent = 0
  let ok = 0
  let failed = 0
  const started = performance.now()
  while (performance.now() < deadline && sent < max) {
    const i = sent++
    const body = bodies[i % bodies.length]!
    try {
      const res = await fetch(url, { method: 'POST', headers: headers(secret, body, `n-${process.pid}-${i}`), body })
      await res.arrayBuffer()
      if (res.ok) ok++
      else failed++
    } catch {
      failed++
    }
  }
  return { sent, ok, failed, elapsedMs: performance.now() - started }
}

serve(async (msg) => {
  if (msg.type === 'run') return run(msg)
  throw new Error(`unknown message ${msg.type}`)
})
