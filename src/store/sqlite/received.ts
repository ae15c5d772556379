// Received mail in SQLite (../received.ts): one row per message (its parsed fields as JSON), and its bytes
// (raw and attachments) in received_contents. Each write is one WriteQueue.run, the event included.
import type Database from 'better-sqlite3'
import type { EventRecord } from '../../domain/events.js'
import type { ReceivedQuery, ReceivedRecord } from '../received.js'
import type { WriteQueue } from './write-queue.js'

type Row = Record<string, unknown>

/** The columns are the record's keys; the rest of it is the JSON in `message`. */
function toReceived (r: Row): ReceivedRecord {
  const rest = JSON.parse(r.message as string) as Omit<ReceivedRecord, 'id' | 'accountId' | 'domainId' | 'recipient' | 'size' | 'createdAt'>
  return {
    ...rest,
    id: r.id as string,
    accountId: r.account_id as string,
    domainId: r.domain_id as string,
    recipient: r.recipient as string,
    size: r.size as number,
    createdAt: r.created_at as string,
  }
}

function messageJson (m: ReceivedRecord): string {
  const { id: _id, accountId: _a, domainId: _d, recipient: _r, size: _s, createdAt: _c, ...rest } = m
  return JSON.stringify(rest)
}

export class SqliteReceived {
  private readonly q

  constructor (db: Database.Database, private readonly writes: WriteQueue, private readonly insertEventRows: (events: EventRecord[]) => void) {
    const p = (sql: string) => db.prepare(sql)
    this.q = {
      bytes: p('SELECT coalesce(sum(size), 0) AS n FROM received WHERE account_id = ?'),
      insert: p('INSERT INTO received (id, account_id, domain_id, recipient, size, created_at, message) VALUES (?, ?, ?, ?, ?, ?, ?)'),
      insertContent: p('INSERT INTO received_contents (received_id, part, content) VALUES (?, ?, ?)'),
      page: p('SELECT * FROM received WHERE account_id = ? AND id < ? ORDER BY id DESC LIMIT ?'),
      pageTo: p('SELECT * FROM received WHERE account_id = ? AND recipient = ? AND id < ? ORDER BY id DESC LIMIT ?'),
      one: p('SELECT * FROM received WHERE account_id = ? AND id = ?'),
      content: p(`SELECT c.content FROM received_contents c JOIN received r ON r.id = c.received_id
                  WHERE r.account_id = ? AND r.id = ? AND c.part = ?`),
      old: p('SELECT id FROM received WHERE created_at < ? ORDER BY created_at LIMIT ?'),
      removeContents: p('DELETE FROM received_contents WHERE received_id = ?'),
      remove: p('DELETE FROM received WHERE id = ?'),
    }
  }

  insertReceived (input: { message: ReceivedRecord; raw: Buffer; contents: Array<{ id: string; content: Buffer }>; event: EventRecord; limitBytes: number }): Promise<'recorded' | 'limit_reached'> {
    const m = input.message
    return this.writes.run(() => {
      const { n } = this.q.bytes.get(m.accountId) as { n: number }
      if (n + m.size > input.limitBytes) return 'limit_reached'
      this.q.insert.run(m.id, m.accountId, m.domainId, m.recipient, m.size, m.createdAt, messageJson(m))
      this.q.insertContent.run(m.id, 'raw', input.raw)
      for (const c of input.contents) this.q.insertContent.run(m.id, c.id, c.content)
      this.insertEventRows([input.event])
      return 'recorded'
    })
  }

  async receivedBytes (accountId: string): Promise<number> {
    return (this.q.bytes.get(accountId) as { n: number }).n
  }

  async listReceived (accountId: string, q: ReceivedQuery): Promise<ReceivedRecord[]> {
    // Ids sort by time; '~' sorts after every id.
    const before = q.before ?? '~'
    const rows = q.to !== undefined ? this.q.pageTo.all(accountId, q.to, before, q.limit) : this.q.page.all(accountId, before, q.limit)
    return (rows as Row[]).map(toReceived)
  }

  async findReceived (accountId: string, id: string): Promise<ReceivedRecord | null> {
    const row = this.q.one.get(accountId, id) as Row | undefined
    return row ? toReceived(row) : null
  }

  async readReceivedRaw (accountId: string, id: string): Promise<Buffer | null> {
    const row = this.q.content.get(accountId, id, 'raw') as { content: Buffer } | undefined
    return row ? row.content : null
  }

  async readReceivedAttachment (accountId: string, id: string, attachmentId: string): Promise<Buffer | null> {
    // 'raw' is not an attachment id (the route accepts att_<n> only; this keeps the store's promise too).
    if (attachmentId === 'raw') return null
    const row = this.q.content.get(accountId, id, attachmentId) as { content: Buffer } | undefined
    return row ? row.content : null
  }

  pruneReceived (before: string, limit: number): Promise<number> {
    return this.writes.run(() => {
      const ids = (this.q.old.all(before, limit) as Array<{ id: string }>).map((r) => r.id)
      for (const id of ids) {
        this.q.removeContents.run(id)
        this.q.remove.run(id)
      }
      return ids.length
    })
  }
}
