// Sending in SQLite: emails (the mail queue), idempotency keys and suppressions. Each method that changes
// rows is one WriteQueue.run, so an email, its events and its idempotency key commit together, and share
// that commit with whatever else concurrent requests write.
import type Database from 'better-sqlite3'
import type { EventRecord } from '../../domain/events.js'
import type { EventType } from '../../domain/events.js'
import { metadataOf } from '../../domain/metadata.js'
import type {
  AcceptResult, DailyEventCount, EmailAttempt, EmailClaim, EmailLease, EmailListQuery, EmailRecord, EmailStatus, EmailStore, EmailSummary,
  AttachmentContent, EngagementEvent, IdempotencyRecord, QuotaCharge, SuppressionCursor, SuppressionReason, SuppressionRecord, UnsubscribeResult,
} from '../emails.js'
import { SqliteAttachments, attachmentsOf } from './attachments.js'
import { FreshEmails } from './fresh-emails.js'
import type { WriteQueue } from './write-queue.js'
import { emailLeaseRelease } from './leases.js'

type Row = Record<string, unknown>

/**
 * The due, unleased emails a claim takes, earliest due first: next_attempt_at (ISO text) at or before the
 * due time, and no lease or one that ran out (lease_expires_at, ms since the epoch, at or before now).
 */
const DUE = 'SELECT id FROM emails WHERE next_attempt_at <= @dueBy AND (lease_expires_at IS NULL OR lease_expires_at <= @now) ORDER BY next_attempt_at LIMIT @limit'

/** findSuppressions reads this many addresses or fewer one by one (the duplicate check is quadratic in it). */
const FEW_ADDRESSES = 8

const str = (v: unknown): string => v as string
const strOrNull = (v: unknown): string | null => (v ?? null) as string | null
const numOrNull = (v: unknown): number | null => (v ?? null) as number | null
const json = <T>(v: unknown): T => JSON.parse(v as string) as T

/** What changes in a stored email after it is accepted: its recipients' outcomes, status, attempts, lease. */
type EmailState = Pick<EmailRecord, 'recipients' | 'status' | 'attempts' | 'nextAttemptAt' | 'leaseOwner' | 'leaseExpiresAt' | 'leaseToken' | 'lastError' | 'updatedAt'>

function stateOf (r: Row): EmailState {
  return {
    recipients: json(r.recipients),
    status: r.status as EmailStatus,
    attempts: r.attempts as number,
    nextAttemptAt: strOrNull(r.next_attempt_at),
    leaseOwner: strOrNull(r.lease_owner),
    leaseExpiresAt: numOrNull(r.lease_expires_at),
    leaseToken: r.lease_token as number,
    lastError: strOrNull(r.last_error),
    updatedAt: str(r.updated_at),
  }
}

/** `attachments` only for an email that has some: records of the others stay as they were. */
function attachmentsField (r: Row): { attachments?: EmailRecord['attachments'] } {
  const attachments = attachmentsOf(r.attachments)
  return attachments === undefined ? {} : { attachments }
}

function toEmail (r: Row): EmailRecord {
  return {
    id: str(r.id),
    accountId: str(r.account_id),
    from: str(r.from_address),
    to: json(r.to_addresses),
    cc: json(r.cc_addresses),
    bcc: json(r.bcc_addresses),
    replyTo: json(r.reply_to),
    subject: str(r.subject),
    html: strOrNull(r.html),
    text: strOrNull(r.text),
    headers: json(r.headers),
    tags: json(r.tags),
    suppressed: json(r.suppressed),
    ...attachmentsField(r),
    ...(typeof r.template_id === 'string' ? { template: { id: r.template_id, version: r.template_version as number } } : {}),
    createdAt: str(r.created_at),
    ...stateOf(r),
    scheduledAt: strOrNull(r.scheduled_at),
    metadata: metadataOf(r.metadata === undefined ? {} : json(r.metadata)),
    tracking: { opens: r.track_opens !== 0, clicks: r.track_clicks !== 0 },
    unsubscribe: r.unsubscribe !== 0,
  }
}

/** A record as toEmail reads it back: the fields added later filled in when a caller left them out. */
function filled (e: EmailRecord): EmailRecord {
  return {
    ...e,
    scheduledAt: e.scheduledAt ?? null,
    metadata: e.metadata ?? {},
    tracking: { opens: e.tracking?.opens !== false, clicks: e.tracking?.clicks !== false },
    unsubscribe: e.unsubscribe !== false,
  }
}

