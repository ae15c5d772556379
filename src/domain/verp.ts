// VERP Return-Path addresses: `b+<token>@<bounce domain>`, one per email and recipient, so a bounce mailed
// back to it says which email and which recipient it is about. The token is signed (HMAC-SHA-256 with a
// key derived from SVC_SECRET, truncated to 80 bits) so nobody can make one that svc did not: a forged
// or altered address is refused at RCPT. Lower-case base32, because some mail servers fold the case of
// local parts.
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto'

export const VERP_PREFIX = 'b+'
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567'
const EMAIL_ID = /^em_[0-9a-f]{28}$/
const ID_BYTES = 14
const MAC_BYTES = 10
const TOKEN_BYTES = ID_BYTES + 1 + MAC_BYTES
/** 25 bytes in base32: 40 characters, so `b+<token>` fits the 64 characters of a local part. */
export const TOKEN_CHARS = Math.ceil((TOKEN_BYTES * 8) / 5)
/** Recipients of one email are at most 150 (to, cc and bcc of 50); one byte names one. */
export const MAX_RECIPIENT_INDEX = 255

export function verpKey (secret: string): Buffer {
  return Buffer.from(hkdfSync('sha256', secret, 'svc', 'svc verp return-path v1', 32))
}

function base32 (bytes: Buffer): string {
  let out = ''
  let bits = 0
  let value = 0
  for (const byte of bytes) {
    value = (value << 8) | byte
    bits += 8
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31]
      bits -= 5
    }
    value &= (1 << bits) - 1
  }
  if (bits > 0) out += ALPHABET[(value << (5 - bits)) & 31]
  return out
}

/** null unless `text` is exactly TOKEN_CHARS of the alphabet (either case). */
function unbase32 (text: string): Buffer | null {
  if (text.length !== TOKEN_CHARS) return null
  const out = Buffer.alloc(TOKEN_BYTES)
  let bits = 0
  let value = 0
  let at = 0
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i) | 0x20 // lower case
    const digit = c >= 97 && c <= 122 ? c - 97 : c >= 50 && c <= 55 ? c - 24 : -1
    if (digit < 0 || text.charCodeAt(i) > 0x7f) return null
    value = (value << 5) | digit
    bits += 5
    if (bits >= 8) {
      if (at < TOKEN_BYTES) out[at++] = (value >>> (bits - 8)) & 0xff
      bits -= 8
    }
    value &= (1 << bits) - 1
  }
  return at === TOKEN_BYTES ? out : null
}

function mac (key: Buffer, body: Buffer): Buffer {
  return createHmac('sha256', key).update('verp1').update(body).digest().subarray(0, MAC_BYTES)
}

export function makeVerpToken (key: Buffer, emailId: string, recipientIndex: number): string {
  if (!EMAIL_ID.test(emailId)) throw new TypeError('not an email id')
  if (!Number.isInteger(recipientIndex) || recipientIndex < 0 || recipientIndex > MAX_RECIPIENT_INDEX) throw new RangeError('recipient index out of range')
  const body = Buffer.alloc(ID_BYTES + 1)
  Buffer.from(emailId.slice(3), 'hex').copy(body)
  body[ID_BYTES] = recipientIndex
  return base32(Buffer.concat([body, mac(key, body)]))
}

export interface VerpClaims {
  emailId: string
  /** The recipient's place in the email's recipients. */
  recipientIndex: number
}

export function readVerpToken (key: Buffer, token: string): VerpClaims | null {
  const bytes = unbase32(token)
  if (bytes === null) return null
  const body = bytes.subarray(0, ID_BYTES + 1)
  if (!timingSafeEqual(mac(key, body), bytes.subarray(ID_BYTES + 1))) return null
  return { emailId: `em_${body.subarray(0, ID_BYTES).toString('hex')}`, recipientIndex: body[ID_BYTES]! }
}

export function verpAddress (key: Buffer, emailId: string, recipientIndex: number, domain: string): string {
  return `${VERP_PREFIX}${makeVerpToken(key, emailId, recipientIndex)}@${domain}`
}

/**
 * The claims of a VERP address, or why it is not one: 'not_verp' (another address), 'forged' (the shape
 * of a VERP address with a token svc did not sign). Bounded: nothing longer than an address can be is read.
 */
export function parseVerpAddress (key: Buffer, address: string): VerpClaims | 'not_verp' | 'forged' {
  if (address.length > 320) return 'not_verp'
  const at = address.lastIndexOf('@')
  if (at < 0) return 'not_verp'
  const local = address.slice(0, at)
  if (local.length < 2 || local.slice(0, 2).toLowerCase() !== VERP_PREFIX) return 'not_verp'
  return readVerpToken(key, local.slice(2)) ?? 'forged'
}
