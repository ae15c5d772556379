// What this node holds in memory, and its leases: the one place that keeps the rule "a delivery is held
// from its lease until its outcome is queued". Work comes in with hold(); it leaves only with release(),
// which queues its outcome in the same step, so nothing is ever dropped between the two.
import type { DeliveryOrigin, DeliveryOutcome, DeliveryWork } from '../store/deliveries.js'
import { leaseUntil } from '../domain/lease-owner.js'

/** This node's leases: who holds them and for how long each one is taken or renewed. */
export class Leases {
  constructor (readonly owner: string, readonly ms: number) {}
  /** When a lease taken or renewed at `now` runs out (the rule the mailer keeps too: src/domain/lease-owner.ts). */
  until (now: number): number {
    return leaseUntil(now, this.ms)
  }
}

/**
 * The fields by which an outcome names its work (id, webhook, lease token); a first attempt held in memory
 * brings its origin too (its row is made from it).
 */
export function workIdentity (w: DeliveryWork): { id: string; webhookId: string; lease: number; origin?: DeliveryOrigin } {
  return w.origin === undefined ? { id: w.id, webhookId: w.webhookId, lease: w.lease } : { id: w.id, webhookId: w.webhookId, lease: w.lease, origin: w.origin }
}

export class HeldWork {
  private readonly byId = new Map<string, DeliveryWork>()
  private emptyWaiters: Array<() => void> = []

  /** `queue` takes the outcome of work that leaves (the outcome writer). */
  constructor (private readonly queue: (outcome: DeliveryOutcome) => void) {}

  get size (): number {
    return this.byId.size
  }

  get (id: string): DeliveryWork | undefined {
    return this.byId.get(id)
  }

  values (): IterableIterator<DeliveryWork> {
    return this.byId.values()
  }

  /** Work leased to this node (or read under the routing lease) is held from now on. */
  hold (work: DeliveryWork): void {
    this.byId.set(work.id, work)
  }

  /** Work leaves memory with its outcome queued, in one step. */
  release (work: DeliveryWork, outcome: DeliveryOutcome): void {
    this.byId.delete(work.id)
    this.queue(outcome)
    if (this.byId.size === 0 && this.emptyWaiters.length > 0) for (const resolve of this.emptyWaiters.splice(0)) resolve()
  }

  /** Gives work back to the store, due at `at`, without counting an attempt. */
  defer (work: DeliveryWork, at: number): void {
    this.release(work, { kind: 'deferred', ...workIdentity(work), nextAttemptAt: at })
  }

  /** Resolves when nothing is held (at once when nothing is). */
  emptied (): Promise<void> {
    if (this.byId.size === 0) return Promise.resolve()
    return new Promise((resolve) => { this.emptyWaiters.push(resolve) })
  }
}
