import addressparser from 'nodemailer/lib/addressparser/index.js'
import { isPlainAddress } from '../domain/addresses.js'
import type { HtmlTemplate } from './tracking.js'

export interface OutgoingMessage {
  /** Our id; the Message-ID header becomes `<${messageId}@${domain of from}>`. */
  messageId: string
  from: string
  to: string[]
  cc: string[]
  bcc: string[]
  replyTo?: string[]
  subject: string
  html?: string
  text?: string
  /** Already validated custom headers, plus List-Unsubscribe and friends. */
  headers: Record<string, string>
  /**
   * The email's attachments, with their bytes (read from the store for this attempt): the same in every
   * recipient's copy, so encoded once per message (./mime.ts). After crossing to a thread, `content` is a
   * Uint8Array. The transport takes the bytes: one that runs in a thread moves them there (./smtp-thread.ts),
   * leaving the caller's copy empty, so a message is sent once and not read again after `send`.
   */
  attachments?: MessageAttachment[]
  /** The From domain's DKIM key (a verified domain of the account): the relay transport signs with it. */
  dkim?: { domainName: string; keySelector: string; privateKey: string }
  /** The envelope sender (Return-Path) for each recipient, a VERP address; the From address when absent. */
  returnPath?: (recipient: string) => string
  /**
   * Each recipient's own copy: the html whose tracked links and pixel name that recipient, and the headers
   * that do (List-Unsubscribe), replacing `html` and those headers for them. Absent: every recipient gets
   * the message as it is. Throws MessageBuildError when the copy cannot be made.
   */
  copy?: (recipient: string) => RecipientCopy
}

/** An attachment as the message carries it (src/domain/attachments.ts decided its name and type). */
export interface MessageAttachment {
  filename: string
  contentType: string
  /** Inline: in the html's multipart/related part, named `cid:<contentId>` there. */
  contentId?: string
  content: Uint8Array
}

/** What differs in one recipient's copy of a message (see OutgoingMessage.copy). */
export interface RecipientCopy {
  html?: string
  /** The headers of this copy that differ from the message's, e.g. List-Unsubscribe. */
  headers: Record<string, string>
}

/**
 * The headers a DKIM signature covers, when the message has them (RFC 6376 §5.4: From always; what a
 * mailbox provider shows or acts on, the one-click unsubscribe pair included).
 */
export const DKIM_SIGNED_HEADERS = [
  'From', 'To', 'Cc', 'Subject', 'Date', 'Message-ID', 'Reply-To', 'MIME-Version', 'Content-Type', 'Content-Transfer-Encoding',
  'List-Unsubscribe', 'List-Unsubscribe-Post',
].join(':')

export type RecipientOutcome = 'delivered' | 'bounced' | 'complained' | 'deferred'

export interface RecipientResult {
  recipient: string
  outcome: RecipientOutcome
  code?: number
  response?: string
}

/**
 * An attempt's message before it is made per recipient: plain data, so that it crosses threads. `msg` has
 * no html and no List-Unsubscribe yet; `template` is its html with the tracked places found.
 */
export interface MessageDraft {
  msg: OutgoingMessage
  template: HtmlTemplate | null
  /** The pending recipients (bare addresses), in order: the first one's copy is also `msg`'s own. */
  recipients: string[]
  emailId: string
  /** Unix seconds after which the tracking and unsubscribe tokens are refused. */
  expiresAt: number
  /** false: the copies carry no List-Unsubscribe headers (the send chose `unsubscribe: false`). Absent: they do. */
  unsubscribe?: boolean
}

export interface MailTransport {
  readonly name: string
  /** One result per envelope recipient (see `envelopeRecipients`). Never throws for a delivery failure. */
  send(msg: OutgoingMessage): Promise<RecipientResult[]>
  /**
   * When the transport makes each recipient's copy itself (the SMTP thread does, off the mailer's
   * thread): the draft of the message (./compose.ts), its `msg` already given its DKIM key and envelope
   * senders. Same answers as `send`; throws MessageBuildError when a copy cannot be made.
   */
  sendDraft?(draft: MessageDraft): Promise<RecipientResult[]>
  close(): Promise<void>
}

export const SIMULATOR = {
  delivered: 'delivered@simulator.test',
  bounced: 'bounced@simulator.test',
  complained: 'complained@simulator.test',
} as const

