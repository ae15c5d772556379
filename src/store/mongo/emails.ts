// Sending in MongoDB: emails (the mail queue), idempotency keys and suppressions (the list itself and
// engagement in suppressions.ts), with the semantics of the SQLite adapter.
//
// Atomicity comes from a multi-document transaction where one write spans documents and has nothing to
// resume from (a send without an Idempotency-Key: its emails and their events), and elsewhere from
// single-document writes plus an outbox kept inside the document that changes:
//
// - An attempt's update sets the email's new state and pushes its events and suppressions into the same
//   document, in one update (an email that comes through an idempotency key's journal, below, is
//   inserted WITH its events the same way). The outbox is then published (events inserted into
//   `events`, suppressions upserted) and pulled. Publishing is idempotent (ids are the application's),
//   so a crash in between loses nothing: repairInterruptedWrites publishes whatever a crash left in an
//   outbox.
// - An idempotency key is claimed by inserting its document (unique index on accountId + key) with the
//   whole accepted payload in it (`journal`) before the emails are inserted: the claim is the commit
//   point. A concurrent request that finds the claim answers with its response; a crash after the claim
//   is finished from the journal by repairInterruptedWrites.
// - An unsubscribe is one upsert of the suppression carrying its event (`pendingEvent`), published after.
//
// Mail leases fence (src/store/emails.ts): a claim adds 1 to `leaseToken` and stamps `leaseClaim` (a
// random id of that claim, only used to read back what the claim won); outcomes, renewals and releases
// are conditional on the owner and the token.
//
// Query safety, as in index.ts: every value from a caller goes through String()/Number() and every
// document is rebuilt field by field, so no request value can become an operator.
import { randomUUID } from 'node:crypto'
import type { Collection, Db, Filter, MongoClient } from 'mongodb'
import type { EventRecord, EventType } from '../../domain/events.js'
import type {
  AcceptResult, EmailAttempt, EmailClaim, EmailLease, EmailRecord, EmailStatus, EmailStore, EngagementEvent, IdempotencyRecord, QuotaCharge, SuppressionCursor,
  SuppressionRecord, UnsubscribeResult,
} from '../emails.js'
import type { AttachmentContent, DailyEventCount, EmailListQuery, EmailSummary } from '../emails.js'
import { eventDoc, inTransaction, nullableString, toDate, type EventDoc } from './documents.js'
import { syncIndexes } from './indexes.js'
import { MongoSuppressions } from './suppressions.js'
import { MongoAttachments, attachmentsDoc } from './attachments.js'
import { MongoSendUsage } from './send-usage.js'
import {
  CLAIM_ROUNDS, NO_OUTBOX, REPAIR_BATCH, isDuplicate, onlyDuplicates, outboxSuppression, recipientsDoc, toEmail, toIdempotency, type EmailDoc, type IdempotencyDoc, type SuppressionDoc,
} from './email-docs.js'

export type { EmailDoc }

export class MongoEmails implements EmailStore {
  readonly emails: Collection<EmailDoc>
  readonly idempotencyKeys: Collection<IdempotencyDoc>
  readonly suppressions: Collection<SuppressionDoc>
  private readonly events: Collection<EventDoc>
  /** What each account has sent in each quota period (./send-usage.ts). */
  readonly sendUsage: MongoSendUsage
  private readonly suppressionList: MongoSuppressions
  /** The bytes of attachments (./attachments.ts). */
  readonly attachments: MongoAttachments

  /** `hint` tells the delivery engine that events were published; `client` runs transactions. */
  constructor (private readonly client: MongoClient, db: Db, private readonly hint: () => void) {
    this.emails = db.collection<EmailDoc>('emails')
    this.idempotencyKeys = db.collection<IdempotencyDoc>('idempotency_keys')
    this.suppressions = db.collection<SuppressionDoc>('suppressions')
    this.events = db.collection<EventDoc>('events')
    this.sendUsage = new MongoSendUsage(db)
    this.suppressionList = new MongoSuppressions(this.suppressions, this.emails, this.events, (docs) => this.insertEventDocs(docs), hint)
    this.attachments = new MongoAttachments(db, this.emails)
  }

