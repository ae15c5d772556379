// Accounts and their sessions in MongoDB, for index.ts (whose comment explains the query safety: every
// caller's value goes through String()). The account documents also hold the limit slots, which
// index.ts manages; the reads here leave them out.
import { MongoServerError, type Collection, type Filter, type MongoClient } from 'mongodb'
import type { Plan } from '../../domain/plans.js'
import type { AccountRecord, SessionRecord } from '../types.js'
import { accountDoc, inTransaction, sessionDoc, toAccount, toDate, toSession, type AccountDoc, type SessionDoc } from './documents.js'
import { syncIndexes } from './indexes.js'

const ACCOUNT_EMAIL_INDEX = 'accounts_email'

/**
 * One document that every account creation writes, in the transaction that inserts the account: two
 * creations at the same moment conflict on it, and MongoDB runs the loser again after the winner has
 * committed, when its count of accounts sees the winner's. `creations` counts the accounts created.
 */
export interface AccountGuardDoc { _id: 'accounts'; creations: number }
const GUARD_ID = 'accounts' as const

function isDuplicateKeyOn (err: unknown, field: string, indexName: string): boolean {
  if (!(err instanceof MongoServerError) || err.code !== 11000) return false
  const pattern = err.keyPattern as Record<string, unknown> | undefined
  if (pattern !== undefined && pattern !== null) return Object.hasOwn(pattern, field)
  return err.message.includes(`index: ${indexName} `)
}

export class MongoAccounts {
  constructor (
    private readonly accounts: Collection<AccountDoc>,
    private readonly sessions: Collection<SessionDoc>,
    private readonly client: MongoClient,
    private readonly guard: Collection<AccountGuardDoc>,
  ) {}

  async ensureIndexes (): Promise<void> {
    await Promise.all([
      // The guard exists before any transaction writes it (a transaction then only updates it). Two
      // processes starting at once may both try to insert it: the one that loses finds it there.
      this.guard.updateOne({ _id: GUARD_ID }, { $setOnInsert: { creations: 0 } }, { upsert: true }).catch((err: unknown) => {
        if (!(err instanceof MongoServerError && err.code === 11000)) throw err
      }),
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
   * onlyIfFirst (closed signup): no account may exist. MongoDB has no insert conditional on a whole
   * collection, so the count and the insert are one transaction that first writes the guard document:
   * of two first signups at the same instant, one commits, and the other, run again by withTransaction
   * after the write conflict, counts one account and inserts nothing. Every creation takes the guard, so
   * an account made by the CLI at that instant counts too.
   */
  async createAccount (account: AccountRecord, opts: { onlyIfFirst?: boolean } = {}): Promise<'created' | 'email_taken' | 'not_first'> {
    try {
      return await inTransaction(this.client, async (session) => {
        await this.guard.updateOne({ _id: GUARD_ID }, { $inc: { creations: 1 } }, { upsert: true, session })
        if (opts.onlyIfFirst === true && await this.accounts.countDocuments({}, { limit: 1, session }) > 0) {
          await session.abortTransaction()
          return 'not_first' as const
        }
        await this.accounts.insertOne(accountDoc(account), { session })
        return 'created' as const
      })
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
