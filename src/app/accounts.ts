import { InvalidCredentials, InvalidSession, EmailTaken, SignupClosed } from '../errors.js'
import { iso, type Clock } from '../domain/clock.js'
import { newId } from '../domain/ids.js'
import type { Plan } from '../domain/plans.js'
import { decoyPasswordHash, hashPassword, hashToken, randomToken, verifyPassword } from '../domain/secrets.js'
import type { AccountRecord, Store } from '../store/types.js'

export interface AccountServiceOptions {
  store: Store
  secret: string
  clock: Clock
  /** Sliding: a session unused this long ends. */
  sessionTtlMs: number
  /** Absolute: a session ends this long after it began, used or not. Default: no bound but the sliding one. */
  sessionMaxMs?: number
  /** false: signup admits the first account only (SIGNUP=closed, production's default). Default true. */
  signupOpen?: boolean
}

export interface SessionGrant {
  account: AccountRecord
  /** The cookie value; shown to the client once and stored only as a hash. */
  token: string
  expiresAt: number
}

export interface AuthenticatedSession {
  account: AccountRecord
  tokenHash: string
  /** Set when the sliding expiry moved: the cookie is sent again with the new lifetime. */
  renewedUntil: number | undefined
}

/** Emails are compared case-insensitively; one spelling is stored. */
export function normaliseEmail (email: string): string {
  return email.trim().toLowerCase()
}

// A session is extended at most once an hour, so the sliding expiry costs one write per hour per
// session, not one per request.
const RENEW_AFTER_MS = 3_600_000

export function createAccountService ({ store, secret, clock, sessionTtlMs, sessionMaxMs = Number.MAX_SAFE_INTEGER / 2, signupOpen = true }: AccountServiceOptions) {
  async function openSession (account: AccountRecord): Promise<SessionGrant> {
    const token = randomToken(32)
    const now = clock.now()
    const expiresAt = now + Math.min(sessionTtlMs, sessionMaxMs)
    await store.createSession({ tokenHash: hashToken(secret, token, 'session'), accountId: account.id, createdAt: iso(now), expiresAt: iso(expiresAt) })
    return { account, token, expiresAt }
  }

  async function register (email: string, password: string, plan: Plan = 'free', opts: { onlyIfFirst?: boolean } = {}): Promise<AccountRecord> {
    const account: AccountRecord = {
      id: newId('acct'),
      email: normaliseEmail(email),
      passwordHash: await hashPassword(password),
      plan,
      createdAt: iso(clock.now()),
    }
    const created = await store.createAccount(account, opts)
    if (created === 'email_taken') throw EmailTaken()
    if (created === 'not_first') throw SignupClosed()
    return account
  }

  return {
    /** An account without a session (the operator's CLI). */
    register,

    /** A new account and its session; SignupClosed when signup is closed and an account exists. */
    async signup (email: string, password: string): Promise<SessionGrant> {
      return openSession(await register(email, password, 'free', { onlyIfFirst: !signupOpen }))
    },

    /**
     * A session for the right password. InvalidCredentials otherwise, with the account (when there is
     * one) for the security log.
     */
    async login (email: string, password: string): Promise<SessionGrant> {
      const account = await store.findAccountByEmail(normaliseEmail(email))
      // Verify against a decoy when the account does not exist, so the answer takes as long either way
      // and says nothing about which emails have accounts.
      const ok = await verifyPassword(password, account?.passwordHash ?? await decoyPasswordHash())
      if (!account || !ok) throw Object.assign(InvalidCredentials(), { accountId: account?.id ?? null })
      return openSession(account)
    },

    /**
     * A new password, when the current one is given right; every other session of the account ends (the
     * one making the change stays). Returns how many sessions ended.
     */
    async changePassword (account: AccountRecord, currentPassword: string, newPassword: string, keep: string | null): Promise<number> {
      const fresh = await store.findAccountById(account.id)
      if (!fresh || !await verifyPassword(currentPassword, fresh.passwordHash)) {
        throw InvalidCredentials('The current password is wrong', [{ path: 'body.currentPassword', message: 'is not the current password' }])
      }
      await store.setAccountPassword(account.id, await hashPassword(newPassword))
      return await store.deleteAccountSessions(account.id, keep)
    },

    /** Ends every session of the account but `keep`; returns how many ended. */
    endOtherSessions (accountId: string, keep: string | null): Promise<number> {
      return store.deleteAccountSessions(accountId, keep)
    },

    async logout (tokenHash: string): Promise<void> {
      await store.deleteSession(tokenHash)
    },

    async authenticate (token: string): Promise<AuthenticatedSession> {
      const tokenHash = hashToken(secret, token, 'session')
      const session = await store.findSession(tokenHash)
      const now = clock.now()
      if (!session || Date.parse(session.expiresAt) <= now) throw InvalidSession()
      // However often it is used, a session ends sessionMaxMs after it began.
      const endsAt = Date.parse(session.createdAt) + sessionMaxMs
      if (!(endsAt > now)) throw InvalidSession()
      const account = await store.findAccountById(session.accountId)
      if (!account) throw InvalidSession()
      let renewedUntil: number | undefined
      const next = Math.min(now + sessionTtlMs, endsAt)
      if (next - Date.parse(session.expiresAt) > RENEW_AFTER_MS) {
        renewedUntil = next
        await store.extendSession(tokenHash, iso(renewedUntil))
      }
      return { account, tokenHash, renewedUntil }
    },
  }
}

export type AccountService = ReturnType<typeof createAccountService>
