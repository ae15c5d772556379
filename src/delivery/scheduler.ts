// The engine's scheduler: what goes out when, and what each answer does. It keeps one actor per webhook
// (actor.ts) and the node's budget of requests in flight; `pump` hands ready actors' work to the port in
// per-shard batches, `answer` applies each result (attempt-outcome.ts says what it means, the actor
// what it does to the webhook) and queues its outcome through the held work. No store reads, no threads:
// the port (port.ts) is where batches go and answers come from, so a test drives all of this with a fake
// port, a fake clock and manual timers (test/unit/delivery-scheduler.test.ts).
import type { Clock, Timers } from '../domain/clock.js'
import type { StoreHealth } from '../store/faults.js'
import type { DeliveryWork } from '../store/deliveries.js'
import { RequestTally, WebhookActor, type ActorOptions, type BreakerState } from './actor.js'
import { attemptOutcome, classify, isOverload } from './attempt-outcome.js'
import type { RetryPolicy } from './backoff.js'
import { clampRetryAfter } from './backoff.js'
import { shardOf } from './dispatcher.js'
import type { EngineLogger } from './engine-logger.js'
import type { HeldWork } from './held.js'
import type { DeliveryResult } from './http-sender.js'
import type { DeliveryMetrics } from './metrics.js'
import { Pacer, WakeList, type PermitCounter } from './pacer.js'
import type { DeliveryPort } from './port.js'

/**
 * Deliveries handed to the port in one pump, at most; the rest go at the next turn of the event loop. A
 * pump runs on the API's thread: after a restart, with a backlog due at once, one pump packed and posted
 * a whole request budget (1,024) and held the sends waiting behind it; a page keeps each turn short.
 */
const PUMP_PAGE = 256

/** What the scheduler needs of the engine around it. */
export interface SchedulerHost {
  running (): boolean
  /** Whether a webhook's backlog waits parked in the store (its actor is kept to page it in). */
  isSaturated (webhookId: string): boolean
  /** An actor's mailbox shrank: a saturated one pages its backlog in. */
  refill (actor: WebhookActor): void
  /** The endpoint answers 2xx again after an outage: what waits for it in the store is due now. */
  redrive (webhookId: string): void
  /** Answers came in: room may have freed for more work from the store. */
  answered (): void
}

export interface SchedulerOptions {
  clock: Clock
  log: EngineLogger
  held: HeldWork
  port: DeliveryPort
  /** HTTP requests in flight at once across all webhooks; deliveries per batch handed to a shard. */
  maxRequests: number
  batchSize: number
  policy: RetryPolicy
  actorOptions: ActorOptions
  /** The store's shared rate-limit counters (a rate-limited webhook's permits), and its fault log. */
  counter: PermitCounter & { readonly health: Pick<StoreHealth, 'failed'> }
  metrics: Pick<DeliveryMetrics, 'requestDuration' | 'latency' | 'pushbacks' | 'attempts'>
  timers?: Timers
  host: SchedulerHost
}

export class Scheduler {
  private readonly actors = new Map<string, WebhookActor>()
  private readonly ready = new Set<WebhookActor>()
  /** Actors with work that may not send before a time (a pushback hold, a rate-limit window). */
  private readonly later: WakeList
  /** Rate-limited webhooks' permits, from the store's shared counters. */
  private readonly pacer: Pacer
  /** Requests handed to the port and not answered yet, over every actor. */
  private readonly tally = new RequestTally()
  private pumpScheduled = false
  private idleWaiters: Array<() => void> = []

  constructor (private readonly opts: SchedulerOptions) {
    this.later = new WakeList(opts.clock, (actors) => this.makeReady(actors), opts.timers)
    this.pacer = new Pacer(opts.counter, opts.clock, (actor, at) => {
      if (at === null) this.makeReady([actor])
      else this.later.add(actor, at)
    }, (err, actor) => {
      if (!opts.counter.health.failed(err)) opts.log.error({ err, webhookId: actor.webhookId }, 'asking for rate-limit permits failed')
    })
  }

  /** Requests handed to the port and not answered yet. */
  get inFlight (): number {
    return this.tally.total
  }

  /** Actors on this node now. */
  get actorCount (): number {
    return this.actors.size
  }

  /** The webhook's actor, made when there is none. */
  actorFor (webhookId: string): WebhookActor {
    let actor = this.actors.get(webhookId)
    if (!actor) {
      actor = new WebhookActor(webhookId, shardOf(webhookId, this.opts.port.shards), this.opts.actorOptions, this.tally)
      this.actors.set(webhookId, actor)
    }
    return actor
  }

