// The MongoDB store, through the official driver, chosen by MONGODB_URI.
//
// Topology: a replica set (a single-node one will do) or a sharded cluster, never a standalone mongod.
// The writes of a batch that spans documents and has nothing to resume from (a send without an
// Idempotency-Key, insertEvents) are one multi-document transaction, and MongoDB runs transactions only
// on a replica set or through mongos. openMongoStore checks this at start and says so.
//
// Durability: every write, transactions included, uses the client's write concern: `{ w: 'majority',
// journal: true }` by default (MONGODB_WRITE_CONCERN sets `w`; it wins over a `w` in the URI), so a
// resolved write is on disk on a majority of the members and survives a failover.
//
// Indexes are synchronised at start (syncIndexes, indexes.ts): missing ones are created, and one whose
// definition changed between releases is dropped and recreated, so a changed index never stops a start.
//
// Query safety: every filter and update below is built here from typed parameters, each value passed
// through String() (or Number()) where a caller could hand in an object; no request object is ever used
// as a filter, and inserted documents are rebuilt field by field (documents.ts). `$ne`, `{"$gt":""}` and
// the like are therefore plain strings to MongoDB.
import { MongoClient, MongoServerError, type Collection, type Db, type Filter } from 'mongodb'
import pRetry from 'p-retry'
import type { EventRecord } from '../../domain/events.js'
import type { Plan } from '../../domain/plans.js'
import { CANCEL_REASONS, cancelOnEdit } from '../../domain/webhook-health.js'
import type { ReplayState } from '../../domain/replay.js'
import type {
  AccountRecord, ApiKeyRecord, DomainCheck, DomainRecord, LimitedInsert, SessionRecord, Store, WebhookPatch, WebhookRecord, WebhookStatus,
} from '../types.js'
import {
  apiKeyDoc, eventDoc, filterDoc, inTransaction, nullableString, replayDoc, toApiKey, toEvent, toWebhook, webhookDoc,
  type AccountDoc, type ApiKeyDoc, type EventDoc, type SessionDoc, type WebhookDoc,
} from './documents.js'
import { MongoAccounts, type AccountGuardDoc } from './accounts.js'
import { MongoForwarders } from './forwarders.js'
import { MongoEmails } from './emails.js'
import { MongoDomains, domainDoc } from './domains.js'
import { MongoReceived } from './received.js'
import { MongoTemplates } from './templates.js'
import { MongoMeta } from './meta.js'
import { StoreHealth } from '../faults.js'
import { syncIndexes } from './indexes.js'
import type { EmailRecord, SuppressionRecord } from '../emails.js'

type SlotField = 'activeApiKeyIds' | 'webhookIds' | 'domainIds'

/**
 * Limits without transactions. A standalone mongod has no multi-document transactions, so "count the
 * active keys, then insert" cannot be one atomic step across two collections. Instead each account
 * document holds its limit slots: the ids of its active API keys (`activeApiKeyIds`) and of its live
 * webhooks (`webhookIds`). Taking a slot is ONE conditional update of ONE document, which MongoDB applies
 * atomically on any deployment:
 *
 *   findOneAndUpdate({ _id: account, 'activeApiKeyIds.<limit-1>': { $exists: false } },
 *                    { $addToSet: { activeApiKeyIds: keyId } })
 *
 * (the array has fewer than `limit` elements), so 20 concurrent inserts with limit 3 take exactly 3
 * slots. The record is inserted after its slot is taken; if the insert is refused, the slot is given back.
 * Revoking a key / deleting a webhook first marks the record, then pulls its id from the slots. Keeping
 * ids rather than a counter makes both steps idempotent: pulling an id that is not there changes nothing,
 * so a revoke that is retried (or repeated) never frees a second slot, and a retry repairs a release
 * that failed.
 *
 * The trade-off: the slots and the records are two writes, not one. Every step is ordered so that a crash
 * or a lost connection between them errs on the safe side: a slot can stay taken by an id whose record
 * was never inserted or is already revoked/deleted (the account then gets one key/webhook fewer than its
 * plan allows until that id is pulled), but an active record never lacks its slot, so the limit itself is
 * never exceeded. Counting (countActiveApiKeys, countWebhooks) reads the records, which are the truth; a
 * leaked slot shows up as `slots - count > 0` and can be pulled by id.
 */
