import type { FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from 'fastify'
import type { AccountService } from '../app/accounts.js'
import type { ApiKeyNeed, ApiKeyService } from '../app/api-keys.js'
import { AuthenticationRequired, ForbiddenOrigin } from '../errors.js'
import type { AccountRecord, ApiKeyRecord } from '../store/types.js'

export const SESSION_COOKIE = 'svc_session'

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the session pre-handler on cookie routes. */
    account: AccountRecord | null
    sessionTokenHash: string | null
    /** Set when the request came with `x-api-key`: on sending routes, and on management routes (see accountAuth). */
    apiKey: ApiKeyRecord | null
  }
}

export interface CookieOptions {
  production: boolean
  sessionTtlMs: number
}

export function setSessionCookie (reply: FastifyReply, token: string, expiresAt: number, opts: CookieOptions): void {
  reply.setCookie(SESSION_COOKIE, token, {
    httpOnly: true,
    sameSite: 'lax',
    path: '/',
    secure: opts.production,
    maxAge: Math.max(0, Math.floor((expiresAt - Date.now()) / 1000)),
  })
}

export function clearSessionCookie (reply: FastifyReply, opts: CookieOptions): void {
  reply.clearCookie(SESSION_COOKIE, { httpOnly: true, sameSite: 'lax', path: '/', secure: opts.production })
}

/**
 * Cookies ride along on cross-site requests that a browser makes on its own; the Origin header is how we
 * tell them apart. A request that names an origin other than ours is refused before any cookie is read.
 * Clients that send no Origin (curl, servers) are not browsers and carry no ambient credentials.
 */
export function originGuard (allowedOrigins: readonly string[]): onRequestAsyncHookHandler {
  const allowed = new Set(allowedOrigins.map((o) => new URL(o).origin))
  // Names what is allowed (public: it is where svc is served), never echoes what the request sent.
  const message = `Requests from this origin are not allowed: cookie requests must come from ${[...allowed].join(' or ')} (PUBLIC_URL)`
  return async (request) => {
    const origin = request.headers.origin
    if (origin !== undefined && !allowed.has(origin)) throw ForbiddenOrigin(message)
  }
}

export function sessionAuth (accounts: AccountService, cookieOpts: CookieOptions): onRequestAsyncHookHandler {
  return async (request, reply) => {
    const token = request.cookies[SESSION_COOKIE]
    if (!token) throw AuthenticationRequired('Log in first: this route needs the session cookie')
    try {
      const session = await accounts.authenticate(token)
      request.account = session.account
      request.sessionTokenHash = session.tokenHash
      if (session.renewedUntil !== undefined) setSessionCookie(reply, token, session.renewedUntil, cookieOpts)
    } catch (err) {
      clearSessionCookie(reply, cookieOpts)
      throw err
    }
  }
}

export function apiKeyAuth (keys: ApiKeyService): onRequestAsyncHookHandler {
  return async (request: FastifyRequest) => {
    const presented = request.headers['x-api-key']
    if (typeof presented !== 'string' || presented === '') {
      throw AuthenticationRequired('Send your API key in the x-api-key header')
    }
    request.apiKey = await keys.authenticate(presented)
  }
}

/**
 * Management routes (keys, webhooks, deliveries, suppressions, …): the session cookie, or an API key in
 * `x-api-key` whose permission allows managing (src/domain/api-key-permissions.ts decides), acting for the key's
 * account exactly as its owner's cookie would. A request with a key is judged by the key alone: no cookie
 * is read, and no Origin check is needed (a browser never sends a key on its own, as it does a cookie).
 */
export function accountAuth (
  accounts: AccountService, keys: ApiKeyService, allowedOrigins: readonly string[], cookieOpts: CookieOptions, need: ApiKeyNeed = 'manage',
): onRequestAsyncHookHandler {
  const sameOrigin = originGuard(allowedOrigins)
  const session = sessionAuth(accounts, cookieOpts)
  return async function (request, reply) {
    const presented = request.headers['x-api-key']
    if (presented !== undefined) {
      const { key, account } = await keys.authenticateAccount(String(presented), need)
      request.apiKey = key
      request.account = account
      return
    }
    await sameOrigin.call(this, request, reply)
    await session.call(this, request, reply)
  }
}

export function requireAccount (request: FastifyRequest): AccountRecord {
  if (!request.account) throw AuthenticationRequired()
  return request.account
}

export function requireApiKey (request: FastifyRequest): ApiKeyRecord {
  if (!request.apiKey) throw AuthenticationRequired()
  return request.apiKey
}
