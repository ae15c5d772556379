// Received mail in MongoDB (../received.ts): `received` holds one document per message (its parsed
// fields), `received_contents` its bytes, one document per part (the raw message, each attachment), so
// that a 10 MiB message never meets the 16 MiB document limit together with its attachments and a list
// never reads a blob. `received_usage` holds each account's running total of stored bytes, one document
// per account. A message, its parts, its event and the total are written in one transaction; a delete or
// a prune removes the message and its parts and lowers the total in one transaction too. Documents are
// rebuilt field by field, and every filter value goes through String().
import { Binary, type ClientSession, type Collection, type Db, type MongoClient } from 'mongodb'
import type { EventRecord } from '../../domain/events.js'
import type { ReceivedQuery, ReceivedRecord } from '../received.js'
import { eventDoc, inTransaction, type EventDoc } from './documents.js'

export interface ReceivedDoc {
  _id: string
  accountId: string
  domainId: string
  /**
   * The envelope recipients, in order. A document written before messages had several recipients holds
   * one string: a filter on the field matches a string or any element of an array alike.
   */
  recipient: string | string[]
  size: number
  createdAt: string
  /** The parsed fields (ReceivedRecord less the fields above), as JSON text: stored as given, never queried. */
  message: string
}

export interface ReceivedContentDoc {
  /** `<message id>:<part>` (part: 'raw' or an attachment id). */
  _id: string
  receivedId: string
  accountId: string
  content: Binary
}

/** An account's running total of stored received bytes (`_id`: the account id). */
export interface ReceivedUsageDoc {
  _id: string
  bytes: number
}

function toReceived (d: ReceivedDoc): ReceivedRecord {
  const rest = JSON.parse(d.message) as Omit<ReceivedRecord, 'id' | 'accountId' | 'domainId' | 'recipients' | 'size' | 'createdAt'>
  const recipients = Array.isArray(d.recipient) ? d.recipient : [d.recipient]
  return { ...rest, id: d._id, accountId: d.accountId, domainId: d.domainId, recipients, size: d.size, createdAt: d.createdAt }
}

function receivedDoc (m: ReceivedRecord): ReceivedDoc {
  const { id, accountId, domainId, recipients, size, createdAt, ...rest } = m
  return {
    _id: String(id), accountId: String(accountId), domainId: String(domainId), recipient: recipients.map(String),
    size: Number(size), createdAt: String(createdAt), message: JSON.stringify(rest),
  }
}

export class MongoReceived {
  readonly received: Collection<ReceivedDoc>
  readonly contents: Collection<ReceivedContentDoc>
  readonly usage: Collection<ReceivedUsageDoc>
  private readonly events: Collection<EventDoc>

  constructor (private readonly client: MongoClient, db: Db, private readonly hint: () => void) {
    this.received = db.collection<ReceivedDoc>('received')
    this.contents = db.collection<ReceivedContentDoc>('received_contents')
    this.usage = db.collection<ReceivedUsageDoc>('received_usage')
    this.events = db.collection<EventDoc>('events')
  }

  async ensureIndexes (): Promise<void> {
    await this.received.createIndexes([
      { key: { accountId: 1, _id: -1 }, name: 'received_account' },
      { key: { accountId: 1, recipient: 1, _id: -1 }, name: 'received_recipient' },
      { key: { createdAt: 1 }, name: 'received_time' },
    ])
    await this.contents.createIndexes([{ key: { receivedId: 1 }, name: 'received_contents_message' }])
  }

  /** The sum of the account's stored sizes, counted from its messages (for an account with no usage document yet). */
  private async counted (accountId: string, session?: ClientSession): Promise<number> {
    const [row] = await this.received.aggregate<{ n: number }>([
      { $match: { accountId: String(accountId) } },
      { $group: { _id: null, n: { $sum: '$size' } } },
    ], session ? { session } : {}).toArray()
    return row?.n ?? 0
  }

  /**
   * The account's running total as the transaction sees it. An account whose mail was kept before the
   * total existed has no document: its total is counted once from its messages, and the caller's write
   * of the new total creates the document.
   */
  private async used (accountId: string, session?: ClientSession): Promise<number> {
    const doc = await this.usage.findOne({ _id: String(accountId) }, session ? { session } : {})
    return doc !== null ? doc.bytes : await this.counted(accountId, session)
  }

  /**
   * Sets the total read earlier in the same transaction: two transactions that change one account's
   * total write the same document, so MongoDB lets one commit and retries the other, which reads again.
   */
  private async setUsed (accountId: string, bytes: number, session: ClientSession): Promise<void> {
    await this.usage.updateOne({ _id: String(accountId) }, { $set: { bytes: Math.max(0, bytes) } }, { upsert: true, session })
  }

