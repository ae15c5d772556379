import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { SuppressionRecord } from '../../../store/emails.js'
import { requireAccount } from '../../auth.js'
import { cookieOrKey } from '../../cookie-or-key.js'
import { BODY_LIMITS } from '../../schemas.js'
import type { RouteContext } from '../context.js'
import { AddSuppressionRoute, DeleteSuppressionRoute, GetSuppressionRoute, ListSuppressionsRoute } from './schema.js'

function shown (s: SuppressionRecord) {
  return { email: s.email, reason: s.reason, createdAt: s.createdAt }
}

const suppressionRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  // The session cookie (Origin checked) or a full_access API key.
  app.addHook('onRequest', cookieOrKey(services, config, 'manage'))

  app.get('/api/suppressions', { schema: ListSuppressionsRoute }, async (request) => {
    const { limit, cursor } = request.query
    const page = await services.suppressions.list(requireAccount(request).id, { limit, ...(cursor !== undefined ? { cursor } : {}) })
    return {
      success: true as const,
      data: page.items.map(shown),
      message: `${page.items.length} suppressed address(es)`,
      nextCursor: page.nextCursor,
    }
  })

  app.post('/api/suppressions', { schema: AddSuppressionRoute, bodyLimit: BODY_LIMITS.small }, async (request, reply) => {
    const { created, record } = await services.suppressions.add(requireAccount(request).id, request.body.email, request.body.reason ?? 'manual')
    return reply.code(created ? 201 : 200).send({
      success: true,
      data: shown(record),
      message: created ? 'Address suppressed' : `Address already suppressed (${record.reason})`,
    })
  })

  app.get('/api/suppressions/:email', { schema: GetSuppressionRoute }, async (request) => {
    const found = await services.suppressions.find(requireAccount(request).id, request.params.email)
    return { success: true as const, data: shown(found), message: `Suppressed (${found.reason})` }
  })

  app.delete('/api/suppressions/:email', { schema: DeleteSuppressionRoute }, async (request) => {
    const email = await services.suppressions.remove(requireAccount(request).id, request.params.email)
    return { success: true as const, data: { email, deleted: true as const }, message: 'Address removed from the suppression list' }
  })
}

export default suppressionRoutes