  /**
   * A partial index serves a query only when the query states the index's filter itself: each query on
   * these fields repeats `$type: 'string'` (an equality alone does not let the planner use the index).
   */
  async ensureIndexes (): Promise<void> {
    await Promise.all([
      this.releaseTextLeases(),
      syncIndexes(this.emails, [
        { key: { nextAttemptAt: 1 }, name: 'emails_due', partialFilterExpression: { nextAttemptAt: { $type: 'string' } } },
        { key: { leaseOwner: 1 }, name: 'emails_leases', partialFilterExpression: { leaseOwner: { $type: 'string' } } },
        { key: { outboxAt: 1 }, name: 'emails_outbox', partialFilterExpression: { outboxAt: { $type: 'string' } } },
      ]),
      syncIndexes(this.idempotencyKeys, [
        { key: { accountId: 1, key: 1 }, name: 'idempotency_keys_account_key', unique: true },
        { key: { expiresAtDate: 1 }, name: 'idempotency_keys_ttl', expireAfterSeconds: 0 },
        { key: { createdAt: 1 }, name: 'idempotency_keys_unapplied', partialFilterExpression: { applied: false } },
      ]),
      // The dashboard's reads: the account's emails newest first (by status, by recipient), and its
      // events by time for the stats.
      syncIndexes(this.emails, [
        { key: { accountId: 1, createdAt: -1, _id: -1 }, name: 'emails_account_page' },
        { key: { accountId: 1, status: 1, createdAt: -1, _id: -1 }, name: 'emails_account_status' },
        { key: { accountId: 1, 'recipients.address': 1, createdAt: -1, _id: -1 }, name: 'emails_account_recipient' },
        { key: { accountId: 1, 'tags.name': 1, 'tags.value': 1, createdAt: -1, _id: -1 }, name: 'emails_account_tag' },
      ]),
      syncIndexes(this.events, [{ key: { accountId: 1, occurredAt: 1 }, name: 'events_account_time' }]),
      this.attachments.ensureIndexes(),
      syncIndexes(this.suppressions, [
        { key: { accountId: 1, email: 1 }, name: 'suppressions_account_email', unique: true },
        { key: { accountId: 1, createdAt: -1, email: -1 }, name: 'suppressions_page' },
        { key: { pendingEventAt: 1 }, name: 'suppressions_pending', partialFilterExpression: { pendingEventAt: { $type: 'string' } } },
      ]),
    ])
  }

  /**
   * Releases leases whose end is ISO text (from before src/domain/lease-owner.ts's ms): no claim would take
   * them again. Unreleased, so none is converted (as SQLite's migration 25); served by emails_leases.
   */
  private async releaseTextLeases (): Promise<void> {
    await this.emails.updateMany({ leaseOwner: { $type: 'string' }, leaseExpiresAt: { $type: 'string' } }, { $set: { leaseOwner: null, leaseExpiresAt: null } })
  }

  private emailDoc (e: EmailRecord, events: EventRecord[]): EmailDoc {
    return {
      _id: String(e.id),
      accountId: String(e.accountId),
      from: String(e.from),
      to: Array.from(e.to, String),
      cc: Array.from(e.cc, String),
      bcc: Array.from(e.bcc, String),
      replyTo: Array.from(e.replyTo, String),
      subject: String(e.subject),
      html: nullableString(e.html),
      text: nullableString(e.text),
      headers: Object.entries(e.headers).map(([name, value]) => ({ name: String(name), value: String(value) })),
      tags: Array.from(e.tags, (t) => ({ name: String(t.name), value: String(t.value) })),
      suppressed: Array.from(e.suppressed, String),
      ...(attachmentsDoc(e.attachments) !== undefined ? { attachments: attachmentsDoc(e.attachments) } : {}),
      ...(e.template !== undefined ? { template: { id: String(e.template.id), version: Number(e.template.version) } } : {}),
      recipients: recipientsDoc(e.recipients),
      status: String(e.status),
      attempts: Number(e.attempts),
      nextAttemptAt: nullableString(e.nextAttemptAt),
      leaseOwner: nullableString(e.leaseOwner),
      leaseExpiresAt: e.leaseExpiresAt === null ? null : Number(e.leaseExpiresAt),
      leaseToken: Number(e.leaseToken ?? 0),
      lastError: nullableString(e.lastError),
      createdAt: String(e.createdAt),
      updatedAt: String(e.updatedAt),
      scheduledAt: nullableString(e.scheduledAt ?? null),
      metadata: Object.fromEntries(Object.entries(e.metadata ?? {}).map(([k, v]) => [String(k), String(v)])),
      trackOpens: e.tracking?.opens !== false,
      trackClicks: e.tracking?.clicks !== false,
      unsubscribe: e.unsubscribe !== false,
      outbox: events.map((e) => eventDoc(e)),
      outboxSuppressions: [],
      outboxAt: events.length > 0 ? String(e.createdAt) : null,
    }
  }

