import { randomBytes } from 'node:crypto'

export type IdPrefix = 'acct' | 'key' | 'wh' | 'em' | 'evt' | 'dlv'

/**
 * Application-made ids: `<prefix>_` + 12 hex digits of milliseconds + 16 random hex digits. They sort by
 * creation time (cursor pages and "newest first" need no extra column) and need no help from the store,
 * so the SQLite and MongoDB adapters make the same ids.
 */
export function newId (prefix: IdPrefix, now = Date.now()): string {
  return `${prefix}_${now.toString(16).padStart(12, '0')}${randomBytes(8).toString('hex')}`
}

const ID_PATTERN = /^[a-z]{2,4}_[0-9a-f]{28}$/

export function looksLikeId (value: string, prefix: IdPrefix): boolean {
  return value.startsWith(prefix + '_') && ID_PATTERN.test(value)
}