  receivedBytes (accountId: string): Promise<number> {
    return this.used(accountId)
  }

  async insertReceived (input: { message: ReceivedRecord; raw: Buffer; contents: Array<{ id: string; content: Buffer }>; event: EventRecord; limitBytes: number }): Promise<'recorded' | 'limit_reached'> {
    const m = input.message
    const doc = receivedDoc(m)
    const parts: ReceivedContentDoc[] = [
      { _id: `${doc._id}:raw`, receivedId: doc._id, accountId: doc.accountId, content: new Binary(input.raw) },
      ...input.contents.map((c) => ({ _id: `${doc._id}:${String(c.id)}`, receivedId: doc._id, accountId: doc.accountId, content: new Binary(c.content) })),
    ]
    const outcome = await inTransaction(this.client, async (session): Promise<'recorded' | 'limit_reached'> => {
      const used = await this.used(doc.accountId, session)
      if (used + doc.size > Number(input.limitBytes)) return 'limit_reached'
      // Parts one at a time: a batch of them could pass the 48 MB limit of one insert message.
      for (const part of parts) await this.contents.insertOne(part, { session })
      await this.received.insertOne(doc, { session })
      await this.events.insertOne(eventDoc(input.event), { session })
      await this.setUsed(doc.accountId, used + doc.size, session)
      return 'recorded'
    })
    if (outcome === 'recorded') this.hint()
    return outcome
  }

  async deleteReceived (accountId: string, id: string): Promise<ReceivedRecord | null> {
    return await inTransaction(this.client, async (session) => {
      const doc = await this.received.findOne({ _id: String(id), accountId: String(accountId) }, { session })
      if (doc === null) return null
      const used = await this.used(doc.accountId, session)
      await this.contents.deleteMany({ receivedId: doc._id }, { session })
      await this.received.deleteOne({ _id: doc._id }, { session })
      await this.setUsed(doc.accountId, used - doc.size, session)
      return toReceived(doc)
    })
  }

  async listReceived (accountId: string, q: ReceivedQuery): Promise<ReceivedRecord[]> {
    const filter: Record<string, unknown> = { accountId: String(accountId) }
    if (q.before !== undefined) filter._id = { $lt: String(q.before) }
    if (q.to !== undefined) filter.recipient = String(q.to)
    return (await this.received.find(filter).sort({ _id: -1 }).limit(Number(q.limit)).toArray()).map(toReceived)
  }

  async findReceived (accountId: string, id: string): Promise<ReceivedRecord | null> {
    const doc = await this.received.findOne({ _id: String(id), accountId: String(accountId) })
    return doc ? toReceived(doc) : null
  }

  private async part (accountId: string, id: string, part: string): Promise<Buffer | null> {
    const doc = await this.contents.findOne({ _id: `${String(id)}:${String(part)}`, accountId: String(accountId) })
    return doc ? Buffer.from(doc.content.buffer) : null
  }

  readReceivedRaw (accountId: string, id: string): Promise<Buffer | null> {
    return this.part(accountId, id, 'raw')
  }

  async readReceivedAttachment (accountId: string, id: string, attachmentId: string): Promise<Buffer | null> {
    if (attachmentId === 'raw') return null
    return await this.part(accountId, id, attachmentId)
  }

  /** The messages, their parts and their accounts' totals in one transaction (read inside it, so a DELETE at the same time is retried, never counted twice). */
  async pruneReceived (before: string, limit: number): Promise<number> {
    return await inTransaction(this.client, async (session) => {
      const old = await this.received.find({ createdAt: { $lt: String(before) } }, { projection: { _id: 1, accountId: 1, size: 1 }, session })
        .sort({ createdAt: 1 }).limit(Number(limit)).toArray()
      if (old.length === 0) return 0
      const freed = new Map<string, number>()
      for (const d of old) freed.set(d.accountId, (freed.get(d.accountId) ?? 0) + d.size)
      const used = new Map<string, number>()
      for (const accountId of freed.keys()) used.set(accountId, await this.used(accountId, session))
      const ids = old.map((d) => d._id)
      await this.contents.deleteMany({ receivedId: { $in: ids } }, { session })
      await this.received.deleteMany({ _id: { $in: ids } }, { session })
      for (const [accountId, bytes] of freed) await this.setUsed(accountId, used.get(accountId)! - bytes, session)
      return old.length
    })
  }
}