  /** Inserts events that may already be there (a publish repeated after a crash). */
  private async insertEventDocs (docs: EventDoc[]): Promise<void> {
    if (docs.length === 0) return
    try {
      await this.events.insertMany(docs, { ordered: false })
    } catch (err) {
      if (!onlyDuplicates(err)) throw err
    }
    this.hint()
  }

  /** Publishes the outboxes of these emails, then empties them. Idempotent. */
  private async publish (ids: string[]): Promise<void> {
    if (ids.length === 0) return
    const docs = await this.emails.find({ _id: { $in: ids }, outboxAt: { $type: 'string' } },
      { projection: { accountId: 1, outbox: 1, outboxSuppressions: 1 } }).toArray()
    if (docs.length === 0) return
    await this.insertEventDocs(docs.flatMap((d) => d.outbox ?? []))
    for (const d of docs) await this.suppressionList.upsertSuppressions(d.accountId, d.outboxSuppressions ?? [])
    await this.emails.bulkWrite(docs.map((d) => ({
      updateOne: {
        filter: { _id: d._id },
        update: {
          $pull: {
            outbox: { _id: { $in: (d.outbox ?? []).map((e) => e._id) } },
            outboxSuppressions: { email: { $in: (d.outboxSuppressions ?? []).map((s) => s.email) } },
          },
        },
      },
    })), { ordered: false })
    // Only an outbox that is empty now is marked so: one written to meanwhile keeps its mark.
    await this.emails.updateMany({ _id: { $in: docs.map((d) => d._id) }, outbox: { $size: 0 }, outboxSuppressions: { $size: 0 } },
      { $set: { outboxAt: null } })
  }

  private async insertEmailDocs (docs: EmailDoc[]): Promise<void> {
    if (docs.length === 0) return
    try {
      await this.emails.insertMany(docs, { ordered: false })
    } catch (err) {
      if (!onlyDuplicates(err)) throw err
    }
  }

  /** Inserts a claimed key's emails (those not inserted yet), publishes them, and marks the key applied. */
  private async applyJournal (k: IdempotencyDoc): Promise<void> {
    const journal = k.journal ?? []
    await this.insertEmailDocs(journal)
    await this.publish(journal.map((d) => d._id))
    await this.idempotencyKeys.updateOne({ accountId: k.accountId, key: k.key, createdAt: k.createdAt },
      { $set: { applied: true, journal: null, expiresAtDate: toDate(k.expiresAt) } })
  }

  /** With a quota charge, the recipients are reserved first (./send-usage.ts), then the send is written. */
  async acceptEmails (input: { emails: EmailRecord[]; events: EventRecord[]; idempotency?: IdempotencyRecord; quota?: QuotaCharge; attachments?: AttachmentContent[] }): Promise<AcceptResult> {
    const accept = () => this.sendUsage.charged(input.quota, () => this.acceptUncharged(input))
    if (input.attachments === undefined || input.attachments.length === 0) return await accept()
    // The bytes first (./attachments.ts): a send refused here drops them; one that failed may have been
    // written, so its bytes stay (pruned once old if no email came of them).
    await this.attachments.store(input.emails, input.attachments)
    const result = await accept()
    if (result.outcome !== 'accepted') await this.attachments.drop(input.emails.map((e) => String(e.id)))
    return result
  }

