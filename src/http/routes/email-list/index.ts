// Reading emails: the list and one email with its timeline, for the dashboard (cookie) and for
// programs (x-api-key). Sending stays in ../emails, behind the API key alone.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { accountIdOf, cookieOrKey, perCallerLimit } from '../../cookie-or-key.js'
import type { RouteContext } from '../context.js'
import { CancelEmailRoute, GetEmailRoute, ListEmailsRoute, RescheduleEmailRoute } from './schema.js'
import { BODY_LIMITS } from '../../schemas.js'

const emailListRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  app.addHook('onRequest', cookieOrKey(services, config, 'send'))
  app.addHook('onRequest', perCallerLimit(app, config.rateLimits.apiPerSecond))
  const emails = services.emailList

  app.get('/api/emails', { schema: ListEmailsRoute }, async (request) => {
    const { status, event, to, tag, since, until, limit, cursor } = request.query
    const page = await emails.list(accountIdOf(request), {
      limit,
      ...(status !== undefined ? { status } : {}),
      ...(event !== undefined ? { event } : {}),
      ...(to !== undefined ? { to } : {}),
      ...(tag !== undefined ? { tag } : {}),
      ...(since !== undefined ? { since } : {}),
      ...(until !== undefined ? { until } : {}),
      ...(cursor !== undefined ? { cursor } : {}),
    })
    return { success: true as const, data: page.items, nextCursor: page.nextCursor, message: `${page.items.length} email(s)` }
  })

  app.get('/api/emails/:id', { schema: GetEmailRoute }, async (request) => {
    const email = await services.emails.get(accountIdOf(request), request.params.id)
    return { success: true as const, data: email, message: `Email ${email.status}` }
  })

  // A scheduled email, moved or canceled by its sender (a key with the send permission, or the dashboard).
  app.patch('/api/emails/:id', { schema: RescheduleEmailRoute, bodyLimit: BODY_LIMITS.small }, async (request) => {
    const email = await services.emails.reschedule(accountIdOf(request), request.params.id, request.body.scheduledAt)
    return { success: true as const, data: email, message: `Email scheduled for ${email.scheduledAt}` }
  })

  app.post('/api/emails/:id/cancel', { schema: CancelEmailRoute }, async (request) => {
    const email = await services.emails.cancel(accountIdOf(request), request.params.id)
    return { success: true as const, data: email, message: 'Email canceled: it will not be sent' }
  })
}

export default emailListRoutes
