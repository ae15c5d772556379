// Accounts and their sessions in MongoDB, for index.ts (whose comment explains the query safety: every
// caller's value goes through String()). The account documents also hold the limit slots, which
// index.ts manages; the reads here leave them out.
import { MongoServerError, type Collection, type Filter } from 'mongodb'
import type { Plan } from '../../domain/plans.js'
import type { AccountRecord, SessionRecord } from '../types.js'
import { accountDoc, sessionDoc, toAccount, toDate, toSession, type AccountDoc, type SessionDoc } from './documents.js'
import { syncIndexes } from './indexes.js'

const ACCOUNT_EMAIL_INDEX = 'accounts_email'

function isDuplicateKeyOn (err: unknown, field: string, indexName: string): boolean {
  if (!(err instanceof MongoServerError) || err.code !== 11000) return false
  const pattern = err.keyPattern as Record<string, unknown> | undefined
  if (pattern !== undefined && pattern !== null) return Object.hasOwn(pattern, field)
  return err.message.includes(`index: ${indexName} `)
}

export class MongoAccounts {
  constructor (private readonly accounts: Collection<AccountDoc>, private readonly sessions: Collection<SessionDoc>) {}

  async ensureIndexes (): Promise<void> {
    await Promise.all([
      syncIndexes(this.accounts, [{ key: { email: 1 }, name: ACCOUNT_EMAIL_INDEX, unique: true }]),
      syncIndexes(this.sessions, [
        { key: { expiresAt: 1 }, name: 'sessions_expiry' },
        // Expired sessions also disappear on their own (the TTL monitor runs about once a minute);
        // deleteExpiredSessions stays the contract, this only keeps the collection small.
        { key: { expiresAtDate: 1 }, name: 'sessions_ttl', expireAfterSeconds: 0 },
        // A password change or "log out everywhere" ends one account's sessions at once.
        { key: { accountId: 1 }, name: 'sessions_account' },
      ]),
    ])
  }

  // Accounts

  /**
   * onlyIfFirst: a count, then the insert. Two first signups at the same instant can both pass (MongoDB
   * has no cheap conditional insert across a collection); the operator sees two accounts and removes one.
   */
  async createAccount (account: AccountRecord, opts: { onlyIfFirst?: boolean } = {}): Promise<'created' | 'email_taken' | 'not_first'> {
    if (opts.onlyIfFirst === true && await this.accounts.countDocuments({}, { limit: 1 }) > 0) return 'not_first'
    try {
      await this.accounts.insertOne(accountDoc(account))
      return 'created'
    } catch (err) {
      if (isDuplicateKeyOn(err, 'email', ACCOUNT_EMAIL_INDEX)) return 'email_taken'
      throw err
    }
  }

  async findAccountById (id: string): Promise<AccountRecord | null> {
    const doc = await this.accounts.findOne({ _id: String(id) }, { projection: { activeApiKeyIds: 0, webhookIds: 0 } })
    return doc ? toAccount(doc) : null
  }

  async findAccountByEmail (email: string): Promise<AccountRecord | null> {
    const doc = await this.accounts.findOne({ email: String(email) }, { projection: { activeApiKeyIds: 0, webhookIds: 0 } })
    return doc ? toAccount(doc) : null
  }

  async setAccountPlan (accountId: string, plan: Plan): Promise<boolean> {
    const r = await this.accounts.updateOne({ _id: String(accountId) }, { $set: { plan: String(plan) } })
    return r.matchedCount === 1
  }

  async setAccountPassword (accountId: string, passwordHash: string): Promise<boolean> {
    const r = await this.accounts.updateOne({ _id: String(accountId) }, { $set: { passwordHash: String(passwordHash) } })
    return r.matchedCount === 1
  }

  // Sessions

  async deleteAccountSessions (accountId: string, keep: string | null): Promise<number> {
    const filter: Filter<SessionDoc> = { accountId: String(accountId) }
    if (keep !== null) filter._id = { $ne: String(keep) }
    const r = await this.sessions.deleteMany(filter)
    return r.deletedCount
  }

  async createSession (session: SessionRecord): Promise<void> {
    await this.sessions.insertOne(sessionDoc(session))
  }

  async findSession (tokenHash: string): Promise<SessionRecord | null> {
    const doc = await this.sessions.findOne({ _id: String(tokenHash) })
    return doc ? toSession(doc) : null
  }

  async extendSession (tokenHash: string, expiresAt: string): Promise<void> {
    const at = String(expiresAt)
    await this.sessions.updateOne({ _id: String(tokenHash) }, { $set: { expiresAt: at, expiresAtDate: toDate(at) } })
  }

  async deleteSession (tokenHash: string): Promise<void> {
    await this.sessions.deleteOne({ _id: String(tokenHash) })
  }

  async deleteExpiredSessions (now: string): Promise<number> {
    const r = await this.sessions.deleteMany({ expiresAt: { $lt: String(now) } })
    return r.deletedCount
  }
}