  readSendUsage (accountId: string, periods: string[]): Promise<Record<string, number>> {
    return this.sendUsage.read(accountId, periods)
  }

  private async acceptUncharged (input: { emails: EmailRecord[]; events: EventRecord[]; idempotency?: IdempotencyRecord }): Promise<AcceptResult> {
    const eventsOf = new Map<string, EventRecord[]>(input.emails.map((e) => [String(e.id), []]))
    for (const ev of input.events) {
      const list = eventsOf.get(String(ev.emailId))
      if (list === undefined) throw new Error(`event ${ev.id} is about an email that is not in this write`)
      list.push(ev)
    }

    const k = input.idempotency
    if (k === undefined) {
      // One transaction: every email and every event of the send, or none (the client gets an error and
      // nothing is ever sent). No outbox needed: the events commit with their emails.
      const docs = input.emails.map((e) => this.emailDoc(e, []))
      const events = input.events.map((e) => eventDoc(e))
      if (docs.length === 0 && events.length === 0) return { outcome: 'accepted' }
      await inTransaction(this.client, async (session) => {
        if (docs.length > 0) await this.emails.insertMany(docs, { session })
        if (events.length > 0) await this.events.insertMany(events, { session })
      })
      if (events.length > 0) this.hint()
      return { outcome: 'accepted' }
    }

    // With a key: the key's document carries the whole send (its journal) and is the commit point.
    const docs = input.emails.map((e) => this.emailDoc(e, eventsOf.get(String(e.id))!))
    const claim: IdempotencyDoc = {
      accountId: String(k.accountId),
      key: String(k.key),
      requestHash: String(k.requestHash),
      responseStatus: Number(k.responseStatus),
      responseBody: String(k.responseBody),
      createdAt: String(k.createdAt),
      expiresAt: String(k.expiresAt),
      expiresAtDate: null,
      journal: docs,
      applied: false,
    }
    for (let tries = 0; ; tries++) {
      try {
        await this.idempotencyKeys.insertOne({ ...claim })
        break
      } catch (err) {
        if (!isDuplicate(err) || tries >= 3) throw err
      }
      const existing = await this.idempotencyKeys.findOne({ accountId: claim.accountId, key: claim.key })
      if (existing === null) continue // expired and removed meanwhile: claim it again
      if (existing.expiresAt > claim.createdAt) return { outcome: 'duplicate', existing: toIdempotency(existing) }
      // Expired: finish what it accepted if a crash left that undone, then take the key over.
      if (!existing.applied) await this.applyJournal(existing)
      await this.idempotencyKeys.deleteOne({ accountId: existing.accountId, key: existing.key, createdAt: existing.createdAt })
    }

    await this.insertEmailDocs(docs)
    await this.publish(docs.filter((d) => d.outbox.length > 0).map((d) => d._id))
    await this.idempotencyKeys.updateOne({ accountId: claim.accountId, key: claim.key, createdAt: claim.createdAt },
      { $set: { applied: true, journal: null, expiresAtDate: toDate(claim.expiresAt) } })
    return { outcome: 'accepted' }
  }

  async findIdempotencyKey (accountId: string, key: string, now: string): Promise<IdempotencyRecord | null> {
    const doc = await this.idempotencyKeys.findOne({ accountId: String(accountId), key: String(key) }, { projection: { journal: 0 } })
    return doc !== null && doc.expiresAt > String(now) ? toIdempotency(doc) : null
  }

  async pruneIdempotencyKeys (now: string): Promise<number> {
    // An unapplied claim is repaired first (repairInterruptedWrites), never pruned with its journal.
    const r = await this.idempotencyKeys.deleteMany({ expiresAt: { $lte: String(now) }, applied: true })
    return r.deletedCount
  }

