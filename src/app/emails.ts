// Sending: what a send request must hold, how it becomes a stored email with its email.sent events, the
// idempotency rules, scheduling and cancelling, and the events tracking links raise. What one attempt at
// delivering it changes is src/domain/mail-attempt.ts. No HTTP and no driver in here.
import { createHash } from 'node:crypto'
import { EmailNotScheduled, IdempotencyConflict, InvalidSchedule, NotFound, QuotaExceeded, RecipientSuppressed, ValidationError, type ErrorDetail } from '../errors.js'
import type { Quotas } from '../../config/index.js'
import { quotaPeriods, secondsUntil } from '../domain/quotas.js'
import type { AttachmentContent, EmailRecord, EngagementEvent, IdempotencyRecord, SuppressionRecord } from '../store/emails.js'
import type { ApiKeyRecord, Store } from '../store/types.js'
import { bareOf, formatAddress, parseAddress } from '../domain/addresses.js'
import { iso, type Clock } from '../domain/clock.js'
import { eventPayload, type EventData, type EventRecord, type EventType } from '../domain/events.js'
import { labelsOf, makeEvent } from '../domain/email-events.js'
import { newId } from '../domain/ids.js'
import { eventRoute } from '../domain/webhook-filter.js'
import type { AttachmentLimits } from '../domain/attachments.js'
import { DEFAULT_ATTACHMENT_LIMITS, attachmentRecords, checkSendAttachments } from './attachments.js'
import type { TemplateUse } from '../domain/templates.js'
import type { TemplateService } from './templates.js'
import { DEFAULT_SCHEDULE_HORIZON_DAYS, checkSchedule } from '../domain/schedule.js'
import { MAX_HEADERS, MAX_RECIPIENTS, MAX_REPLY_TO, normaliseSend, sendProblems, type NormalisedSend, type RecipientField, type SendInput } from '../domain/send-input.js'
import { emailView, type EmailView } from './email-view.js'
import type { LocalIntake } from '../mail/hand-off.js'
import { verifyTrackingToken, type TrackingClaims, type TrackingKind } from '../mail/tracking.js'

export { MAX_HEADERS, MAX_RECIPIENTS, MAX_REPLY_TO, normaliseSend, sendProblems, type EmailView, type LocalIntake, type SendInput, type TrackingKind }

export const IDEMPOTENCY_TTL_MS = 24 * 3_600_000
export const MAX_BATCH = 100
/** Key order does not make two bodies different; everything else does. */
export function canonicalJson (value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const obj = value as Record<string, unknown>
    return `{${Object.keys(obj).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`
  }
  return JSON.stringify(value) ?? 'null'
}

/** What an Idempotency-Key is bound to: the route and the body. */
export function requestHash (route: string, body: unknown): string {
  return createHash('sha256').update(route).update('\n').update(canonicalJson(body)).digest('hex')
}

function engagementEvent (type: EventType, email: EmailRecord, recipient: string, at: number, data?: EventData): EngagementEvent {
  const base = { id: newId('evt', at), emailId: email.id, type, recipient, occurredAt: iso(at) }
  const labels = labelsOf(email)
  return { ...base, payload: eventPayload(base, data, labels), route: labels.route ?? null }
}

export interface SendAnswer {
  status: number
  /** The JSON body, exactly as stored for replays. */
  body: string
  replayed: boolean
}

export interface SendOptions {
  batch: boolean
  /** The request's Idempotency-Key, and the hash of what it is bound to (requestHash: the route and body). */
  idempotency?: { key: string; requestHash: string }
}

/** The lease token of an email leased in the write that accepts it: its first claim. */
export const FIRST_LEASE_TOKEN = 1

export interface EmailServiceOptions {
  store: Store
  clock: Clock
  /** MAIL_FROM: the sender of emails that name none. */
  mailFrom: string
  /** Refuses senders that are not on the account's verified domains (REQUIRE_VERIFIED_DOMAIN; domains.ts). */
  senders?: { assertSenders(accountId: string, senders: Array<{ address: string; path: string }>): Promise<void> }
  /** An email's attachments at most (ATTACHMENTS_MAX_BYTES, src/domain/attachments.ts); default DEFAULT_ATTACHMENT_LIMITS. */
  attachmentLimits?: AttachmentLimits
  /** Recipients per UTC day and month by plan (src/domain/quotas.ts); null or absent: not counted, no limit. */
  quotas?: Quotas | null
  /** Renders the sends that name a template (src/app/templates.ts); absent: a send naming one is refused as unknown. */
  templates?: Pick<TemplateService, 'renderSends'>
  /** How far ahead a send may be scheduled (SCHEDULE_HORIZON_DAYS); default 30 days. */
  scheduleHorizonDays?: number
  /**
   * The sending domain's tracking defaults, for a send that leaves a choice out (src/app/domains.ts);
   * absent: the account's default, on.
   */
  trackingDefaults?: (accountId: string, fromAddress: string) => Promise<{ opens: boolean; clicks: boolean }>
  /** SVC_SECRET, which tracking links are sealed with: their tokens are opened here. Absent: no token is valid. */
  secret?: string
}

