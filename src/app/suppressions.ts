// The account's suppression list: addresses that later sends drop. Bounces, complaints and unsubscribes
// add to it on their own (with the event that records them); the account adds and removes by hand.
import { NotFound, ValidationError } from '../errors.js'
import type { SuppressionCursor, SuppressionReason, SuppressionRecord } from '../store/emails.js'
import type { Store } from '../store/types.js'
import { parseAddress } from '../domain/addresses.js'
import { iso, type Clock } from '../domain/clock.js'

export const SUPPRESSION_REASONS = ['bounced', 'complained', 'unsubscribed', 'manual'] as const satisfies readonly SuppressionReason[]

export function encodeSuppressionCursor (c: SuppressionCursor): string {
  return Buffer.from(JSON.stringify([c.createdAt, c.email])).toString('base64url')
}

export function decodeSuppressionCursor (cursor: string): SuppressionCursor | null {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
    if (Array.isArray(value) && value.length === 2 && typeof value[0] === 'string' && typeof value[1] === 'string' &&
        !Number.isNaN(Date.parse(value[0]))) {
      return { createdAt: value[0], email: value[1] }
    }
  } catch {}
  return null
}

export interface SuppressionPage {
  items: SuppressionRecord[]
  nextCursor: string | null
}

export function createSuppressionService ({ store, clock }: { store: Store; clock: Clock }) {
  return {
    /** Newest first, in pages; nextCursor is null on the last page. */
    async list (accountId: string, opts: { limit: number; cursor?: string }): Promise<SuppressionPage> {
      let after: SuppressionCursor | undefined
      if (opts.cursor !== undefined) {
        const decoded = decodeSuppressionCursor(opts.cursor)
        if (decoded === null) throw ValidationError('The request is not valid', [{ path: 'query.cursor', message: 'is not a cursor this API gave out' }])
        after = decoded
      }
      // One more than asked tells whether another page exists without a count.
      const rows = await store.listSuppressions(accountId, { limit: opts.limit + 1, ...(after ? { after } : {}) })
      const items = rows.slice(0, opts.limit)
      const last = items.at(-1)
      return { items, nextCursor: rows.length > opts.limit && last ? encodeSuppressionCursor(last) : null }
    },

    /** Adds the address; when it is already suppressed, the existing entry (and its reason) stays. */
    async add (accountId: string, email: string, reason: SuppressionReason): Promise<{ created: boolean; record: SuppressionRecord }> {
      const parsed = parseAddress(email)
      if ('error' in parsed) throw ValidationError('The request is not valid', [{ path: 'body.email', message: parsed.error }])
      return await store.addSuppression({ accountId, email: parsed.address, reason, createdAt: iso(clock.now()) })
    },

    /** Removes the address: later sends reach it again. NotFound when it is not suppressed. */
    /** The entry for this address; not_found when it is not suppressed. */
    async find (accountId: string, email: string): Promise<SuppressionRecord> {
      const [found] = await store.findSuppressions(accountId, [email.trim().toLowerCase()])
      if (found === undefined) throw NotFound('This address is not on the suppression list')
      return found
    },

    async remove (accountId: string, email: string): Promise<string> {
      const address = email.trim().toLowerCase()
      if (!await store.deleteSuppression(accountId, address)) throw NotFound('This address is not on the suppression list')
      return address
    },
  }
}

export type SuppressionService = ReturnType<typeof createSuppressionService>
