// The bytes of sent emails' attachments in MongoDB, with the semantics of the SQLite adapter
// (../sqlite/attachments.ts): once per email, read before each attempt, dropped once the email is final.
//
// One document per attachment in `email_attachments` (_id `<emailId>:<part>`), holding the bytes itself
// while they fit well inside a document's 16 MB; a larger one goes to GridFS (the driver's GridFSBucket,
// bucket `email_attachments`, file id the same string) and its document only points there.
//
// The bytes are written before the emails, outside their transaction or journal (a transaction would
// carry megabytes, and a journal document could pass 16 MB): a send that is then refused or fails has
// them deleted at once, and bytes whose email never appeared (a crash in between) are pruned with the
// rest (pruneAttachmentContents), once older than the grace below.
//
// Query safety, as in index.ts: ids go through String(), documents are rebuilt field by field.
import { Binary, GridFSBucket, type Collection, type Db } from 'mongodb'
import type { AttachmentMeta } from '../../domain/attachments.js'
import type { AttachmentContent, EmailRecord } from '../emails.js'
import type { EmailDoc } from './email-docs.js'

/** Bytes up to this size are kept in the attachment's own document; larger ones in GridFS. */
export const INLINE_MAX_BYTES = 15 * 1024 * 1024
/** Bytes without an email are pruned once older than this: an accept still in progress is never taken for one. */
export const ORPHAN_GRACE_MS = 3_600_000

export interface AttachmentDoc {
  _id: string
  emailId: string
  part: number
  createdAt: string
  /** The bytes, or null when they are in GridFS under this document's _id. */
  content: Binary | null
  size: number
}

/** The attachments' facts as stored in the email document: rebuilt field by field. */
export function attachmentsDoc (list: AttachmentMeta[] | undefined): AttachmentMeta[] | undefined {
  if (list === undefined || list.length === 0) return undefined
  return Array.from(list, (a) => {
    const doc: AttachmentMeta = {
      filename: String(a.filename), contentType: String(a.contentType), size: Number(a.size), sha256: String(a.sha256),
    }
    if (a.contentId !== undefined) doc.contentId = String(a.contentId)
    return doc
  })
}

export class MongoAttachments {
  readonly docs: Collection<AttachmentDoc>
  private readonly bucket: GridFSBucket

  constructor (db: Db, private readonly emails: Collection<EmailDoc>) {
    this.docs = db.collection<AttachmentDoc>('email_attachments')
    this.bucket = new GridFSBucket(db, { bucketName: 'email_attachments' })
  }

  async ensureIndexes (): Promise<void> {
    await this.docs.createIndex({ emailId: 1, part: 1 }, { name: 'email_attachments_email' })
    await this.docs.createIndex({ createdAt: 1 }, { name: 'email_attachments_time' })
  }

  /** Writes the bytes of these emails' attachments (before the emails themselves). Idempotent by id. */
  async store (emails: EmailRecord[], contents: AttachmentContent[] | undefined): Promise<void> {
    if (contents === undefined || contents.length === 0) return
    const createdAt = new Map(emails.map((e) => [String(e.id), String(e.createdAt)]))
    for (const c of contents) {
      const emailId = String(c.emailId)
      const at = createdAt.get(emailId)
      if (at === undefined) continue
      const _id = `${emailId}:${Number(c.part)}`
      const inline = c.content.length <= INLINE_MAX_BYTES
      if (!inline) {
        await this.deleteFile(_id)
        await new Promise<void>((resolve, reject) => {
          const upload = this.bucket.openUploadStreamWithId(_id as never, _id, { metadata: { emailId } })
          upload.once('finish', () => resolve())
          upload.once('error', reject)
          upload.end(c.content)
        })
      }
      const doc: AttachmentDoc = { _id, emailId, part: Number(c.part), createdAt: at, content: inline ? new Binary(c.content) : null, size: c.content.length }
      await this.docs.replaceOne({ _id }, doc, { upsert: true })
    }
  }

  /** The bytes of one email's attachments in order; null when none are stored. */
  async read (emailId: string): Promise<Buffer[] | null> {
    const docs = await this.docs.find({ emailId: String(emailId) }).sort({ part: 1 }).toArray()
    if (docs.length === 0) return null
    const out: Buffer[] = []
    for (const d of docs) {
      if (d.content !== null) {
        out.push(Buffer.from(d.content.buffer))
        continue
      }
      const chunks: Buffer[] = []
      try {
        for await (const chunk of this.bucket.openDownloadStream(d._id as never)) chunks.push(chunk as Buffer)
      } catch {
        return null // pruned meanwhile
      }
      out.push(Buffer.concat(chunks))
    }
    return out
  }

  /** Deletes the bytes of these emails (a send that was not written, or pruning). */
  async drop (emailIds: string[]): Promise<void> {
    if (emailIds.length === 0) return
    const ids = emailIds.map(String)
    const docs = await this.docs.find({ emailId: { $in: ids } }, { projection: { _id: 1, content: 1 } }).toArray()
    for (const d of docs) if (d.content === null) await this.deleteFile(d._id)
    await this.docs.deleteMany({ emailId: { $in: ids } })
  }

  /** As the SQLite adapter: emails final since before `before`, and bytes without an email past the grace. */
  async prune (before: string, limit: number): Promise<number> {
    const docs = await this.docs.find({ createdAt: { $lt: String(before) } }, { projection: { emailId: 1, createdAt: 1 } })
      .sort({ createdAt: 1 }).limit(Math.max(1, limit) * 20).toArray()
    const candidates = [...new Set(docs.map((d) => d.emailId))]
    if (candidates.length === 0) return 0
    const emails = await this.emails.find({ _id: { $in: candidates } }, { projection: { _id: 1, nextAttemptAt: 1, updatedAt: 1 } }).toArray()
    const byId = new Map(emails.map((e) => [e._id, e]))
    const orphanBefore = new Date(Date.parse(before) - ORPHAN_GRACE_MS).toISOString()
    const oldest = new Map<string, string>()
    for (const d of docs) if (!oldest.has(d.emailId)) oldest.set(d.emailId, d.createdAt)
    const gone = candidates.filter((id) => {
      const e = byId.get(id)
      if (e === undefined) return oldest.get(id)! < orphanBefore
      return (e.nextAttemptAt ?? null) === null && e.updatedAt < String(before)
    }).slice(0, limit)
    await this.drop(gone)
    return gone.length
  }

  private async deleteFile (id: string): Promise<void> {
    try {
      await this.bucket.delete(id as never)
    } catch {
      // No such file: nothing to delete.
    }
  }
}
