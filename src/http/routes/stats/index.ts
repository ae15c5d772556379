import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { accountIdOf, cookieOrKey, perCallerLimit } from '../../cookie-or-key.js'
import type { RouteContext } from '../context.js'
import { StatsRoute } from './schema.js'

const statsRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  app.addHook('onRequest', cookieOrKey(services, config, 'manage'))
  app.addHook('onRequest', perCallerLimit(app, config.rateLimits.apiPerSecond))
  const { stats } = services

  app.get('/api/stats', { schema: StatsRoute }, async (request) => {
    const { since, until } = request.query
    const data = await stats.stats(accountIdOf(request), { ...(since !== undefined ? { since } : {}), ...(until !== undefined ? { until } : {}) })
    return { success: true as const, data, message: `Events from ${data.since} to ${data.until}` }
  })
}

export default statsRoutes
