import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { requestHash, type SendAnswer } from '../../../domain/emails.js'
import { RateLimited } from '../../../errors.js'
import { apiKeyAuth, requireApiKey } from '../../auth.js'
import type { RouteContext } from '../context.js'
import { SendBatchRoute, SendRoute } from './schema.js'

const emailRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
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

  const idempotencyKey = (request: FastifyRequest) => {
    const key = request.headers['idempotency-key']
    return typeof key === 'string' ? { idempotencyKey: key } : {}
  }
  // The answer is sent as the stored JSON text: a replay is the first response, byte for byte.
  const answer = (reply: FastifyReply, a: SendAnswer) => {
    if (a.replayed) reply.header('idempotent-replayed', 'true')
    return reply.code(a.status).type('application/json; charset=utf-8').send(a.body)
  }

  app.post('/api/send', { schema: SendRoute }, async (request, reply) => {
    const a = await services.emails.send(requireApiKey(request), [request.body], {
      batch: false, requestHash: requestHash('POST /api/send', request.body), ...idempotencyKey(request),
    })
    return answer(reply, a)
  })

  app.post('/api/send/batch', { schema: SendBatchRoute }, async (request, reply) => {
    const a = await services.emails.send(requireApiKey(request), request.body, {
      batch: true, requestHash: requestHash('POST /api/send/batch', request.body), ...idempotencyKey(request),
    })
    return answer(reply, a)
  })
}

export default emailRoutes