  async findEmail (accountId: string, id: string): Promise<EmailRecord | null> {
    const doc = await this.emails.findOne({ _id: String(id), accountId: String(accountId) }, { projection: NO_OUTBOX })
    return doc ? toEmail(doc) : null
  }

  async listEmails (accountId: string, query: EmailListQuery): Promise<EmailSummary[]> {
    const filter: Filter<EmailDoc> = { accountId: String(accountId) }
    if (query.status !== undefined) filter.status = String(query.status)
    if (query.to !== undefined) filter['recipients.address'] = String(query.to)
    if (query.tag !== undefined) {
      filter.tags = query.tag.value === undefined
        ? { $elemMatch: { name: String(query.tag.name) } }
        : { $elemMatch: { name: String(query.tag.name), value: String(query.tag.value) } }
    }
    const createdAt: { $gte?: string; $lt?: string } = {}
    if (query.since !== undefined) createdAt.$gte = String(query.since)
    if (query.until !== undefined) createdAt.$lt = String(query.until)
    if (query.since !== undefined || query.until !== undefined) filter.createdAt = createdAt
    if (query.after !== undefined) {
      const at = String(query.after.createdAt)
      filter.$or = [{ createdAt: { $lt: at } }, { createdAt: at, _id: { $lt: String(query.after.id) } }]
    }
    const projection = { _id: 1, from: 1, to: 1, subject: 1, status: 1, createdAt: 1, updatedAt: 1, scheduledAt: 1 }
    const docs = query.event === undefined
      ? await this.emails.find(filter, { sort: { createdAt: -1, _id: -1 }, limit: Number(query.limit), projection }).toArray()
      // Emails with an event of this type: each candidate, newest first, looks its events up (by emailId)
      // until a page is full.
      : await this.emails.aggregate<EmailDoc>([
        { $match: filter },
        { $sort: { createdAt: -1, _id: -1 } },
        { $lookup: { from: 'events', let: { id: '$_id' }, as: 'hit', pipeline: [
          { $match: { $expr: { $eq: ['$emailId', '$$id'] }, type: String(query.event) } }, { $limit: 1 }, { $project: { _id: 1 } },
        ] } },
        { $match: { hit: { $ne: [] } } },
        { $limit: Number(query.limit) },
        { $project: projection },
      ]).toArray()
    return docs.map((d) => ({
      id: d._id, from: d.from, to: [...d.to], subject: d.subject, status: d.status as EmailStatus, createdAt: d.createdAt, updatedAt: d.updatedAt,
      scheduledAt: d.scheduledAt ?? null,
    }))
  }

  async countEvents (accountId: string, window: { since: string; until: string }): Promise<DailyEventCount[]> {
    // Test events carry `test: true` (src/store/mongo/deliveries.ts) and are not counted.
    const rows = await this.events.aggregate<{ _id: { day: string; type: string }; n: number }>([
      { $match: { accountId: String(accountId), occurredAt: { $gte: String(window.since), $lt: String(window.until) }, test: { $ne: true } } },
      { $group: { _id: { day: { $substrBytes: ['$occurredAt', 0, 10] }, type: '$type' }, n: { $sum: 1 } } },
    ]).toArray()
    return rows.map((r) => ({ day: r._id.day, type: r._id.type as EventType, count: r.n }))
  }

