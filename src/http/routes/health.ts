import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { envelope } from '../errors.js'
import { component, errors } from '../schemas.js'
import { Unavailable } from '../../errors.js'
import { RETRY_AFTER_SECONDS } from '../../store/faults.js'
import type { RouteContext } from './context.js'

const Status = component('Health', Type.Object({ status: Type.String(), checks: Type.Optional(Type.Record(Type.String(), Type.String())) }))

const healthRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services }) => {
  const store = services.storeStatus
  const retryAfter = { 'retry-after': String(RETRY_AFTER_SECONDS) }

  // The store's fault state is logged here, once when it begins and once when it ends: the requests
  // it fails answer 503 without a log line each.
  const unsubscribe = store.health.onChange((now, before) => {
    if (now.state === 'unwritable') {
      app.log.error({ store: store.kind, fault: now.kind, code: now.code },
        `store cannot write: ${now.reason}; writes answer 503 and /readyz is 503 until a probe write succeeds`)
    } else if (before.state === 'unwritable') {
      app.log.warn({ store: store.kind, fault: before.kind, code: before.code, since: before.since, downMs: Date.parse(now.since) - Date.parse(before.since) },
        'store can write again; /readyz is ready')
    }
  })
  app.addHook('onClose', async () => { unsubscribe() })

  // Public: load balancers and orchestrators probe these without credentials.
  app.get('/healthz', {
    schema: { operationId: 'checkLiveness', tags: ['operations'], summary: 'The process is alive', security: [], response: { 200: { ...Status, description: 'Alive: { status: "ok" }' } }, omitErrors: [503] },
  },
    async () => ({ status: 'ok' }))

  app.get('/readyz', {
    schema: {
      operationId: 'checkReadiness', tags: ['operations'], security: [],
      summary: 'The store answers and takes writes, and the background workers are running',
      response: {
        200: { ...Status, description: 'Ready: { status: "ready", checks }, each check "ok"' },
        ...errors({ 503: 'Not ready: the store is unreachable or cannot write, or a background worker is not running (unavailable; the message says which)' }),
      },
    },
  },
    async (request, reply) => {
      try {
        await store.ping()
      } catch (err) {
        request.log.warn({ err }, 'readiness check: store unreachable')
        return reply.code(503).headers(retryAfter).send(envelope(Unavailable('The store is unreachable')))
      }
      // While the store cannot write, this makes a probe write (at most every few seconds) so that
      // readiness comes back by itself once the disk has room again.
      const health = await store.health.check()
      if (health.state === 'unwritable') {
        return reply.code(503).headers(retryAfter)
          .send(envelope(Unavailable(`The store cannot write since ${health.since}: ${health.reason} (${health.code})`)))
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
