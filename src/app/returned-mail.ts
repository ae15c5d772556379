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
import { clean, type ComplaintMatch, type DsnVerdict, type ReturnedOutcome } from '../domain/returned-mail.js'

const MAX_REASON = 500

function reason (text: string): string {
  const t = clean(text)
  return t.length > MAX_REASON ? t.slice(0, MAX_REASON) + '…' : t
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