  async claimDueEmails (req: EmailClaim): Promise<EmailRecord[]> {
    const limit = Math.floor(Number(req.limit))
    if (!(limit > 0)) return []
    // Due (the emails_due filter, stated so that index serves it) and not leased, or leased until now at most
    // (the lease's end in ms: src/domain/lease-owner.ts).
    const due: Filter<EmailDoc> = {
      nextAttemptAt: { $type: 'string', $lte: String(req.dueBy) },
      $or: [{ leaseExpiresAt: null }, { leaseExpiresAt: { $lte: Number(req.now) } }],
    }
    // One id for this claim: the update stamps it on what it wins, so the read-back finds exactly that,
    // whatever other nodes claim meanwhile.
    const claim = randomUUID()
    const lease = { leaseOwner: String(req.owner), leaseExpiresAt: Number(req.leaseUntil), leaseClaim: claim }
    const claimed: EmailRecord[] = []
    for (let round = 0; round < CLAIM_ROUNDS && claimed.length < limit; round++) {
      const candidates = await this.emails.find(due, { projection: { _id: 1 }, sort: { nextAttemptAt: 1 }, limit: limit - claimed.length })
        .toArray()
      if (candidates.length === 0) break
      const ids = candidates.map((d) => d._id)
      // Conditional on still being free: each document is updated atomically, so an email another node
      // leased since the read is not taken from it (and is not handed out here).
      const r = await this.emails.updateMany({ ...due, _id: { $in: ids } }, { $set: lease, $inc: { leaseToken: 1 } })
      if (r.modifiedCount > 0) {
        const won = await this.emails.find({ _id: { $in: ids }, leaseClaim: claim }, { projection: NO_OUTBOX }).toArray()
        for (const d of won) claimed.push(toEmail(d))
      }
      // Won every candidate: either the limit is reached or nothing more is due.
      if (r.modifiedCount === candidates.length) break
    }
    return claimed.sort((a, b) => (a.nextAttemptAt! < b.nextAttemptAt! ? -1 : a.nextAttemptAt! > b.nextAttemptAt! ? 1 : 0))
  }

  async nextDueAt (now: string): Promise<string | null> {
    // The emails_due index, its filter stated: one seek past now.
    const doc = await this.emails.find({ nextAttemptAt: { $type: 'string', $gt: String(now) } },
      { projection: { nextAttemptAt: 1 }, sort: { nextAttemptAt: 1 }, limit: 1 }).next()
    return doc?.nextAttemptAt ?? null
  }

  /** A scheduled email that may still be moved or canceled: not due at `now`, not leased. */
  private stillScheduled (accountId: string, id: string, now: string): Filter<EmailDoc> {
    return {
      _id: String(id), accountId: String(accountId), status: 'scheduled',
      nextAttemptAt: { $type: 'string', $gt: String(now) }, leaseOwner: null,
    }
  }

  async rescheduleEmail (input: { accountId: string; id: string; scheduledAt: string; now: string }): Promise<EmailRecord | 'not_scheduled' | null> {
    const at = String(input.scheduledAt)
    const doc = await this.emails.findOneAndUpdate(this.stillScheduled(input.accountId, input.id, input.now),
      { $set: { scheduledAt: at, nextAttemptAt: at, updatedAt: String(input.now) } }, { returnDocument: 'after', projection: NO_OUTBOX })
    if (doc !== null) return toEmail(doc)
    return await this.findEmail(input.accountId, input.id) === null ? null : 'not_scheduled'
  }

  /**
   * The cancel is one conditional update; the refund follows it, one decrement per period (never below
   * 0). A crash between the two leaves the recipients charged, never refunded for an email still due.
   */
  async cancelEmail (input: { accountId: string; id: string; now: string; refund?: { recipients: number; periods: string[] } }): Promise<EmailRecord | 'not_scheduled' | null> {
    const doc = await this.emails.findOneAndUpdate(this.stillScheduled(input.accountId, input.id, input.now),
      { $set: { status: 'canceled', nextAttemptAt: null, updatedAt: String(input.now) } }, { returnDocument: 'after', projection: NO_OUTBOX })
    if (doc === null) return await this.findEmail(input.accountId, input.id) === null ? null : 'not_scheduled'
    if (input.refund !== undefined) await this.sendUsage.refund(input.accountId, input.refund)
    return toEmail(doc)
  }

  async renewEmailLeases (owner: string, leases: EmailLease[], leaseUntil: number): Promise<number> {
    if (leases.length === 0) return 0
    const until = Number(leaseUntil)
    const r = await this.emails.bulkWrite(leases.map((l) => ({
      updateOne: {
        filter: { _id: String(l.id), leaseOwner: String(owner), leaseToken: Number(l.leaseToken) },
        update: { $max: { leaseExpiresAt: until } }, // never shortens (null sorts below every number)
      },
    })), { ordered: false })
    return r.matchedCount
  }

