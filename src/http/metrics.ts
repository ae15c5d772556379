import type { FastifyInstance } from 'fastify'
import { Histogram, type Registry } from 'prom-client'
import { safeEqual } from '../domain/secrets.js'
import { errors } from './schemas.js'

/**
 * The request histogram, and /metrics: open without a token (development and test), behind
 * `Authorization: Bearer <token>` with one, and not served at all when `served` is false (production
 * without METRICS_TOKEN, config/index.ts), so that nothing is public unless the operator says so.
 */
export function registerHttpMetrics (app: FastifyInstance, registry: Registry, token: string | undefined, served = true): void {
  const duration = new Histogram({
    name: 'svc_http_request_duration_seconds',
    help: 'HTTP requests by method, route and status, with their duration',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  })

  app.addHook('onResponse', async (request, reply) => {
    // The route pattern, never the raw URL: ids and tokens in paths would explode the label set.
    const route = request.routeOptions.url ?? 'unmatched'
    duration.observe({ method: request.method, route, status: String(reply.statusCode) }, reply.elapsedTime / 1000)
  })

  if (!served) return
  app.get('/metrics', {
    schema: {
      operationId: 'getMetrics', tags: ['operations'], summary: 'Prometheus metrics (text exposition format)',
      // Open, unless METRICS_TOKEN is set: then `Authorization: Bearer <token>` (in production, always).
      security: [{}, { metricsToken: [] }],
      response: {
        200: { description: 'The metrics', content: { 'text/plain': { schema: { type: 'string' } } } },
        ...errors({ 401: 'METRICS_TOKEN is set and the bearer token is missing or wrong (authentication_required)' }),
      },
    },
  }, async (request, reply) => {
    if (token !== undefined) {
      const given = request.headers.authorization ?? ''
      if (!safeEqual(given, `Bearer ${token}`)) {
        return reply.code(401).header('www-authenticate', 'Bearer').send({
          success: false, error: { code: 'authentication_required', message: 'Send the metrics bearer token' },
        })
      }
    }
    reply.type(registry.contentType)
    return registry.metrics()
  })
}
