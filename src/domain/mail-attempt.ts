// What one attempt at mailing an email changes, and when a deferred recipient is tried again: the rule,
// pure. The mailer (src/mail/mailer.ts) writes what these plans return as one atomic write under its lease.
import { iso } from './clock.js'
import { labelsOf, makeEvent } from './email-events.js'
import type { EventRecord } from './events.js'
import type { EmailMetadata } from './metadata.js'
import type { EmailTag } from './send-input.js'

/**
 * scheduled: accepted for a later time (scheduledAt), not attempted yet; it can still be moved or
 * canceled. canceled: final, canceled while scheduled: never mailed.
 * queued: accepted, not attempted yet. deferred: attempted, some recipients wait for a retry.
 * delivered / bounced: every recipient has that outcome (a complaint counts as delivered).
 * partially_delivered: final, some recipients delivered and some bounced. failed: final, the message could
 * not be built (planBuildFailure), so nothing more is sent.
 */
export type EmailStatus = 'scheduled' | 'queued' | 'deferred' | 'delivered' | 'bounced' | 'partially_delivered' | 'failed' | 'canceled'
export type RecipientState = 'pending' | 'delivered' | 'bounced' | 'complained'
export type SuppressionReason = 'bounced' | 'complained' | 'unsubscribed' | 'manual'

export interface EmailRecipient {
  /** Bare, lower-case. */
  address: string
  state: RecipientState
}

/**
 * The wait before each retry of a deferred recipient (before jitter): about 24 hours in all, then the
 * recipient is given up on and bounced.
 */
export const DEFAULT_RETRY_DELAYS_MS = [
  30_000, 120_000, 600_000, 1_800_000, 3_600_000, 7_200_000, 14_400_000, 28_800_000, 28_800_000,
]

/**
 * The largest html (or text) the mailer builds a message from, in characters: far above the request body
 * limit's default, so only an email stored by other means (or under a much larger limit) reaches it.
 */
export const MAX_BUILD_BODY_CHARS = 10 * 1024 * 1024

// Stored reasons are what a remote server said; a page of it helps nobody.
const MAX_REASON = 500

/** What a plan needs of the email attempted (the store's EmailRecord has all of it). */
export interface AttemptedEmail {
  id: string
  accountId: string
  from: string
  tags: EmailTag[]
  metadata?: EmailMetadata
  recipients: EmailRecipient[]
  attempts: number
}

/** The email's state after an attempt, with what the attempt raises: the store's EmailAttempt without its lease. */
export interface AttemptPlan {
  emailId: string
  recipients: EmailRecipient[]
  status: EmailStatus
  attempts: number
  nextAttemptAt: string | null
  lastError: string | null
  at: string
  events: EventRecord[]
  suppressions: Array<{ accountId: string; email: string; reason: SuppressionReason; createdAt: string }>
}

/** What a transport said about one recipient (src/mail/transport.ts RecipientResult, without the import). */
export interface RecipientOutcome {
  recipient: string
  outcome: 'delivered' | 'bounced' | 'complained' | 'deferred'
  code?: number
  response?: string
}

export interface AttemptPolicy {
  retryDelaysMs: number[]
  /** 0 ≤ random() < 1; jitter spreads retries of many emails deferred at once. */
  random: () => number
}

function reasonOf (r: RecipientOutcome): string {
  const text = r.response ?? (r.code !== undefined ? String(r.code) : 'no reason given')
  return text.length > MAX_REASON ? text.slice(0, MAX_REASON) + '…' : text
}

/** ±20 % around the scheduled delay. */
export function withJitter (delayMs: number, random: () => number): number {
  return Math.round(delayMs * (0.8 + 0.4 * random()))
}

/**
 * The email's next state after one attempt at its pending recipients, with the events and suppressions
 * that attempt raises.
 *
 * delivered → email.delivered. bounced (a 5xx) → email.bounced and a suppression of that address only.
 * complained → email.delivered, then email.complained and a suppression. deferred (4xx, connection
 * faults) → stays pending for a retry after the next delay of the schedule; once the schedule is spent,
 * email.bounced without a suppression (the fault may have been ours or the relay's, not the address's).
 */
