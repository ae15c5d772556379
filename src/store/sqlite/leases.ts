// Letting go of leases, written once: a stopping node releases its own (its owner), a restored store every
// owner's (./backup.ts: the processes that held them are gone). Both take the same statements, so the two
// cannot come to disagree on what a released row looks like.
import type Database from 'better-sqlite3'
import { LIVE } from './delivery-rows.js'

/** Whose leases: one owner's (named by the `owner` parameter), or every owner's. */
export type Holders = 'owner' | 'every'

const held = (holders: Holders, column: string) => holders === 'owner' ? `${column} = @owner` : `${column} IS NOT NULL`

/**
 * Releases the delivery engine's leases: live deliveries are due at `now` under a fresh token (so an
 * outcome still in flight under the old one is stale), final ones just lose their owner, and the routing
 * lease is freed. Call inside a write.
 */
export function deliveryLeaseRelease (db: Database.Database, holders: Holders): (now: number, owner?: string) => void {
  const live = db.prepare(`UPDATE deliveries SET lease_owner = NULL, parked = 0, next_attempt_at = @now, lease = lease + 1
                           WHERE ${held(holders, 'lease_owner')} AND ${LIVE}`)
  const final = db.prepare(`UPDATE deliveries SET lease_owner = NULL, parked = 0 WHERE ${held(holders, 'lease_owner')} AND NOT (${LIVE})`)
  const routing = db.prepare(`UPDATE routing SET router_owner = NULL, router_until = 0 WHERE id = 1 AND ${held(holders, 'router_owner')}`)
  return holders === 'owner'
    ? (now, owner) => {
        live.run({ now, owner })
        final.run({ owner })
        routing.run({ owner })
      }
    : (now) => {
        live.run({ now })
        final.run()
        routing.run()
      }
}

/** Releases the mailer's leases on emails (their token stays: see EmailLease); returns how many. Call inside a write. */
export function emailLeaseRelease (db: Database.Database, holders: Holders): (owner?: string) => number {
  const release = db.prepare(`UPDATE emails SET lease_owner = NULL, lease_expires_at = NULL WHERE ${held(holders, 'lease_owner')}`)
  return holders === 'owner' ? (owner) => release.run({ owner }).changes : () => release.run().changes
}
