// Reading mail that comes back (src/app/returned-mail.ts says what it means): the fields of a delivery
// status notification (RFC 3464) and svc's own Message-IDs, and what the inbound listener asks of the
// use case that records them (ReturnedMail).
import type { VerpClaims } from './verp.js'

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

/** A header value as one line: control characters go, runs of space become one. */
export function clean (text: string): string {
  // Unfolded already.
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

export type ReturnedOutcome = 'bounced' | 'delayed' | 'complained' | 'duplicate' | 'unmatched' | 'ignored'

/** What a feedback report offers to find the email and recipient by. */
export interface ComplaintMatch {
  /** VERP claims: the address the report was mailed to, its Original-Mail-From, or the original's Return-Path. */
  verp: VerpClaims[]
}

/** What the inbound listener hands over of returning mail (src/app/returned-mail.ts records it). */
export interface ReturnedMail {
  /** A DSN mailed to a signed VERP address. */
  deliveryStatus (claims: VerpClaims, verdict: DsnVerdict): Promise<ReturnedOutcome>
  /** A feedback report (ARF). */
  feedback (feedbackType: string, userAgent: string, match: ComplaintMatch): Promise<ReturnedOutcome>
}
