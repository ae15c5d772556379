// Webhook signatures: `X-Svc-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…]`.
// v1 = lowercase hex HMAC-SHA256, keyed with the UTF-8 bytes of the whole secret (`whsec_` prefix
// included), over `<t>.<body>`. The timestamp is inside the signed bytes so a captured delivery cannot
// be replayed later with a fresh `t`. During a secret rotation there is one v1 per live secret, so a
// receiver holding either secret can verify.
import { createHmac, timingSafeEqual } from 'node:crypto'

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