export function createEmailService ({
  store, clock, mailFrom, senders, secret, quotas = null, scheduleHorizonDays = DEFAULT_SCHEDULE_HORIZON_DAYS, trackingDefaults, templates,
  attachmentLimits = DEFAULT_ATTACHMENT_LIMITS,
}: EmailServiceOptions) {
  const defaultFrom = parseAddress(mailFrom)
  if ('error' in defaultFrom) throw new Error(`MAIL_FROM ${defaultFrom.error}`)
  const from = formatAddress(defaultFrom)
  const listeners = new Set<(emails: number) => void>()
  /** Told the earliest time of each scheduled send accepted or moved here (the mailer's wake-up). */
  const scheduledListeners = new Set<(dueAt: number) => void>()
  const scheduled = (at: number) => { for (const listener of scheduledListeners) listener(at) }

  /**
   * The email is not scheduled any more (the store said so): 409, naming what it is now. A cancel of an
   * email already canceled is no conflict: the caller gets what it asked for.
   */
  async function notScheduled (accountId: string, id: string, cancel: boolean): Promise<EmailRecord> {
    const email = await store.findEmail(accountId, id)
    if (email === null) throw NotFound('No email with this id')
    if (cancel && email.status === 'canceled') return email
    const why = email.status === 'canceled'
      ? 'it was canceled'
      : email.status === 'scheduled' ? 'its time has come and it is going out' : `it went out (status ${email.status})`
    throw EmailNotScheduled(`The email is no longer scheduled: ${why}`, [{ path: 'params.id', message: `is ${email.status}` }])
  }
  let intake: LocalIntake | undefined

  function replayOrConflict (existing: IdempotencyRecord, hash: string): SendAnswer {
    if (existing.requestHash !== hash) {
      throw IdempotencyConflict('This Idempotency-Key was used with a different request in the last 24 hours; use a new key')
    }
    return { status: existing.responseStatus, body: existing.responseBody, replayed: true }
  }

  return {
    /**
     * Accepts one send (or a batch) for the key's account: validated as a whole, suppressed recipients
     * dropped, then every email with its email.sent events (and the idempotency key) in one atomic write.
     * Resolves once that write is durable.
     */
    async send (apiKey: ApiKeyRecord, items: SendInput[], opts: SendOptions): Promise<SendAnswer> {
      const accountId = apiKey.accountId
      const prefix = (i: number) => (opts.batch ? `body[${i}]` : 'body')
      // A send that names a template gets its subject, html and text from it first (src/app/templates.ts),
      // unless its Idempotency-Key answers a replay: the first answer stands, whatever the template became since.
      let templateUses: Array<TemplateUse | null> = []
      if (templates !== undefined && items.some((item) => item.template !== undefined)) {
        if (opts.idempotency !== undefined) {
          const existing = await store.findIdempotencyKey(accountId, opts.idempotency.key, iso(clock.now()))
          if (existing !== null) return replayOrConflict(existing, opts.idempotency.requestHash)
        }
        const rendered = await templates.renderSends(accountId, items, prefix)
        items = rendered.items
        templateUses = rendered.uses
      }
      const details: ErrorDetail[] = []
      const sends: NormalisedSend[] = []
      items.forEach((item, i) => {
        const n = normaliseSend(item, from)
        if ('errors' in n) details.push(...n.errors.map((e) => ({ path: `${prefix(i)}.${e.path}`, message: e.message })))
        else sends.push(n)
      })
      // Attachments are decoded here, once: their field problems join the others in one answer.
      const checked = checkSendAttachments(items, attachmentLimits, prefix)
      details.push(...checked.invalid)
      if (details.length > 0) throw ValidationError('The request is not valid; nothing was sent', details)
      checked.refuse()
      const decodedOf = new Map(sends.map((s, i) => [s, checked.byItem[i]]))

      const now = clock.now()
      if (opts.idempotency !== undefined) {
        const existing = await store.findIdempotencyKey(accountId, opts.idempotency.key, iso(now))
        if (existing !== null) return replayOrConflict(existing, opts.idempotency.requestHash)
      }
      // After the key: a replay of a scheduled send whose time has passed answers as the first one did.
      const dueAt: Array<number | null> = []
      const late: ErrorDetail[] = []
      sends.forEach((s, i) => {
        const verdict = s.scheduledAt === undefined ? null : checkSchedule(s.scheduledAt, now, scheduleHorizonDays)
        if (verdict !== null && 'error' in verdict) late.push({ path: `${prefix(i)}.scheduledAt`, message: verdict.error })
        dueAt.push(verdict !== null && 'at' in verdict ? verdict.at : null)
      })
      if (late.length > 0) throw InvalidSchedule(`scheduledAt is not a time svc can schedule for (from now to ${scheduleHorizonDays} days ahead); nothing was sent`, late)
      // The domain's defaults, asked once per sending address, only for a choice a send left out.
      const defaults = new Map<string, Promise<{ opens: boolean; clicks: boolean }>>()
      const trackingOf = async (s: NormalisedSend): Promise<{ opens: boolean; clicks: boolean }> => {
        if (s.tracking.opens !== undefined && s.tracking.clicks !== undefined) return { opens: s.tracking.opens, clicks: s.tracking.clicks }
        const address = bareOf(s.from)
        let d = defaults.get(address)
        if (d === undefined) {
          d = trackingDefaults?.(accountId, address) ?? Promise.resolve({ opens: true, clicks: true })
          defaults.set(address, d)
        }
        const found = await d
        return { opens: s.tracking.opens ?? found.opens, clicks: s.tracking.clicks ?? found.clicks }
      }
      await senders?.assertSenders(accountId, sends.map((s, i) => ({ address: bareOf(s.from), path: `${prefix(i)}.from` })))

      const suppressions = new Map<string, SuppressionRecord>()
      for (const s of await store.findSuppressions(accountId, sends.flatMap((s) => s.recipients.map((r) => r.address)))) {
        suppressions.set(s.email, s)
      }
      const refused: ErrorDetail[] = []
      sends.forEach((s, i) => {
        if (s.recipients.every((r) => suppressions.has(r.address))) {
          for (const r of s.recipients) {
            refused.push({ path: `${prefix(i)}.${r.path}`, message: `${r.address} is on the suppression list (${suppressions.get(r.address)!.reason})` })
          }
        }
      })
      if (refused.length > 0) {
        throw RecipientSuppressed(opts.batch
          ? 'Every recipient of at least one email in this batch is on the suppression list; nothing was sent'
          : 'Every recipient is on the suppression list; nothing was sent', refused)
      }

      const at = iso(now)
      const emails: EmailRecord[] = []
      // The bytes of the attachments, once per email: every recipient's copy is made from them.
      const contents: AttachmentContent[] = []
      const events: EventRecord[] = []
      const answers: Array<{ id: string; suppressed?: string[]; scheduledAt?: string }> = []
      let earliest: number | undefined
      for (const [i, s] of sends.entries()) {
        const id = newId('em', now)
        const attached = attachmentRecords(id, decodedOf.get(s))
        contents.push(...attached.contents)
        const due = dueAt[i] ?? null
        if (due !== null && (earliest === undefined || due < earliest)) earliest = due
        const labels = { tags: s.tags, metadata: s.metadata, route: eventRoute(s.from, s.tags) }
        const kept = s.recipients.filter((r) => !suppressions.has(r.address))
        const dropped = s.recipients.filter((r) => suppressions.has(r.address)).map((r) => r.address)
        const field = (f: RecipientField) => kept.filter((r) => r.field === f).map((r) => r.formatted)
        emails.push({
          id,
          accountId,
          from: s.from,
          to: field('to'),
          cc: field('cc'),
          bcc: field('bcc'),
          replyTo: s.replyTo,
          subject: s.subject,
          html: s.html,
          text: s.text,
          headers: s.headers,
          ...(attached.facts.length > 0 ? { attachments: attached.facts } : {}),
          ...(templateUses[i] ? { template: templateUses[i] } : {}),
          tags: s.tags,
          metadata: s.metadata,
          tracking: await trackingOf(s),
          unsubscribe: s.unsubscribe,
          scheduledAt: due === null ? null : iso(due),
          suppressed: dropped,
          recipients: kept.map((r) => ({ address: r.address, state: 'pending' as const })),
          // A scheduled email waits in the due index like a retry: no claim takes it before its time.
          status: due === null ? 'queued' : 'scheduled',
          attempts: 0,
          nextAttemptAt: due === null ? at : iso(due),
          leaseOwner: null,
          leaseExpiresAt: null,
          leaseToken: 0,
          lastError: null,
          createdAt: at,
          updatedAt: at,
        })
        for (const r of kept) events.push(makeEvent({ accountId, emailId: id, type: 'email.sent', recipient: r.address, at: now, labels }))
        answers.push({ id, ...(dropped.length > 0 ? { suppressed: dropped } : {}), ...(due !== null ? { scheduledAt: iso(due) } : {}) })
      }

      const message = opts.batch ? `${emails.length} emails accepted for delivery` : 'Email accepted for delivery'
      const body = JSON.stringify({ success: true, data: opts.batch ? answers : answers[0], message })
      const idempotency: IdempotencyRecord | undefined = opts.idempotency === undefined
        ? undefined
        : {
            accountId,
            key: opts.idempotency.key,
            requestHash: opts.idempotency.requestHash,
            responseStatus: 202,
            responseBody: body,
            createdAt: at,
            expiresAt: iso(now + IDEMPOTENCY_TTL_MS),
          }
      // The quota: every recipient accepted counts, in the day and the month; a send that would pass
      // either is refused whole. Periods without a limit are counted too (GET /api/account shows them).
      let periods: ReturnType<typeof quotaPeriods> = []
      if (quotas !== null) {
        const account = await store.findAccountById(accountId)
        if (account !== null) periods = quotaPeriods(account.plan, quotas, now)
      }
      const quota = periods.length === 0
        ? undefined
        : {
            accountId,
            recipients: emails.reduce((n, e) => n + e.recipients.length, 0),
            periods: periods.map((p) => ({ period: p.period, limit: p.limit ?? Number.MAX_SAFE_INTEGER })),
          }
      // Asked right before the write is queued (no await between): the mailer's answer and the order of
      // the writes agree, so an email it leaves to the store is never overtaken by a later one it takes.
      // Scheduled emails are never handed over: they wait in the store for their time.
      const local = intake
      const immediate = earliest === undefined ? emails : emails.filter((e) => e.scheduledAt === null)
      const promise = immediate.length === 0 ? null : local?.offer(immediate.length) ?? null
      const leased = promise === null ? [] : immediate.slice(0, promise.count)
      for (const e of leased) {
        e.leaseOwner = promise!.owner
        e.leaseExpiresAt = promise!.leaseUntil
        e.leaseToken = FIRST_LEASE_TOKEN
      }
      let result: Awaited<ReturnType<Store['acceptEmails']>>
      try {
        result = await store.acceptEmails({
          emails, events, ...(idempotency ? { idempotency } : {}), ...(quota ? { quota } : {}), ...(contents.length > 0 ? { attachments: contents } : {}),
        })
      } catch (err) {
        // Perhaps stored (a failed disk flush): leased, they are taken over once the lease runs out.
        local?.take(leased.length, [])
        throw err
      }
      local?.take(leased.length, result.outcome === 'accepted' ? leased : [])
      // A concurrent request with the same key got there first: answer as it did (or refuse the new body).
      if (result.outcome === 'duplicate') return replayOrConflict(result.existing, opts.idempotency!.requestHash)
      if (result.outcome === 'quota_exceeded') {
        const p = periods.find((q) => q.period === result.period) ?? periods[0]!
        const retry = secondsUntil(p.resetsAt, now)
        throw QuotaExceeded(
          `This ${opts.batch ? 'batch' : 'send'} of ${quota!.recipients} recipient(s) would pass the ${p.kind === 'day' ? 'daily' : 'monthly'} quota ` +
          `of ${p.limit} recipients (UTC ${p.kind}); nothing was sent. The ${p.kind} ends in ${retry} s`,
          [{ path: 'body', message: `the ${p.kind === 'day' ? 'daily' : 'monthly'} quota is ${p.limit} recipients` }],
          { 'retry-after': String(retry) })
      }
      for (const listener of listeners) listener(emails.length)
      if (earliest !== undefined) scheduled(earliest)
      return { status: 202, body, replayed: false }
    },

    /**
     * Moves a scheduled email to another time (the same rules as at the send: from now to the horizon).
     * 409 once it is not scheduled any more: it went out, its time came, or it was canceled.
     */
    async reschedule (accountId: string, id: string, scheduledAt: string): Promise<EmailView> {
      const now = clock.now()
      const verdict = checkSchedule(scheduledAt, now, scheduleHorizonDays)
      if ('error' in verdict) throw InvalidSchedule(undefined, [{ path: 'body.scheduledAt', message: verdict.error }])
      const moved = await store.rescheduleEmail({ accountId, id, scheduledAt: iso(verdict.at), now: iso(now) })
      if (moved === null) throw NotFound('No email with this id')
      if (moved === 'not_scheduled') await notScheduled(accountId, id, false)
      scheduled(verdict.at)
      return await this.get(accountId, id)
    },

    /**
     * Cancels a scheduled email: status canceled, never mailed, no event after this. Its recipients are
     * given back to the quota periods its acceptance was charged to (the day and month it was accepted
     * in). A second cancel answers the same; 409 once it went out or its time came.
     */
    async cancel (accountId: string, id: string): Promise<EmailView> {
      const now = clock.now()
      let refund: { recipients: number; periods: string[] } | undefined
      if (quotas !== null) {
        const email = await store.findEmail(accountId, id)
        if (email === null) throw NotFound('No email with this id')
        const account = await store.findAccountById(accountId)
        const accepted = Date.parse(email.createdAt)
        if (account !== null) refund = { recipients: email.recipients.length, periods: quotaPeriods(account.plan, quotas, accepted).map((p) => p.period) }
      }
      const canceled = await store.cancelEmail({ accountId, id, now: iso(now), ...(refund ? { refund } : {}) })
      if (canceled === null) throw NotFound('No email with this id')
      if (canceled === 'not_scheduled') await notScheduled(accountId, id, true)
      return await this.get(accountId, id)
    },

    /** `listener` hears the time of every scheduled send accepted or moved here; returns the unsubscribe function. */
    onScheduled (listener: (dueAt: number) => void): () => void {
      scheduledListeners.add(listener)
      return () => { scheduledListeners.delete(listener) }
    },

    /** The email and its event timeline; NotFound for an unknown id or another account's email. */
    async get (accountId: string, id: string): Promise<EmailView> {
      const email = await store.findEmail(accountId, id)
      if (email === null) throw NotFound('No email with this id')
      const events = await store.listEmailEvents(accountId, id)
      return emailView(email, events)
    },

    /** `listener` runs after each accepted send with its number of emails (the mailer's cue); returns the unsubscribe function. */
    onAccepted (listener: (emails: number) => void): () => void {
      listeners.add(listener)
      return () => { listeners.delete(listener) }
    },

    /** This node's mailer takes accepted emails at once (LocalIntake); returns the function that stops it. */
    handOffTo (local: LocalIntake): () => void {
      intake = local
      return () => { if (intake === local) intake = undefined }
    },

    /**
     * What a tracking link's token says (its email, recipient and, for a click, destination), or null when
     * it is forged, altered, expired or of another kind.
     */
    trackingClaims (token: string, kind: TrackingKind): TrackingClaims | null {
      return secret === undefined ? null : verifyTrackingToken(secret, token, kind)
    },

    /** email.opened, every time; false when the email does not exist. */
    async opened (emailId: string, recipient: string): Promise<boolean> {
      const email = await store.findEmailById(emailId)
      if (email === null) return false
      return await store.recordEngagement(engagementEvent('email.opened', email, recipient, clock.now())) !== null
    },

    /** email.clicked with the link, every time; false when the email does not exist. */
    async clicked (emailId: string, recipient: string, url: string): Promise<boolean> {
      const email = await store.findEmailById(emailId)
      if (email === null) return false
      return await store.recordEngagement(engagementEvent('email.clicked', email, recipient, clock.now(), { url })) !== null
    },

    /**
     * Suppresses the recipient for the email's account and raises email.unsubscribed, once: an address
     * that is already suppressed raises nothing. False when the email does not exist.
     */
    async unsubscribed (emailId: string, recipient: string): Promise<boolean> {
      const now = clock.now()
      const email = await store.findEmailById(emailId)
      if (email === null) return false
      const result = await store.unsubscribeRecipient(engagementEvent('email.unsubscribed', email, recipient, now), iso(now))
      return result !== 'no_email'
    },
  }
}

export type EmailService = ReturnType<typeof createEmailService>
