// The email documents in MongoDB and their mappers to and from the store's records (emails.ts).
import { MongoBulkWriteError, MongoServerError, MongoWriteConcernError, type WriteError } from 'mongodb'
import type {
  EmailRecipient, EmailRecord, EmailStatus, EmailTag, IdempotencyRecord, RecipientState, SuppressionReason, SuppressionRecord,
} from '../emails.js'
import { metadataOf, type EmailMetadata } from '../../domain/metadata.js'
import type { AttachmentMeta } from '../../domain/attachments.js'
import type { EventDoc } from './documents.js'

export interface OutboxSuppression {
  email: string
  reason: string
  createdAt: string
}

export interface EmailDoc {
  _id: string
  accountId: string
  from: string
  to: string[]
  cc: string[]
  bcc: string[]
  replyTo: string[]
  subject: string
  html: string | null
  text: string | null
  // Pairs, not an object: header names may hold '.' or start with '$', which field names must not.
  headers: Array<{ name: string; value: string }>
  tags: EmailTag[]
  suppressed: string[]
  /** The attachments' facts (their bytes: ./attachments.ts); absent when the email has none. */
  attachments?: AttachmentMeta[]
  /** The template and version it was rendered from; absent: none. */
  template?: { id: string; version: number }
  recipients: EmailRecipient[]
  status: string
  attempts: number
  nextAttemptAt: string | null
  leaseOwner: string | null
  /** When the lease runs out, ms since the epoch; ISO text on documents from before (released at start). */
  leaseExpiresAt: number | null
  /** The claim that leased it last; absent on documents written before fencing (read as 0). */
  leaseToken?: number
  /** A random id of the claim that leased it last, to read back what one claim won. */
  leaseClaim?: string | null
  lastError: string | null
  createdAt: string
  updatedAt: string
  /** When it was scheduled for; absent or null: sent at once. The fields to `unsubscribe` are absent on older documents. */
  scheduledAt?: string | null
  /** Keys are letters, digits, _ and - only (src/domain/metadata.ts): safe as field names. Absent: none. */
  metadata?: EmailMetadata
  /** Absent: on. */
  trackOpens?: boolean
  trackClicks?: boolean
  unsubscribe?: boolean
  /** Events and suppressions written with the last changes and not yet published. */
  outbox: EventDoc[]
  outboxSuppressions: OutboxSuppression[]
  /** Set while the outbox may hold something: when it was last written to. */
  outboxAt: string | null
}

export interface IdempotencyDoc {
  accountId: string
  key: string
  requestHash: string
  responseStatus: number
  responseBody: string
  createdAt: string
  expiresAt: string
  /** For the TTL index; set once the journal is applied, so an unapplied claim is never expired away. */
  expiresAtDate: Date | null
  /** The accepted emails (with their outboxes), until they are inserted. */
  journal: EmailDoc[] | null
  applied: boolean
}

export interface SuppressionDoc {
  accountId: string
  email: string
  reason: string
  createdAt: string
  /** An unsubscribe's event, written with the suppression and published after. */
  pendingEvent: EventDoc | null
  pendingEventAt: string | null
}

export const NO_OUTBOX = { outbox: 0, outboxSuppressions: 0 } as const
// Bounds the work of one repair pass; the next pass takes the rest.
export const REPAIR_BATCH = 500
// A claim reads the due emails, leases those still free, and reads back what it won; when other nodes
// won some, it tries again for the rest, at most this many times (3 round trips each).
export const CLAIM_ROUNDS = 3

/**
 * A single-document write refused as a duplicate key. Not a bulk error (its code is only its first
 * write error's) and not a write-concern error (the write may not be durable).
 */
export function isDuplicate (err: unknown): boolean {
  return err instanceof MongoServerError && !(err instanceof MongoBulkWriteError) && !(err instanceof MongoWriteConcernError) &&
    err.code === 11000
}

/**
 * True when a write failed only because what it inserts is there already: a single duplicate key, or a
 * bulk error whose EVERY write error is a duplicate key and that carries no write-concern error. A bulk
 * error of another kind (a network failure, a write concern not met) has no write errors: false.
 */
export function onlyDuplicates (err: unknown): boolean {
  if (isDuplicate(err)) return true
  if (!(err instanceof MongoBulkWriteError)) return false
  if (err.err !== undefined || err.result?.getWriteConcernError() !== undefined) return false
  const errors: Array<WriteError | undefined> = ([] as Array<WriteError | undefined>).concat(err.writeErrors)
  return errors.length > 0 && errors.every((e) => e?.code === 11000)
}

export function recipientsDoc (list: EmailRecipient[]): EmailRecipient[] {
  return Array.from(list, (r) => ({ address: String(r.address), state: String(r.state) as RecipientState }))
}

export function toEmail (d: EmailDoc): EmailRecord {
  return {
    id: d._id,
    accountId: d.accountId,
    from: d.from,
    to: [...d.to],
    cc: [...d.cc],
    bcc: [...d.bcc],
    replyTo: [...d.replyTo],
    subject: d.subject,
    html: d.html ?? null,
    text: d.text ?? null,
    headers: Object.fromEntries(d.headers.map((h) => [h.name, h.value])),
    tags: d.tags.map((t) => ({ name: t.name, value: t.value })),
    suppressed: [...d.suppressed],
    ...(d.attachments !== undefined && d.attachments.length > 0 ? { attachments: d.attachments.map((a) => ({ ...a })) } : {}),
    ...(d.template !== undefined && d.template !== null ? { template: { id: d.template.id, version: d.template.version } } : {}),
    recipients: d.recipients.map((r) => ({ address: r.address, state: r.state })),
    status: d.status as EmailStatus,
    attempts: d.attempts,
    nextAttemptAt: d.nextAttemptAt ?? null,
    leaseOwner: d.leaseOwner ?? null,
    leaseExpiresAt: d.leaseExpiresAt ?? null,
    leaseToken: d.leaseToken ?? 0,
    lastError: d.lastError ?? null,
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
    scheduledAt: d.scheduledAt ?? null,
    metadata: metadataOf(d.metadata),
    tracking: { opens: d.trackOpens !== false, clicks: d.trackClicks !== false },
    unsubscribe: d.unsubscribe !== false,
  }
}

export function toIdempotency (d: IdempotencyDoc): IdempotencyRecord {
  return {
    accountId: d.accountId,
    key: d.key,
    requestHash: d.requestHash,
    responseStatus: d.responseStatus,
    responseBody: d.responseBody,
    createdAt: d.createdAt,
    expiresAt: d.expiresAt,
  }
}

export function toSuppression (d: SuppressionDoc): SuppressionRecord {
  return { accountId: d.accountId, email: d.email, reason: d.reason as SuppressionReason, createdAt: d.createdAt }
}

export function outboxSuppression (s: SuppressionRecord): OutboxSuppression {
  return { email: String(s.email), reason: String(s.reason), createdAt: String(s.createdAt) }
}
