// Received mail in SQLite (../received.ts): one row per message (its parsed fields as JSON), a row per
// recipient in received_recipients, and its bytes (raw and attachments) in received_contents. Each
// account's stored bytes are a running total in received_usage. Each write is one WriteQueue.run, the
// event and the total included.
import type Database from 'better-sqlite3'
import type { EventRecord } from '../../domain/events.js'
import type { ReceivedQuery, ReceivedRecord } from '../received.js'
import type { WriteQueue } from './write-queue.js'

type Row = Record<string, unknown>

/** The columns are the record's keys (`recipient` is the first recipient); the rest of it is the JSON in `message`. */
function toReceived (r: Row): ReceivedRecord {
  const rest = JSON.parse(r.message as string) as Omit<ReceivedRecord, 'id' | 'accountId' | 'domainId' | 'size' | 'createdAt'> & { recipients?: string[] }
  return {
    ...rest,
    // A message kept before migration 19 has its one recipient in the column only.
    recipients: rest.recipients ?? [r.recipient as string],
    id: r.id as string,
    accountId: r.account_id as string,
    domainId: r.domain_id as string,
    size: r.size as number,
    createdAt: r.created_at as string,
  }
}

function messageJson (m: ReceivedRecord): string {
  const { id: _id, accountId: _a, domainId: _d, size: _s, createdAt: _c, ...rest } = m
  return JSON.stringify(rest)
}

export class SqliteReceived {
  private readonly q

  constructor (db: Database.Database, private readonly writes: WriteQueue, private readonly insertEventRows: (events: EventRecord[]) => void) {
    const p = (sql: string) => db.prepare(sql)
    this.q = {
      bytes: p('SELECT bytes FROM received_usage WHERE account_id = ?'),
      addBytes: p(`INSERT INTO received_usage (account_id, bytes) VALUES (?, ?)
                   ON CONFLICT (account_id) DO UPDATE SET bytes = bytes + excluded.bytes`),
      subtractBytes: p('UPDATE received_usage SET bytes = max(0, bytes - ?) WHERE account_id = ?'),
      insert: p('INSERT INTO received (id, account_id, domain_id, recipient, size, created_at, message) VALUES (?, ?, ?, ?, ?, ?, ?)'),
      insertRecipient: p('INSERT OR IGNORE INTO received_recipients (received_id, recipient, account_id) VALUES (?, ?, ?)'),
      insertContent: p('INSERT INTO received_contents (received_id, part, content) VALUES (?, ?, ?)'),
      page: p('SELECT * FROM received WHERE account_id = ? AND id < ? ORDER BY id DESC LIMIT ?'),
      pageTo: p(`SELECT r.* FROM received_recipients t JOIN received r ON r.id = t.received_id
                 WHERE t.account_id = ? AND t.recipient = ? AND t.received_id < ? ORDER BY t.received_id DESC LIMIT ?`),
      one: p('SELECT * FROM received WHERE account_id = ? AND id = ?'),
      content: p(`SELECT c.content FROM received_contents c JOIN received r ON r.id = c.received_id
                  WHERE r.account_id = ? AND r.id = ? AND c.part = ?`),
      old: p('SELECT id, account_id, size FROM received WHERE created_at < ? ORDER BY created_at LIMIT ?'),
      removeContents: p('DELETE FROM received_contents WHERE received_id = ?'),
      removeRecipients: p('DELETE FROM received_recipients WHERE received_id = ?'),
      remove: p('DELETE FROM received WHERE id = ?'),
    }
  }

  private used (accountId: string): number {
    return (this.q.bytes.get(accountId) as { bytes: number } | undefined)?.bytes ?? 0
  }

  /** Deletes one message, its recipients and bytes, and takes its size off its account's total (inside a write). */
  private removeOne (r: { id: string; account_id: string; size: number }): void {
    this.q.removeContents.run(r.id)
    this.q.removeRecipients.run(r.id)
    this.q.remove.run(r.id)
    this.q.subtractBytes.run(r.size, r.account_id)
  }

  insertReceived (input: { message: ReceivedRecord; raw: Buffer; contents: Array<{ id: string; content: Buffer }>; event: EventRecord; limitBytes: number }): Promise<'recorded' | 'limit_reached'> {
    const m = input.message
    return this.writes.run(() => {
      if (this.used(m.accountId) + m.size > input.limitBytes) return 'limit_reached'
      this.q.insert.run(m.id, m.accountId, m.domainId, m.recipients[0] ?? '', m.size, m.createdAt, messageJson(m))
      for (const to of m.recipients) this.q.insertRecipient.run(m.id, to, m.accountId)
      this.q.insertContent.run(m.id, 'raw', input.raw)
      for (const c of input.contents) this.q.insertContent.run(m.id, c.id, c.content)
      this.q.addBytes.run(m.accountId, m.size)
      this.insertEventRows([input.event])
      return 'recorded'
    })
  }

  async receivedBytes (accountId: string): Promise<number> {
    return this.used(accountId)
  }

  deleteReceived (accountId: string, id: string): Promise<ReceivedRecord | null> {
    return this.writes.run(() => {
      const row = this.q.one.get(accountId, id) as Row | undefined
      if (row === undefined) return null
      this.removeOne({ id: row.id as string, account_id: row.account_id as string, size: row.size as number })
      return toReceived(row)
    })
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
      const rows = this.q.old.all(before, limit) as Array<{ id: string; account_id: string; size: number }>
      for (const r of rows) this.removeOne(r)
      return rows.length
    })
  }
}