const byDue = (a: EmailRecord, b: EmailRecord): number => (a.nextAttemptAt! < b.nextAttemptAt! ? -1 : a.nextAttemptAt! > b.nextAttemptAt! ? 1 : 0)

/** A stored email as a claim leaves it: what it says from `email`, its state from the claim's row. */
function withState (email: EmailRecord, r: Row): EmailRecord {
  return { ...email, ...stateOf(r) }
}

function toIdempotency (r: Row): IdempotencyRecord {
  return {
    accountId: str(r.account_id),
    key: str(r.key),
    requestHash: str(r.request_hash),
    responseStatus: r.response_status as number,
    responseBody: str(r.response_body),
    createdAt: str(r.created_at),
    expiresAt: str(r.expires_at),
  }
}

function toSuppression (r: Row): SuppressionRecord {
  return { accountId: str(r.account_id), email: str(r.email), reason: r.reason as SuppressionReason, createdAt: str(r.created_at) }
}

function toSummary (r: Row): EmailSummary {
  return {
    id: str(r.id),
    from: str(r.from_address),
    to: json(r.to_addresses),
    subject: str(r.subject),
    status: r.status as EmailStatus,
    createdAt: str(r.created_at),
    updatedAt: str(r.updated_at),
    scheduledAt: strOrNull(r.scheduled_at),
  }
}

/** A scheduled email that may still be moved or canceled: not due at `now`, not leased. */
const STILL_SCHEDULED = `status = 'scheduled' AND next_attempt_at > ? AND lease_owner IS NULL`

export class SqliteEmails implements EmailStore {
  private readonly q
  private readonly db: Database.Database
  /** listEmails' statements, one per combination of filters (32 at most), prepared on first use. */
  private readonly listStatements = new Map<string, Database.Statement>()
  /** The emails this process accepted and has not claimed yet, as stored (./fresh-emails.ts). */
  private readonly fresh = new FreshEmails()
  /** The bytes of attachments (./attachments.ts). */
  private readonly attachments: SqliteAttachments

