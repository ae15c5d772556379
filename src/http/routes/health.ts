import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { envelope } from '../errors.js'
import { Unavailable } from '../../errors.js'
import type { RouteContext } from './context.js'

const Status = Type.Object({ status: Type.String(), checks: Type.Optional(Type.Record(Type.String(), Type.String())) })

const healthRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services }) => {
  app.get('/healthz', { schema: { tags: ['operations'], summary: 'The process is alive', response: { 200: Status } } },
    async () => ({ status: 'ok' }))

  app.get('/readyz', { schema: { tags: ['operations'], summary: 'The store answers and the service can take work' } },
    async (request, reply) => {
      try {
        await services.store.ping()
      } catch (err) {
        request.log.warn({ err }, 'readiness check: store unreachable')
        return reply.code(503).send(envelope(Unavailable('The store is unreachable')))
      }
      return { status: 'ready', checks: { store: 'ok' } }
    })
}

export default healthRoutes
