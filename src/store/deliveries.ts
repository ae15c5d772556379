// The delivery engine's part of the Store contract. A delivery is one event for one webhook; it is made
// when the event is routed and lives until it succeeds, fails for good, or is cancelled.
//
// Leases: a node works only on deliveries it holds a lease on (lease owner + expiry). While a delivery
// is leased its `nextAttemptAt` holds the lease's expiry, so "due" means one thing everywhere: a retry
// whose time has come, or a lease whose holder has died. Outcomes end the lease.
//
// Fencing, the one rule both adapters implement: every delivery carries a lease token, an integer that
// every claim (routeEvents, claimDeliveries, unparkDeliveries) increments and hands out with the work
// (`DeliveryWork.lease`), and that every outcome ending a lease (succeeded, retry, failed, gone, deferred)
// and every release increments again. An outcome carries the token it was claimed under and applies only
// while the stored token is still that one; otherwise it is stale and changes nothing at all (not the
// status, not the attempts, not the lease, not the webhook's health) and recordOutcomes counts it. So a
// node that stalled past its lease cannot overwrite the work of the node that took the delivery over, and
// an outcome written twice (a retried write) applies once. Renewing, parking, cancelling, a hand retry and
// a requeue keep the token.
//
// Cancelled while in flight: cancelling (a webhook disabled, auto-disabled or deleted) keeps the token, so
// the attempt in flight is still recorded when its outcome comes (the delivery log records every attempt
// made): attempts + 1 and the attempt's time, status code, error and duration; a success makes the
// delivery `succeeded` (it was delivered), any failure leaves it `cancelled` (nothing is retried).
//
// Written once (SQLite; readEvents): a delivery's first attempt is made from memory and its row is written
// once, with its outcome, instead of inserted at routing and updated after. The routing lease (one holder
// at a time, a token incremented at each take) guards reading; the durable cursor (every event up to it
// has all its deliveries stored) moves in the same write as the outcomes that complete its events. A
// first attempt whose outcome must wait (a retry, a deferral, a parked webhook) is stored then, as such.
// A holder that crashes or stalls loses nothing: the next holder reads again from the durable cursor,
// skips what is stored, and the stale holder's first-attempt outcomes are refused by the token.
//
// Webhook health is decided by src/domain/webhook-health.ts from the outcomes that applied; the adapters
// store its decisions. What stays adapter-specific:
// - SQLite applies a batch of outcomes, the health decisions and the cancellations in one transaction.
// - MongoDB applies the outcomes in one ordered bulkWrite (each outcome is one conditional single-document
//   update, so a retried batch is safe), then each webhook's decision as a compare-and-set on the health
//   fields it was decided from (decided again when another node changed them meanwhile), then the
//   cancellation; a process that stops between these steps leaves the cancellation to the next claim,
//   which cancels instead of handing out any delivery whose webhook is not enabled.
// - MongoDB routes and claims in steps (see src/store/mongo/deliveries.ts); claims compare and set on
//   the token read, so two nodes never both win one delivery.
import type { EventRecord, EventType } from '../domain/events.js'
import type { ReplayRange } from '../domain/replay.js'

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
  /**
   * Of those, how many were the receiver pushing back (429/503 while not down): attempts, but not steps of
   * the retry schedule (see src/delivery/attempt-outcome.ts). Absent: none.
   */
  pushbacks?: number
  /** The webhook's rateLimit (deliveries per second) at claim time; null or absent for none. */
  rateLimit?: number | null
  /** When the event happened (ms), for the event→delivery latency. */
  eventAt: number
  /**
   * The lease token this work was claimed under: every outcome for it carries it back (see Fencing).
   * 0 for a first attempt read by readEvents: nothing of it is stored yet (see Written once).
   */
  lease: number
  /** A first attempt not stored yet (readEvents): what its row is made of when its outcome is written. */
  origin?: DeliveryOrigin
}

/**
 * Where a first attempt held in memory comes from: its event, and the routing token it was read under.
 * Its outcome is the delivery's first row, and is written only while that token still routes.
 */
export interface DeliveryOrigin {
  seq: number
  accountId: string
  eventId: string
  eventType: EventType
  emailId: string
  /** When the event happened (ms). */
  eventAt: number
  /** The routing lease token the event was read under (see Written once). */
  router: number
  /** When it was read (ms): the delivery's creation time. */
  createdAt: number
}

/**
 * What every outcome names: the delivery, its webhook, and the lease token it was claimed under; and for a
 * first attempt held in memory, its origin (the outcome makes its row).
 */
interface OutcomeOf { id: string; webhookId: string; lease: number; origin?: DeliveryOrigin }