  /** `insertEventRows` writes outbox rows inside the current write (the store's own, shared with the engine). */
  constructor (
    db: Database.Database,
    private readonly writes: WriteQueue,
    private readonly insertEventRows: (events: EventRecord[]) => void,
  ) {
    this.db = db
    this.attachments = new SqliteAttachments(db, writes)
    const p = (sql: string) => db.prepare(sql)
    this.q = {
      insertEmail: p(`INSERT INTO emails (id, account_id, from_address, to_addresses, cc_addresses, bcc_addresses, reply_to, subject,
                        html, text, headers, tags, suppressed, recipients, status, attempts, next_attempt_at, lease_owner,
                        lease_expires_at, lease_token, last_error, created_at, updated_at,
                        scheduled_at, metadata, track_opens, track_clicks, unsubscribe, template_id, template_version)
                      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
                        ?, ?, ?, ?, ?, ?, ?)`),
      emailById: p('SELECT * FROM emails WHERE account_id = ? AND id = ?'),
      emailAccount: p('SELECT account_id FROM emails WHERE id = ?'),
      emailAnyAccount: p('SELECT * FROM emails WHERE id = ?'),
      claim: p(`UPDATE emails SET lease_owner = @owner, lease_expires_at = @leaseUntil, lease_token = lease_token + 1
                WHERE id IN (${DUE}) RETURNING *`),
      // The same, returning only the columns that change after acceptance: for when this process accepted
      // emails lately (`fresh`); those it did not are read whole (emailsByIds).
      claimState: p(`UPDATE emails SET lease_owner = @owner, lease_expires_at = @leaseUntil, lease_token = lease_token + 1
                     WHERE id IN (${DUE})
                     RETURNING id, recipients, status, attempts, next_attempt_at, lease_owner, lease_expires_at, lease_token, last_error, updated_at`),
      emailsByIds: p('SELECT * FROM emails WHERE id IN (SELECT value FROM json_each(?))'),
      attempt: p(`UPDATE emails SET recipients = ?, status = ?, attempts = ?, next_attempt_at = ?, last_error = ?, updated_at = ?,
                    lease_owner = NULL, lease_expires_at = NULL
                  WHERE id = ? AND lease_owner = ? AND lease_token = ?`),
      // Never shortens: the later of the lease's end and the new one (both ms; a lease cleared meanwhile
      // has no end, and 0 stands for it, as max() of a NULL is NULL).
      renew: p(`UPDATE emails SET lease_expires_at = max(coalesce(lease_expires_at, 0), ?)
                WHERE id = ? AND lease_owner = ? AND lease_token = ?`),
      release: emailLeaseRelease(db, 'owner'),
      releaseOne: p('UPDATE emails SET lease_owner = NULL, lease_expires_at = NULL WHERE id = ? AND lease_owner = ? AND lease_token = ?'),
      anyDue: p('SELECT 1 FROM emails WHERE next_attempt_at <= @dueBy AND (lease_expires_at IS NULL OR lease_expires_at <= @now) LIMIT 1'),
      // The first entry of emails_due after now: one seek, whatever is scheduled behind it.
      nextDue: p('SELECT next_attempt_at FROM emails WHERE next_attempt_at > ? ORDER BY next_attempt_at LIMIT 1').pluck(),
      reschedule: p(`UPDATE emails SET scheduled_at = ?, next_attempt_at = ?, updated_at = ?
                     WHERE account_id = ? AND id = ? AND ${STILL_SCHEDULED} RETURNING *`),
      cancel: p(`UPDATE emails SET status = 'canceled', next_attempt_at = NULL, updated_at = ?
                 WHERE account_id = ? AND id = ? AND ${STILL_SCHEDULED} RETURNING *`),
      refund: p('UPDATE send_usage SET recipients = max(0, recipients - ?) WHERE account_id = ? AND period = ?'),
      anyLeased: p('SELECT 1 FROM emails WHERE lease_owner = ? LIMIT 1'),
      anyExpiredKey: p('SELECT 1 FROM idempotency_keys WHERE expires_at <= ? LIMIT 1'),

      keyByAccount: p('SELECT * FROM idempotency_keys WHERE account_id = ? AND key = ?'),
      usage: p('SELECT recipients FROM send_usage WHERE account_id = ? AND period = ?').pluck(),
      charge: p(`INSERT INTO send_usage (account_id, period, recipients) VALUES (?, ?, ?)
                 ON CONFLICT (account_id, period) DO UPDATE SET recipients = recipients + excluded.recipients`),
      deleteKey: p('DELETE FROM idempotency_keys WHERE account_id = ? AND key = ?'),
      insertKey: p(`INSERT INTO idempotency_keys (account_id, key, request_hash, response_status, response_body, created_at, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)`),
      pruneKeys: p('DELETE FROM idempotency_keys WHERE expires_at <= ?'),

      suppression: p('SELECT * FROM suppressions WHERE account_id = ? AND email = ?'),
      suppressionsAmong: p('SELECT * FROM suppressions WHERE account_id = ? AND email IN (SELECT value FROM json_each(?))'),
      insertSuppression: p(`INSERT INTO suppressions (account_id, email, reason, created_at) VALUES (?, ?, ?, ?)
                            ON CONFLICT (account_id, email) DO NOTHING`),
      deleteSuppression: p('DELETE FROM suppressions WHERE account_id = ? AND email = ?'),
      firstPage: p('SELECT * FROM suppressions WHERE account_id = ? ORDER BY created_at DESC, email DESC LIMIT ?'),
      nextPage: p(`SELECT * FROM suppressions WHERE account_id = ? AND (created_at < ? OR (created_at = ? AND email < ?))
                   ORDER BY created_at DESC, email DESC LIMIT ?`),
      // routed = 0 leaves test events out, and lets the partial index events_account_time serve the count.
      countEvents: p(`SELECT substr(occurred_at, 1, 10) AS day, type, count(*) AS n FROM events
                      WHERE account_id = ? AND occurred_at >= ? AND occurred_at < ? AND routed = 0
                      GROUP BY day, type`),
    }
  }

  private insertEmailRow (e: EmailRecord): void {
    this.q.insertEmail.run(e.id, e.accountId, e.from, JSON.stringify(e.to), JSON.stringify(e.cc), JSON.stringify(e.bcc),
      JSON.stringify(e.replyTo), e.subject, e.html, e.text, JSON.stringify(e.headers), JSON.stringify(e.tags),
      JSON.stringify(e.suppressed), JSON.stringify(e.recipients), e.status, e.attempts, e.nextAttemptAt, e.leaseOwner,
      e.leaseExpiresAt, e.leaseToken, e.lastError, e.createdAt, e.updatedAt,
      e.scheduledAt ?? null, JSON.stringify(e.metadata ?? {}), e.tracking?.opens === false ? 0 : 1, e.tracking?.clicks === false ? 0 : 1,
      e.unsubscribe === false ? 0 : 1, e.template?.id ?? null, e.template?.version ?? null)
  }

