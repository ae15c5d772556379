// Suppressions in MongoDB, and engagement (an open, a click, an unsubscribe that adds one), for
// emails.ts (whose comment explains the outboxes): an unsubscribe is one upsert of the suppression
// carrying its event (`pendingEvent`), published after; publishPending finishes what a crash left.
// Query safety as in index.ts: every caller's value goes through String()/Number().
import type { AnyBulkWriteOperation, Collection } from 'mongodb'
import type { EventRecord } from '../../domain/events.js'
import type { EngagementEvent, SuppressionCursor, SuppressionRecord, UnsubscribeResult } from '../emails.js'
import { eventDoc, type EventDoc } from './documents.js'
import { REPAIR_BATCH, isDuplicate, onlyDuplicates, toSuppression, type EmailDoc, type OutboxSuppression, type SuppressionDoc } from './email-docs.js'

export class MongoSuppressions {
  /**
   * `insertEventDocs` inserts events that may already be there (emails.ts); `hint` tells the delivery
   * engine that events were published.
   */
  constructor (
    private readonly suppressions: Collection<SuppressionDoc>,
    private readonly emails: Collection<EmailDoc>,
    private readonly events: Collection<EventDoc>,
    private readonly insertEventDocs: (docs: EventDoc[]) => Promise<void>,
    private readonly hint: () => void,
  ) {}

  /** Adds an email's outbox suppressions (publish, in emails.ts). */
  async upsertSuppressions (accountId: string, list: OutboxSuppression[]): Promise<void> {
    if (list.length === 0) return
    const ops: AnyBulkWriteOperation<SuppressionDoc>[] = list.map((s) => ({
      updateOne: {
        filter: { accountId, email: String(s.email) },
        // The first reason stays: a later bounce does not rewrite an unsubscribe.
        update: { $setOnInsert: { reason: String(s.reason), createdAt: String(s.createdAt), pendingEvent: null, pendingEventAt: null } },
        upsert: true,
      },
    }))
    try {
      await this.suppressions.bulkWrite(ops, { ordered: false })
    } catch (err) {
      // Two upserts of one new address race on the unique index; the loser's address is suppressed anyway.
      if (!onlyDuplicates(err)) throw err
    }
  }

  async findSuppressions (accountId: string, emails: string[]): Promise<SuppressionRecord[]> {
    if (emails.length === 0) return []
    const docs = await this.suppressions.find({ accountId: String(accountId), email: { $in: [...new Set(Array.from(emails, String))] } }).toArray()
    return docs.map(toSuppression)
  }

  async listSuppressions (accountId: string, opts: { limit: number; after?: SuppressionCursor }): Promise<SuppressionRecord[]> {
    const account = String(accountId)
    const filter = opts.after === undefined
      ? { accountId: account }
      : {
          accountId: account,
          $or: [
            { createdAt: { $lt: String(opts.after.createdAt) } },
            { createdAt: String(opts.after.createdAt), email: { $lt: String(opts.after.email) } },
          ],
        }
    // limit(0) is no limit at all in MongoDB: a page of nothing is answered here.
    const limit = Math.floor(Number(opts.limit))
    if (!(limit > 0)) return []
    const docs = await this.suppressions.find(filter).sort({ createdAt: -1, email: -1 }).limit(limit).toArray()
    return docs.map(toSuppression)
  }

  async addSuppression (s: SuppressionRecord): Promise<{ created: boolean; record: SuppressionRecord }> {
    const filter = { accountId: String(s.accountId), email: String(s.email) }
    let created = false
    try {
      const r = await this.suppressions.updateOne(filter,
        { $setOnInsert: { reason: String(s.reason), createdAt: String(s.createdAt), pendingEvent: null, pendingEventAt: null } },
        { upsert: true })
      created = r.upsertedCount === 1
    } catch (err) {
      if (!isDuplicate(err)) throw err
    }
    const doc = await this.suppressions.findOne(filter)
    if (doc === null) throw new Error('suppression vanished while it was being added')
    return { created, record: toSuppression(doc) }
  }

  async deleteSuppression (accountId: string, email: string): Promise<boolean> {
    const doc = await this.suppressions.findOneAndDelete({ accountId: String(accountId), email: String(email) })
    if (doc === null) return false
    // An unsubscribe whose event was not published yet still raises it.
    if (doc.pendingEvent) await this.insertEventDocs([doc.pendingEvent])
    return true
  }

  private async emailAccount (emailId: string): Promise<string | null> {
    const doc = await this.emails.findOne({ _id: String(emailId) }, { projection: { accountId: 1 } })
    return doc?.accountId ?? null
  }

  async recordEngagement (event: EngagementEvent): Promise<EventRecord | null> {
    const accountId = await this.emailAccount(event.emailId)
    if (accountId === null) return null
    const record: EventRecord = { ...event, accountId }
    await this.events.insertOne(eventDoc(record))
    this.hint()
    return record
  }

  async unsubscribeRecipient (event: EngagementEvent, at: string): Promise<UnsubscribeResult> {
    const accountId = await this.emailAccount(event.emailId)
    if (accountId === null) return 'no_email'
    const doc = eventDoc({ ...event, accountId })
    const filter = { accountId, email: String(event.recipient) }
    try {
      const r = await this.suppressions.updateOne(filter,
        { $setOnInsert: { reason: 'unsubscribed', createdAt: String(at), pendingEvent: doc, pendingEventAt: String(at) } },
        { upsert: true })
      if (r.upsertedCount !== 1) return 'already_suppressed'
    } catch (err) {
      if (isDuplicate(err)) return 'already_suppressed'
      throw err
    }
    await this.insertEventDocs([doc])
    await this.suppressions.updateOne({ ...filter, 'pendingEvent._id': doc._id }, { $set: { pendingEvent: null, pendingEventAt: null } })
    return 'unsubscribed'
  }

  /** Publishes the events of unsubscribes a crash interrupted (older than `cutoff`); how many. */
  async publishPending (cutoff: string): Promise<number> {
    let repaired = 0
    const pending = await this.suppressions.find({ pendingEventAt: { $type: 'string', $lt: cutoff } }).limit(REPAIR_BATCH).toArray()
    for (const s of pending) {
      if (s.pendingEvent) await this.insertEventDocs([s.pendingEvent])
      await this.suppressions.updateOne({ accountId: s.accountId, email: s.email, pendingEventAt: s.pendingEventAt },
        { $set: { pendingEvent: null, pendingEventAt: null } })
      repaired++
    }
    return repaired
  }
}