export type DeliveryOutcome =
  | OutcomeOf & { kind: 'succeeded'; at: number; statusCode: number; durationMs: number }
  /**
   * An attempt failed and another is scheduled at `nextAttemptAt` (ms). `pushback`: the receiver pushed
   * back (429/503 while it still answers): counted in `attempts` and in `pushbacks`, which the retry
   * schedule subtracts.
   */
  | OutcomeOf & { kind: 'retry'; at: number; nextAttemptAt: number; statusCode?: number; error: string; durationMs: number; pushback?: true }
  /** The last attempt failed: no more automatic attempts. */
  | OutcomeOf & { kind: 'failed'; at: number; statusCode?: number; error: string; durationMs: number }
  /** The receiver answered 410 Gone: the delivery fails and its webhook is disabled. */
  | OutcomeOf & { kind: 'gone'; at: number; statusCode: number; durationMs: number }
  /**
   * Not attempted (breaker open, Retry-After pause, node stopping): back to the store, attempts unchanged.
   * For a delivery cancelled meanwhile it only ends the lease.
   */
  | OutcomeOf & { kind: 'deferred'; nextAttemptAt: number }
  /**
   * Not attempted yet because the webhook's actor is full: the delivery stays leased to this node under
   * the same token (so no other node takes it: claims skip it until `leaseUntil`) but out of memory,
   * until unparkDeliveries pages it back in. renewLeases does not extend parked leases: one the actor
   * never comes back for runs out and is due for anyone.
   */
  | OutcomeOf & { kind: 'parked'; owner: string; leaseUntil: number }
  /**
   * A first attempt held in memory (it has an origin) that is taking long (a slow receiver): its row is
   * stored now, pending and leased to `owner` under token 1, so that the durable cursor need not wait for
   * it; its outcome then updates that row like any leased delivery's. Without an origin it is stale.
   */
  | OutcomeOf & { kind: 'leased'; owner: string; leaseUntil: number }

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

/** The engine's place in the event stream while it holds the routing lease (readEvents). */
export interface RoutingPosition {
  /** The routing lease token: each take of the lease increments it. */
  token: number
  /** The last event read (seq): the next read starts after it. */
  through: number
  /** Events up to here may already have deliveries stored (a previous holder wrote them): check each. */
  recheckThrough: number
}

/** The engine's report of how far every delivery of every event read has been written (see Written once). */
export interface RoutedThrough {
  owner: string
  token: number
  /** Every delivery of every event up to this seq is stored: the durable cursor may move here. */
  through: number
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
   * account that is enabled, subscribes to its type and whose filter takes its email (src/domain/
   * webhook-filter.ts) at this moment; the events are marked routed in the same atomic write. The new deliveries come back already leased to `owner`.
   */
  routeEvents(req: LeaseRequest): Promise<{ events: number; work: DeliveryWork[] }>
  /**
   * Written once (optional; the engine routes with routeEvents where an adapter lacks it). Reads up to
   * `limit` events after the caller's position, without storing anything, and answers each delivery they
   * make (per enabled webhook subscribing to the type, its filter taking the email, at this moment) as a first attempt held in memory:
   * lease 0 and an `origin`. Only the holder of the routing lease reads: a caller without a position (or
   * whose position's token no longer holds) takes the lease when it is free, has run out or is its own,
   * and starts from the durable cursor, skipping deliveries a previous holder already stored. `routing` is null when
   * another node holds the lease (the caller only claims due work), else the caller's new position.
   * The durable cursor moves only with recordOutcomes' `routed`, in the same write as the outcomes: so a
   * crash re-reads from the events what was not yet recorded, and nothing accepted is lost.
   */
  readEvents?(req: LeaseRequest & { routing?: RoutingPosition }): Promise<{ events: number; work: DeliveryWork[]; routing: RoutingPosition | null }>
  /** Extends the routing lease while `owner` holds it under `token`; false when it has lost it. */
  renewRouting?(owner: string, token: number, leaseUntil: number): Promise<boolean>
  /**
   * Leases up to `limit` due deliveries (retries whose time has come, expired leases), earliest first;
   * only those of `webhookId` when given. Deliveries whose webhook is no longer enabled are cancelled
   * instead of handed out.
   */
  claimDeliveries(req: LeaseRequest & { webhookId?: string }): Promise<DeliveryWork[]>
  /** Up to `limit` of the deliveries `owner` parked for `webhookId`, oldest first, now in hand again. */
  unparkDeliveries(req: { owner: string; webhookId: string; now: number; leaseUntil: number; limit: number }): Promise<DeliveryWork[]>
  /**
   * Extends to `leaseUntil` the leases of `ids` that `owner` still holds (live, not parked), and no
   * others: a node renews what it holds in memory, so what it dropped runs out and is due for anyone.
   */
  renewLeases(owner: string, ids: readonly string[], leaseUntil: number): Promise<void>
  /**
   * Gives back every lease `owner` holds, parked ones included: those deliveries are due at once for any
   * node; and the routing lease, if it holds it.
   */
  releaseLeases(owner: string, now: number): Promise<void>
  /**
   * Applies the outcomes whose lease is still held (see Fencing), in the order given, with their effect
   * on each webhook's health as src/domain/webhook-health.ts decides it: a success clears its failing
   * streak; a failure starts one; a webhook failing without a success for `autoDisableMs` becomes
   * auto_disabled, and so does one that answered 410; disabling cancels its live deliveries. Answers how
   * many outcomes were stale (changed nothing).
   *
   * An outcome with an `origin` (a first attempt held in memory) makes the delivery's row, as that outcome
   * leaves it, and only while the routing lease is still held under `origin.router` (else it is stale):
   * one write per delivery instead of an insert at routing and an update after. A delivery whose webhook
   * is no longer enabled is stored as cancelled while in flight is (see above). `routed` moves the durable
   * cursor in the same write, while its token still holds.
   *
   * What each outcome does to its delivery is src/domain/delivery-transition.ts's table. An outcome that
   * does not apply counts as stale, on every adapter: a token that no longer holds, an unknown delivery,
   * a `leased` outcome of a stored delivery, and (an adapter without readEvents) any outcome with an
   * origin. `routed` comes only from an engine that reads with readEvents: an adapter without it has no
   * durable cursor and never receives one.
   */
  recordOutcomes(outcomes: DeliveryOutcome[], opts: { now: number; autoDisableMs: number; routed?: RoutedThrough }): Promise<{ stale: number }>