export function planAttempt (email: AttemptedEmail, results: RecipientOutcome[], now: number, policy: AttemptPolicy): AttemptPlan {
  const attempts = email.attempts + 1
  const delay = policy.retryDelaysMs[attempts - 1]
  const byAddress = new Map(results.map((r) => [r.recipient.toLowerCase(), r]))
  const events: EventRecord[] = []
  const suppressions: AttemptPlan['suppressions'] = []
  const at = iso(now)
  const base = { accountId: email.accountId, emailId: email.id, at: now, labels: labelsOf(email) }
  let lastError: string | null = null

  const recipients = email.recipients.map((r): EmailRecipient => {
    if (r.state !== 'pending') return r
    const result = byAddress.get(r.address) ?? { recipient: r.address, outcome: 'deferred' as const, response: 'the transport gave no result for this recipient' }
    const recipient = r.address
    switch (result.outcome) {
      case 'delivered':
        events.push(makeEvent({ ...base, type: 'email.delivered', recipient }))
        return { address: recipient, state: 'delivered' }
      case 'bounced':
        events.push(makeEvent({ ...base, type: 'email.bounced', recipient }, { reason: reasonOf(result) }))
        suppressions.push({ accountId: email.accountId, email: recipient, reason: 'bounced', createdAt: at })
        return { address: recipient, state: 'bounced' }
      case 'complained':
        events.push(makeEvent({ ...base, type: 'email.delivered', recipient }))
        events.push(makeEvent({ ...base, type: 'email.complained', recipient }, { reason: reasonOf(result) }))
        suppressions.push({ accountId: email.accountId, email: recipient, reason: 'complained', createdAt: at })
        return { address: recipient, state: 'complained' }
      default:
        lastError = reasonOf(result)
        if (delay !== undefined) return r
        events.push(makeEvent({ ...base, type: 'email.bounced', recipient }, {
          reason: `gave up after ${attempts} attempts; last answer: ${reasonOf(result)}`,
        }))
        return { address: recipient, state: 'bounced' }
    }
  })

  const pending = recipients.some((r) => r.state === 'pending')
  return {
    emailId: email.id,
    recipients,
    status: pending ? 'deferred' : finalStatus(recipients),
    attempts,
    nextAttemptAt: pending ? iso(now + withJitter(delay!, policy.random)) : null,
    lastError,
    at,
    events,
    suppressions,
  }
}

/**
 * The email's final state when its message cannot be built (a body over MAX_BUILD_BODY_CHARS, a rewrite
 * that throws): building again would fail again, so it is failed now instead of being retried at every
 * attempt and after every restart. Each pending recipient gets email.bounced with the reason, so webhook
 * subscribers hear of it, and no suppression: the fault is the message's, not the address's. `reason`
 * says what failed and must not quote the content.
 */
export function planBuildFailure (email: AttemptedEmail, reason: string, now: number, what = 'could not be built'): AttemptPlan {
  const full = `${what}: ${reason}`
  const text = full.length > MAX_REASON ? full.slice(0, MAX_REASON) + '…' : full
  const events: EventRecord[] = []
  const recipients = email.recipients.map((r): EmailRecipient => {
    if (r.state !== 'pending') return r
    events.push(makeEvent({ accountId: email.accountId, emailId: email.id, type: 'email.bounced', recipient: r.address, at: now, labels: labelsOf(email) }, { reason: text }))
    return { address: r.address, state: 'bounced' }
  })
  return {
    emailId: email.id,
    recipients,
    status: 'failed',
    attempts: email.attempts + 1,
    nextAttemptAt: null,
    lastError: text,
    at: iso(now),
    events,
    suppressions: [],
  }
}

function finalStatus (recipients: EmailRecipient[]): EmailStatus {
  const bounced = recipients.filter((r) => r.state === 'bounced').length
  if (bounced === 0) return 'delivered'
  return bounced === recipients.length ? 'bounced' : 'partially_delivered'
}