  /** The actor has work to send: it takes its turn at the next pump. */
  markReady (actor: WebhookActor): void {
    this.ready.add(actor)
  }

  private makeReady (actors: WebhookActor[]): void {
    if (!this.opts.host.running()) return
    for (const a of actors) this.ready.add(a)
    this.schedulePump()
  }

  schedulePump (): void {
    if (this.pumpScheduled) return
    this.pumpScheduled = true
    setImmediate(() => {
      this.pumpScheduled = false
      this.pump()
    })
  }

  /**
   * Moves work from actors with room into per-shard batches of up to batchSize, within the node's budget
   * of requests in flight. Actors take turns: one that still has work after its turn goes to the back.
   */
  pump (): void {
    const { port, maxRequests, batchSize, clock } = this.opts
    const now = clock.now()
    let batches: Array<DeliveryWork[] | undefined> | undefined
    let handed = 0
    for (const actor of this.ready) {
      if (handed >= PUMP_PAGE) {
        // The rest of the ready actors at the next turn, after whatever else waits (the API's requests).
        this.schedulePump()
        break
      }
      const budget = Math.min(maxRequests - this.tally.total, PUMP_PAGE - handed)
      if (budget <= 0) break
      // Deleting the current entry of a Set while iterating it is safe; one added again goes to the back.
      this.ready.delete(actor)
      if (actor.rateLimit !== null && actor.needsPermits(now)) {
        // A rate-limited webhook spends permits from the shared counters; it is made ready again when they come.
        this.pacer.ask(actor, now)
        continue
      }
      const taken = actor.take(now, budget)
      handed += taken.length
      if (actor.queued > 0) {
        if (actor.capacity(now) > 0) this.ready.add(actor)
        else if (actor.isHeld(now)) this.later.add(actor, actor.holdUntil)
      }
      if (taken.length === 0) continue
      batches ??= []
      let batch = batches[actor.shard]
      if (batch === undefined) batches[actor.shard] = batch = []
      for (const w of taken) {
        batch.push(w)
        if (batch.length >= batchSize) {
          port.sendWork(actor.shard, batch, this.windowOf)
          batches[actor.shard] = batch = []
        }
      }
    }
    if (batches === undefined) return
    for (let shard = 0; shard < batches.length; shard++) {
      const batch = batches[shard]
      if (batch !== undefined && batch.length > 0) port.sendWork(shard, batch, this.windowOf)
    }
  }

  /** Each webhook's adaptive window, as it travels with its batches to the senders. */
  private readonly windowOf = (webhookId: string): number => this.actors.get(webhookId)?.windowLimit ?? this.opts.actorOptions.window.initial

  /** Results from the port, as they stream in: each applied, then the next pump. */
  answer (results: DeliveryResult[]): void {
    const { held, host, clock, metrics } = this.opts
    const now = clock.now()
    const running = host.running()
    let requeue: Map<WebhookActor, DeliveryWork[]> | undefined
    for (const r of results) {
      const work = held.get(r.deliveryId)
      if (!work) continue
      const actor = this.actorFor(work.webhookId)
      if (r.outcome === 'returned') {
        // Handed back unattempted by its sender (after a failure, a pause, or when stopping): no attempt
        // is counted. It goes out again as soon as the actor may send (still held), or back to the store.
        actor.returned()
        if (running && !actor.isPaused(now)) {
          requeue ??= new Map()
          let list = requeue.get(actor)
          if (!list) requeue.set(actor, list = [])
          list.push(work)
        } else {
          held.defer(work, actor.isPaused(now) ? actor.pausedUntil : now)
        }
      } else {
        metrics.requestDuration.observe(r.durationMs / 1000)
        this.applyAttempt(actor, work, r, now)
      }
      if (actor.queued > 0) this.ready.add(actor)
      else if (actor.idle(now) && !host.isSaturated(actor.webhookId) && !requeue?.has(actor)) this.actors.delete(actor.webhookId)
      host.refill(actor)
    }
    // Handed back in order: they go to the front of their mailbox, ahead of what came later.
    if (requeue !== undefined) {
      for (const [actor, works] of requeue) {
        actor.requeueFirst(works)
        this.ready.add(actor)
      }
    }
    this.schedulePump()
    host.answered()
    if (this.idleWaiters.length > 0 && this.tally.total === 0) for (const resolve of this.idleWaiters.splice(0)) resolve()
  }

