// The restart soak's load generator, in its own process: POST /api/send at a fixed rate (open loop: a
// request starts on time whatever the answers do, so a stalled svc shows as waiting, not as fewer sends),
// round robin over the accounts' keys, for `durationMs`. svc is killed and restarted on the same port
// meanwhile: the requests that fail while it is down are recorded as errors, with their start time.
// Every send is recorded (start time on the wall clock, shared with the harness; latency; status; the
// email's id from a 202), so the harness can leave out the window after the kill and check every
// accepted email's events at the healthy receiver.
import { setMaxListeners } from 'node:events'
import { Pool } from 'undici'
import { openLoop } from '../lib/open-loop.js'
import { serve, type Msg } from '../lib/procs.js'

/** One send: when it started (ms, wall clock), its latency (ms), its status (0: no answer), the email's id. */
export interface SendRecord { at: number; ms: number; status: number; id?: string; error?: string }

async function run (msg: Msg): Promise<Record<string, unknown>> {
  const origin = String(msg.origin)
  const keys = msg.keys as string[]
  const bodies = msg.bodies as string[]
  const rate = Number(msg.rate)
  const durationMs = Number(msg.durationMs)
  const graceMs = Number(msg.graceMs ?? 30_000)
  const maxInFlight = Number(msg.maxInFlight ?? 5000)
  // No undici timeouts: the phase's grace ends what is left, and counts it.
  const pool = new Pool(origin, { connections: 128, keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 })
  const abandon = new AbortController()
  setMaxListeners(0, abandon.signal)
  const sends: SendRecord[] = []
  let inFlight = 0
  let unanswered = 0
  const t0 = performance.now()
  const wall0 = Date.now()
  const fire = (i: number) => {
    inFlight++
    const started = performance.now()
    const record: SendRecord = { at: wall0 + (started - t0), ms: NaN, status: 0 }
    sends.push(record)
    pool.request({
      path: '/api/send', method: 'POST', signal: abandon.signal, body: bodies[i % bodies.length]!,
      headers: { 'content-type': 'application/json', 'x-api-key': keys[i % keys.length]! },
    }).then(async (res) => {
      const text = await res.body.text()
      record.ms = performance.now() - started
      record.status = res.statusCode
      if (res.statusCode === 202) {
        try { record.id = (JSON.parse(text) as { data: { id: string } }).data.id } catch { /* counted as no id */ }
      }
    }, (err: unknown) => {
      record.ms = performance.now() - started
      if (abandon.signal.aborted) {
        unanswered++
        record.error = 'unanswered'
      } else {
        record.error = (err as { code?: string }).code ?? (err instanceof Error ? err.message.slice(0, 60) : String(err))
      }
    }).finally(() => { inFlight-- })
  }
  const { issued, skipped } = await openLoop({ rate, untilMs: durationMs, t0, maxInFlight, inFlight: () => inFlight, fire })
  const giveUpAt = performance.now() + graceMs
  while (inFlight > 0 && performance.now() < giveUpAt) await new Promise((r) => setTimeout(r, 10))
  abandon.abort()
  while (inFlight > 0) await new Promise((r) => setTimeout(r, 5))
  await pool.destroy()
  return { sends, issued, skipped, unanswered, startedAt: wall0 }
}

serve(async (msg: Msg) => {
  if (msg.type === 'run') return run(msg)
  throw new Error(`unknown message ${msg.type}`)
})
