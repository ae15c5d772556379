// Which secret a store was written under. API keys and sessions are stored as HMACs keyed with the
// server's secret (SVC_SECRET, or DATA_DIR/secret in development), and webhook secrets and DKIM keys are
// sealed under keys derived from it: a store opened under another secret answers 401 to every key and
// cannot open what it sealed. So the store keeps a check value of the secret it was written under, and
// svc compares it with its own before it serves.
//
// The check value is an HMAC of a fixed label keyed with the secret: it confirms a secret, it does not
// reveal one (not the secret, not a plain hash of it), and it tells nothing a stolen store did not already
// tell (a sealed value confirms a guessed secret just as well).
import { createHmac, timingSafeEqual } from 'node:crypto'

const LABEL = 'svc secret check v1'
const VERSION = 'v1'
const DIGEST_BYTES = 32

function digest (secret: string): Buffer {
  return createHmac('sha256', secret).update(LABEL).digest()
}

/** The check value of `secret`, as the store keeps it: `v1.<base64url of HMAC-SHA256(secret, label)>`. */
export function secretCheckValue (secret: string): string {
  return `${VERSION}.${digest(secret).toString('base64url')}`
}

/**
 * Whether `stored` is the check value of `secret`. The digests are compared in constant time; a value in
 * another form (not `v1.`, not 32 bytes) matches no secret.
 */
export function secretMatchesCheck (secret: string, stored: string): boolean {
  const dot = stored.indexOf('.')
  if (dot === -1 || stored.slice(0, dot) !== VERSION) return false
  const text = stored.slice(dot + 1)
  // base64url of 32 bytes is 43 characters; a longer text is not worth decoding.
  if (text.length !== Math.ceil(DIGEST_BYTES * 4 / 3)) return false
  const given = Buffer.from(text, 'base64url')
  if (given.length !== DIGEST_BYTES) return false
  return timingSafeEqual(given, digest(secret))
}

/** Where a svc process's secret comes from, as an operator names it. */
export type SecretSource = { kind: 'env' } | { kind: 'file'; path: string }

function describeSource (source: SecretSource): string {
  return source.kind === 'env' ? 'SVC_SECRET' : `${source.path}, as SVC_SECRET is not set`
}

/**
 * The one line svc says when `what` (a store, a backup) was written under another secret than its own:
 * what to set, never a secret or a check value.
 */
export function otherSecretMessage (what: string, source: SecretSource): string {
  return `${what} was written under another secret than this svc's (from ${describeSource(source)}): ` +
    'set SVC_SECRET (or, without it, DATA_DIR/secret) to the secret it was written with'
}

/**
 * What a backup's check value says about restoring it under `secret` (undefined: no secret is known yet,
 * neither SVC_SECRET nor DATA_DIR/secret): 'matched'; 'unchecked' when the backup holds no check value
 * (made before svc kept one), which nothing can be compared with; 'other' when it was written under
 * another secret; 'unknown' when it has a check value and there is no secret here to compare it with.
 */
export type BackupSecret = 'matched' | 'unchecked' | 'other' | 'unknown'

export function judgeBackupSecret (secret: string | undefined, stored: string | null): BackupSecret {
  if (stored === null) return 'unchecked'
  if (secret === undefined) return 'unknown'
  return secretMatchesCheck(secret, stored) ? 'matched' : 'other'
}

/** The line for 'unknown': a backup with a check value, restored where no secret is set yet. */
export function noSecretToCheckMessage (what: string, secretFile: string): string {
  return `${what} was written under a secret, and neither SVC_SECRET nor ${secretFile} is here to check it against: ` +
    'set SVC_SECRET (or, without it, put DATA_DIR/secret in place) to the secret it was written with'
}