  /** Deliveries whose sender died unanswered: each is an attempt that failed, retried on the schedule. */
  lost (ids: string[], error: string): void {
    this.opts.log.error({ deliveries: ids.length, error }, 'a delivery worker thread died; its unanswered deliveries will be retried')
    this.answer(ids.map((deliveryId) => ({ deliveryId, outcome: 'retry', error, durationMs: 0 })))
  }

  /** An attempt that was made: what it means (attempt-outcome.ts), applied to the actor, and its outcome queued. */
  private applyAttempt (actor: WebhookActor, work: DeliveryWork, r: DeliveryResult, now: number): void {
    const { metrics } = this.opts
    const answer = classify(r, actor.isDown(now))
    if (answer === 'returned') return
    const wasPaused = actor.isPaused(now)
    let pushbackWaitMs = 0
    if (answer === 'delivered') {
      if (actor.succeeded(now, r.durationMs)) this.opts.host.redrive(actor.webhookId)
      metrics.latency.observe(Math.max(0, now - work.eventAt) / 1000)
    } else if (answer === 'gone') {
      actor.failed(now)
      // The receiver is gone and its webhook is being disabled: send it nothing more for a while. What
      // waits for it goes back to the store, where the disable cancels it (the claim would, too).
      actor.pause(now + this.opts.actorOptions.cooldownMs)
    } else if (answer === 'pushback') {
      // Busy, not down: the window shrinks and this delivery waits a moment (or its Retry-After).
      pushbackWaitMs = actor.pushedBack(now)
      metrics.pushbacks.inc()
    } else {
      if (isOverload(r)) actor.shrink(now)
      const opened = actor.failed(now)
      // A Retry-After from an endpoint that is down pauses the whole webhook (from a busy one, only the delivery).
      if (r.retryAfterMs !== undefined) actor.pause(now + clampRetryAfter(r.retryAfterMs))
      if (opened) this.opts.log.warn({ webhookId: work.webhookId, until: new Date(actor.pausedUntil).toISOString() }, 'webhook circuit breaker opened')
    }
    const outcome = attemptOutcome(r, work, answer, this.opts.policy, now, pushbackWaitMs)
    this.opts.held.release(work, outcome)
    // Every attempt that ends or moves the retry schedule counts (a retry after a pushback does not).
    if (answer === 'delivered' || answer === 'gone' || (answer === 'failure' && outcome.kind === 'failed')) metrics.attempts.observe(work.attempts + 1)
    if (answer === 'gone' || answer === 'failure') this.giveBackWhilePaused(actor, now, wasPaused)
  }

  /**
   * A paused actor sends nothing, so it keeps nothing: its mailbox goes back to the store, due when the
   * pause ends, and what its sender holds queued behind the window comes back to be deferred too.
   * (A paused actor with a mailbox would never be made ready again.)
   */
  private giveBackWhilePaused (actor: WebhookActor, now: number, wasPaused: boolean): void {
    if (!actor.isPaused(now)) return
    for (const queued of actor.emptyMailbox()) this.opts.held.defer(queued, actor.pausedUntil)
    if (!wasPaused) this.opts.port.hold(actor.shard, [actor.webhookId])
  }

  /**
   * Stopping: nothing more is sent; what waits in mailboxes goes back to the store unattempted, and the
   * port is asked for what it holds queued and has not started (it comes back as `returned`). Resolves
   * once every request in flight is answered.
   */
  stop (): Promise<void> {
    this.later.close()
    const now = this.opts.clock.now()
    for (const actor of this.actors.values()) {
      for (const work of actor.emptyMailbox()) this.opts.held.defer(work, now)
    }
    this.ready.clear()
    this.opts.port.holdAll()
    if (this.tally.total === 0) return Promise.resolve()
    return new Promise((resolve) => { this.idleWaiters.push(resolve) })
  }

  /** A webhook's adaptive delivery state on this node, or null when it holds no work for it (the API shows it). */
  deliveryState (webhookId: string): { window: number; roundTripMs: number; breaker: BreakerState } | null {
    const a = this.actors.get(webhookId)
    return a ? { window: a.windowLimit, roundTripMs: Math.round(a.roundTripMs), breaker: a.state(this.opts.clock.now()) } : null
  }

  breakerCounts (): { open: number; half_open: number } {
    const now = this.opts.clock.now()
    const counts = { open: 0, half_open: 0 }
    for (const actor of this.actors.values()) {
      const state = actor.state(now)
      if (state !== 'closed') counts[state] += 1
    }
    return counts
  }

  /** Every actor's adaptive window (for /metrics). */
  windows (): number[] {
    return [...this.actors.values()].map((a) => a.windowLimit)
  }
}
