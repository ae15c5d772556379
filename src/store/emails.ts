// The sending part of the Store contract: accepted emails (which are also the mail queue), idempotency
// keys, the suppression list, and the events that tracking links raise.
//
// Every event written here is an outbox row for the delivery engine (`routed` left at its default), and
// it is written in the same atomic write as the change it records.
//
// Mail leases fence. Each claim of an email gives it a fresh `leaseToken` (the previous one plus 1), and a
// write made under a lease (an attempt's outcome, a renewal, a release of listed leases) applies only
// while the email still carries that owner AND that token: once the lease was released, or expired and
// claimed by anyone (the same node included), a write from the old claim changes nothing. An expired
// lease nobody has claimed again is still held by its claim. Renewal names the leases it extends, so a
// node extends only what it still works on; what it drops simply runs out.
import type { EmailTag } from '../domain/send-input.js'
import type { AttachmentMeta } from '../domain/attachments.js'
import type { TemplateUse } from '../domain/templates.js'
import type { EventRecord, EventType } from '../domain/events.js'
import type { EmailMetadata, TagFilter } from '../domain/metadata.js'
import type { EmailRecipient, EmailStatus, RecipientState, SuppressionReason } from '../domain/mail-attempt.js'

// An email's and its recipients' states are the sending rule's (src/domain/mail-attempt.ts).
export type { EmailRecipient, EmailStatus, RecipientState, SuppressionReason }
export type { EmailTag }

export interface EmailRecord {
  id: string
  accountId: string
  /** Header forms (`addr` or `Name <addr>`), bare addresses lower-case. */
  from: string
  to: string[]
  cc: string[]
  bcc: string[]
  replyTo: string[]
  subject: string
  html: string | null
  text: string | null
  headers: Record<string, string>
  tags: EmailTag[]
  /**
   * What the email keeps of its attachments (src/domain/attachments.ts), in the order given; their bytes
   * are stored apart (acceptEmails' `attachments`, readEmailAttachments). Absent or empty: none.
   */
  attachments?: AttachmentMeta[]
  /** The template and the version it was rendered from (src/app/templates.ts). Absent: none. */
  template?: TemplateUse
  /** Bare addresses dropped at acceptance because the account suppresses them. */
  suppressed: string[]
  /** Every envelope recipient, deduplicated, in to/cc/bcc order, and where it stands. */
  recipients: EmailRecipient[]
  status: EmailStatus
  /** Attempts made so far. */
  attempts: number
  /** When the next attempt is due; null once every recipient has a final outcome. */
  nextAttemptAt: string | null
  leaseOwner: string | null
  /** When the lease runs out, in ms since the epoch (src/domain/lease-owner.ts); null when not leased. */
  leaseExpiresAt: number | null
  /** The claim that leased it last (0: never claimed); every claim adds 1. */
  leaseToken: number
  /** What the last failed attempt was told (already free of credentials). */
  lastError: string | null
  createdAt: string
  updatedAt: string
  /**
   * When it was scheduled for (its first nextAttemptAt); null or absent: sent at once. The fields from
   * here on are absent on records made before they existed, and stores answer them filled in.
   */
  scheduledAt?: string | null
  /** The sender's own data, carried in every webhook payload of the email with its tags. Absent: none. */
  metadata?: EmailMetadata
  /** Whether the html gets an open pixel and tracked links, as decided at acceptance. Absent: both on. */
  tracking?: { opens: boolean; clicks: boolean }
  /** Whether each copy carries the List-Unsubscribe headers. Absent: on. */
  unsubscribe?: boolean
}

export interface IdempotencyRecord {
  accountId: string
  key: string
  /** Hash of the route and the request body: the same key with another body is a conflict. */
  requestHash: string
  /** The first answer, replayed byte for byte. */
  responseStatus: number
  responseBody: string
  createdAt: string
  expiresAt: string
}

export interface SuppressionRecord {
  accountId: string
  /** Bare, lower-case. */
  email: string
  reason: SuppressionReason
  createdAt: string
}

/** Where a suppression page starts: after this entry in (createdAt, email) descending order. */
export interface SuppressionCursor {
  createdAt: string
  email: string
}

/** An email as a list shows it: no bodies, no headers. */
export interface EmailSummary {
  id: string
  from: string
  to: string[]
  subject: string
  status: EmailStatus
  createdAt: string
  updatedAt: string
  /** When a scheduled email is (or was) due; null for one sent at once. Absent from adapters that do not keep it. */
  scheduledAt?: string | null
}

/** Where an email page starts: after this email in (createdAt, id) descending order. */
export interface EmailCursor {
  createdAt: string
  id: string
}