export class MongoStore extends MongoForwarders implements Store {
  readonly kind = 'mongo' as const
  readonly accounts: Collection<AccountDoc>
  readonly sessions: Collection<SessionDoc>
  readonly apiKeys: Collection<ApiKeyDoc>
  readonly webhooks: Collection<WebhookDoc>
  readonly events: Collection<EventDoc>

  constructor (readonly client: MongoClient, db: Db) {
    super(db)
    this.accounts = db.collection<AccountDoc>('accounts')
    this.sessions = db.collection<SessionDoc>('sessions')
    this.apiKeys = db.collection<ApiKeyDoc>('api_keys')
    this.webhooks = db.collection<WebhookDoc>('webhooks')
    this.events = db.collection<EventDoc>('events')
    this.people = new MongoAccounts(this.accounts, this.sessions, client, db.collection<AccountGuardDoc>('account_guard'))
    this.mail = new MongoEmails(client, db, () => this.hintWork())
    this.senderDomains = new MongoDomains(db, () => this.hintWork())
    this.receivedMail = new MongoReceived(client, db, () => this.hintWork())
    this.templateStore = new MongoTemplates(db)
    this.meta = new MongoMeta(db)
  }

  /** Accounts and their sessions (src/store/mongo/accounts.ts). */
  private readonly people: MongoAccounts

  /** Facts about the store itself: the secret's check value (src/store/mongo/meta.ts). */
  private readonly meta: MongoMeta

  /** Received mail (src/store/mongo/received.ts). */
  readonly receivedMail: MongoReceived

  /** Templates and their versions (src/store/mongo/templates.ts). */
  readonly templateStore: MongoTemplates

  /** Sender domains and returning mail (src/store/mongo/domains.ts). */
  readonly senderDomains: MongoDomains

  /** Sending: emails, idempotency keys, suppressions (src/store/mongo/emails.ts). */
  readonly mail: MongoEmails

  /**
   * Synchronises the indexes (syncIndexes): creates the missing ones, rebuilds one whose definition
   * changed; idempotent (an index that exists with the same definition is left alone).
   */
  async ensureIndexes (): Promise<void> {
    await Promise.all([
      this.people.ensureIndexes(),
      syncIndexes(this.apiKeys, [
        { key: { keyHash: 1 }, name: 'api_keys_hash', unique: true },
        { key: { accountId: 1, _id: -1 }, name: 'api_keys_account' },
      ]),
      syncIndexes(this.webhooks, [{ key: { accountId: 1, _id: -1 }, name: 'webhooks_account' }]),
      syncIndexes(this.events, [
        { key: { accountId: 1, emailId: 1, _id: 1 }, name: 'events_email' },
        { key: { routed: 1, _id: 1 }, name: 'events_unrouted', partialFilterExpression: { routed: false } },
      ]),
      this.mail.ensureIndexes(),
      this.senderDomains.ensureIndexes(),
      this.receivedMail.ensureIndexes(),
      this.templateStore.ensureIndexes(),
      this.ensureDeliveryIndexes(),
    ])
  }

  private readonly listeners = new Set<() => void>()

  /** Only this process's writes are heard; the engine's polling picks up other nodes' work. */
  subscribe (listener: () => void): () => void {
    this.listeners.add(listener)
    return () => { this.listeners.delete(listener) }
  }

  protected hintWork (): void {
    for (const listener of this.listeners) listener()
  }

  async ping (): Promise<void> {
    await this.db.command({ ping: 1 })
  }

  /**
   * Writes are spread over many calls here, so the write faults (no writable primary, disk full, write
   * concern not met) are found by a probe write that /readyz makes at most every 5 s: one upsert of one
   * document, with the URI's write concern.
   */
  readonly health = new StoreHealth({
    probe: async () => {
      await this.db.collection<{ _id: string; at: Date }>('health').updateOne({ _id: 'probe' }, { $set: { at: new Date() } }, { upsert: true })
    },
    checkMs: 5_000,
  })

  async close (): Promise<void> {
    this.health.close()
    await this.client.close()
  }

