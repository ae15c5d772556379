// The pieces of a message's bytes that both builders share (./mime.ts for plain messages, and
// ./mime-attachments.ts for messages that carry files): the template's shape, the markers, base64 lines,
// relaxed canonicalization and the DKIM-Signature field.
import { createPrivateKey, sign, type KeyObject } from 'node:crypto'
import { randomHex } from '../domain/ids.js'
import { DKIM_SIGNED_HEADERS, type OutgoingMessage, type RecipientCopy } from './transport.js'

/** One message, ready to be made for any of its recipients. */
export interface MimeTemplate {
  /** The bytes for one recipient (their copy, or the message as it is), DKIM-signed when the message has a key. */
  render(copy: RecipientCopy | undefined): Promise<Buffer>
  /**
   * The same bytes in pieces, where a message carries large parts that every copy shares (attachments,
   * ./mime-attachments.ts): each copy's own bytes are a few small buffers around the shared ones, which
   * the relay connection writes one after another. Absent: render() is the whole message.
   */
  parts?(copy: RecipientCopy | undefined): Promise<Buffer[]>
}

export const UNSUBSCRIBE = 'List-Unsubscribe'

// A marker's randomness comes from the ids' pool: a call into the CSPRNG per marker was a measurable share
// of the mailer's thread.
// A marker of 57 bytes is one line of 76 characters in base64, which is how MailComposer writes it.
export function marker (what: string): string {
  return `svc-${what}-${randomHex(24)}`.slice(0, 57)
}

/** base64 in lines of 76 characters (RFC 2045), CRLF between them, none after the last. */
export function base64Lines (text: string): string {
  const b64 = Buffer.from(text, 'utf8').toString('base64')
  if (b64.length <= 76) return b64
  const lines: string[] = []
  for (let i = 0; i < b64.length; i += 76) lines.push(b64.slice(i, i + 76))
  return lines.join('\r\n')
}

/** RFC 6376 §3.4.4 relaxed body canonicalization, in one pass over the lines. */
export function relaxedBody (body: string): string {
  const lines = body.split('\r\n')
  let end = lines.length
  // Trailing empty lines go (a body that ends in CRLF splits into a last empty "line").
  const canon: string[] = []
  for (let i = 0; i < end; i++) canon.push(lines[i]!.replace(/[ \t]+/g, ' ').replace(/ $/, ''))
  while (end > 0 && canon[end - 1] === '') end--
  return end === 0 ? '' : canon.slice(0, end).join('\r\n') + '\r\n'
}

/** The header block's fields, each with its unfolded lines, in order. */
export function headerFields (head: string): Array<{ key: string; line: string }> {
  const out: Array<{ key: string; line: string }> = []
  for (const line of head.split('\r\n')) {
    if ((line.startsWith(' ') || line.startsWith('\t')) && out.length > 0) out[out.length - 1]!.line += '\r\n' + line
    else out.push({ key: line.slice(0, line.indexOf(':')).trim().toLowerCase(), line })
  }
  return out
}

/** RFC 6376 §3.4.2 relaxed header canonicalization of one field's value. */
function relaxedValue (line: string): string {
  return line.slice(line.indexOf(':') + 1).replace(/\r\n/g, '').replace(/[ \t]+/g, ' ').trim()
}

// Parsing a PEM key costs more than signing with it: the keys of the latest domains are kept parsed.
const keys = new Map<string, KeyObject>()
export function keyOf (pem: string): KeyObject {
  let key = keys.get(pem)
  if (key === undefined) {
    key = createPrivateKey(pem)
    if (keys.size >= 100) keys.delete(keys.keys().next().value!)
    keys.set(pem, key)
  }
  return key
}

const signAsync = (data: Buffer, key: KeyObject): Promise<Buffer> =>
  new Promise((resolve, reject) => sign('sha256', data, key, (err, sig) => { if (err) reject(err); else resolve(sig) }))

const SIGNED = DKIM_SIGNED_HEADERS.toLowerCase().split(':')

/** The DKIM-Signature header field for a message whose canonical body's hash (base64) is `bh`. */
export async function dkimHeader (head: string, bh: string, dkim: NonNullable<OutgoingMessage['dkim']>, key: KeyObject): Promise<string> {
  // The last instance of each field is the one signed (RFC 6376 §5.4.2); ours appear once each.
  const fields = headerFields(head)
  const names: string[] = []
  const canon: string[] = []
  for (const name of SIGNED) {
    for (let i = fields.length - 1; i >= 0; i--) {
      if (fields[i]!.key === name) {
        names.push(name)
        canon.push(`${name}:${relaxedValue(fields[i]!.line)}`)
        break
      }
    }
  }
  const tags = `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=${dkim.domainName}; q=dns/txt;\r\n s=${dkim.keySelector}; bh=${bh};\r\n h=${names.join(':')};\r\n b=`
  const data = canon.join('\r\n') + '\r\n' + `dkim-signature:${relaxedValue(tags)}`
  const b = (await signAsync(Buffer.from(data, 'latin1'), key)).toString('base64')
  const folded: string[] = []
  for (let i = 0; i < b.length; i += 72) folded.push(b.slice(i, i + 72))
  return tags + folded.join('\r\n ')
}
