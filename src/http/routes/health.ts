import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { envelope } from '../errors.js'
import { Unavailable } from '../../errors.js'
import type { RouteContext } from './context.js'

const Status = Type.Object({ status: Type.String(), checks: Type.Optional(Type.Record(Type.String(), Type.String())) })

const healthRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services }) => {
  app.get('/healthz', { schema: { tags: ['operations'], summary: 'The process is alive', response: { 200: Status } } },
    async () => ({ status: 'ok' }))

  app.get('/readyz', { schema: { tags: ['operations'], summary: 'The store answers and the background workers are running' } },
    async (request, reply) => {
      try {
        await services.store.ping()
      } catch (err) {
        request.log.warn({ err }, 'readiness check: store unreachable')
        return reply.code(503).send(envelope(Unavailable('The store is unreachable')))
      }
      const checks: Record<string, string> = { store: 'ok' }
      for (const [name, check] of services.readiness) {
        const problem = check()
        if (problem !== null) return reply.code(503).send(envelope(Unavailable(problem)))
        checks[name] = 'ok'
      }
      return { status: 'ready', checks }
    })
}

export default healthRoutes