  acceptEmails (input: { emails: EmailRecord[]; events: EventRecord[]; idempotency?: IdempotencyRecord; quota?: QuotaCharge; attachments?: AttachmentContent[] }): Promise<AcceptResult> {
    return this.writes.run((): AcceptResult => {
      const k = input.idempotency
      if (k !== undefined) {
        const row = this.q.keyByAccount.get(k.accountId, k.key) as Row | undefined
        if (row !== undefined && str(row.expires_at) > k.createdAt) return { outcome: 'duplicate', existing: toIdempotency(row) }
      }
      // The counts are checked and charged in the write that accepts the send: concurrent sends cannot
      // pass a limit together.
      const charge = input.quota
      if (charge !== undefined) {
        for (const p of charge.periods) {
          const used = (this.q.usage.get(charge.accountId, p.period) as number | undefined) ?? 0
          if (used + charge.recipients > p.limit) return { outcome: 'quota_exceeded', period: p.period }
        }
        for (const p of charge.periods) this.q.charge.run(charge.accountId, p.period, charge.recipients)
      }
      if (k !== undefined) {
        // Inside the write, so the check and the insert are one step: of N concurrent requests with one
        // key, the first one stores, and every later one finds its record here.
        const row = this.q.keyByAccount.get(k.accountId, k.key) as Row | undefined
        if (row !== undefined) {
          if (str(row.expires_at) > k.createdAt) return { outcome: 'duplicate', existing: toIdempotency(row) }
          this.q.deleteKey.run(k.accountId, k.key)
        }
        this.q.insertKey.run(k.accountId, k.key, k.requestHash, k.responseStatus, k.responseBody, k.createdAt, k.expiresAt)
      }
      for (const e of input.emails) this.insertEmailRow(e)
      this.attachments.store(input.emails, input.attachments)
      this.insertEventRows(input.events)
      // Inside the write: a claim in a later write finds them. Were this write rolled back, its entries
      // would only wait unclaimed until they age out. Emails leased in this very write went to this
      // node's mailer whole: no claim of them is coming. Scheduled ones are left out: their claim is
      // later than the cache keeps anything.
      this.fresh.add(input.emails.filter((e) => e.leaseOwner === null && (e.scheduledAt ?? null) === null).map(filled))
      return { outcome: 'accepted' }
    })
  }

  async readSendUsage (accountId: string, periods: string[]): Promise<Record<string, number>> {
    const usage: Record<string, number> = {}
    for (const period of periods) usage[period] = (this.q.usage.get(accountId, period) as number | undefined) ?? 0
    return usage
  }

  async findIdempotencyKey (accountId: string, key: string, now: string): Promise<IdempotencyRecord | null> {
    const row = this.q.keyByAccount.get(accountId, key) as Row | undefined
    return row !== undefined && str(row.expires_at) > now ? toIdempotency(row) : null
  }

  async pruneIdempotencyKeys (now: string): Promise<number> {
    if (this.q.anyExpiredKey.get(now) === undefined) return 0
    return await this.writes.run(() => this.q.pruneKeys.run(now).changes)
  }

  async findEmail (accountId: string, id: string): Promise<EmailRecord | null> {
    const row = this.q.emailById.get(accountId, id) as Row | undefined
    return row ? toEmail(row) : null
  }

  async listEmails (accountId: string, query: EmailListQuery): Promise<EmailSummary[]> {
    // The SQL is chosen from fixed fragments by which filters are present; every value is bound.
    const where = ['account_id = ?']
    const args: unknown[] = [accountId]
    if (query.status !== undefined) { where.push('status = ?'); args.push(query.status) }
    if (query.since !== undefined) { where.push('created_at >= ?'); args.push(query.since) }
    if (query.until !== undefined) { where.push('created_at < ?'); args.push(query.until) }
    if (query.after !== undefined) {
      where.push('(created_at < ? OR (created_at = ? AND id < ?))')
      args.push(query.after.createdAt, query.after.createdAt, query.after.id)
    }
    // Recipients are a JSON array in the row: the filter reads the account's emails newest first (by the
    // index) and stops once a page is full.
    if (query.to !== undefined) {
      where.push("EXISTS (SELECT 1 FROM json_each(recipients) WHERE json_extract(value, '$.address') = ?)")
      args.push(query.to)
    }
    // Tags are a JSON array in the row, read like the recipients above.
    if (query.tag !== undefined) {
      if (query.tag.value === undefined) {
        where.push("EXISTS (SELECT 1 FROM json_each(tags) WHERE json_extract(value, '$.name') = ?)")
        args.push(query.tag.name)
      } else {
        where.push("EXISTS (SELECT 1 FROM json_each(tags) WHERE json_extract(value, '$.name') = ? AND json_extract(value, '$.value') = ?)")
        args.push(query.tag.name, query.tag.value)
      }
    }
    // An email's events, by the events_email index: a handful per recipient.
    if (query.event !== undefined) {
      where.push('EXISTS (SELECT 1 FROM events WHERE events.email_id = emails.id AND events.type = ?)')
      args.push(query.event)
    }
    const sql = `SELECT id, from_address, to_addresses, subject, status, created_at, updated_at, scheduled_at FROM emails
                 WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT ?`
    let statement = this.listStatements.get(sql)
    if (statement === undefined) {
      statement = this.db.prepare(sql)
      this.listStatements.set(sql, statement)
    }
    return (statement.all(...args, query.limit) as Row[]).map(toSummary)
  }

