// Routes that both a person in the dashboard (session cookie) and a program (x-api-key) may call: every
// management route, the email reads, the stats. An x-api-key header makes it a key request, checked for
// the permission the route needs; otherwise it is a cookie request, under the Origin rule.
import type { FastifyInstance, FastifyRequest, onRequestAsyncHookHandler } from 'fastify'
import type { Config } from '../../config/index.js'
import { AuthenticationRequired, RateLimited } from '../errors.js'
import type { ApiKeyNeed } from '../app/api-keys.js'
import { accountAuth } from './auth.js'
import type { Services } from './routes/context.js'

/**
 * The session cookie (Origin checked) or an API key allowed `need`: `send` for the email reads (a
 * sending_access key reads what it sent), `manage` for the rest.
 */
export function cookieOrKey (services: Services, config: Pick<Config, 'production' | 'sessionTtlMs' | 'allowedOrigins'>, need: ApiKeyNeed): onRequestAsyncHookHandler {
  const cookieOpts = { production: config.production, sessionTtlMs: config.sessionTtlMs }
  return accountAuth(services.accounts, services.apiKeys, config.allowedOrigins, cookieOpts, need)
}

/** The account a cookie-or-key request acts for. */
export function accountIdOf (request: FastifyRequest): string {
  const id = request.account?.id ?? request.apiKey?.accountId
  if (id === undefined) throw AuthenticationRequired()
  return id
}

/**
 * A per-second limit per caller (the API key, or the account behind the cookie), like the sending routes'
 * per-key limit; runs after cookieOrKey.
 */
export function perCallerLimit (app: FastifyInstance, max: number): onRequestAsyncHookHandler {
  const limit = app.createRateLimit({
    max,
    timeWindow: 1000,
    keyGenerator: (request: FastifyRequest) => (request.apiKey ? `api-key:${request.apiKey.id}` : `account:${accountIdOf(request)}`),
  })
  return async (request, reply) => {
    const verdict = await limit(request)
    if (verdict.isAllowed || !verdict.isExceeded) return
    reply.header('ratelimit-limit', verdict.max)
    reply.header('ratelimit-remaining', verdict.remaining)
    reply.header('ratelimit-reset', verdict.ttlInSeconds)
    throw RateLimited(`Too many requests; retry in ${verdict.ttlInSeconds} s`, undefined, { 'retry-after': String(verdict.ttlInSeconds) })
  }
}
