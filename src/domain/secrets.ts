// Secret material: API keys, session tokens, webhook secrets, DKIM keys and passwords. Secrets that svc
// only checks are stored as hashes; secrets it must use again (webhook signing secrets, DKIM private keys)
// are sealed with a key derived from SVC_SECRET (seal/open, below); every comparison of secret bytes is
// constant-time.
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto'

export const API_KEY_PREFIX = 'svc_sk_'
export const WEBHOOK_SECRET_PREFIX = 'whsec_'
/** How much of a key stays readable, for people to recognise it in a list. */
export const KEY_PREFIX_LENGTH = 12

export function randomToken (bytes = 32): string {
  return randomBytes(bytes).toString('base64url')
}

export function newApiKey (): { key: string; keyPrefix: string } {
  const key = API_KEY_PREFIX + randomToken(32)
  return { key, keyPrefix: key.slice(0, KEY_PREFIX_LENGTH) }
}

/** Random bytes behind a new webhook secret (Standard Webhooks asks for 24 to 64). */
export const WEBHOOK_SECRET_BYTES = 32

/**
 * `whsec_` + standard base64 (padded) of 32 random bytes: the form the Standard Webhooks libraries read,
 * so a receiver hands the secret to them as it is.
 */
export function newWebhookSecret (): string {
  return WEBHOOK_SECRET_PREFIX + randomBytes(WEBHOOK_SECRET_BYTES).toString('base64')
}

/**
 * The Standard Webhooks HMAC key of a webhook secret: the bytes that the standard base64 after `whsec_`
 * encodes (the prefix is optional, as in the Standard Webhooks libraries). A string that is not base64
 * (svc never made one) has no key: undefined. Linear in the secret's length, no regex.
 */
export function standardWebhookKey (secret: string): Buffer | undefined {
  const text = secret.startsWith(WEBHOOK_SECRET_PREFIX) ? secret.slice(WEBHOOK_SECRET_PREFIX.length) : secret
  if (text.length === 0 || text.length > 1024) return undefined
  let padding = 0
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x3d /* = */) {
      padding += 1
      continue
    }
    if (padding > 0) return undefined // only padding may follow padding
    if ((c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39)) continue
    if (c !== 0x2b /* + */ && c !== 0x2f /* / */) return undefined
  }
  // Padded: whole quads, at most two `=`. Unpadded: a length a base64 text can have.
  if (padding > 0 ? padding > 2 || text.length % 4 !== 0 : text.length % 4 === 1) return undefined
  const key = Buffer.from(text, 'base64')
  return key.length > 0 ? key : undefined
}

/**
 * Keyed hash of a high-entropy token (API key, session token). A keyed HMAC rather than a slow hash:
 * the tokens carry 256 random bits, so a fast hash is safe, and it lets `x-api-key` be checked with one
 * indexed lookup per request. The server secret as key means a stolen database alone cannot confirm a
 * guessed key.
 */
export function hashToken (secret: string, token: string, purpose: 'api-key' | 'session'): string {
  return createHmac('sha256', secret).update(purpose).update('\0').update(token).digest('base64url')
}

// scrypt with N=2^15, r=8: about 32 MiB and tens of milliseconds per hash, so guessing is slow.
const SCRYPT: ScryptOptions = { N: 1 << 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 }
const SCRYPT_KEYLEN = 32

function scryptAsync (password: string, salt: Buffer, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password.normalize('NFKC'), salt, SCRYPT_KEYLEN, options, (err, key) => (err ? reject(err) : resolve(key)))
  })
}

