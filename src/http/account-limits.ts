// Per-account limits on every authenticated route (the session cookie or an API key): reads (GET, HEAD)
// and writes counted apart, per minute, so that one account cannot take the server for itself; and a
// tight limit per account and route on the routes that cost much (a webhook test sends a request to
// someone else's server; a domain makes an RSA key and asks DNS; a key or a secret is minted). The
// sending routes keep their own per-key limit (src/http/routes/emails) and are not counted here.
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Config } from '../../config/index.js'
import { RateLimited } from '../errors.js'

/** `METHOD url` of the routes under the tight limit. */
export const COSTLY_ROUTES: ReadonlySet<string> = new Set([
  'POST /api/webhooks/:id/test',
  'POST /api/webhooks/:id/rotate-secret',
  'POST /api/webhooks/:id/replay',
  'POST /api/domains',
  'DELETE /api/domains/:id',
  'POST /api/domains/:id/verify',
  'POST /api/keys',
])

const OWN_LIMIT: ReadonlySet<string> = new Set(['/api/send', '/api/send/batch'])

function accountOf (request: FastifyRequest): string | undefined {
  return request.account?.id ?? request.apiKey?.accountId
}

/**
 * Registers the limits as a hook that runs after every route's authentication (onRequest) and before its
 * body is read; routes registered after this call get it.
 */
export function registerAccountLimits (app: FastifyInstance, limits: Config['rateLimits']): void {
  const minute = 60_000
  const reads = app.createRateLimit({ max: limits.readsPerMinute, timeWindow: minute, keyGenerator: (r) => `account-reads:${accountOf(r)}` })
  const writes = app.createRateLimit({ max: limits.writesPerMinute, timeWindow: minute, keyGenerator: (r) => `account-writes:${accountOf(r)}` })
  const costly = app.createRateLimit({
    max: limits.costlyPerMinute, timeWindow: minute, keyGenerator: (r) => `account-costly:${accountOf(r)}:${r.method} ${r.routeOptions.url}`,
  })
  app.addHook('preParsing', async (request, reply, payload) => {
    if (accountOf(request) === undefined || OWN_LIMIT.has(request.routeOptions.url ?? '')) return payload
    const read = request.method === 'GET' || request.method === 'HEAD'
    const checks = [read ? reads : writes]
    if (COSTLY_ROUTES.has(`${request.method} ${request.routeOptions.url}`)) checks.push(costly)
    for (const limit of checks) {
      const verdict = await limit(request)
      if (verdict.isAllowed || !verdict.isExceeded) continue
      reply.header('ratelimit-limit', verdict.max)
      reply.header('ratelimit-remaining', verdict.remaining)
      reply.header('ratelimit-reset', verdict.ttlInSeconds)
      throw RateLimited(`Too many ${limit === costly ? 'requests to this route' : read ? 'reads' : 'writes'} for this account; retry in ${verdict.ttlInSeconds} s`,
        undefined, { 'retry-after': String(verdict.ttlInSeconds) })
    }
    return payload
  })
}
