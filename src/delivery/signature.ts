// Webhook signatures: `X-Svc-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…]`.
// v1 = lowercase hex HMAC-SHA256, keyed with the UTF-8 bytes of the whole secret (`whsec_` prefix
// included), over `<t>.<body>`. The timestamp is inside the signed bytes so a captured delivery cannot
// be replayed later with a fresh `t`. During a secret rotation there is one v1 per live secret, so a
// receiver holding either secret can verify.
//
// Beside it, every delivery carries the Standard Webhooks headers (https://www.standardwebhooks.com):
// `webhook-id` (the delivery id), `webhook-timestamp` (the same `t`) and
// `webhook-signature: v1,<base64>[ v1,<base64>…]`, HMAC-SHA256 over `<webhook-id>.<t>.<body>` keyed with
// the bytes the secret's base64 part encodes (standardWebhookKey), one entry per live secret.
import { createHmac, timingSafeEqual } from 'node:crypto'
import { standardWebhookKey } from '../domain/secrets.js'

export const SIGNATURE_HEADER = 'x-svc-signature'
export const DEFAULT_TOLERANCE_SECONDS = 300

export function sign (secret: string, timestamp: number, body: string): string {
  // A string key is keyed with its UTF-8 bytes, as Buffer.from(secret, 'utf8') would be, without the copy.
  return createHmac('sha256', secret)
    .update(`${timestamp}.`, 'utf8')
    .update(body, 'utf8')
    .digest('hex')
}

export function signatureHeader (secrets: string[], timestamp: number, body: string): string {
  if (secrets.length === 0) throw new Error('a webhook delivery needs at least one signing secret')
  if (!Number.isSafeInteger(timestamp) || timestamp < 0) throw new Error('signature timestamp must be whole unix seconds')
  // One secret is the common case (two only during a rotation): no array, no join.
  let header = `t=${timestamp},v1=${sign(secrets[0]!, timestamp, body)}`
  for (let i = 1; i < secrets.length; i++) header += `,v1=${sign(secrets[i]!, timestamp, body)}`
  return header
}

/** Standard Webhooks `v1` value (base64, no `v1,`) of one delivery, keyed with the decoded secret bytes. */
export function standardSign (key: Buffer, deliveryId: string, timestamp: number, body: string): string {
  return createHmac('sha256', key).update(`${deliveryId}.${timestamp}.`, 'utf8').update(body, 'utf8').digest('base64')
}

/**
 * The HMAC keys of one webhook's live secrets, made once and used for each of its deliveries (a
 * webhook's deliveries travel together and share their secrets).
 */
export interface SigningKeys {
  /** The seed's scheme: the UTF-8 bytes of each whole secret, in order. Empty: nothing may be signed. */
  svc: Buffer[]
  /** Standard Webhooks: each secret's decoded bytes, in order; a secret that is not base64 has none. */
  standard: Buffer[]
}

export function signingKeys (secrets: readonly string[]): SigningKeys {
  const standard: Buffer[] = []
  for (const secret of secrets) {
    const key = standardWebhookKey(secret)
    if (key) standard.push(key)
  }
  return { svc: secrets.map((s) => Buffer.from(s, 'utf8')), standard }
}

export interface DeliverySignatures {
  /** `X-Svc-Signature`. */
  svc: string
  /** `webhook-signature`; undefined when no live secret has a Standard Webhooks key. */
  standard: string | undefined
}

/**
 * Both signature headers of one delivery, at one timestamp. The body is fed to each HMAC as it is
 * (no concatenated copy of it is made). Throws without a secret: a delivery is never sent unsigned.
 */
export function signDelivery (keys: SigningKeys, deliveryId: string, timestamp: number, body: string): DeliverySignatures {
  if (keys.svc.length === 0) throw new Error('a webhook delivery needs at least one signing secret')
  if (!Number.isSafeInteger(timestamp) || timestamp < 0) throw new Error('signature timestamp must be whole unix seconds')
  const t = String(timestamp)
  const seedPrefix = `${t}.`
  let svc = `t=${t}`
  for (const key of keys.svc) {
    svc += `,v1=${createHmac('sha256', key).update(seedPrefix, 'utf8').update(body, 'utf8').digest('hex')}`
  }
  let standard: string | undefined
  if (keys.standard.length > 0) {
    const prefix = `${deliveryId}.${t}.`
    for (const key of keys.standard) {
      const entry = `v1,${createHmac('sha256', key).update(prefix, 'utf8').update(body, 'utf8').digest('base64')}`
      standard = standard === undefined ? entry : `${standard} ${entry}`
    }
  }
  return { svc, standard }
}

/**
 * Receiver side: true when `header` carries a v1 signature of `body` made with `secret`, and its
 * timestamp is within `toleranceSeconds` of `now` (unix seconds) in either direction. A timestamp from
 * the future is refused too, so a clock that runs ahead cannot mint signatures that stay valid longer.
 * `body` must be the raw request body as received, not a re-serialised parse of it.
 */
export function verifySignature (
  header: string,
  body: string,
  secret: string,
  opts: { toleranceSeconds?: number; now?: number } = {},
): boolean {
  const tolerance = opts.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS
  const now = opts.now ?? Math.floor(Date.now() / 1000)
  let timestamp: number | undefined
  const candidates: string[] = []
  for (const part of header.split(',')) {
    const eq = part.indexOf('=')
    if (eq === -1) continue
    const key = part.slice(0, eq).trim()
    const value = part.slice(eq + 1).trim()
    if (key === 't') {
      // Two timestamps would leave it open which one was signed.
      if (timestamp !== undefined || !/^\d{1,15}$/.test(value)) return false
      timestamp = Number(value)
    } else if (key === 'v1') {
      candidates.push(value)
    }
  }
  if (timestamp === undefined || candidates.length === 0) return false
  if (Math.abs(now - timestamp) > tolerance) return false

  const expected = Buffer.from(sign(secret, timestamp, body), 'utf8')
  let match = false
  for (const candidate of candidates) {
    const given = Buffer.from(candidate, 'utf8')
    // Lengths are public (always 64 hex characters), so only equal-length values need the constant-time
    // compare; every candidate is compared so timing does not reveal which one matched.
    if (given.length === expected.length && timingSafeEqual(given, expected)) match = true
  }
  return match
}
