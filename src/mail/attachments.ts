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