  async recordEmailAttempt (a: EmailAttempt): Promise<boolean> {
    const id = String(a.emailId)
    const events = a.events.map((e) => eventDoc(e))
    const suppressions = a.suppressions.map(outboxSuppression)
    const touchesOutbox = events.length > 0 || suppressions.length > 0
    // Fenced: only under the claim the attempt was made under (owner and token).
    const r = await this.emails.updateOne({ _id: id, leaseOwner: String(a.owner), leaseToken: Number(a.leaseToken) }, {
      $set: {
        recipients: recipientsDoc(a.recipients),
        status: String(a.status),
        attempts: Number(a.attempts),
        nextAttemptAt: nullableString(a.nextAttemptAt),
        lastError: nullableString(a.lastError),
        updatedAt: String(a.at),
        leaseOwner: null,
        leaseExpiresAt: null,
        ...(touchesOutbox ? { outboxAt: String(a.at) } : {}),
      },
      $push: { outbox: { $each: events }, outboxSuppressions: { $each: suppressions } },
    })
    if (r.matchedCount === 0) return false
    if (touchesOutbox) await this.publish([id])
    return true
  }

  async releaseEmailLeases (owner: string, leases?: EmailLease[]): Promise<number> {
    const free = { $set: { leaseOwner: null, leaseExpiresAt: null } }
    if (leases !== undefined) {
      if (leases.length === 0) return 0
      const r = await this.emails.bulkWrite(leases.map((l) => ({
        updateOne: { filter: { _id: String(l.id), leaseOwner: String(owner), leaseToken: Number(l.leaseToken) }, update: free },
      })), { ordered: false })
      return r.modifiedCount
    }
    // `$type: 'string'` states the emails_leases index's filter, so that index serves this query.
    const r = await this.emails.updateMany({ leaseOwner: { $type: 'string', $eq: String(owner) } }, free)
    return r.modifiedCount
  }

  // Suppressions, and the engagement that can add one (src/store/mongo/suppressions.ts)

  findSuppressions (accountId: string, emails: string[]): Promise<SuppressionRecord[]> { return this.suppressionList.findSuppressions(accountId, emails) }
  listSuppressions (accountId: string, opts: { limit: number; after?: SuppressionCursor }): Promise<SuppressionRecord[]> { return this.suppressionList.listSuppressions(accountId, opts) }
  addSuppression (s: SuppressionRecord): Promise<{ created: boolean; record: SuppressionRecord }> { return this.suppressionList.addSuppression(s) }
  deleteSuppression (accountId: string, email: string): Promise<boolean> { return this.suppressionList.deleteSuppression(accountId, email) }
  recordEngagement (event: EngagementEvent): Promise<EventRecord | null> { return this.suppressionList.recordEngagement(event) }
  unsubscribeRecipient (event: EngagementEvent, at: string): Promise<UnsubscribeResult> { return this.suppressionList.unsubscribeRecipient(event, at) }

  readEmailAttachments (emailId: string): Promise<Buffer[] | null> {
    return this.attachments.read(emailId)
  }

  pruneAttachmentContents (before: string, limit: number): Promise<number> {
    return this.attachments.prune(before, limit)
  }

  async repairInterruptedWrites (before: string): Promise<number> {
    const cutoff = String(before)
    let repaired = 0

    const claims = await this.idempotencyKeys.find({ applied: false, createdAt: { $lt: cutoff } }).limit(REPAIR_BATCH).toArray()
    for (const k of claims) {
      await this.applyJournal(k)
      repaired++
    }

    const outboxes = await this.emails.find({ outboxAt: { $type: 'string', $lt: cutoff } }, { projection: { _id: 1 } })
      .limit(REPAIR_BATCH).toArray()
    if (outboxes.length > 0) {
      await this.publish(outboxes.map((d) => d._id))
      repaired += outboxes.length
    }

    repaired += await this.suppressionList.publishPending(cutoff)
    return repaired
  }
}
