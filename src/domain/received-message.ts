// A message mailed to a receiving domain as the inbound listener reads it (src/mail/inbound) and the
// use cases keep it (src/app/received.ts): how big each field may be, what was parsed, and what its
// sender's authentication said. The bounds are the rule both sides apply.
import { AUTH_RESULTS, type AuthResult } from './auth-results.js'

export { AUTH_RESULTS, type AuthResult }

export const LIMITS = {
  /** Characters of text and of html kept (and sent in the event); longer ones are cut and flagged. */
  text: 64 * 1024,
  html: 64 * 1024,
  headers: 100,
  headerValue: 1000,
  subject: 998,
  from: 1000,
  addresses: 50,
  address: 320,
  attachments: 100,
  filename: 255,
  messageIds: 20,
  /** Envelope recipients listed on one message (the listener takes fewer per transaction). */
  recipients: 100,
  /** Accounts that may receive one recipient's mail (the same domain verified by several accounts). */
  accountsPerDomain: 5,
} as const

/** What the listener read from one message: mailparser's fields, unbounded as parsed. */
export interface ParsedMessage {
  from: string
  to: string[]
  cc: string[]
  subject: string
  text: string | null
  html: string | null
  /** Header fields in order, names as written, values unfolded. */
  headers: Array<{ name: string; value: string }>
  messageId: string | null
  /** In-Reply-To first, then References, each a message id as written. */
  replyIds: string[]
  attachments: Array<{ filename: string | null; contentType: string; content: Buffer }>
}

export interface Authentication { spf: AuthResult; dkim: AuthResult; dmarc: AuthResult; arc: AuthResult | null }

export function authResult (value: unknown): AuthResult {
  const v = typeof value === 'string' ? value.toLowerCase() : ''
  return (AUTH_RESULTS as readonly string[]).includes(v) ? v as AuthResult : 'none'
}

export type ReceiveOutcome = 'received' | 'over_limit'

/**
 * The targets of one transaction (one per account and RCPT) as one message per account: its recipients
 * in the order given, each once, and the first one's domain. Accounts in the order first named.
 */
export function byAccount (targets: ReadonlyArray<{ accountId: string; domainId: string; recipient: string }>): Array<{ accountId: string; domainId: string; recipients: string[] }> {
  const out = new Map<string, { accountId: string; domainId: string; recipients: string[] }>()
  for (const t of targets) {
    const one = out.get(t.accountId)
    if (one === undefined) out.set(t.accountId, { accountId: t.accountId, domainId: t.domainId, recipients: [t.recipient] })
    else if (!one.recipients.includes(t.recipient)) one.recipients.push(t.recipient)
  }
  return [...out.values()]
}
