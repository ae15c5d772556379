import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import { normaliseEmail } from '../../../app/accounts.js'
import { limitsOf } from '../../../domain/plans.js'
import { RateLimited } from '../../../errors.js'
import type { AccountRecord } from '../../../store/types.js'
import { clearSessionCookie, originGuard, requireAccount, sessionAuth, setSessionCookie } from '../../auth.js'
import { BODY_LIMITS } from '../../schemas.js'
import type { RouteContext } from '../context.js'
import { AccountRoute, LoginRoute, LogoutRoute, SignupRoute, type Credentials } from './schema.js'

function publicAccount (a: AccountRecord) {
  return { id: a.id, email: a.email, plan: a.plan, createdAt: a.createdAt }
}

const accountRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  const cookieOpts = { production: config.production, sessionTtlMs: config.sessionTtlMs }
  const sameOrigin = originGuard(config.allowedOrigins)
  const session = sessionAuth(services.accounts, cookieOpts)

  // Two limits on the credential routes: per client address, and per email across all addresses, so
  // that neither one machine nor a botnet can guess one account's password at speed.
  const perIp = { rateLimit: { max: config.rateLimits.authPerMinute, timeWindow: 60_000 } }
  // (@fastify/rate-limit runs one of its own hooks per request, so the second limit is checked here.)
  const perEmail = (action: 'signup' | 'login') => {
    const limit = app.createRateLimit({
      max: config.rateLimits.loginPerEmail,
      timeWindow: 15 * 60_000,
      keyGenerator: (request: FastifyRequest) => `${action}:${normaliseEmail((request.body as Credentials).email)}`,
    })
    return async (request: FastifyRequest) => {
      const verdict = await limit(request)
      // isAllowed is true only for allow-listed keys; over the limit is isExceeded.
      if (!verdict.isAllowed && verdict.isExceeded) {
        throw RateLimited(`Too many attempts for this email; retry in ${verdict.ttlInSeconds} s`, undefined, { 'retry-after': String(verdict.ttlInSeconds) })
      }
    }
  }

  app.post('/api/auth/signup', { schema: SignupRoute, bodyLimit: BODY_LIMITS.small, config: perIp, onRequest: sameOrigin, preHandler: perEmail('signup') }, async (request, reply) => {
    const grant = await services.accounts.signup(request.body.email, request.body.password)
    setSessionCookie(reply, grant.token, grant.expiresAt, cookieOpts)
    return reply.code(201).send({ success: true, data: publicAccount(grant.account), message: 'Account created' })
  })

  app.post('/api/auth/login', { schema: LoginRoute, bodyLimit: BODY_LIMITS.small, config: perIp, onRequest: sameOrigin, preHandler: perEmail('login') }, async (request, reply) => {
    const grant = await services.accounts.login(request.body.email, request.body.password)
    setSessionCookie(reply, grant.token, grant.expiresAt, cookieOpts)
    return { success: true as const, data: publicAccount(grant.account), message: 'Logged in' }
  })

  app.post('/api/auth/logout', { schema: LogoutRoute, onRequest: [sameOrigin, session] }, async (request, reply) => {
    await services.accounts.logout(request.sessionTokenHash!)
    clearSessionCookie(reply, cookieOpts)
    return { success: true as const, data: { loggedOut: true as const }, message: 'Logged out' }
  })

  app.get('/api/account', { schema: AccountRoute, onRequest: [sameOrigin, session] }, async (request) => {
    const account = requireAccount(request)
    const usage = await services.usage.of(account.id)
    return {
      success: true as const,
      data: {
        ...publicAccount(account), limits: limitsOf(account.plan), usage,
        // Every node has the same SMTP_URL: what this one would use is what the mailers use.
        transport: config.smtpUrl !== undefined ? 'smtp' as const : 'sandbox' as const,
      },
      message: 'Account',
    }
  })
}

export default accountRoutes
