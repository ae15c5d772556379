import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { requestHash, sendProblems, type SendAnswer } from '../../../app/emails.js'
import { RateLimited, ValidationError, type ErrorDetail } from '../../../errors.js'
import { apiKeyAuth, requireApiKey } from '../../auth.js'
import { registerSendBudget } from '../../send-budget.js'
import { toAppError } from '../../errors.js'
import type { RouteContext } from '../context.js'
import { SendBatchRoute, SendRoute } from './schema.js'

// `body.to[2]` → item 0, field `to`; `body[3].subject` → item 3, field `subject`; `body` → the whole body.
const DETAIL_PATH = /^body(?:\[(\d+)\])?(?:\.([A-Za-z]+))?/
const FIELD_ORDER = ['to', 'subject', 'html', 'text', 'attachments', 'from', 'cc', 'bcc', 'replyTo', 'headers', 'tags', 'metadata', 'scheduledAt', 'tracking', 'unsubscribe']

/**
 * A send the schema refused is answered with the schema's problems and, for the fields the schema
 * accepted, the send rules' problems (src/domain/send-input.ts): one answer names every field that is wrong.
 */
function refuseInvalidSend (request: FastifyRequest, batch: boolean): void {
  const error = request.validationError
  if (error === undefined) return
  const schemaDetails = toAppError(error).details ?? []
  const details: ErrorDetail[] = [...schemaDetails]
  const body = request.body
  const items = batch ? (Array.isArray(body) ? body as unknown[] : []) : [body]
  // Which top-level fields of which item the schema refused; null: the item (or the body) as a whole.
  const invalid = new Map<number, Set<string> | null>()
  let whole = false
  if ((error as { validationContext?: string }).validationContext === 'body') {
    for (const d of schemaDetails) {
      const m = DETAIL_PATH.exec(d.path)
      if (m === null) continue
      if (batch && m[1] === undefined) whole = true
      const i = m[1] === undefined ? 0 : Number(m[1])
      if (m[2] === undefined) invalid.set(i, null)
      else if (invalid.get(i) !== null) invalid.set(i, (invalid.get(i) ?? new Set()).add(m[2]))
    }
  }
  if (!whole) {
    items.forEach((item, i) => {
      const fields = invalid.get(i)
      if (fields === null) return
      const prefix = batch ? `body[${i}]` : 'body'
      for (const p of sendProblems(item, fields ?? new Set())) details.push({ path: `${prefix}.${p.path}`, message: p.message })
    })
  }
  // In the order of the items, and of the fields as the README lists them.
  const rank = (path: string): [number, number] => {
    const m = DETAIL_PATH.exec(path)
    return [m?.[1] === undefined ? -1 : Number(m[1]), m?.[2] === undefined ? -1 : FIELD_ORDER.indexOf(m[2])]
  }
  details.sort((a, b) => {
    const [ai, af] = rank(a.path)
    const [bi, bf] = rank(b.path)
    return ai - bi || af - bf
  })
  throw ValidationError('The request is not valid; nothing was sent', details)
}

const emailRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config, registry }) => {
  // The key is checked first (a revoked key is refused at once), then counted: the limit is per API key,
  // so one sender's burst never slows another's, and a stranger without a key is never counted at all.
  // The two hooks run in this order, before the body is read.
  app.addHook('onRequest', apiKeyAuth(services.apiKeys))
  const limit = app.createRateLimit({
    max: config.rateLimits.apiPerSecond,
    timeWindow: 1000,
    keyGenerator: (request: FastifyRequest) => `api-key:${requireApiKey(request).id}`,
  })
  app.addHook('onRequest', async (request, reply) => {
    const verdict = await limit(request)
    if (verdict.isAllowed) return
    reply.header('ratelimit-limit', verdict.max)
    reply.header('ratelimit-remaining', verdict.remaining)
    reply.header('ratelimit-reset', verdict.ttlInSeconds)
    if (verdict.isExceeded) {
      throw RateLimited(`Too many requests for this API key; retry in ${verdict.ttlInSeconds} s`, undefined,
        { 'retry-after': String(verdict.ttlInSeconds) })
    }
  })

  // Then a large body waits for room among those being read (src/http/send-budget.ts).
  registerSendBudget(app, { ...config.sendBudget, bodyLimit: config.sendBodyLimit, registry })

  // The body's hash binds an Idempotency-Key to its request; without a key there is nothing to bind (and
  // nothing to hash).
  const idempotency = (request: FastifyRequest, route: string) => {
    const key = request.headers['idempotency-key']
    return typeof key === 'string' ? { idempotency: { key, requestHash: requestHash(route, request.body) } } : {}
  }
  // The answer is sent as the stored JSON text: a replay is the first response, byte for byte.
  const answer = (reply: FastifyReply, a: SendAnswer) => {
    if (a.replayed) reply.header('idempotent-replayed', 'true')
    return reply.code(a.status).type('application/json; charset=utf-8').send(a.body)
  }

  app.post('/api/send', { schema: SendRoute, bodyLimit: config.sendBodyLimit, attachValidation: true }, async (request, reply) => {
    refuseInvalidSend(request, false)
    const a = await services.emails.send(requireApiKey(request), [request.body], {
      batch: false, ...idempotency(request, 'POST /api/send'),
    })
    return answer(reply, a)
  })

  app.post('/api/send/batch', { schema: SendBatchRoute, bodyLimit: config.sendBodyLimit, attachValidation: true }, async (request, reply) => {
    refuseInvalidSend(request, true)
    const a = await services.emails.send(requireApiKey(request), request.body, {
      batch: true, ...idempotency(request, 'POST /api/send/batch'),
    })
    return answer(reply, a)
  })
}

export default emailRoutes
