import { hash, randomBytes } from 'node:crypto'

export type IdPrefix = 'acct' | 'key' | 'wh' | 'em' | 'evt' | 'dlv' | 'dom' | 'rcv' | 'tpl'

/**
 * Application-made ids: `<prefix>_` + 12 hex digits of milliseconds + 16 hex digits (64 bits) drawn from
 * the CSPRNG for each id. The time prefix keeps them in creation order to the millisecond (cursor pages
 * and "newest first" need no extra column; ties within one millisecond fall in a random but fixed order,
 * which keyset pages handle like any other); the random part is whole in every id, so an id says nothing
 * about the ids made beside it. They need no help from the store, so the SQLite and MongoDB adapters make
 * the same ids.
 */
// Random bytes are drawn 4 KiB at a time: one call into the CSPRNG per 512 ids rather than one per id.
let pool = Buffer.alloc(0)
let poolAt = 0

/** `bytes` fresh CSPRNG bytes as hex, from a pool drawn 4 KiB at a time. */
export function randomHex (bytes: number): string {
  if (poolAt + bytes > pool.length) {
    pool = randomBytes(Math.max(4096, bytes))
    poolAt = 0
  }
  const hex = pool.toString('hex', poolAt, poolAt + bytes)
  // Each draw is used once: the pool's bytes are never handed out twice.
  pool.fill(0, poolAt, poolAt + bytes)
  poolAt += bytes
  return hex
}

export function newId (prefix: IdPrefix, now = Date.now()): string {
  return `${prefix}_${now.toString(16).padStart(12, '0')}${randomHex(8)}`
}

const ID_PATTERN = /^[a-z]{2,4}_[0-9a-f]{28}$/

export function looksLikeId (value: string, prefix: IdPrefix): boolean {
  return value.startsWith(prefix + '_') && ID_PATTERN.test(value)
}

/**
 * A delivery's id follows from its event and webhook, so routing the same event twice (a retried write,
 * a second node) can never make two deliveries of it. It keeps the event's time digits, so deliveries
 * sort by when their event happened.
 */
export function deliveryId (eventId: string, webhookId: string): string {
  const time = eventId.slice(eventId.indexOf('_') + 1, eventId.indexOf('_') + 13)
  // One-shot: a third of createHash().update().digest()'s cost, the same digest.
  return `dlv_${time}${hash('sha256', `${eventId}:${webhookId}`, 'hex').slice(0, 16)}`
}

/** The delivery log's page cursor: the last delivery id of a page, opaque to clients. */
export function encodeDeliveryCursor (id: string): string {
  return Buffer.from(id).toString('base64url')
}

/** The delivery id a cursor names, or null when it is not a cursor this API gave out. */
export function decodeDeliveryCursor (cursor: string): string | null {
  const id = Buffer.from(String(cursor), 'base64url').toString()
  return /^dlv_[0-9a-f]{28}$/.test(id) ? id : null
}