  async countEvents (accountId: string, window: { since: string; until: string }): Promise<DailyEventCount[]> {
    return (this.q.countEvents.all(accountId, window.since, window.until) as Row[])
      .map((r) => ({ day: str(r.day), type: r.type as EventType, count: r.n as number }))
  }

  /** The email whatever its account (returning mail names the email, not the account). */
  async findEmailById (id: string): Promise<EmailRecord | null> {
    const row = this.q.emailAnyAccount.get(id) as Row | undefined
    return row ? toEmail(row) : null
  }

  async claimDueEmails (req: EmailClaim): Promise<EmailRecord[]> {
    // The mailer polls: an idle queue is answered by a read, without taking the write lock.
    if (req.limit <= 0 || this.q.anyDue.get({ dueBy: req.dueBy, now: req.now }) === undefined) return []
    // A lease lost to a power cut only makes the email due again: no fsync needed for it alone.
    return await this.writes.run(() => {
      const args = { owner: req.owner, leaseUntil: req.leaseUntil, dueBy: req.dueBy, now: req.now, limit: req.limit }
      // Nothing accepted here lately (a process that only sends, beside one that only accepts): whole rows.
      if (this.fresh.held() === 0) return (this.q.claim.all(args) as Row[]).map(toEmail).sort(byDue)
      const claimed: EmailRecord[] = []
      let unknown: string[] | undefined
      for (const r of this.q.claimState.all(args) as Row[]) {
        const fresh = this.fresh.take(str(r.id))
        if (fresh !== undefined) claimed.push(withState(fresh, r))
        else (unknown ??= []).push(str(r.id))
      }
      // In the same write as the claim: these rows are as the claim left them.
      if (unknown !== undefined) for (const r of this.q.emailsByIds.all(JSON.stringify(unknown)) as Row[]) claimed.push(toEmail(r))
      return claimed.sort(byDue)
    }, { durable: false })
  }

  async nextDueAt (now: string): Promise<string | null> {
    return (this.q.nextDue.get(now) as string | undefined) ?? null
  }

  rescheduleEmail (input: { accountId: string; id: string; scheduledAt: string; now: string }): Promise<EmailRecord | 'not_scheduled' | null> {
    return this.writes.run(() => {
      const row = this.q.reschedule.get(input.scheduledAt, input.scheduledAt, input.now, input.accountId, input.id, input.now) as Row | undefined
      if (row !== undefined) return toEmail(row)
      return this.q.emailById.get(input.accountId, input.id) === undefined ? null : 'not_scheduled'
    })
  }

  cancelEmail (input: { accountId: string; id: string; now: string; refund?: { recipients: number; periods: string[] } }): Promise<EmailRecord | 'not_scheduled' | null> {
    return this.writes.run(() => {
      const row = this.q.cancel.get(input.now, input.accountId, input.id, input.now) as Row | undefined
      if (row === undefined) return this.q.emailById.get(input.accountId, input.id) === undefined ? null : 'not_scheduled'
      for (const period of input.refund?.periods ?? []) this.q.refund.run(input.refund!.recipients, input.accountId, period)
      return toEmail(row)
    })
  }

