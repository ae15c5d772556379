// One SMTP transaction's dialogue (RFC 5321 §3.3), written once for both ways a connection sends it: its
// commands (MAIL FROM, one RCPT TO per recipient, DATA), and what the relay's answers to them mean and
// call for next. When the relay offers PIPELINING (RFC 2920) the connection writes every command at once
// and reads every answer; without it, one command at a time, stopping where the answers so far make the
// rest pointless (`goesOn`). Either way `conclude` reads the answers, so each recipient's reply is
// recorded the same whichever the relay offered.
import type { SmtpReply } from './smtp-reply.js'

export interface Envelope { from: string; to: string[] }

/** A message's bytes: whole, or in pieces written one after another (a message with attachments). */
export type MessageBytes = Buffer | readonly Buffer[]

/** The size in bytes of a message given whole or in pieces. */
export function bytesOf (raw: MessageBytes): number {
  if (Buffer.isBuffer(raw)) return raw.length
  let n = 0
  for (const b of raw as readonly Buffer[]) n += b.length
  return n
}

/** The relay's answers to one transaction. Any reply can be a refusal; `final` is there when the message was sent. */
export interface TransactionReplies {
  mail: SmtpReply
  /** One per envelope recipient, in order. */
  rcpt: SmtpReply[]
  /** The answer to DATA; absent when no recipient was accepted and DATA was not sent. */
  data?: SmtpReply
  /** The answer to the end of the message. */
  final?: SmtpReply
  /**
   * The relay's SIZE (RFC 1870) is smaller than the message: nothing of it was sent, no command either;
   * `mail` holds a 552 that says so in words.
   */
  tooLarge?: { size: number; limit: number }
}

/** A positive completion reply (2yz). */
export const positive = (r: SmtpReply | undefined): boolean => r !== undefined && r.code >= 200 && r.code < 300

/** What the relay offered that MAIL FROM speaks to. */
export interface MailParameters {
  /** The message's size, declared when the relay offers SIZE; undefined otherwise. */
  size: number | undefined
  /** The relay offers SMTPUTF8: an address that is not ASCII asks for it. */
  smtputf8: boolean
}

/** A transaction's commands, each with its CRLF: MAIL FROM, one RCPT TO per recipient, DATA. */
export function transactionCommands (envelope: Envelope, params: MailParameters): string[] {
  const utf8 = params.smtputf8 && [envelope.from, ...envelope.to].some((a) => /[^\x00-\x7f]/.test(a))
  const size = params.size !== undefined ? ` SIZE=${params.size}` : ''
  return [`MAIL FROM:<${envelope.from}>${size}${utf8 ? ' SMTPUTF8' : ''}\r\n`, ...envelope.to.map((r) => `RCPT TO:<${r}>\r\n`), 'DATA\r\n']
}

/**
 * One command at a time: whether the next one is worth sending after `answers` (the replies so far, in
 * order). Nothing after a refused MAIL FROM; no DATA when no recipient was accepted.
 */
export function goesOn (answers: readonly SmtpReply[], recipients: number): boolean {
  if (answers.length === 0) return true
  if (!positive(answers[0])) return false
  if (answers.length === 1 + recipients) return answers.slice(1).some(positive)
  return true
}

/**
 * What follows the answers to a transaction's commands:
 * - `message`: DATA was taken (354) and a recipient at least accepted: the message goes out;
 * - `empty`: DATA was taken with no recipient accepted (a server that does not answer 503 then): an empty
 *   message ends the data, and the relay's refusal of it is its answer;
 * - `reset`: no DATA, and the relay opened the transaction: RSET closes it before the next one;
 * - `done`: MAIL FROM was refused, nothing is open.
 */
export type NextStep = 'message' | 'empty' | 'reset' | 'done'

/**
 * Reads a transaction's answers: all of its commands' (pipelined), or those the relay was sent one by one
 * until `goesOn` stopped. A recipient not asked about because MAIL FROM was refused has MAIL FROM's reply.
 */
export function conclude (answers: readonly SmtpReply[], recipients: number): { replies: TransactionReplies; next: NextStep } {
  const mail = answers[0]
  if (mail === undefined) throw new Error('a transaction is concluded from its answers, MAIL FROM\'s at least')
  const rcpt = answers.length >= 1 + recipients ? answers.slice(1, 1 + recipients) : new Array<SmtpReply>(recipients).fill(mail)
  const data = answers[1 + recipients]
  const replies: TransactionReplies = data === undefined ? { mail, rcpt } : { mail, rcpt, data }
  if (data === undefined || data.code !== 354) return { replies, next: positive(mail) ? 'reset' : 'done' }
  return { replies, next: rcpt.some(positive) ? 'message' : 'empty' }
}

/** A transaction that never started: the message is larger than the relay's SIZE. */
export function tooLargeReplies (size: number, limit: number): TransactionReplies {
  const text = `552 5.3.4 the relay takes at most ${limit} bytes (SIZE) and this message is ${size} bytes; nothing was sent`
  return { mail: { code: 552, text }, rcpt: [], tooLarge: { size, limit } }
}
