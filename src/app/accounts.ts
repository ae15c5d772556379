import { InvalidCredentials, InvalidSession, EmailTaken } from '../errors.js'
import { iso, type Clock } from '../domain/clock.js'
import { newId } from '../domain/ids.js'
import type { Plan } from '../domain/plans.js'
import { decoyPasswordHash, hashPassword, hashToken, randomToken, verifyPassword } from '../domain/secrets.js'
import type { AccountRecord, Store } from '../store/types.js'

export interface AccountServiceOptions {
  store: Store
  secret: string
  clock: Clock
  sessionTtlMs: number
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

export function createAccountService ({ store, secret, clock, sessionTtlMs }: AccountServiceOptions) {
  async function openSession (account: AccountRecord): Promise<SessionGrant> {
    const token = randomToken(32)
    const now = clock.now()
    const expiresAt = now + sessionTtlMs
    await store.createSession({ tokenHash: hashToken(secret, token, 'session'), accountId: account.id, createdAt: iso(now), expiresAt: iso(expiresAt) })
    return { account, token, expiresAt }
  }

  async function register (email: string, password: string, plan: Plan = 'free'): Promise<AccountRecord> {
    const account: AccountRecord = {
      id: newId('acct'),
      email: normaliseEmail(email),
      passwordHash: await hashPassword(password),
      plan,
      createdAt: iso(clock.now()),
    }
    if (await store.createAccount(account) === 'email_taken') throw EmailTaken()
    return account
  }

  return {
    /** An account without a session (the operator's CLI). */
    register,

    async signup (email: string, password: string): Promise<SessionGrant> {
      return openSession(await register(email, password))
    },

    async login (email: string, password: string): Promise<SessionGrant> {
      const account = await store.findAccountByEmail(normaliseEmail(email))
      // Verify against a decoy when the account does not exist, so the answer takes as long either way
      // and says nothing about which emails have accounts.
      const ok = await verifyPassword(password, account?.passwordHash ?? await decoyPasswordHash())
      if (!account || !ok) throw InvalidCredentials()
      return openSession(account)
    },

    async logout (tokenHash: string): Promise<void> {
      await store.deleteSession(tokenHash)
    },

    async authenticate (token: string): Promise<AuthenticatedSession> {
      const tokenHash = hashToken(secret, token, 'session')
      const session = await store.findSession(tokenHash)
      const now = clock.now()
      if (!session || Date.parse(session.expiresAt) <= now) throw InvalidSession()
      const account = await store.findAccountById(session.accountId)
      if (!account) throw InvalidSession()
      let renewedUntil: number | undefined
      if (Date.parse(session.expiresAt) - now < sessionTtlMs - RENEW_AFTER_MS) {
        renewedUntil = now + sessionTtlMs
        await store.extendSession(tokenHash, iso(renewedUntil))
      }
      return { account, tokenHash, renewedUntil }
    },
  }
}

export type AccountService = ReturnType<typeof createAccountService>