  recordEmailAttempt (a: EmailAttempt): Promise<boolean> {
    // Not fsynced: if a power cut takes this write, the email's lease runs out and it is sent again, with
    // the same events raised again: at least once, never lost. (The send itself was durable at the 202.)
    return this.writes.run(() => {
      const changed = this.q.attempt.run(JSON.stringify(a.recipients), a.status, a.attempts, a.nextAttemptAt, a.lastError, a.at,
        a.emailId, a.owner, a.leaseToken).changes
      if (changed === 0) return false
      this.insertEventRows(a.events)
      for (const s of a.suppressions) this.q.insertSuppression.run(s.accountId, s.email, s.reason, s.createdAt)
      return true
    }, { durable: false })
  }

  async renewEmailLeases (owner: string, leases: EmailLease[], leaseUntil: number): Promise<number> {
    if (leases.length === 0) return 0
    // Not fsynced: a renewal lost to a power cut only lets the lease run out sooner.
    return await this.writes.run(() => {
      let held = 0
      for (const l of leases) held += this.q.renew.run(leaseUntil, l.id, owner, l.leaseToken).changes
      return held
    }, { durable: false })
  }

  async releaseEmailLeases (owner: string, leases?: EmailLease[]): Promise<number> {
    if (leases !== undefined) {
      if (leases.length === 0) return 0
      return await this.writes.run(() => {
        let released = 0
        for (const l of leases) released += this.q.releaseOne.run(l.id, owner, l.leaseToken).changes
        return released
      }, { durable: false })
    }
    if (this.q.anyLeased.get(owner) === undefined) return 0
    return await this.writes.run(() => this.q.release(owner), { durable: false })
  }

  async findSuppressions (accountId: string, emails: string[]): Promise<SuppressionRecord[]> {
    if (emails.length === 0) return []
    // A few addresses (a send names one or a handful): one primary-key read each, which costs about half of
    // the json_each query below even for one address. More: the list travels as one bound JSON parameter,
    // one prepared statement for any number of addresses.
    if (emails.length <= FEW_ADDRESSES) {
      const found: SuppressionRecord[] = []
      for (let i = 0; i < emails.length; i++) {
        if (emails.indexOf(emails[i]!) !== i) continue
        const row = this.q.suppression.get(accountId, emails[i]) as Row | undefined
        if (row !== undefined) found.push(toSuppression(row))
      }
      return found
    }
    return (this.q.suppressionsAmong.all(accountId, JSON.stringify([...new Set(emails)])) as Row[]).map(toSuppression)
  }

  async listSuppressions (accountId: string, opts: { limit: number; after?: SuppressionCursor }): Promise<SuppressionRecord[]> {
    const rows = opts.after === undefined
      ? this.q.firstPage.all(accountId, opts.limit)
      : this.q.nextPage.all(accountId, opts.after.createdAt, opts.after.createdAt, opts.after.email, opts.limit)
    return (rows as Row[]).map(toSuppression)
  }

  addSuppression (s: SuppressionRecord): Promise<{ created: boolean; record: SuppressionRecord }> {
    return this.writes.run(() => {
      const created = this.q.insertSuppression.run(s.accountId, s.email, s.reason, s.createdAt).changes === 1
      return { created, record: toSuppression(this.q.suppression.get(s.accountId, s.email) as Row) }
    })
  }

  deleteSuppression (accountId: string, email: string): Promise<boolean> {
    return this.writes.run(() => this.q.deleteSuppression.run(accountId, email).changes === 1)
  }

  recordEngagement (event: EngagementEvent): Promise<EventRecord | null> {
    return this.writes.run(() => {
      const owner = this.q.emailAccount.get(event.emailId) as Row | undefined
      if (owner === undefined) return null
      const record: EventRecord = { ...event, accountId: str(owner.account_id) }
      this.insertEventRows([record])
      return record
    })
  }

  unsubscribeRecipient (event: EngagementEvent, at: string): Promise<UnsubscribeResult> {
    return this.writes.run((): UnsubscribeResult => {
      const owner = this.q.emailAccount.get(event.emailId) as Row | undefined
      if (owner === undefined) return 'no_email'
      const accountId = str(owner.account_id)
      if (this.q.insertSuppression.run(accountId, event.recipient, 'unsubscribed', at).changes === 0) return 'already_suppressed'
      this.insertEventRows([{ ...event, accountId }])
      return 'unsubscribed'
    })
  }

  async repairInterruptedWrites (_before: string): Promise<number> {
    return 0 // every write above is one transaction: nothing is ever half done
  }

  readEmailAttachments (emailId: string): Promise<Buffer[] | null> {
    return this.attachments.read(emailId)
  }

  pruneAttachmentContents (before: string, limit: number): Promise<number> {
    return this.attachments.prune(before, limit)
  }
}
