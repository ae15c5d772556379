// Who holds a lease, and until when. The mail queue and the delivery engine both lease work in the store
// (an email being mailed, a delivery in flight, the routing lease), and both name the holder the same way:
// the node's name (NODE_ID), this process's id and 32 random bits. Two processes started with the same
// NODE_ID (a copied environment, a second `npm start` on the same data) are still two holders: neither can
// release, renew or record under the other's leases, so neither can make the other send an email or a
// delivery twice. The price: the work a process held when it died waits for its leases to run out
// (MAIL_LEASE_SECONDS, DELIVERY_LEASE_SECONDS), whoever takes it over, the same process restarted included.
//
// Both keep a lease's end the same way too: a time in ms since the epoch (a number, in the store as in
// memory). A lease taken or renewed at `now` holds until leaseUntil(now, leaseMs); a claim at `now` may take
// it once that time is <= now.
import { randomHex } from './ids.js'

export function leaseOwner (nodeId: string, pid: number = process.pid): string {
  return `${nodeId}:${pid}:${randomHex(4)}`
}

/** When a lease taken or renewed at `now` (ms since the epoch) for `leaseMs` runs out, in ms since the epoch. */
export function leaseUntil (now: number, leaseMs: number): number {
  return now + leaseMs
}
