// The received-mail part of the Store contract (src/store/types.ts): messages taken by the inbound
// listener for domains with receiving on (src/app/received.ts decides what is kept and how big it may
// be). A message is one row of metadata and parsed fields, plus its raw bytes and each attachment's
// bytes kept beside it; all of them are written in one atomic step together with the email.received
// event (the outbox row the delivery engine turns into webhook deliveries). One SMTP transaction is one
// message per account, whatever number of that account's addresses it named. Each account's stored
// bytes are kept as a running total, changed in the same atomic step as every insert and delete.
import type { EventRecord } from '../domain/events.js'
import type { AuthResult } from '../domain/auth-results.js'

export type AuthVerdict = AuthResult

export interface ReceivedAttachment {
  /** `att_<n>`, unique within its message. */
  id: string
  filename: string | null
  contentType: string
  size: number
}

export interface ReceivedHeader { name: string; value: string }

export interface ReceivedRecord {
  /** `rcv_…` */
  id: string
  accountId: string
  /** The domain of the first recipient. */
  domainId: string
  /**
   * The envelope recipients (RCPT TO) of this account that the transaction named, lower case, in the
   * order given, each once; at least one.
   */
  recipients: string[]
  /** The envelope sender (MAIL FROM), '' for the null sender. */
  mailFrom: string
  from: string
  to: string[]
  cc: string[]
  subject: string
  text: string | null
  textTruncated: boolean
  html: string | null
  htmlTruncated: boolean
  headers: ReceivedHeader[]
  messageId: string | null
  /** The id of this account's email that In-Reply-To / References names, else null. */
  inReplyTo: string | null
  attachments: ReceivedAttachment[]
  authentication: { spf: AuthVerdict; dkim: AuthVerdict; dmarc: AuthVerdict; arc: AuthVerdict | null }
  /** What the plan's storage counts for it: the raw message's bytes (its attachments are inside them). */
  size: number
  createdAt: string
}

/** A page of an account's received messages, newest first; `before` an id: those older than it. */
export interface ReceivedQuery {
  limit: number
  before?: string
  /** An envelope recipient, lower case, matched exactly against each of a message's recipients. */
  to?: string
}

export interface ReceivedStore {
  /**
   * Stores the message, its raw bytes, its attachments' bytes and its event, and adds its `size` to the
   * account's running total, in one atomic step; unless that total plus `size` would exceed
   * `limitBytes` ('limit_reached', nothing written).
   */
  insertReceived(input: { message: ReceivedRecord; raw: Buffer; contents: Array<{ id: string; content: Buffer }>; event: EventRecord; limitBytes: number }): Promise<'recorded' | 'limit_reached'>
  /** The account's running total: the sum of its kept messages' `size`, read from one stored counter. */
  receivedBytes(accountId: string): Promise<number>
  /**
   * Deletes one of the account's messages with its bytes and takes its `size` off the running total, in
   * one atomic step; returns what was deleted, or null when the account has no such message (nothing changes).
   */
  deleteReceived(accountId: string, id: string): Promise<ReceivedRecord | null>
  /** Newest first, `limit` at most. */
  listReceived(accountId: string, q: ReceivedQuery): Promise<ReceivedRecord[]>
  findReceived(accountId: string, id: string): Promise<ReceivedRecord | null>
  /** The message as received; null when the account has no such message. */
  readReceivedRaw(accountId: string, id: string): Promise<Buffer | null>
  /** One attachment's bytes; null when the account has no such message or it no such attachment. */
  readReceivedAttachment(accountId: string, id: string, attachmentId: string): Promise<Buffer | null>
  /** Deletes up to `limit` messages (with their bytes, off their accounts' totals) received before `before`; returns how many. */
  pruneReceived(before: string, limit: number): Promise<number>
}