export interface EmailListQuery {
  status?: EmailStatus
  /** Bare, lower-case: emails that have this recipient (to, cc or bcc). */
  to?: string
  /** Emails with at least one event of this type (email.complained finds a complaint on a delivered email). */
  event?: EventType
  /** Emails with a tag of this name (and this value, when given). */
  tag?: TagFilter
  /** createdAt >= since (ISO). */
  since?: string
  /** createdAt < until (ISO). */
  until?: string
  limit: number
  after?: EmailCursor
}

/** How many events of one type happened on one UTC day (`YYYY-MM-DD`). */
export interface DailyEventCount {
  day: string
  type: EventType
  count: number
}

export type AcceptResult =
  | { outcome: 'accepted' }
  /** The key was taken (by an earlier request, or a concurrent one that won): nothing was written. */
  | { outcome: 'duplicate'; existing: IdempotencyRecord }
  /** The charge would take the count of `period` past its limit: nothing was written. */
  | { outcome: 'quota_exceeded'; period: string }

/**
 * Recipients charged to an account's sending counters with a send (src/domain/quotas.ts decides the
 * periods and limits): each period's count plus `recipients` must stay within its limit, else nothing is
 * written; the counts and the send are one step.
 */
export interface QuotaCharge {
  accountId: string
  recipients: number
  periods: Array<{ period: string; limit: number }>
}

/** The result of one attempt at sending an email, as one write. */
export interface EmailAttempt {
  emailId: string
  /** The lease holder; the write is refused when someone else holds the lease now. */
  owner: string
  /** The token of the claim this attempt was made under; the write is refused once that claim is over. */
  leaseToken: number
  recipients: EmailRecipient[]
  status: EmailStatus
  attempts: number
  nextAttemptAt: string | null
  lastError: string | null
  at: string
  events: EventRecord[]
  /** Added unless the address is already suppressed (the first reason stays). */
  suppressions: SuppressionRecord[]
}

/** The bytes of one attachment of an email, stored once whatever its recipients. `part`: its index in the email's attachments. */
export interface AttachmentContent {
  emailId: string
  part: number
  content: Buffer
}

/** One claim of one email: what renewing or releasing a lease names. */
export interface EmailLease {
  id: string
  leaseToken: number
}

/** A claim of due emails (EmailStore.claimDueEmails): the due time as the schedule's ISO text, the lease times in ms. */
export interface EmailClaim {
  owner: string
  /** Emails whose nextAttemptAt is at or before this ISO time are due. */
  dueBy: string
  /** The same instant in ms since the epoch: a lease that ran out by then (leaseExpiresAt <= now) is free. */
  now: number
  /** When the leases this claim takes run out, in ms since the epoch. */
  leaseUntil: number
  limit: number
}

/** An event raised by a tracking link: the store adds the account, which is the email's own. */
export type EngagementEvent = Omit<EventRecord, 'accountId'>

export type UnsubscribeResult = 'unsubscribed' | 'already_suppressed' | 'no_email'

export interface EmailStore {
  /**
   * Stores emails and their events (email.sent, one per recipient) in one atomic write. With
   * `idempotency`, the key is stored in that same write, unless the account already holds that key
   * unexpired: then nothing is written and the existing record comes back (concurrent requests with one
   * key therefore store one set of emails). An expired key is replaced. `attachments`: the bytes of the
   * emails' attachments, kept with them (nothing of them when the emails are not written).
   */
  acceptEmails(input: { emails: EmailRecord[]; events: EventRecord[]; idempotency?: IdempotencyRecord; quota?: QuotaCharge; attachments?: AttachmentContent[] }): Promise<AcceptResult>
  /** The account's sending counts of these periods (0 for a period without one). */
  readSendUsage(accountId: string, periods: string[]): Promise<Record<string, number>>
  /** The account's key, or null when absent or expired at `now`. */
  findIdempotencyKey(accountId: string, key: string, now: string): Promise<IdempotencyRecord | null>
  /** Deletes keys that expired at or before `now`; returns how many. */
  pruneIdempotencyKeys(now: string): Promise<number>

  /** Null when the account has no such email (another account's email included). */
  findEmail(accountId: string, id: string): Promise<EmailRecord | null>
  /**
   * The account's emails that match every given filter, newest first (ties by id, descending), after
   * `after` when given, at most `limit`. Served by an index on (account, createdAt, id), and with a
   * status by one on (account, status, createdAt, id).
   */
  listEmails(accountId: string, query: EmailListQuery): Promise<EmailSummary[]>
  /**
   * The account's events with `since <= occurredAt < until`, counted per UTC day and type, in no
   * particular order. Test events (POST /api/webhooks/:id/test) are not counted: no email raised them.
   * Counted by the store (an index on account and time), never by reading the events.
   */
  countEvents(accountId: string, window: { since: string; until: string }): Promise<DailyEventCount[]>

