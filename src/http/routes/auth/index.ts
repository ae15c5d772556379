import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import { normaliseEmail } from '../../../app/accounts.js'
import { addressKey } from '../../../domain/inbound-limits.js'
import { createLocalCeilingCounts, createLoginGuard, LOGIN_CEILING_WINDOW_MS, type CeilingCounter } from '../../../domain/login-throttle.js'
import { limitsOf } from '../../../domain/plans.js'
import { quotaPeriods } from '../../../domain/quotas.js'
import { isAppError, RateLimited } from '../../../errors.js'
import type { AccountRecord } from '../../../store/types.js'
import { clearSessionCookie, originGuard, requireAccount, sessionAuth, setSessionCookie } from '../../auth.js'
import { BODY_LIMITS } from '../../schemas.js'
import type { RouteContext } from '../context.js'
import { AccountRoute, ChangePasswordRoute, EndSessionsRoute, LoginRoute, LogoutRoute, SignupRoute, type Credentials } from './schema.js'

function publicAccount (a: AccountRecord) {
  return { id: a.id, email: a.email, plan: a.plan, createdAt: a.createdAt }
}

const accountRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  const cookieOpts = { production: config.production, sessionTtlMs: config.sessionTtlMs }
  const sameOrigin = originGuard(config.allowedOrigins)
  const session = sessionAuth(services.accounts, cookieOpts)

  // Three limits on the credential routes: per client address; per email and client address, on failed
  // logins, with growing delays; and per email across all addresses, a ceiling on FAILED logins far above
  // what one address can make, so that neither one machine nor a botnet can guess one account's password
  // at speed, while the owner at another address still logs in (the rule: src/domain/login-throttle.ts).
  // A client is its addressKey: an IPv4 address, or an IPv6 /64 (one host has all of a /64's addresses).
  const perIp = { rateLimit: { max: config.rateLimits.authPerMinute, timeWindow: 60_000, keyGenerator: (r: FastifyRequest) => `auth:${addressKey(r.ip)}` } }
  const guard = createLoginGuard({ clock: services.clock, freeFailures: config.rateLimits.loginFailures, ceiling: config.rateLimits.loginPerEmail })
  const emailOf = (request: FastifyRequest) => normaliseEmail((request.body as Credentials).email)
  // The ceiling's two counts per email, each attempt's in the window it began in (its number is in the
  // key). RATE_LIMIT_STORE=store: in @fastify/rate-limit's store, the shared one, so every node counts the
  // same tries; the rule needs the counts themselves, so no hit is ever over the limit (max) and a hit's
  // count is max − remaining. memory: in this process, for a bounded number of emails (the plugin's own
  // memory store holds 5000 keys, and starts each key's window at its first hit).
  const localCounts = config.rateLimitStore === 'memory' ? createLocalCeilingCounts() : null
  const windowOf = new WeakMap<FastifyRequest, number>()
  const sharedCount = (count: 'tries' | 'marks') => app.createRateLimit({
    max: Number.MAX_SAFE_INTEGER, timeWindow: LOGIN_CEILING_WINDOW_MS, keyGenerator: (r: FastifyRequest) => `login-${count}:${windowOf.get(r)}:${emailOf(r)}`,
  })
  const sharedCounts = localCounts === null ? { tries: sharedCount('tries'), marks: sharedCount('marks') } : null
  const counterFor = (request: FastifyRequest, email: string): CeilingCounter => {
    if (sharedCounts === null) return localCounts!.counter(email)
    return async (which, window) => {
      windowOf.set(request, window)
      const verdict = await sharedCounts[which](request)
      if (verdict.isAllowed) throw new Error('the login ceiling\'s counts have no allow list')
      return { hits: verdict.max - verdict.remaining }
    }
  }
  // Signups per email, every attempt counted (a signup has no password to guess, only an email to try).
  const signupLimit = app.createRateLimit({
    max: config.rateLimits.loginPerEmail, timeWindow: LOGIN_CEILING_WINDOW_MS, keyGenerator: (r: FastifyRequest) => `signup:${emailOf(r)}`,
  })
  const perEmailSignup = async (request: FastifyRequest) => {
    const verdict = await signupLimit(request)
    // isAllowed is true only for allow-listed keys; over the limit is isExceeded.
    if (!verdict.isAllowed && verdict.isExceeded) {
      throw RateLimited(`Too many attempts for this email; retry in ${verdict.ttlInSeconds} s`, undefined, { 'retry-after': String(verdict.ttlInSeconds) })
    }
  }

  app.post('/api/auth/signup', { schema: SignupRoute, bodyLimit: BODY_LIMITS.small, config: perIp, onRequest: sameOrigin, preHandler: perEmailSignup }, async (request, reply) => {
    try {
      const grant = await services.accounts.signup(request.body.email, request.body.password)
      setSessionCookie(reply, grant.token, grant.expiresAt, cookieOpts)
      return reply.code(201).send({ success: true, data: publicAccount(grant.account), message: 'Account created' })
    } catch (err) {
      if (isAppError(err) && err.code === 'signup_closed') request.log.warn({ security: 'signup_refused' }, 'security: signup refused (signup is closed)')
      throw err
    }
  })

  app.post('/api/auth/login', { schema: LoginRoute, bodyLimit: BODY_LIMITS.small, config: perIp, onRequest: sameOrigin }, async (request, reply) => {
    const email = normaliseEmail(request.body.email)
    const attempt = await guard.attempt(email, request.ip, counterFor(request, email))
    if (!attempt.allowed) {
      const seconds = Math.max(1, Math.ceil(attempt.waitMs / 1000))
      const message = attempt.by === 'address'
        ? `Too many failed logins from this address for this email; retry in ${seconds} s`
        : `Too many failed logins for this email; retry in ${seconds} s`
      throw RateLimited(message, undefined, { 'retry-after': String(seconds) })
    }
    let grant: Awaited<ReturnType<typeof services.accounts.login>>
    try {
      grant = await services.accounts.login(email, request.body.password)
    } catch (err) {
      if (isAppError(err) && err.code === 'invalid_credentials') {
        attempt.failed()
        const accountId = (err as { accountId?: string | null }).accountId ?? null
        request.log.warn({ security: 'login_failed', accountId }, 'security: failed login')
      } else {
        await attempt.abandoned()
      }
      throw err
    }
    // A success not taken off the count still counts as a failure: the ceiling errs toward refusing.
    await attempt.succeeded().catch((err: unknown) => request.log.warn({ err }, 'taking a login off the account-wide ceiling failed'))
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
    const periods = quotaPeriods(account.plan, config.quotas, services.clock.now())
    const [usage, sent] = await Promise.all([services.usage.of(account.id), services.usage.sending(account.id, periods.map((p) => p.period))])
    const [day, month] = periods.map((p) => ({ used: sent[p.period] ?? 0, limit: p.limit, resetsAt: new Date(p.resetsAt).toISOString() }))
    return {
      success: true as const,
      data: {
        ...publicAccount(account), limits: limitsOf(account.plan), usage, sending: { day: day!, month: month! },
        // Every node has the same SMTP_URL: what this one would use is what the mailers use.
        transport: config.smtpUrl !== undefined ? 'smtp' as const : 'sandbox' as const,
      },
      message: 'Account',
    }
  })

  // A new password ends every other session; the one that changed it stays.
  app.post('/api/account/password', { schema: ChangePasswordRoute, bodyLimit: BODY_LIMITS.small, onRequest: [sameOrigin, session] }, async (request) => {
    const account = requireAccount(request)
    let ended: number
    try {
      ended = await services.accounts.changePassword(account, request.body.currentPassword, request.body.newPassword, request.sessionTokenHash)
    } catch (err) {
      if (isAppError(err) && err.code === 'invalid_credentials') request.log.warn({ security: 'password_change_refused', accountId: account.id }, 'security: password change with a wrong current password')
      throw err
    }
    request.log.warn({ security: 'password_changed', accountId: account.id, sessionsEnded: ended }, 'security: password changed')
    return { success: true as const, data: { changed: true as const, sessionsEnded: ended }, message: 'Password changed; every other session has ended' }
  })

  app.delete('/api/account/sessions', { schema: EndSessionsRoute, onRequest: [sameOrigin, session] }, async (request) => {
    const account = requireAccount(request)
    const ended = await services.accounts.endOtherSessions(account.id, request.sessionTokenHash)
    request.log.warn({ security: 'sessions_ended', accountId: account.id, sessionsEnded: ended }, 'security: every other session ended')
    return { success: true as const, data: { sessionsEnded: ended }, message: `${ended} other session(s) ended` }
  })
}

export default accountRoutes
