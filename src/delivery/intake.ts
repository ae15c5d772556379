// Work coming into memory: each delivery leased (or read) goes to its webhook's actor, or, when that
// actor is paused, back to the store due when the pause ends, or, when the actor is full, parked in the
// store still leased to this node. A webhook with parked work is saturated: new deliveries for it are
// parked behind its backlog, and its actor pages the backlog back in itself as its mailbox empties.
//
// Tested in test/unit/delivery-parts.test.ts.
import type { Clock } from '../domain/clock.js'
import type { DeliveryStore, DeliveryWork } from '../store/deliveries.js'
import type { WebhookActor } from './actor.js'
import type { EngineLogger } from './engine-logger.js'
import type { EventSource } from './event-source.js'
import { workIdentity, type HeldWork, type Leases } from './held.js'

/** What intake needs of the engine around it. */
export interface IntakeHost {
  running (): boolean
  /** The webhook's actor, made when there is none. */
  actorFor (webhookId: string): WebhookActor
  /** Actors on this node now. */
  actorCount (): number
  /** The actor has work to send. */
  ready (actor: WebhookActor): void
  /** Work has been handed to actors: schedule sending it. */
  pump (): void
  /** How much more work may be taken into memory now. */
  room (): number
  /** Writes the outcomes queued so far (a deferred delivery must be stored before it is claimed again). */
  flushOutcomes (): Promise<void>
}

export interface IntakeOptions {
  store: Pick<DeliveryStore, 'unparkDeliveries'>
  clock: Clock
  log: EngineLogger
  held: HeldWork
  leases: Leases
  source: EventSource
  host: IntakeHost
  /** Deliveries this node holds in memory at most. */
  maxInFlight: number
  /** What one actor may queue at least. */
  mailboxLimit: number
}

export class Intake {
  /** Webhooks with more due work in the store than room in their actor: they page it in themselves. */
  private readonly saturatedIds = new Set<string>()
  private readonly refilling = new Set<string>()

  constructor (private readonly opts: IntakeOptions) {}

  /** Saturated webhooks (routing and claims park their new work instead of handing it out). */
  saturated (): string[] {
    return [...this.saturatedIds]
  }

  isSaturated (webhookId: string): boolean {
    return this.saturatedIds.has(webhookId)
  }

  accept (work: DeliveryWork[]): void {
    if (work.length === 0) return
    const { held, host, source } = this.opts
    const now = this.opts.clock.now()
    const share = this.mailboxShare()
    for (const w of work) {
      const known = held.get(w.id)
      if (known) {
        // Already here, and claimed again (its lease ran out, say, and this node won it back): the new
        // token is the one that holds, so the attempt under way records itself with it.
        if (w.origin !== undefined) {
          // Read again as not stored (under a new routing token): it is a first attempt under that one.
          known.origin = w.origin
          known.lease = 0
          source.count(known.origin, 1)
        } else {
          known.lease = Math.max(known.lease, w.lease)
        }
        continue
      }
      held.hold(w)
      source.count(w.origin, 1)
      const actor = host.actorFor(w.webhookId)
      // The latest claim carries the webhook's rate limit as it is now.
      if (w.rateLimit !== undefined) actor.limitRate(w.rateLimit)
      if (w.origin !== undefined && this.saturatedIds.has(w.webhookId)) {
        // This webhook's backlog waits in the store: a new delivery goes behind it, not ahead.
        this.park(w, now)
      } else if (actor.isPaused(now)) {
        held.defer(w, actor.pausedUntil)
      } else if (!actor.hasRoom(share)) {
        // This endpoint has more queued than it can take soon: the rest waits in the store, still leased to
        // this node, and the actor pages it back in as its mailbox empties (refill).
        this.park(w, now)
        this.saturatedIds.add(w.webhookId)
      } else {
        actor.enqueue(w)
        host.ready(actor)
      }
    }
    host.pump()
  }

  /** Stored as parked: still leased to this node, out of memory until its actor pages it in. */
  private park (w: DeliveryWork, now: number): void {
    this.opts.held.release(w, { kind: 'parked', ...workIdentity(w), owner: this.opts.leases.owner, leaseUntil: this.opts.leases.until(now) })
  }

  /**
   * An actor may queue at least mailboxLimit, and more when few actors share the node's budget: one busy
   * webhook alone gets the whole of it, many share it.
   */
  mailboxShare (): number {
    return Math.floor(this.opts.maxInFlight / Math.max(1, this.opts.host.actorCount()))
  }

  /** A saturated actor whose mailbox has half emptied pulls its own backlog from the store. */
  refill (actor: WebhookActor): void {
    const { host, leases } = this.opts
    const id = actor.webhookId
    if (!host.running() || !this.saturatedIds.has(id) || this.refilling.has(id)) return
    const limit = Math.max(this.opts.mailboxLimit, this.mailboxShare())
    const want = Math.min(host.room(), limit - actor.queued)
    if (actor.queued > limit / 2 || want <= 0) return
    this.refilling.add(id)
    // Outcomes first: a deferred delivery must be back in the store before it can be claimed again.
    host.flushOutcomes()
      .then(() => {
        const now = this.opts.clock.now()
        return this.opts.store.unparkDeliveries({ owner: leases.owner, now, leaseUntil: leases.until(now), limit: want, webhookId: id })
      })
      .then((work) => {
        if (work.length < want) this.saturatedIds.delete(id)
        this.accept(work)
      })
      .catch((err: unknown) => this.opts.log.error({ err, webhookId: id }, 'paging in a webhook backlog failed'))
      .finally(() => { this.refilling.delete(id) })
  }
}
