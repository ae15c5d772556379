// Which permanent refusals say the address itself is bad, and so put it on the suppression list. A 5xx
// is permanent for the email it answers, but not every one is about the mailbox: "550 5.7.1 rejected as
// spam" or a relay's block list is about that message or about us, and suppressing the recipient for it
// would silence every later email to a mailbox that works. So (like Postmark's hard bounce against its
// content and block types):
//
// - an enhanced status code (RFC 3463) decides when the reply has one, other than the catch-all 5.0.0:
//   bad destination mailbox, system or syntax, mailbox moved, no mail accepted (5.1.0, 5.1.1, 5.1.2,
//   5.1.3, 5.1.6, 5.1.10) and mailbox disabled (5.2.1) suppress; a full mailbox (5.2.2), a message too
//   large (5.2.3), the sender's own address (5.1.7, 5.1.8), and the system, network, protocol, content
//   and policy classes (5.3 to 5.7) do not;
// - without one (or with 5.0.0), only a refusal of the recipient (RCPT TO) with 550, 551 or 553 (RFC 5321: mailbox
//   unavailable, not local, name not allowed) suppresses; a refusal of the message after DATA is about
//   the message;
// - a bounce report (DSN) is read the same way, from its Status, or from the remote server's reply in
//   its Diagnostic-Code when the Status is 5.0.0.
//
// Either way the email's recipient is bounced (email.bounced with the reply as its reason): only the
// suppression depends on this.

/** Where in the transaction a refusal came: to the recipient (RCPT TO) or to the message (DATA, or its end). */
export type RefusalStage = 'recipient' | 'message'

const MAILBOX_STATUSES = new Set(['5.1.0', '5.1.1', '5.1.2', '5.1.3', '5.1.6', '5.1.10', '5.2.1'])
const MAILBOX_REPLY_CODES = new Set([550, 551, 553])

/** `5.1.1 (extra)` → `5.1.1`; null unless the value starts with a status code (class 2, 4 or 5). Reads 40 characters at most. */
export function statusCode (value: string | undefined): string | null {
  if (value === undefined) return null
  const m = /^\s*([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])/.exec(value.slice(0, 40))
  return m ? `${m[1]}.${Number(m[2])}.${Number(m[3])}` : null
}

/**
 * The enhanced status code of an SMTP reply as svc keeps it (`550 5.1.1 no such user`, or its text alone),
 * or null. Only the reply's first line counts.
 */
export function enhancedStatus (reply: string): string | null {
  const head = reply.slice(0, 48).trimStart()
  return statusCode(/^\d{3}[ -]/.test(head) ? head.slice(4) : head)
}

/** Whether an enhanced status code says the address is bad. */
export function statusSuppresses (status: string): boolean {
  return MAILBOX_STATUSES.has(status)
}

/**
 * Whether a permanent SMTP refusal (code and text, as the relay gave them) should suppress the address. An
 * enhanced code decides, unless it is the catch-all 5.0.0 (Exim's, for one), which says no more than the
 * reply code does.
 */
export function refusalSuppresses (code: number, text: string, stage: RefusalStage): boolean {
  if (code < 500 || code > 599) return false
  const status = enhancedStatus(text)
  if (status !== null && status !== '5.0.0') return statusSuppresses(status)
  return stage === 'recipient' && MAILBOX_REPLY_CODES.has(code)
}

/**
 * Whether a DSN's failed recipient (its Status, and its Diagnostic-Code as given, `smtp; 550 5.1.1 …`)
 * should be suppressed. A specific status decides; the catch-all 5.0.0 defers to the remote server's reply
 * in the diagnostic when there is one (read as a refusal of the recipient: that is what a DSN reports),
 * and suppresses without one, as a permanent failure of that recipient with nothing said against it.
 */
export function dsnSuppresses (status: string, diagnostic: string): boolean {
  if (status !== '5.0.0') return statusSuppresses(status)
  const d = diagnostic.slice(0, 200)
  const semi = d.indexOf(';')
  const reply = (semi >= 0 && d.slice(0, semi).trim().toLowerCase() === 'smtp' ? d.slice(semi + 1) : '').trimStart()
  if (!/^\d{3}(?:[ -]|$)/.test(reply)) return true
  return refusalSuppresses(Number(reply.slice(0, 3)), reply, 'recipient')
}