const SIMULATOR_DOMAIN = 'simulator.test'

/**
 * The bare address of `Name <a@b>` or `a@b`, lower-cased. Returns '' when nothing
 * address-like is there, so callers can drop it instead of sending to garbage.
 */
export function bareAddress(input: string): string {
  // Most inputs are a bare address already (every envelope recipient is): those need no parser.
  if (isPlainAddress(input)) return input.toLowerCase()
  const parsed = addressparser(input, { flatten: true })
  const first = parsed.find((a) => a.address !== '')
  return (first?.address ?? '').trim().toLowerCase()
}

/**
 * `delivered+anything@simulator.test` counts too, so a test can use many distinct
 * simulator recipients in one send without them being deduplicated into one.
 */
function simulatorKind(address: string): keyof typeof SIMULATOR | null {
  const a = bareAddress(address)
  const at = a.lastIndexOf('@')
  if (at < 0 || a.slice(at + 1) !== SIMULATOR_DOMAIN) return null
  const local = a.slice(0, at).split('+')[0]
  return local === 'delivered' || local === 'bounced' || local === 'complained' ? local : null
}

export function isSimulatorAddress(a: string): boolean {
  return simulatorKind(a) !== null
}

export function simulatorOutcome(a: string): RecipientResult | null {
  const kind = simulatorKind(a)
  if (kind === null) return null
  const recipient = bareAddress(a)
  switch (kind) {
    case 'delivered':
      return { recipient, outcome: 'delivered', code: 250, response: 'simulator: delivered' }
    case 'bounced':
      return { recipient, outcome: 'bounced', code: 550, response: 'simulator: 550 mailbox does not exist' }
    case 'complained':
      // The mail was accepted; the caller raises delivered and then the complaint.
      return { recipient, outcome: 'complained', code: 250, response: 'simulator: delivered, recipient complained' }
    default:
      return null
  }
}

/** to + cc + bcc as bare, lower-cased, deduplicated addresses, in that order. */
export function envelopeRecipients(msg: Pick<OutgoingMessage, 'to' | 'cc' | 'bcc'>): string[] {
  const seen = new Set<string>()
  for (const entry of [...msg.to, ...msg.cc, ...msg.bcc]) {
    if (isPlainAddress(entry)) {
      seen.add(entry.toLowerCase())
      continue
    }
    // An entry may be a group ("Team: a@x, b@x;"); every address in it is a recipient.
    for (const { address } of addressparser(entry, { flatten: true })) {
      const a = address.trim().toLowerCase()
      if (a !== '') seen.add(a)
    }
  }
  return [...seen]
}

/** The Message-ID header value we put on every message, e.g. `<em_123@example.com>`. */
export function formatMessageId(msg: Pick<OutgoingMessage, 'messageId' | 'from'>): string {
  const from = bareAddress(msg.from)
  const at = from.lastIndexOf('@')
  // A sender without a domain is a config mistake elsewhere; `localhost` still yields a well-formed id.
  const domain = at >= 0 && at < from.length - 1 ? from.slice(at + 1) : 'localhost'
  return `<${msg.messageId}@${domain}>`
}

// Headers the message structure owns. A custom header with one of these names would
// either be silently overridden or, worse, duplicate a structural header (a second
// From or Bcc), so they never pass through from the custom set.
const RESERVED_HEADERS = new Set([
  'message-id', 'from', 'sender', 'to', 'cc', 'bcc', 'reply-to', 'subject', 'date',
  'mime-version', 'content-type', 'content-transfer-encoding', 'return-path',
])

// RFC 5322 field-name: printable US-ASCII except colon.
const FIELD_NAME = /^[\x21-\x39\x3b-\x7e]+$/

/**
 * The custom headers to put on the wire. Values are validated upstream; this is the
 * last line against header injection, so a name that is not a field-name is an error
 * rather than something to repair.
 */
export function customHeaders(headers: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (!FIELD_NAME.test(name)) throw new TypeError(`invalid header name ${JSON.stringify(name)}`)
    if (RESERVED_HEADERS.has(name.toLowerCase())) continue
    // Folding is the composer's job; a raw CR or LF here would start a new header line.
    out[name] = String(value).replace(/[\r\n]+/g, ' ')
  }
  return out
}
