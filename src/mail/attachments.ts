// An email's attachments on their way out: their bytes read from the store once per attempt (whatever
// the recipients), put on the attempt's message, and encoded once per message (./mime.ts). What a relay
// receives of them is base64 in lines of 76 characters, which each recipient's copy shares.
import type { EmailRecord } from '../store/emails.js'
import { MessageBuildError } from './compose.js'
import { markDotFree } from './smtp-reply.js'
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

/** Bytes encoded per call: 512 lines of 57 bytes (no whole-file string in between, less for the GC to carry). */
const ENCODE_BLOCK = 57 * 512

/**
 * Base64 in lines of 76 characters with CRLF between them, as bytes: what MIME's base64 encoding of an
 * attachment is (RFC 2045 §6.8). Encoded a block at a time into the tail of the output, then each line
 * moved forward to its place with its line break before it: one native move per line, where writing each
 * line from its own string cost twice as much.
 */
export function base64Body (bytes: Uint8Array): Buffer {
  const src = asBuffer(bytes)
  const n = src.length
  const encoded = Math.ceil(n / 3) * 4
  const lines = Math.ceil(encoded / 76)
  const out = Buffer.allocUnsafe(encoded + 2 * Math.max(0, lines - 1))
  const start = out.length - encoded
  for (let i = 0; i < n; i += ENCODE_BLOCK) {
    out.write(src.toString('base64', i, Math.min(i + ENCODE_BLOCK, n)), start + (i / 3) * 4, 'latin1')
  }
  // Line k moves from start + 76k to 78k, never past where a later line is still to be read.
  let at = 0
  for (let from = start; from < out.length; from += 76) {
    if (at > 0) { out[at++] = 0x0d; out[at++] = 0x0a }
    const end = Math.min(from + 76, out.length)
    out.copyWithin(at, from, end)
    at += end - from
  }
  // Base64 lines never start with a dot: DATA need not look for one in each copy.
  return markDotFree(out)
}

/**
 * The attachment bytes the mailer holds at once (read from the store, copied to the SMTP thread, encoded
 * there), in decoded bytes: attempts of emails with files wait for room, so that a burst of large emails
 * takes memory in proportion to this, not to the mailer's concurrency. One email larger than the whole
 * budget goes alone.
 */
export const DEFAULT_ATTACHMENT_BYTES_IN_FLIGHT = 64 * 1024 * 1024

/** The decoded bytes of an email's attachments, from its facts. */
export function attachmentBytes (email: Pick<EmailRecord, 'attachments'>): number {
  let n = 0
  for (const a of email.attachments ?? []) n += a.size
  return n
}