  /**
   * Leases up to `limit` emails that are due (nextAttemptAt, an ISO time, at or before `dueBy`) and free
   * (no lease, or one that ran out: leaseExpiresAt <= `now`, ms) to `owner` until `leaseUntil` (ms), each
   * with a fresh leaseToken, earliest due first. `dueBy` and `now` are the same instant, once as the
   * schedule's ISO text and once as the lease's number. No email is handed to two claimers at once; a
   * claim racing another may get fewer than `limit` although more are due (the next claim takes them).
   */
  claimDueEmails(req: EmailClaim): Promise<EmailRecord[]>
  /**
   * The earliest nextAttemptAt after `now` of any email (a scheduled one, a retry), by the due index; null
   * when none. The mailer sleeps until then instead of waiting for its next poll. Optional: without it,
   * what another process scheduled is found by the poll (both adapters have it).
   */
  nextDueAt?(now: string): Promise<string | null>
  /**
   * Moves a scheduled email to `scheduledAt` (its nextAttemptAt with it). Only while it is still
   * scheduled, not due at `now` and not leased, checked in the write itself: 'not_scheduled' (nothing
   * written) once it went out, was canceled, or its time came. Null when the account has no such email.
   */
  rescheduleEmail(input: { accountId: string; id: string; scheduledAt: string; now: string }): Promise<EmailRecord | 'not_scheduled' | null>
  /**
   * Cancels a scheduled email under the same condition as rescheduleEmail: status canceled, no
   * nextAttemptAt (no claim ever takes it), no event. With `refund`, the recipients its acceptance was
   * charged are taken off those periods' counts (never below 0), in the same write where the store can.
   */
  cancelEmail(input: { accountId: string; id: string; now: string; refund?: { recipients: number; periods: string[] } }): Promise<EmailRecord | 'not_scheduled' | null>
  /**
   * Extends to `leaseUntil` (ms; never shortens) the listed leases that `owner` still holds under their token;
   * every other lease, this owner's included, is left alone. Returns how many are held (and extended).
   */
  renewEmailLeases(owner: string, leases: EmailLease[], leaseUntil: number): Promise<number>
  /**
   * Applies an attempt (the email's new state, its events, its suppressions) in one atomic write and
   * clears the lease. False, and nothing written, when the email is not leased to `attempt.owner` under
   * `attempt.leaseToken` (a stale outcome: the lease was released, or taken over after it expired).
   */
  recordEmailAttempt(attempt: EmailAttempt): Promise<boolean>
  /**
   * Clears the leases `owner` holds, or only the listed ones (each under its token) when `leases` is
   * given; those emails are due again at once. Returns how many were cleared.
   */
  releaseEmailLeases(owner: string, leases?: EmailLease[]): Promise<number>

  /** The account's suppressions among `emails` (bare, lower-case); absent ones are simply not there. */
  findSuppressions(accountId: string, emails: string[]): Promise<SuppressionRecord[]>
  /** The account's suppressions, newest first (ties by email, descending), after `after` when given. */
  listSuppressions(accountId: string, opts: { limit: number; after?: SuppressionCursor }): Promise<SuppressionRecord[]>
  /** Adds the suppression unless the address is already suppressed; returns what is stored now. */
  addSuppression(s: SuppressionRecord): Promise<{ created: boolean; record: SuppressionRecord }>
  /** False when the account does not suppress this address. */
  deleteSuppression(accountId: string, email: string): Promise<boolean>

  /** Appends an open or click event to its email; null (nothing written) when there is no such email. */
  recordEngagement(event: EngagementEvent): Promise<EventRecord | null>
  /**
   * Suppresses `event.recipient` for the email's account (reason unsubscribed) and appends the event, in
   * one atomic write, unless the address is already suppressed: then nothing is written. So one
   * unsubscribe raises one event, however often the link is used.
   */
  unsubscribeRecipient(event: EngagementEvent, at: string): Promise<UnsubscribeResult>

  /**
   * Adapters without multi-document transactions write some of the above in steps, with a record of what
   * is left to do; this finishes what a crash interrupted before `before`. Returns how many were finished
   * (always 0 where every write is one transaction).
   */
  repairInterruptedWrites(before: string): Promise<number>

  /**
   * The bytes of the email's attachments, in order (as many as its `attachments`); null when they are no
   * longer stored (pruned) or never were.
   */
  readEmailAttachments(emailId: string): Promise<Buffer[] | null>
  /**
   * Drops the stored bytes of up to `limit` emails whose every recipient has a final outcome (no
   * nextAttemptAt) since before `before` (their updatedAt: the last attempt), and bytes left by a write
   * that stored no email. The emails keep their attachments' facts. Returns how many emails lost bytes.
   */
  pruneAttachmentContents(before: string, limit: number): Promise<number>
}