  // The secret's check value (src/store/mongo/meta.ts)

  secretCheck (): Promise<string | null> { return this.meta.secretCheck() }
  initSecretCheck (value: string): Promise<string> { return this.meta.initSecretCheck(value) }

  // Accounts and sessions (src/store/mongo/accounts.ts)

  createAccount (account: AccountRecord, opts: { onlyIfFirst?: boolean } = {}): Promise<'created' | 'email_taken' | 'not_first'> { return this.people.createAccount(account, opts) }
  findAccountById (id: string): Promise<AccountRecord | null> { return this.people.findAccountById(id) }
  findAccountByEmail (email: string): Promise<AccountRecord | null> { return this.people.findAccountByEmail(email) }
  setAccountPlan (accountId: string, plan: Plan): Promise<boolean> { return this.people.setAccountPlan(accountId, plan) }
  setAccountPassword (accountId: string, passwordHash: string): Promise<boolean> { return this.people.setAccountPassword(accountId, passwordHash) }
  deleteAccountSessions (accountId: string, keep: string | null): Promise<number> { return this.people.deleteAccountSessions(accountId, keep) }
  createSession (session: SessionRecord): Promise<void> { return this.people.createSession(session) }
  findSession (tokenHash: string): Promise<SessionRecord | null> { return this.people.findSession(tokenHash) }
  extendSession (tokenHash: string, expiresAt: string): Promise<void> { return this.people.extendSession(tokenHash, expiresAt) }
  deleteSession (tokenHash: string): Promise<void> { return this.people.deleteSession(tokenHash) }
  deleteExpiredSessions (now: string): Promise<number> { return this.people.deleteExpiredSessions(now) }

  // Limit slots (see the class comment)

  /** Rejects when the account does not exist (SQLite's foreign key does the same). */
  private async requireAccount (accountId: string): Promise<void> {
    if (await this.accounts.findOne({ _id: accountId }, { projection: { _id: 1 } }) === null) {
      throw new Error(`cannot insert for account ${accountId}: no such account`)
    }
  }

  private async releaseSlot (accountId: string, field: SlotField, id: string): Promise<void> {
    await this.accounts.updateOne({ _id: accountId }, { $pull: { [field]: id } })
  }

  /**
   * Takes a slot for `id` unless the account's `field` already holds `limit` ids, then runs `insert`.
   * When the insert fails the slot is given back, unless the record may have been written after all
   * (an error other than a duplicate key, e.g. a lost connection or a write concern timeout: `written`
   * is asked, and an unanswered question keeps the slot, the safe side). The error is rethrown either way.
   */
  private async insertWithinLimit (
    accountId: string, field: SlotField, id: string, limit: number,
    insert: () => Promise<unknown>, written: () => Promise<boolean>,
  ): Promise<LimitedInsert> {
    // "fewer than limit" as a whole number of records (ceil keeps SQLite's `count >= limit` for any number).
    const max = Math.ceil(Number(limit))
    if (!(max > 0)) {
      await this.requireAccount(accountId)
      return 'limit_reached'
    }
    // `<field>.<max-1>` does not exist: the array has fewer than `max` elements (or is missing).
    const filter = { _id: accountId, [`${field}.${max - 1}`]: { $exists: false } } as Filter<AccountDoc>
    const before = await this.accounts.findOneAndUpdate(filter, { $addToSet: { [field]: id } },
      { returnDocument: 'before', projection: { [field]: 1 } })
    if (before === null) {
      await this.requireAccount(accountId)
      return 'limit_reached'
    }
    // The id was already there (a record with this id holds it): a failure must not free that slot.
    const slotIsOurs = !(before[field] ?? []).includes(id)
    try {
      await insert()
    } catch (err) {
      if (slotIsOurs) {
        const refused = err instanceof MongoServerError && err.code === 11000
        const keep = !refused && await written().catch(() => true)
        if (!keep) await this.releaseSlot(accountId, field, id).catch(() => {})
      }
      throw err
    }
    return 'created'
  }

  // API keys

