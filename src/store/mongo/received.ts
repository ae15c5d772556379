// Received mail in MongoDB (../received.ts): `received` holds one document per message (its parsed
// fields), `received_contents` its bytes, one document per part (the raw message, each attachment), so
// that a 10 MiB message never meets the 16 MiB document limit together with its attachments and a list
// never reads a blob. The message, its parts and its event are written in one transaction. Documents are
// rebuilt field by field, and every filter value goes through String().
import { Binary, type Collection, type Db, type MongoClient } from 'mongodb'
import type { EventRecord } from '../../domain/events.js'
import type { ReceivedQuery, ReceivedRecord } from '../received.js'
import { eventDoc, inTransaction, type EventDoc } from './documents.js'

export interface ReceivedDoc {
  _id: string
  accountId: string
  domainId: string
  recipient: string
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

function toReceived (d: ReceivedDoc): ReceivedRecord {
  const rest = JSON.parse(d.message) as Omit<ReceivedRecord, 'id' | 'accountId' | 'domainId' | 'recipient' | 'size' | 'createdAt'>
  return { ...rest, id: d._id, accountId: d.accountId, domainId: d.domainId, recipient: d.recipient, size: d.size, createdAt: d.createdAt }
}

function receivedDoc (m: ReceivedRecord): ReceivedDoc {
  const { id, accountId, domainId, recipient, size, createdAt, ...rest } = m
  return {
    _id: String(id), accountId: String(accountId), domainId: String(domainId), recipient: String(recipient),
    size: Number(size), createdAt: String(createdAt), message: JSON.stringify(rest),
  }
}

export class MongoReceived {
  readonly received: Collection<ReceivedDoc>
  readonly contents: Collection<ReceivedContentDoc>
  private readonly events: Collection<EventDoc>

  constructor (private readonly client: MongoClient, db: Db, private readonly hint: () => void) {
    this.received = db.collection<ReceivedDoc>('received')
    this.contents = db.collection<ReceivedContentDoc>('received_contents')
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

  async receivedBytes (accountId: string): Promise<number> {
    const [row] = await this.received.aggregate<{ n: number }>([
      { $match: { accountId: String(accountId) } },
      { $group: { _id: null, n: { $sum: '$size' } } },
    ]).toArray()
    return row?.n ?? 0
  }

  async insertReceived (input: { message: ReceivedRecord; raw: Buffer; contents: Array<{ id: string; content: Buffer }>; event: EventRecord; limitBytes: number }): Promise<'recorded' | 'limit_reached'> {
    const m = input.message
    if (await this.receivedBytes(m.accountId) + m.size > Number(input.limitBytes)) return 'limit_reached'
    const doc = receivedDoc(m)
    const parts: ReceivedContentDoc[] = [
      { _id: `${doc._id}:raw`, receivedId: doc._id, accountId: doc.accountId, content: new Binary(input.raw) },
      ...input.contents.map((c) => ({ _id: `${doc._id}:${String(c.id)}`, receivedId: doc._id, accountId: doc.accountId, content: new Binary(c.content) })),
    ]
    await inTransaction(this.client, async (session) => {
      // Parts one at a time: a batch of them could pass the 48 MB limit of one insert message.
      for (const part of parts) await this.contents.insertOne(part, { session })
      await this.received.insertOne(doc, { session })
      await this.events.insertOne(eventDoc(input.event), { session })
    })
    this.hint()
    return 'recorded'
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

  /** The parts first, then the messages: a crash between them leaves old messages without bytes, which the next prune removes. */
  async pruneReceived (before: string, limit: number): Promise<number> {
    const old = await this.received.find({ createdAt: { $lt: String(before) } }, { projection: { _id: 1 } })
      .sort({ createdAt: 1 }).limit(Number(limit)).toArray()
    if (old.length === 0) return 0
    const ids = old.map((d) => d._id)
    await this.contents.deleteMany({ receivedId: { $in: ids } })
    return (await this.received.deleteMany({ _id: { $in: ids } })).deletedCount
  }
}
