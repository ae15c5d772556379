// Mail that comes back after the relay accepted an email: delivery status notifications (RFC 3464) mailed
// to the VERP Return-Path, and feedback reports (ARF, RFC 5965) from mailbox providers. What each means:
//
// - a DSN recipient with `Action: failed` and a 5.x.x status: the address bounced for good → email.bounced
//   (status and diagnostic in data.reason) and the address suppressed (bounced);
// - `Action: delayed`, or a 4.x.x status: the relay is still trying → an `email.delayed` entry on the
//   email's timeline only (no webhook, no suppression);
// - `Action: delivered`, `relayed`, `expanded`: nothing to record;
// - an ARF report with `Feedback-Type: abuse` → email.complained and the address suppressed (complained).
//
// A report is matched to an email and recipient through a signed VERP address (verp.ts) only: each
// recipient's copy carries its own, so a report proves which copy it is about. A Message-ID and a
// recipient named in the report prove nothing (a recipient can quote their own copy and name another
// one: that would suppress someone else), so they match nothing, and nothing changes. One event per
// email, recipient and kind: a report received twice records once.
import type { Store } from '../store/types.js'
import type { EmailRecord } from '../store/emails.js'
import type { Clock } from '../domain/clock.js'
import { labelsOf, makeEvent } from '../domain/email-events.js'
import type { VerpClaims } from '../domain/verp.js'

const MAX_REASON = 500
const EMAIL_ID = /^em_[0-9a-f]{28}$/

/** One recipient block of a message/delivery-status part, field names lower case. */
export type FieldBlock = ReadonlyMap<string, string>

export type DsnVerdict =
  | { kind: 'bounce'; status: string; diagnostic: string; recipient: string | null }
  | { kind: 'delay'; status: string; diagnostic: string; recipient: string | null }
  | { kind: 'none' }

/** `5.1.1 (extra)` → `5.1.1`; null unless it is a status code (class 2, 4 or 5). */
export function statusCode (value: string | undefined): string | null {
  if (value === undefined) return null
  const m = /^\s*([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])/.exec(value.slice(0, 40))
  return m ? `${m[1]}.${m[2]}.${m[3]}` : null
}

/** `rfc822; Alice@Example.net` or `<a@b>` → `alice@example.net`; null when there is no address there. */
export function addressField (value: string | undefined): string | null {
  if (value === undefined || value.length > 400) return null
  const semi = value.indexOf(';')
  let a = (semi >= 0 ? value.slice(semi + 1) : value).trim()
  if (a.startsWith('<') && a.endsWith('>')) a = a.slice(1, -1).trim()
  const at = a.lastIndexOf('@')
  if (at <= 0 || at === a.length - 1 || /[\s<>]/.test(a)) return null
  return a.toLowerCase()
}

/** The email id in one of svc's Message-IDs (`<em_…@domain>`), else null. */
export function emailIdOfMessageId (value: string | undefined): string | null {
  if (value === undefined || value.length > 1000) return null
  const v = value.trim()
  const start = v.startsWith('<') ? 1 : 0
  const at = v.indexOf('@')
  if (at < 0) return null
  const id = v.slice(start, at)
  return EMAIL_ID.test(id) ? id : null
}

function clean (text: string): string {
  // Unfolded already; control characters go, runs of space become one.
  return text.replace(/[\u0000-\u001f\u007f]+/g, ' ').replace(/ {2,}/g, ' ').trim()
}

/**
 * What the per-recipient blocks of a DSN say, as one verdict: a hard bounce if any recipient failed with
 * a 5.x.x status, else a delay if any was delayed or failed with 4.x.x, else nothing. (With VERP each
 * message names one recipient; a DSN about several is read as the worst of them.)
 */
export function classifyDsn (blocks: readonly FieldBlock[]): DsnVerdict {
  let delay: DsnVerdict | undefined
  for (const b of blocks) {
    const action = (b.get('action') ?? '').trim().toLowerCase()
    const status = statusCode(b.get('status'))
    const diagnostic = clean(b.get('diagnostic-code') ?? '')
    const recipient = addressField(b.get('final-recipient')) ?? addressField(b.get('original-recipient'))
    if (action === 'failed' && status?.startsWith('5.')) return { kind: 'bounce', status, diagnostic, recipient }
    if (delay === undefined && (action === 'delayed' || (action === 'failed' && status?.startsWith('4.')))) {
      delay = { kind: 'delay', status: status ?? '4.0.0', diagnostic, recipient }
    }
  }
  return delay ?? { kind: 'none' }
}

function reason (text: string): string {
  const t = clean(text)
  return t.length > MAX_REASON ? t.slice(0, MAX_REASON) + '…' : t
}

export type ReturnedOutcome = 'bounced' | 'delayed' | 'complained' | 'duplicate' | 'unmatched' | 'ignored'

/** What a feedback report offers to find the email and recipient by. */
export interface ComplaintMatch {
  /** VERP claims: the address the report was mailed to, its Original-Mail-From, or the original's Return-Path. */
  verp: VerpClaims[]
}

export function createReturnedMailService ({ store, clock }: { store: Store; clock: Clock }) {
  async function recipientOf (claims: VerpClaims): Promise<{ email: EmailRecord; recipient: string } | null> {
    const email = await store.findEmailById(claims.emailId)
    const recipient = email?.recipients[claims.recipientIndex]?.address
    return email && recipient ? { email, recipient } : null
  }

  async function record (email: EmailRecord, recipient: string, kind: 'bounce' | 'delay' | 'complaint', why: string): Promise<ReturnedOutcome> {
    const now = clock.now()
    const type = kind === 'bounce' ? 'email.bounced' : kind === 'complaint' ? 'email.complained' : 'email.delayed'
    const event = makeEvent({ accountId: email.accountId, emailId: email.id, type, recipient, at: now, labels: labelsOf(email) }, { reason: reason(why) })
    const suppression = kind === 'delay'
      ? null
      : { accountId: email.accountId, email: recipient, reason: kind === 'bounce' ? 'bounced' as const : 'complained' as const, createdAt: event.occurredAt }
    const result = await store.recordReturnedMail({ event, suppression, timelineOnly: kind === 'delay' })
    if (result === 'duplicate') return 'duplicate'
    return kind === 'bounce' ? 'bounced' : kind === 'complaint' ? 'complained' : 'delayed'
  }

  return {
    /** A DSN mailed to the VERP address `claims` came from. */
    async deliveryStatus (claims: VerpClaims, verdict: DsnVerdict): Promise<ReturnedOutcome> {
      if (verdict.kind === 'none') return 'ignored'
      const found = await recipientOf(claims)
      if (found === null) return 'unmatched'
      const text = `${verdict.status}${verdict.diagnostic !== '' ? ` ${verdict.diagnostic}` : ''}`
      return await record(found.email, found.recipient, verdict.kind, verdict.kind === 'bounce' ? text : `delayed: ${text}`)
    },

    /** An ARF report. Only `abuse` complaints count; other feedback types are ignored. */
    async feedback (feedbackType: string, userAgent: string, match: ComplaintMatch): Promise<ReturnedOutcome> {
      if (feedbackType.trim().toLowerCase() !== 'abuse') return 'ignored'
      const why = `feedback report (abuse)${userAgent !== '' ? ` from ${userAgent.slice(0, 100)}` : ''}`
      for (const claims of match.verp.slice(0, 10)) {
        const found = await recipientOf(claims)
        if (found !== null) return await record(found.email, found.recipient, 'complaint', why)
      }
      return 'unmatched'
    },
  }
}

export type ReturnedMailService = ReturnType<typeof createReturnedMailService>