  async insertApiKey (key: ApiKeyRecord, limit: number): Promise<LimitedInsert> {
    const doc = apiKeyDoc(key)
    const result = await this.insertWithinLimit(doc.accountId, 'activeApiKeyIds', doc._id, limit,
      () => this.apiKeys.insertOne(doc),
      async () => await this.apiKeys.findOne({ _id: doc._id, accountId: doc.accountId, keyHash: doc.keyHash }) !== null)
    // A key inserted already revoked holds no slot (SQLite still counts it against the limit on the way in).
    if (result === 'created' && doc.revokedAt !== null) await this.releaseSlot(doc.accountId, 'activeApiKeyIds', doc._id)
    return result
  }

  async listApiKeys (accountId: string): Promise<ApiKeyRecord[]> {
    const docs = await this.apiKeys.find({ accountId: String(accountId) }).sort({ _id: -1 }).toArray()
    return docs.map(toApiKey)
  }

  async findApiKeyByHash (keyHash: string): Promise<ApiKeyRecord | null> {
    const doc = await this.apiKeys.findOne({ keyHash: String(keyHash) })
    return doc ? toApiKey(doc) : null
  }

  async revokeApiKey (accountId: string, id: string, at: string): Promise<ApiKeyRecord | null> {
    const account = String(accountId)
    const keyId = String(id)
    const doc = await this.apiKeys.findOneAndUpdate({ _id: keyId, accountId: account, revokedAt: null },
      { $set: { revokedAt: String(at) } }, { returnDocument: 'after' }) ??
      await this.apiKeys.findOne({ _id: keyId, accountId: account }) // already revoked (first time kept), or absent
    if (doc === null) return null
    // Revoked now or before: give its slot back. Idempotent, so this also repairs a release that failed.
    await this.releaseSlot(account, 'activeApiKeyIds', keyId)
    return toApiKey(doc)
  }

  async touchApiKeys (uses: Array<{ id: string; lastUsedAt: string }>): Promise<void> {
    if (uses.length === 0) return
    // $max: ISO strings compare in time order, and null sorts below every string; unknown ids match nothing.
    await this.apiKeys.bulkWrite(uses.map((u) => ({
      updateOne: { filter: { _id: String(u.id) }, update: { $max: { lastUsedAt: String(u.lastUsedAt) } } },
    })), { ordered: false })
  }

  async countActiveApiKeys (accountId: string): Promise<number> {
    return await this.apiKeys.countDocuments({ accountId: String(accountId), revokedAt: null })
  }

  // Webhooks

  async insertWebhook (webhook: WebhookRecord, limit: number): Promise<LimitedInsert> {
    const doc = webhookDoc(webhook)
    return await this.insertWithinLimit(doc.accountId, 'webhookIds', doc._id, limit,
      () => this.webhooks.insertOne(doc),
      async () => await this.webhooks.findOne({ _id: doc._id, accountId: doc.accountId, createdAt: doc.createdAt }) !== null)
  }

  async listWebhooks (accountId: string): Promise<WebhookRecord[]> {
    const docs = await this.webhooks.find({ accountId: String(accountId), deletedAt: null }).sort({ _id: -1 }).toArray()
    return docs.map(toWebhook)
  }

  async findWebhook (accountId: string, id: string): Promise<WebhookRecord | null> {
    const doc = await this.webhooks.findOne({ _id: String(id), accountId: String(accountId), deletedAt: null })
    return doc ? toWebhook(doc) : null
  }

