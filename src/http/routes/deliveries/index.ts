import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { parseTimestamp } from '../../../domain/clock.js'
import { ValidationError } from '../../../errors.js'
import type { DeliveryRecord } from '../../../store/deliveries.js'
import { requireAccount } from '../../auth.js'
import { cookieOrKey } from '../../cookie-or-key.js'
import { BODY_LIMITS } from '../../schemas.js'
import type { RouteContext } from '../context.js'
import { ListDeliveriesRoute, RecoverRoute, RetryDeliveryRoute, TestDeliveryRoute } from './schema.js'

function instant (text: string, field: string): number {
  const ms = parseTimestamp(text)
  if (ms === null) throw ValidationError('The request is not valid', [{ path: `body.${field}`, message: 'must be a date and time in ISO 8601 (RFC 3339), like 2026-01-31T09:30:00Z' }])
  return ms
}

function shown (d: DeliveryRecord) {
  const { webhookId: _webhookId, ...rest } = d
  return rest
}

const deliveryRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  // The session cookie (Origin checked) or a full_access API key.
  app.addHook('onRequest', cookieOrKey(services, config, 'manage'))
  const deliveries = services.deliveries

  app.get('/api/webhooks/:id/deliveries', { schema: ListDeliveriesRoute }, async (request) => {
    const { status, limit, cursor } = request.query
    const page = await deliveries.list(requireAccount(request).id, request.params.id, {
      limit, ...(status !== undefined ? { status } : {}), ...(cursor !== undefined ? { cursor } : {}),
    })
    return { success: true as const, data: page.items.map(shown), nextCursor: page.nextCursor, message: `${page.items.length} deliveries` }
  })

  app.post('/api/webhooks/:id/deliveries/:deliveryId/retry', { schema: RetryDeliveryRoute }, async (request, reply) => {
    const d = await deliveries.retry(requireAccount(request).id, request.params.id, request.params.deliveryId)
    return reply.code(202).send({ success: true, data: shown(d), message: 'Delivery queued' })
  })

  // Both bodies are optional: no body (or {}) is the default event, or the whole log until now.
  app.post('/api/webhooks/:id/test', { schema: TestDeliveryRoute, bodyLimit: BODY_LIMITS.small }, async (request, reply) => {
    const type = request.body?.event ?? 'email.sent'
    const d = await deliveries.test(requireAccount(request).id, request.params.id, type)
    return reply.code(202).send({ success: true, data: shown(d), message: `Test ${type} event queued` })
  })

  app.post('/api/webhooks/:id/recover', { schema: RecoverRoute, bodyLimit: BODY_LIMITS.small }, async (request, reply) => {
    const since = request.body.since !== undefined ? instant(request.body.since, 'since') : 0
    const until = request.body.until !== undefined ? instant(request.body.until, 'until') : Date.now()
    const queued = await deliveries.recover(requireAccount(request).id, request.params.id, since, until)
    return reply.code(202).send({ success: true, data: { queued }, message: `${queued} failed deliveries queued again` })
  })
}

export default deliveryRoutes
