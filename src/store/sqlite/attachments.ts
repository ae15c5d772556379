// The bytes of sent emails' attachments in SQLite: one row per attachment in email_attachments (migration
// 22), written in the write that accepts the email, read by the mailer before each attempt, and dropped by
// the mailer's housekeeping once the email is final (src/store/emails.ts pruneAttachmentContents). The
// email row keeps the attachments' facts as JSON (emails.attachments), set in that same write.
import type Database from 'better-sqlite3'
import type { AttachmentMeta } from '../../domain/attachments.js'
import type { AttachmentContent, EmailRecord } from '../emails.js'
import type { WriteQueue } from './write-queue.js'

type Row = Record<string, unknown>

/** The attachments' facts of an email row (the column holds '[]' for an email without any). */
export function attachmentsOf (value: unknown): AttachmentMeta[] | undefined {
  if (typeof value !== 'string' || value === '[]') return undefined
  return JSON.parse(value) as AttachmentMeta[]
}

export class SqliteAttachments {
  private readonly q

  constructor (db: Database.Database, private readonly writes: WriteQueue) {
    const p = (sql: string) => db.prepare(sql)
    this.q = {
      setFacts: p('UPDATE emails SET attachments = ? WHERE id = ?'),
      insert: p('INSERT INTO email_attachments (email_id, part, created_at, content) VALUES (?, ?, ?, ?)'),
      read: p('SELECT part, content FROM email_attachments WHERE email_id = ? ORDER BY part'),
      // Oldest first by the time index; the email's own row says whether it is final, and since when.
      prunable: p(`SELECT DISTINCT a.email_id AS id FROM email_attachments a LEFT JOIN emails e ON e.id = a.email_id
                   WHERE a.created_at < ? AND (e.id IS NULL OR (e.next_attempt_at IS NULL AND e.updated_at < ?))
                   ORDER BY a.created_at LIMIT ?`).pluck(),
      drop: p('DELETE FROM email_attachments WHERE email_id = ?'),
    }
  }

  /**
   * Inside the accepting write (the caller's WriteQueue.run): the facts on each email's row and the bytes
   * of its attachments, once each.
   */
  store (emails: EmailRecord[], contents: AttachmentContent[] | undefined): void {
    for (const e of emails) {
      if (e.attachments !== undefined && e.attachments.length > 0) this.q.setFacts.run(JSON.stringify(e.attachments), e.id)
    }
    if (contents === undefined) return
    const createdAt = new Map(emails.map((e) => [e.id, e.createdAt]))
    for (const c of contents) {
      const at = createdAt.get(c.emailId)
      // Bytes of an email this write does not store are not kept.
      if (at !== undefined) this.q.insert.run(c.emailId, c.part, at, c.content)
    }
  }

  async read (emailId: string): Promise<Buffer[] | null> {
    const rows = this.q.read.all(emailId) as Row[]
    if (rows.length === 0) return null
    return rows.map((r) => r.content as Buffer)
  }

  async prune (before: string, limit: number): Promise<number> {
    const ids = this.q.prunable.all(before, before, limit) as string[]
    if (ids.length === 0) return 0
    return await this.writes.run(() => {
      for (const id of ids) this.q.drop.run(id)
      return ids.length
    })
  }
}