  async updateWebhook (accountId: string, id: string, patch: WebhookPatch, updatedAt: string): Promise<WebhookRecord | null> {
    // Only the fields the patch gives (a key present with the value undefined is "not given").
    const set: Partial<WebhookDoc> = { updatedAt: String(updatedAt) }
    if (patch.url !== undefined) set.url = String(patch.url)
    if (patch.events !== undefined) set.events = Array.from(patch.events, String)
    if (patch.status !== undefined) set.status = String(patch.status)
    if (patch.rateLimit !== undefined) set.rateLimit = patch.rateLimit === null ? null : Number(patch.rateLimit)
    if (patch.filter !== undefined) set.filter = filterDoc(patch.filter)
    if (patch.secret !== undefined) set.secret = String(patch.secret)
    if (patch.previousSecret !== undefined) set.previousSecret = nullableString(patch.previousSecret)
    if (patch.previousSecretExpiresAt !== undefined) set.previousSecretExpiresAt = nullableString(patch.previousSecretExpiresAt)
    // Enabling starts the health record afresh: an old failing streak must not disable it again at once.
    const health = patch.status === 'enabled' ? { failingSince: null } : {}
    const doc = await this.webhooks.findOneAndUpdate({ _id: String(id), accountId: String(accountId), deletedAt: null },
      { $set: { ...set, ...health } as Partial<WebhookDoc> }, { returnDocument: 'after' })
    // Disabled: its live deliveries are cancelled. A failure (after a few tries) is the caller's error; the
    // same edit made again cancels again, and until then claims cancel instead of handing them out.
    const cancel = cancelOnEdit(patch.status)
    if (doc && cancel !== null) await this.cancelPendingFor(doc._id, cancel, Date.parse(set.updatedAt!))
    return doc ? toWebhook(doc) : null
  }

  async deleteWebhook (accountId: string, id: string, deletedAt: string): Promise<boolean> {
    const account = String(accountId)
    const webhookId = String(id)
    const at = String(deletedAt)
    const r = await this.webhooks.updateOne({ _id: webhookId, accountId: account, deletedAt: null },
      { $set: { deletedAt: at, updatedAt: at } })
    if (r.matchedCount === 1) {
      await this.releaseSlot(account, 'webhookIds', webhookId)
      // Its live deliveries are cancelled; a failure (after a few tries) is the caller's error.
      await this.cancelPendingFor(webhookId, CANCEL_REASONS.deleted, Date.parse(at))
      return true
    }
    // Already deleted: make sure its slot is free and its deliveries cancelled (repairs a step that
    // failed); the answer stays false.
    const deleted = await this.webhooks.findOne({ _id: webhookId, accountId: account }, { projection: { _id: 1, deletedAt: 1 } })
    if (deleted !== null) {
      await this.releaseSlot(account, 'webhookIds', webhookId)
      if (deleted.deletedAt !== null) await this.cancelPendingFor(webhookId, CANCEL_REASONS.deleted, Date.parse(deleted.deletedAt))
    }
    return false
  }

  async countWebhooks (accountId: string): Promise<number> {
    return await this.webhooks.countDocuments({ accountId: String(accountId), deletedAt: null })
  }

  async countWebhooksByStatus (): Promise<Record<WebhookStatus, number>> {
    const counts: Record<WebhookStatus, number> = { enabled: 0, disabled: 0, auto_disabled: 0 }
    const groups = await this.webhooks.aggregate<{ _id: string; n: number }>([
      { $match: { deletedAt: null } },
      { $group: { _id: '$status', n: { $sum: 1 } } },
    ]).toArray()
    for (const g of groups) if (g._id in counts) counts[g._id as WebhookStatus] = g.n
    return counts
  }

  async setWebhookReplay (accountId: string, id: string, replay: ReplayState): Promise<boolean> {
    const r = await this.webhooks.updateOne({ _id: String(id), accountId: String(accountId), deletedAt: null }, { $set: { replay: replayDoc(replay) } })
    return r.matchedCount === 1
  }

  // Events. Event ids sort by time (src/domain/ids.ts), so `_id` order is the order they were made.

  async insertEvents (events: EventRecord[]): Promise<void> {
    if (events.length === 0) return
    const docs = events.map(eventDoc)
    // One transaction: all of them or none (an insertMany that fails half way keeps what it inserted).
    await inTransaction(this.client, async (session) => { await this.events.insertMany(docs, { session }) })
    this.hintWork()
  }

  async listEmailEvents (accountId: string, emailId: string): Promise<EventRecord[]> {
    const docs = await this.events.find({ accountId: String(accountId), emailId: String(emailId) }).sort({ _id: 1 }).toArray()
    return docs.map(toEvent)
  }

  // Sender domains (src/store/mongo/domains.ts), limited by the account's `domainIds` slots

