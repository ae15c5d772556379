import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { WebhookRecord } from '../../../store/types.js'
import { requireAccount } from '../../auth.js'
import { cookieOrKey } from '../../cookie-or-key.js'
import type { RouteContext, Services } from '../context.js'
import { BODY_LIMITS } from '../../schemas.js'
import { parseTimestamp } from '../../../domain/clock.js'
import { ValidationError, type ErrorDetail } from '../../../errors.js'
import {
  CreateWebhookRoute, DeleteWebhookRoute, GetWebhookRoute, ListWebhooksRoute, PatchWebhookRoute, ReplayWebhookRoute, RotateSecretRoute,
} from './schema.js'

/** A request's time in ms; a problem naming the field when it does not parse. */
function instant (text: string, field: string, problems: ErrorDetail[]): number | undefined {
  const ms = parseTimestamp(text)
  if (ms === null) problems.push({ path: `body.${field}`, message: 'must be a date and time in ISO 8601 (RFC 3339), like 2026-01-31T09:30:00Z' })
  return ms ?? undefined
}

function shown (w: WebhookRecord, services: Services) {
  return {
    id: w.id, url: w.url, events: w.events, status: w.status, rateLimit: w.rateLimit ?? null, filter: w.filter ?? null,
    delivery: services.deliveryState(w.id), createdAt: w.createdAt, updatedAt: w.updatedAt,
  }
}

const webhookRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  // The session cookie (Origin checked) or a full_access API key.
  app.addHook('onRequest', cookieOrKey(services, config, 'manage'))
  const hooks = services.webhooks

  app.post('/api/webhooks', { schema: CreateWebhookRoute }, async (request, reply) => {
    const w = await hooks.create(requireAccount(request), request.body)
    return reply.code(201).send({
      success: true,
      data: {
        id: w.id, url: w.url, events: w.events, secret: w.secret, status: w.status, rateLimit: w.rateLimit ?? null, filter: w.filter ?? null, createdAt: w.createdAt,
      },
      message: 'Webhook created. Keep the secret: it verifies our signatures.',
    })
  })

  app.get('/api/webhooks', { schema: ListWebhooksRoute }, async (request) => {
    const list = await hooks.list(requireAccount(request).id)
    return { success: true as const, data: list.map((w) => shown(w, services)), message: `${list.length} webhook(s)` }
  })

  app.get('/api/webhooks/:id', { schema: GetWebhookRoute }, async (request) => {
    const w = await hooks.get(requireAccount(request).id, request.params.id)
    return { success: true as const, data: shown(w, services), message: 'Webhook' }
  })

  app.patch('/api/webhooks/:id', { schema: PatchWebhookRoute }, async (request) => {
    const w = await hooks.update(requireAccount(request).id, request.params.id, request.body)
    return { success: true as const, data: shown(w, services), message: 'Webhook updated' }
  })

  app.delete('/api/webhooks/:id', { schema: DeleteWebhookRoute }, async (request) => {
    await hooks.remove(requireAccount(request).id, request.params.id)
    return { success: true as const, data: { id: request.params.id, deleted: true as const }, message: 'Webhook deleted' }
  })

  app.post('/api/webhooks/:id/replay', { schema: ReplayWebhookRoute, bodyLimit: BODY_LIMITS.small }, async (request, reply) => {
    // The schema checked the shape; a time that does not parse (a date-time Date.parse refuses) is named here.
    const problems: ErrorDetail[] = []
    const since = instant(request.body.since, 'since', problems)
    const until = request.body.until === undefined ? undefined : instant(request.body.until, 'until', problems)
    if (problems.length > 0) throw ValidationError('The request is not valid', problems)
    const { queued, range } = await hooks.replay(requireAccount(request).id, request.params.id, {
      since: since!, until, events: request.body.events,
    })
    return reply.code(202).send({
      success: true,
      data: { queued, since: new Date(range.since).toISOString(), until: new Date(range.until).toISOString() },
      message: `${queued} deliveries queued to be sent again`,
    })
  })

  app.post('/api/webhooks/:id/rotate-secret', { schema: RotateSecretRoute }, async (request) => {
    const w = await hooks.rotateSecret(requireAccount(request).id, request.params.id)
    return {
      success: true as const,
      data: { secret: w.secret, previousSecretExpiresAt: w.previousSecretExpiresAt! },
      message: 'Secret rotated. The previous secret keeps signing for 24 hours.',
    }
  })
}

export default webhookRoutes