/** `scrypt$N$r$p$salt$hash`: the parameters travel with the hash, so they can be raised later. */
export async function hashPassword (password: string): Promise<string> {
  const salt = randomBytes(16)
  const key = await scryptAsync(password, salt, SCRYPT)
  return ['scrypt', SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64url'), key.toString('base64url')].join('$')
}

export async function verifyPassword (password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split('$')
  if (scheme !== 'scrypt' || !n || !r || !p || !salt || !hash) return false
  const expected = Buffer.from(hash, 'base64url')
  const N = Number(n)
  const actual = await scryptAsync(password, Buffer.from(salt, 'base64url'), {
    N, r: Number(r), p: Number(p), maxmem: Math.max(64 * 1024 * 1024, 256 * N * Number(r)),
  })
  return actual.length === expected.length && timingSafeEqual(actual, expected)
}

/** A hash of a password nobody has, so a login for an unknown email costs the same as a wrong password. */
let decoy: Promise<string> | undefined
export function decoyPasswordHash (): Promise<string> {
  decoy ??= hashPassword(randomToken(16))
  return decoy
}

export function safeEqual (a: string, b: string): boolean {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

// Sealing: AES-256-GCM under a key derived from SVC_SECRET with HKDF, one key per purpose, so a value
// sealed for one purpose never opens as another. seal/open use a fresh 96-bit IV per value and bind the
// value to its record (the record's id as associated data: a sealed value copied onto another record does
// not open). The form: `v1.<iv>.<tag>.<ciphertext>`, base64url parts. Tracking tokens have a compact
// form of their own (src/mail/tracking.ts) under the key sealingKey gives them.

/** What a sealed value is for; each purpose has a key of its own. */
export type SealPurpose = 'webhook signing secret' | 'dkim private key' | 'tracking token'

/** The HKDF info of each purpose's key; changing one makes every value sealed for it unreadable. */
const SEAL_INFO: Record<SealPurpose, string> = {
  'webhook signing secret': 'svc webhook signing secret v1',
  'dkim private key': 'svc dkim private key v1',
  'tracking token': 'svc tracking token v2: AES-256-GCM seal key',
}

// One secret per process in practice: each purpose's key is derived once, and a 1,000-link email (a
// tracking token per link) costs no derivation at all.
const sealingKeys = new Map<SealPurpose, { secret: string; key: Buffer }>()

/** The 256-bit key of a purpose: HKDF-SHA256 of SVC_SECRET (salt 'svc'), the purpose's info. */
export function sealingKey (secret: string, purpose: SealPurpose): Buffer {
  const known = sealingKeys.get(purpose)
  if (known !== undefined && known.secret === secret) return known.key
  if (!Object.hasOwn(SEAL_INFO, purpose)) throw new TypeError(`no sealing purpose ${String(purpose)}`)
  const key = Buffer.from(hkdfSync('sha256', secret, 'svc', SEAL_INFO[purpose], 32))
  sealingKeys.set(purpose, { secret, key })
  return key
}

/** `plain` sealed for `purpose`, bound to the record `recordId`. */
export function seal (secret: string, purpose: SealPurpose, recordId: string, plain: string): string {
  const iv = randomBytes(12)
  const cipher = createCipheriv('aes-256-gcm', sealingKey(secret, purpose), iv)
  cipher.setAAD(Buffer.from(recordId))
  const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()])
  return ['v1', iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), body.toString('base64url')].join('.')
}

/**
 * What seal() sealed. Throws when the value does not open: another purpose, another record, another
 * SVC_SECRET, a byte altered, or not a sealed value at all.
 */
export function open (secret: string, purpose: SealPurpose, recordId: string, sealed: string): string {
  const [version, iv, tag, body, extra] = sealed.split('.', 5)
  if (version !== 'v1' || !iv || !tag || body === undefined || extra !== undefined) throw new Error(`a sealed ${purpose} has an unknown format`)
  // The tag's length fixed at 16 bytes: GCM would otherwise also take a truncated tag, a weaker check.
  const decipher = createDecipheriv('aes-256-gcm', sealingKey(secret, purpose), Buffer.from(iv, 'base64url'), { authTagLength: 16 })
  decipher.setAAD(Buffer.from(recordId))
  decipher.setAuthTag(Buffer.from(tag, 'base64url'))
  return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8')
}

/** The stored form of a webhook's signing secret, bound to the webhook's id. */
export function sealWebhookSecret (secret: string, webhookId: string, plain: string): string {
  return seal(secret, 'webhook signing secret', webhookId, plain)
}

/** The signing secret of a stored one; one that does not open (another SVC_SECRET, altered) throws. */
export function openWebhookSecret (secret: string, webhookId: string, stored: string): string {
  return open(secret, 'webhook signing secret', webhookId, stored)
}