  async insertDomain (domain: DomainRecord, limit: number): Promise<LimitedInsert | 'name_taken'> {
    const doc = domainDoc(domain)
    if (await this.senderDomains.findDomainByName(doc.accountId, doc.name) !== null) return 'name_taken'
    try {
      return await this.insertWithinLimit(doc.accountId, 'domainIds', doc._id, limit,
        () => this.senderDomains.domains.insertOne(doc),
        async () => await this.senderDomains.domains.findOne({ _id: doc._id, accountId: doc.accountId }) !== null)
    } catch (err) {
      // Added by a concurrent request between the check and the insert (the unique index on accountId + name).
      if (err instanceof MongoServerError && err.code === 11000) return 'name_taken'
      throw err
    }
  }

  listDomains (accountId: string): Promise<DomainRecord[]> { return this.senderDomains.listDomains(accountId) }
  findDomain (accountId: string, id: string): Promise<DomainRecord | null> { return this.senderDomains.findDomain(accountId, id) }
  findDomainByName (accountId: string, name: string): Promise<DomainRecord | null> { return this.senderDomains.findDomainByName(accountId, name) }
  updateDomainCheck (accountId: string, id: string, check: DomainCheck): Promise<DomainRecord | null> { return this.senderDomains.updateDomainCheck(accountId, id, check) }

  async deleteDomain (accountId: string, id: string): Promise<boolean> {
    const deleted = await this.senderDomains.deleteDomainDoc(accountId, id)
    // Freed whether or not this call deleted it: repeating a delete repairs a release that failed.
    if (deleted || await this.accounts.findOne({ _id: String(accountId), domainIds: String(id) }, { projection: { _id: 1 } }) !== null) {
      await this.releaseSlot(String(accountId), 'domainIds', String(id))
    }
    return deleted
  }

  listDomainsCheckedBefore (before: string, limit: number): Promise<DomainRecord[]> { return this.senderDomains.listDomainsCheckedBefore(before, limit) }

  async findEmailById (id: string): Promise<EmailRecord | null> {
    const doc = await this.mail.emails.findOne({ _id: String(id) }, { projection: { outbox: 0, outboxSuppressions: 0 } })
    return doc === null ? null : await this.mail.findEmail(doc.accountId, doc._id)
  }

  recordReturnedMail (input: { event: EventRecord; suppression: SuppressionRecord | null; timelineOnly: boolean }): Promise<'recorded' | 'duplicate'> {
    return this.senderDomains.recordReturnedMail(input)
  }

  // Several nodes: shared rate limits. One document per key and window; the TTL monitor removes ended
  // windows about once a minute, pruneRateLimits at once.

  private get rateLimits (): Collection<RateLimitDoc> {
    return this.db.collection<RateLimitDoc>('rate_limits')
  }

  async ensureRateLimitIndexes (): Promise<void> {
    await this.rateLimits.createIndexes([{ key: { expiresAt: 1 }, name: 'rate_limits_ttl', expireAfterSeconds: 0 }])
  }

  async hitRateLimit (hit: { key: string; windowStart: number; windowEnd: number }): Promise<number> {
    const windowEnd = Math.trunc(Number(hit.windowEnd))
    const filter = { _id: `${String(hit.key)}|${Math.trunc(Number(hit.windowStart))}` }
    const update = { $inc: { count: 1 }, $setOnInsert: { expiresAt: new Date(windowEnd) } }
    // Two first hits racing to insert the same window: one loses with a duplicate key; it counts again, at once.
    const doc = await pRetry(() => this.rateLimits.findOneAndUpdate(filter, update,
      // Not journaled: a counter is not worth a disk flush (see the contract).
      { upsert: true, returnDocument: 'after', projection: { count: 1 }, writeConcern: { w: 1 } }),
    { retries: 2, minTimeout: 0, shouldRetry: ({ error }) => error instanceof MongoServerError && error.code === 11000 })
    return doc!.count
  }

  async pruneRateLimits (now: number): Promise<number> {
    const r = await this.rateLimits.deleteMany({ expiresAt: { $lte: new Date(Math.trunc(Number(now))) } })
    return r.deletedCount
  }

  /** MongoDB has no cheap version of the whole database (a change stream needs a replica set): null. */
  async externalWriteVersion (): Promise<number | null> {
    return null
  }
}

interface RateLimitDoc {
  /** `<key>|<windowStart>` */
  _id: string
  count: number
  expiresAt: Date
}