  /** One webhook's deliveries, newest first, in cursor pages. */
  listDeliveries(accountId: string, webhookId: string, opts: { status?: DeliveryStatus; limit: number; cursor?: string }): Promise<DeliveryPage>
  findDelivery(accountId: string, webhookId: string, deliveryId: string): Promise<DeliveryRecord | null>
  /**
   * Makes the delivery pending and due now, whatever its state (a hand retry), unless it is live and
   * leased (its attempt is under way). Null when absent.
   */
  retryDelivery(accountId: string, webhookId: string, deliveryId: string, now: number): Promise<DeliveryRecord | null>
  /**
   * Makes up to `limit` failed or cancelled deliveries of the window [since, until) (by creation time)
   * pending and due now; returns how many. Called repeatedly until it returns less than `limit`.
   */
  requeueFailed(accountId: string, webhookId: string, window: { since: number; until: number }, now: number, limit: number): Promise<number>
  /**
   * Re-drive: makes every live delivery of `webhookId` that waits for a later time (a retry, a deferral)
   * and is not leased due at `now`; returns how many. Called when its endpoint answers 2xx again after an
   * outage, and when it is enabled again. Failed deliveries stay failed (requeueFailed brings them back).
   */
  redriveDeliveries(webhookId: string, now: number): Promise<number>
  countFailed(accountId: string, webhookId: string, window: { since: number; until: number }): Promise<number>
  /**
   * Replay (src/domain/replay.ts): how many deliveries of `webhookId` have their event in [since, until)
   * (of `types` when not null), whatever their state.
   */
  countInRange(accountId: string, webhookId: string, range: ReplayRange): Promise<number>
  /**
   * Replay, one page: the next `limit` deliveries of the range after the delivery id `after` (null: from
   * the start), in id order. Final ones (succeeded, failed, cancelled) become pending and due at `now`,
   * attempts and lease token kept (the next attempt is appended to the log); live ones waiting for a later
   * time become due now; leased ones are left to the attempt under way. Answers how many it read (less
   * than `limit`: the range is done) and the last id read.
   */
  replayPage(accountId: string, webhookId: string, range: ReplayRange, after: string | null, now: number, limit: number): Promise<{ read: number; last: string | null }>
  /** Whether a delivery of the range is still pending or retrying (a replay of it is still going out). */
  anyLiveInRange(webhookId: string, range: ReplayRange): Promise<boolean>
  /** Stores a test event for one webhook (never routed to others) and its delivery, due now. */
  insertTestDelivery(event: EventRecord, webhookId: string, deliveryId: string, now: number): Promise<DeliveryRecord>

  deliveryStats(now: number): Promise<DeliveryStats>
  /** Deletes up to `limit` final deliveries last changed before `before` (ms); returns how many. */
  pruneDeliveries(before: number, limit: number): Promise<number>
  /** Deletes up to `limit` routed events older than `before` (ms) that no delivery still needs. */
  pruneEvents(before: number, limit: number): Promise<number>
}
