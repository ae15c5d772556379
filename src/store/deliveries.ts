// The delivery engine's part of the Store contract. A delivery is one event for one webhook; it is made
// when the event is routed and lives until it succeeds, fails for good, or is cancelled.
//
// Leases: a node works only on deliveries it holds a lease on (lease owner + expiry). While a delivery
// is leased its `nextAttemptAt` holds the lease's expiry, so "due" means one thing everywhere: a retry
// whose time has come, or a lease whose holder has died. Outcomes clear the lease.
import type { EventRecord, EventType } from '../domain/events.js'

export type DeliveryStatus = 'pending' | 'retrying' | 'succeeded' | 'failed' | 'cancelled'

/** A delivery as the API shows it. Times are ISO strings; null when not applicable. */
export interface DeliveryRecord {
  id: string
  webhookId: string
  eventId: string
  event: EventType
  emailId: string
  status: DeliveryStatus
  attempts: number
  lastAttemptAt: string | null
  /** Null while the delivery is in flight, and once it is final. */
  nextAttemptAt: string | null
  lastStatusCode: number | null
  lastError: string | null
  lastDurationMs: number | null
  createdAt: string
}

/** Everything a node needs to attempt one leased delivery. */
export interface DeliveryWork {
  id: string
  webhookId: string
  url: string
  /** The webhook's live secrets at claim time: one, or two during a rotation. */
  secrets: string[]
  event: EventType
  payload: string
  /** Attempts made before this one. */
  attempts: number
  /** When the event happened (ms), for the event→delivery latency. */
  eventAt: number
}

export type DeliveryOutcome =
  | { kind: 'succeeded'; id: string; webhookId: string; at: number; statusCode: number; durationMs: number }
  /** An attempt failed and another is scheduled at `nextAttemptAt` (ms). */
  | { kind: 'retry'; id: string; webhookId: string; at: number; nextAttemptAt: number; statusCode?: number; error: string; durationMs: number }
  /** The last attempt failed: no more automatic attempts. */
  | { kind: 'failed'; id: string; webhookId: string; at: number; statusCode?: number; error: string; durationMs: number }
  /** The receiver answered 410 Gone: the delivery fails and its webhook is disabled. */
  | { kind: 'gone'; id: string; webhookId: string; at: number; statusCode: number; durationMs: number }
  /** Not attempted (breaker open, Retry-After pause, node stopping): back to the store, attempts unchanged. */
  | { kind: 'deferred'; id: string; webhookId: string; nextAttemptAt: number }
  /**
   * Not attempted yet because the webhook's actor is full: the delivery stays leased to this node (so
   * no other node takes it) but out of memory, until unparkDeliveries pages it back in. renewLeases
   * does not extend parked leases: one the actor never comes back for runs out and is due for anyone.
   */
  | { kind: 'parked'; id: string; webhookId: string; owner: string; leaseUntil: number }

export interface LeaseRequest {
  owner: string
  now: number
  /** Lease expiry (ms) for what is handed out. */
  leaseUntil: number
  limit: number
  /**
   * Webhooks whose actor on this node is full: routing parks their new deliveries (see `parked`)
   * instead of handing them out.
   */
  saturated?: string[]
}

export interface DeliveryPage {
  items: DeliveryRecord[]
  nextCursor: string | null
}

export interface DeliveryStats {
  pending: number
  retrying: number
  unroutedEvents: number
  /** occurredAt (ms) of the oldest event not yet delivered, routed or not; null when none. */
  oldestPendingAt: number | null
}

export interface DeliveryStore {
  /**
   * Routes up to `limit` unrouted events, oldest first: each becomes one delivery per webhook of its
   * account that is enabled and subscribes to its type at this moment; the events are marked routed in
   * the same atomic write. The new deliveries come back already leased to `owner`.
   */
  routeEvents(req: LeaseRequest): Promise<{ events: number; work: DeliveryWork[] }>
  /**
   * Leases up to `limit` due deliveries (retries whose time has come, expired leases), earliest first;
   * only those of `webhookId` when given. Deliveries whose webhook is no longer enabled are cancelled
   * instead of handed out.
   */
  claimDeliveries(req: LeaseRequest & { webhookId?: string }): Promise<DeliveryWork[]>
  /** Up to `limit` of the deliveries `owner` parked for `webhookId`, oldest first, now in hand again. */
  unparkDeliveries(req: { owner: string; webhookId: string; now: number; leaseUntil: number; limit: number }): Promise<DeliveryWork[]>
  /** Extends every lease `owner` holds to `leaseUntil`. */
  renewLeases(owner: string, leaseUntil: number): Promise<void>
  /** Gives back every lease `owner` holds, parked ones included: those deliveries are due at once for any node. */
  releaseLeases(owner: string, now: number): Promise<void>
  /**
   * Applies outcomes in one atomic write, with their effect on each webhook's health: a success clears
   * its failing streak; a failure starts one; a webhook failing without a success for `autoDisableMs`
   * becomes auto_disabled, and so does one that answered 410; disabling cancels its pending deliveries.
   */
  recordOutcomes(outcomes: DeliveryOutcome[], opts: { now: number; autoDisableMs: number }): Promise<void>

  /** One webhook's deliveries, newest first, in cursor pages. */
  listDeliveries(accountId: string, webhookId: string, opts: { status?: DeliveryStatus; limit: number; cursor?: string }): Promise<DeliveryPage>
  findDelivery(accountId: string, webhookId: string, deliveryId: string): Promise<DeliveryRecord | null>
  /** Makes the delivery pending and due now, whatever its state (a hand retry). Null when absent. */
  retryDelivery(accountId: string, webhookId: string, deliveryId: string, now: number): Promise<DeliveryRecord | null>
  /**
   * Makes up to `limit` failed or cancelled deliveries of the window [since, until) (by creation time)
   * pending and due now; returns how many. Called repeatedly until it returns less than `limit`.
   */
  requeueFailed(accountId: string, webhookId: string, window: { since: number; until: number }, now: number, limit: number): Promise<number>
  countFailed(accountId: string, webhookId: string, window: { since: number; until: number }): Promise<number>
  /** Stores a test event for one webhook (never routed to others) and its delivery, due now. */
  insertTestDelivery(event: EventRecord, webhookId: string, deliveryId: string, now: number): Promise<DeliveryRecord>

  deliveryStats(now: number): Promise<DeliveryStats>
  /** Deletes up to `limit` final deliveries last changed before `before` (ms); returns how many. */
  pruneDeliveries(before: number, limit: number): Promise<number>
  /** Deletes up to `limit` routed events older than `before` (ms) that no delivery still needs. */
  pruneEvents(before: number, limit: number): Promise<number>
}
