// An email's attachments on their way out: their bytes read from the store once per attempt (whatever
// the recipients), put on the attempt's message, and encoded once per message (./mime.ts). What a relay
// receives of them is base64 in lines of 76 characters, which each recipient's copy shares.
import type { EmailRecord } from '../store/emails.js'
import { MessageBuildError } from './compose.js'
import type { MessageAttachment, OutgoingMessage } from './transport.js'

/** The default of ATTACHMENT_RETENTION_HOURS: a day after the email's last attempt. */
export const DEFAULT_ATTACHMENT_RETENTION_MS = 24 * 3_600_000

/**
 * The message with the email's attachments and their bytes. Throws MessageBuildError when the bytes are
 * no longer stored (sending again would fail again); a store fault throws as it is (the attempt is retried).
 */
export async function withAttachments (
  store: { readEmailAttachments(emailId: string): Promise<Buffer[] | null> }, email: EmailRecord, msg: OutgoingMessage,
): Promise<OutgoingMessage> {
  const facts = email.attachments ?? []
  if (facts.length === 0) return msg
  const contents = await store.readEmailAttachments(email.id)
  if (contents === null || contents.length !== facts.length) {
    throw new MessageBuildError('its attachments are no longer stored')
  }
  const attachments = facts.map((a, i): MessageAttachment => {
    const out: MessageAttachment = { filename: a.filename, contentType: a.contentType, content: contents[i]! }
    if (a.contentId !== undefined) out.contentId = a.contentId
    return out
  })
  return { ...msg, attachments }
}

/** The bytes of an attachment as a Buffer, without a copy (a Uint8Array after a trip between threads). */
export function asBuffer (bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
}

/**
 * Base64 in lines of 76 characters with CRLF between them, as bytes: what MIME's base64 encoding of an
 * attachment is (RFC 2045 §6.8). One pass, no intermediate string per line.
 */
export function base64Body (bytes: Uint8Array): Buffer {
  const b64 = Buffer.from(asBuffer(bytes).toString('base64'), 'latin1')
  const lines = Math.ceil(b64.length / 76)
  if (lines <= 1) return b64
  const out = Buffer.allocUnsafe(b64.length + 2 * (lines - 1))
  let at = 0
  for (let i = 0; i < b64.length; i += 76) {
    if (i > 0) { out[at++] = 0x0d; out[at++] = 0x0a }
    at += b64.copy(out, at, i, Math.min(i + 76, b64.length))
  }
  return out
}

/**
 * The attachment bytes the mailer holds at once (read from the store, copied to the SMTP thread, encoded
 * there), in decoded bytes: attempts of emails with files wait for room, so that a burst of large emails
 * takes memory in proportion to this, not to the mailer's concurrency. One email larger than the whole
 * budget goes alone.
 */
export const DEFAULT_ATTACHMENT_BYTES_IN_FLIGHT = 64 * 1024 * 1024

export class ByteBudget {
  private used = 0
  private readonly waiting: Array<{ n: number; go: () => void }> = []

  constructor (private readonly limit: number) {}

  /** Resolves once `n` bytes fit (or nothing else is held); give them back with give(n). */
  take (n: number): Promise<void> {
    if (n <= 0) return Promise.resolve()
    if (this.waiting.length === 0 && this.fits(n)) {
      this.used += n
      return Promise.resolve()
    }
    return new Promise((resolve) => this.waiting.push({ n, go: resolve }))
  }

  give (n: number): void {
    if (n <= 0) return
    this.used -= n
    // First come, first served: a large one at the head is not overtaken for ever by small ones.
    while (this.waiting.length > 0 && this.fits(this.waiting[0]!.n)) {
      const next = this.waiting.shift()!
      this.used += next.n
      next.go()
    }
  }

  /** Bytes held now. */
  get held (): number {
    return this.used
  }

  private fits (n: number): boolean {
    return this.used === 0 || this.used + n <= this.limit
  }
}

/** The decoded bytes of an email's attachments, from its facts. */
export function attachmentBytes (email: Pick<EmailRecord, 'attachments'>): number {
  let n = 0
  for (const a of email.attachments ?? []) n += a.size
  return n
}
