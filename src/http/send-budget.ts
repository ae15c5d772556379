// The bytes of send bodies svc holds at once. A body is held from its first byte until its answer: as
// chunks, then as text, then parsed, then decoded attachments, a body costs several times its size in
// memory. Twenty 20 MiB sends at once would take gigabytes; with the budget they take their turn, their
// bodies left in the socket (TCP pushes back on the client) until room is made. The key has been checked
// and counted by then (onRequest), so only a sender can wait here. Small bodies are not counted.
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { Gauge, type Registry } from 'prom-client'
import { BudgetWaitAborted, ByteBudget } from '../domain/byte-budget.js'
import { Unavailable } from '../errors.js'

/** Bodies at most this large go straight in: a send without files, however many recipients. */
export const UNCOUNTED_BODY_BYTES = 1024 * 1024

export interface SendBudgetOptions {
  /** The bytes of counted bodies held at once (SEND_BYTES_IN_FLIGHT). */
  bytes: number
  /** How long a body may wait for room before the answer is 503 with Retry-After. */
  waitMs: number
  /** The route's body limit: what a body without Content-Length is counted as. */
  bodyLimit: number
  /** Where svc_send_body_bytes_held and svc_send_bodies_waiting go. */
  registry?: Registry
}

/** Seconds a refused sender is told to wait. */
const RETRY_AFTER_SECONDS = 5

/** How many bytes this request's body is counted as (0: not counted). */
export function countedBytes (request: Pick<FastifyRequest, 'headers'>, bodyLimit: number): number {
  const declared = request.headers['content-length']
  const n = declared === undefined ? bodyLimit : Math.min(Number(declared), bodyLimit)
  return Number.isFinite(n) && n > UNCOUNTED_BODY_BYTES ? n : 0
}

/** Registers the budget on the routes of `app` (the send routes' plugin): a preParsing hook. */
export function registerSendBudget (app: FastifyInstance, opts: SendBudgetOptions): ByteBudget {
  const budget = new ByteBudget(opts.bytes)
  if (opts.registry !== undefined) {
    new Gauge({
      name: 'svc_send_body_bytes_held', help: 'Bytes of send bodies over 1 MiB being read or handled now (at most SEND_BYTES_IN_FLIGHT)',
      registers: [opts.registry], collect () { this.set(budget.held) },
    })
    new Gauge({
      name: 'svc_send_bodies_waiting', help: 'Send bodies over 1 MiB waiting for room in SEND_BYTES_IN_FLIGHT',
      registers: [opts.registry], collect () { this.set(budget.queued) },
    })
  }
  app.addHook('preParsing', async (request, reply, payload) => {
    const n = countedBytes(request, opts.bodyLimit)
    if (n === 0) return payload
    // Given back once, when the answer is written or the connection goes, whichever is first.
    let held = false
    const release = () => {
      if (!held) return
      held = false
      budget.give(n)
    }
    const gone = new AbortController()
    const abandon = () => gone.abort()
    request.raw.once('close', abandon)
    const timer = setTimeout(abandon, opts.waitMs)
    try {
      await budget.take(n, gone.signal)
      held = true
    } catch (err) {
      if (!(err instanceof BudgetWaitAborted)) throw err
      throw Unavailable(`Too many large sends are being received at once; retry in ${RETRY_AFTER_SECONDS} s`, undefined,
        { 'retry-after': String(RETRY_AFTER_SECONDS) })
    } finally {
      clearTimeout(timer)
      request.raw.removeListener('close', abandon)
    }
    reply.raw.once('close', release)
    return payload
  })
  return budget
}
