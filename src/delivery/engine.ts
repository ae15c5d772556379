// The delivery engine: stored events in, signed webhook POSTs out, every outcome written back.
//
//   event source ──new events──┐
//   store ──claimDeliveries────┴► intake ──► actors (one per webhook) ──batches──► worker threads (sign +
//   POST) ──results, streamed──► settle (what each answer means) ──► outcome writer ──batches──► store
//
// The store is the truth: work is leased, never just taken, so a node that dies loses nothing (its
// leases expire and any node picks the work up), and every retry further out than "now" is a time in the
// store, not a timer in memory. Memory is bounded by `maxInFlight`: what does not fit stays in the store
// and is paged in as room frees.
//
// This file keeps the lifecycle and the wiring; each part does one job in its own file:
//   event-source.ts  new events: the routing lease and durable cursor (written once), or routed rows
//   intake.ts        work into actors: parking, saturation, refill
//   held.ts          what is held in memory from its lease until its outcome is queued; the leases
//   settle.ts        what one answer means (pure)
//   outcome-writer.ts  batched, retried outcome writes that carry the cursor
//   retention.ts     store statistics and pruning
//   actor.ts, pacer.ts, window.ts, dispatcher.ts  per-webhook state, pacing, and the worker threads
import { hostname } from 'node:os'
import { leaseOwner } from '../domain/lease-owner.js'
import type { Component } from '../component.js'
import type { Clock } from '../domain/clock.js'
import type { DeliveryStats, DeliveryWork } from '../store/deliveries.js'
import type { Store } from '../store/types.js'
import { WebhookActor, type ActorOptions, type BreakerState } from './actor.js'
import { clampRetryAfter, type RetryPolicy } from './backoff.js'
import { Dispatcher, shardOf } from './dispatcher.js'
import { noopLogger, type EngineLogger } from './engine-logger.js'
import { actorOptionsOf, limitsOf, workerDataOf, type EngineLimits, type EngineOptions } from './engine-options.js'
import { eventSourceFor, type EventSource } from './event-source.js'
import { HeldWork, Leases, outcomeOf } from './held.js'
import type { DeliveryResult } from './http-sender.js'
import { Intake } from './intake.js'
import { createDeliveryMetrics, type DeliveryMetrics } from './metrics.js'
import { OutcomeWriter } from './outcome-writer.js'
import { Pacer, WakeList } from './pacer.js'
import { Retention } from './retention.js'
import { SecretOpener } from './secret-opener.js'
import { classify, isOverload, settle } from './settle.js'

export type { EngineLogger, EngineOptions }

export class DeliveryEngine implements Component {
  readonly name = 'delivery-engine'
  readonly owner: string
  private readonly store: Store
  private readonly clock: Clock
  private readonly log: EngineLogger
  private readonly leases: Leases
  private readonly limits: EngineLimits
  /** The least room a busy engine reads into (see fetch). */
  private readonly minRead: number
  /** Requests handed to the workers and not yet answered. */
  private requests = 0
  private readonly policy: RetryPolicy
  private readonly actorOptions: ActorOptions
  private readonly dispatcher: Dispatcher
  private readonly metrics: DeliveryMetrics

  private readonly actors = new Map<string, WebhookActor>()
  private readonly held: HeldWork
  private readonly source: EventSource
  private readonly writer: OutcomeWriter
  private readonly intake: Intake
  private readonly retention: Retention
  private readonly secrets: SecretOpener
  private readonly ready = new Set<WebhookActor>()
  /** Actors with work that may not send before a time (a pushback hold, a rate-limit window). */
  private readonly later: WakeList
  /** Rate-limited webhooks' permits, from the store's shared counters. */
  private readonly pacer: Pacer

  private running = false
  /** True between start() and stop(). */
  get started (): boolean {
    return this.running
  }

  private fetching = false
  private fetchAgain = false
  private pumpScheduled = false
  /** The last fetch stopped for want of room, not of work: freed room should trigger another. */
  private starved = false
  private timers: NodeJS.Timeout[] = []
  private unsubscribe: (() => void) | undefined
  private idleWaiters: Array<() => void> = []

  constructor (opts: EngineOptions) {
    this.store = opts.store
    this.clock = opts.clock
    this.log = opts.logger ?? noopLogger
    this.owner = opts.owner ?? leaseOwner(opts.nodeId ?? hostname())
    this.leases = new Leases(this.owner, opts.leaseMs ?? 30_000)
    this.limits = limitsOf(opts)
    this.minRead = Math.min(this.limits.readAhead, this.limits.maxInFlight) / 8
    this.policy = { schedule: opts.retrySchedule, ...(opts.random ? { random: opts.random } : {}) }
    this.actorOptions = actorOptionsOf(opts)
    this.dispatcher = new Dispatcher({
      threads: opts.threads,
      workerData: workerDataOf(opts),
      onResults: (results) => this.onResults(results),
      onLost: (ids, error) => {
        this.log.error({ deliveries: ids.length, error }, 'a delivery worker thread died; its unanswered deliveries will be retried')
        this.onResults(ids.map((deliveryId) => ({ deliveryId, outcome: 'retry', error, durationMs: 0 })))
      },
    })
    // Events that made no delivery let the cursor move: a write soon carries it.
    this.source = eventSourceFor(this.store, this.owner, this.log, () => this.writer.schedule())
    this.writer = new OutcomeWriter({
      store: this.store,
      clock: this.clock,
      log: this.log,
      source: this.source,
      autoDisableMs: opts.autoDisableMs,
      onQueued: (outcome) => this.metrics.outcomes.inc({ outcome: outcome.kind }),
      onStale: (n) => this.metrics.staleOutcomes.inc(n),
    })
    this.held = new HeldWork((outcome) => this.writer.queue(outcome))
    this.intake = new Intake({
      store: this.store,
      clock: this.clock,
      log: this.log,
      held: this.held,
      leases: this.leases,
      source: this.source,
      maxInFlight: this.limits.maxInFlight,
      mailboxLimit: this.actorOptions.mailboxLimit,
      host: {
        running: () => this.running,
        actorFor: (id) => this.actorFor(id),
        actorCount: () => this.actors.size,
        ready: (actor) => { this.ready.add(actor) },
        pump: () => this.schedulePump(),
        room: () => this.room(),
        flushOutcomes: () => this.writer.flush(),
      },
    })
    this.secrets = new SecretOpener(opts.openSecret, this.log)
    this.retention = new Retention({ store: this.store, clock: this.clock, log: this.log, retentionMs: opts.retentionMs })
    const makeReady = (actors: WebhookActor[]) => {
      if (!this.running) return
      for (const a of actors) this.ready.add(a)
      this.schedulePump()
    }
    this.later = new WakeList(this.clock, makeReady)
    this.pacer = new Pacer(this.store, this.clock, (actor, at) => {
      if (at === null) makeReady([actor])
      else this.later.add(actor, at)
    }, (err, actor) => {
      if (!this.store.health.failed(err)) this.log.error({ err, webhookId: actor.webhookId }, 'asking for rate-limit permits failed')
    })
    this.metrics = createDeliveryMetrics(opts.registry, {
      stats: () => this.stats(),
      inFlight: () => this.held.size,
      breakers: () => this.breakerCounts(),
      utilization: () => this.dispatcher.utilization(),
      threadIds: () => this.dispatcher.threadIds(),
      windows: () => [...this.actors.values()].map((a) => a.window.limit),
    })
  }

  async start (): Promise<void> {
    this.running = true
    this.unsubscribe = this.store.subscribe(() => this.wake())
    const every = (ms: number, fn: () => void) => { this.timers.push(setInterval(fn, ms).unref()) }
    every(this.limits.pollMs, () => this.wake())
    every(Math.max(1000, Math.floor(this.leases.ms / 3)), () => {
      const leaseUntil = this.leases.until(this.clock.now())
      const ids = this.heldIds()
      if (ids.length > 0) this.store.renewLeases(this.owner, ids, leaseUntil).catch((err) => this.log.error({ err }, 'renewing delivery leases failed'))
      this.source.renew(leaseUntil)
    })
    every(Math.max(10, Math.min(1000, Math.floor(this.limits.firstAttemptHoldMs / 2))), () => this.storeSlowFirstAttempts())
    await this.retention.start()
    this.wake()
  }

  /**
   * Stops taking work, lets requests in flight finish (they are bounded by the delivery timeout), gives
   * back what was queued but not started, writes every outcome, and releases this node's leases.
   */
  async stop (): Promise<void> {
    if (!this.running) return
    this.running = false
    this.unsubscribe?.()
    for (const t of this.timers) clearInterval(t)
    this.timers = []
    await this.retention.stop()
    this.later.close()
    const now = this.clock.now()
    for (const actor of this.actors.values()) {
      for (const work of actor.mailbox.splice(0)) this.held.defer(work, now)
    }
    this.ready.clear()
    // What the threads hold queued and have not started comes back too, unattempted.
    this.dispatcher.holdAll()
    await new Promise<void>((resolve) => {
      if (this.inFlightRequests() === 0) resolve()
      else this.idleWaiters.push(resolve)
    })
    try {
      await this.writer.flush()
      await this.store.releaseLeases(this.owner, this.clock.now())
    } catch (err) {
      // The store is gone: the leases expire on their own and the work is picked up again.
      this.log.error({ err }, 'could not hand back deliveries while stopping')
    }
    await this.dispatcher.close()
  }

  /** Something may be due: look in the store soon. Cheap to call often. */
  wake (): void {
    if (!this.running) return
    if (this.fetching) {
      this.fetchAgain = true
      return
    }
    this.fetching = true
    this.fetchAgain = false
    // A store fault (disk full…) is logged once by the store's health, not at every poll.
    this.fetch().catch((err) => { if (!this.store.health.failed(err)) this.log.error({ err }, 'fetching deliveries failed') }).finally(() => {
      this.fetching = false
      if (this.fetchAgain) this.wake()
    })
  }

  /**
   * The leases this node still needs: work in actors and in flight, and outcomes not yet written (their
   * lease must outlive a slow write, or they would arrive stale). Nothing else is renewed: work this node
   * dropped (outcomes given up after failed writes, a claim whose answer never arrived) runs out.
   */
  private heldIds (): string[] {
    // First attempts held in memory have no row (and no lease) yet: the routing lease covers them.
    const ids: string[] = []
    for (const w of this.held.values()) if (w.origin === undefined) ids.push(w.id)
    ids.push(...this.writer.leasedIds())
    return ids
  }

  /** Resolves once nothing is held in memory (tests and benchmarks wait on this, never on time). */
  async drained (): Promise<void> {
    for (;;) {
      await this.held.emptied()
      // Nothing held: write what is queued and the cursor; work that came in meanwhile is waited for too.
      await this.writer.flush()
      if (this.held.size === 0 && this.writer.pending === 0 && this.source.through() === undefined) return
    }
  }

  /**
   * What may still be taken in. Outcomes waiting to be written count too: if the store falls behind,
   * the engine slows down instead of piling results up in memory.
   */
  private room (): number {
    return Math.min(this.limits.maxInFlight - this.held.size - this.writer.pending, this.limits.readAhead - this.waiting())
  }

  /** Held in mailboxes, not yet handed to a worker thread. */
  private waiting (): number {
    return this.held.size - this.requests
  }

  private async fetch (): Promise<void> {
    // New events first (they are the freshest and the latency target), then due retries and leases of
    // dead nodes. Keep going while full pages come back and there is room.
    this.starved = false
    for (let round = 0; round < 64 && this.running; round++) {
      const room = this.room()
      // A busy engine (requests in flight, so results and their wake-ups are coming) does not read a
      // sliver: at every commit of new events it used to read the few that fitted, thousands of reads a
      // second. It reads once an eighth of what it may hold is free, as one larger page.
      if (room <= 0 || (round === 0 && room < this.minRead && this.requests > 0)) {
        this.starved = true
        return
      }
      const now = this.clock.now()
      const req = { owner: this.owner, now, leaseUntil: this.leases.until(now), limit: Math.min(room, 2000), saturated: this.intake.saturated() }
      // An event fans out to up to 10 webhooks (the Pro plan's limit): route no more events than there
      // is room for their deliveries.
      const eventLimit = Math.max(1, Math.floor(req.limit / 10))
      const routed = await this.source.read({ ...req, limit: eventLimit })
      this.intake.accept(this.secrets.apply(routed.work))
      const claimRoom = this.room()
      let claimed: DeliveryWork[] = []
      if (claimRoom > 0) {
        claimed = await this.store.claimDeliveries({ ...req, limit: Math.min(claimRoom, 2000) })
        this.intake.accept(this.secrets.apply(claimed))
      }
      if (routed.events < eventLimit && claimed.length < Math.min(claimRoom, 2000)) return
    }
    this.starved = true
  }

  /**
   * First attempts held in memory for longer than firstAttemptHoldMs get their row now, leased to this
   * node: one slow receiver must not hold the durable cursor (and what a crash would read again) back.
   * From then on they are leased deliveries like any other (token 1, renewed, their outcome an update).
   * They stay held: the outcome queued here stores them, it does not end them.
   */
  private storeSlowFirstAttempts (): void {
    if (!this.source.holdsFirstAttempts()) return
    const now = this.clock.now()
    const before = now - this.limits.firstAttemptHoldMs
    for (const w of this.held.values()) {
      if (w.origin === undefined || w.origin.createdAt > before) continue
      this.writer.queue({ kind: 'leased', ...outcomeOf(w), owner: this.owner, leaseUntil: this.leases.until(now) })
      delete w.origin
      w.lease = 1
    }
  }

  private actorFor (webhookId: string): WebhookActor {
    let actor = this.actors.get(webhookId)
    if (!actor) {
      actor = new WebhookActor(webhookId, shardOf(webhookId, this.dispatcher.shards), this.actorOptions)
      this.actors.set(webhookId, actor)
    }
    return actor
  }

  private schedulePump (): void {
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
  private pump (): void {
    const now = this.clock.now()
    const batches = new Map<number, DeliveryWork[]>()
    for (const actor of [...this.ready]) {
      const budget = this.limits.maxRequests - this.requests
      if (budget <= 0) break
      if (actor.rateLimit !== null && !actor.isPaused(now) && (now >= actor.permitsUntil || actor.permits <= 0)) {
        // A rate-limited webhook spends permits from the shared counters; it is made ready again when they come.
        this.ready.delete(actor)
        this.pacer.ask(actor, now)
        continue
      }
      const taken = actor.take(now, Math.min(budget, actor.mailbox.length))
      this.ready.delete(actor)
      if (actor.mailbox.length > 0 && actor.capacity(now) > 0) this.ready.add(actor)
      else if (actor.mailbox.length > 0 && now < actor.holdUntil) this.later.add(actor, actor.holdUntil)
      if (taken.length === 0) continue
      this.requests += taken.length
      let batch = batches.get(actor.shard)
      if (!batch) batches.set(actor.shard, batch = [])
      for (const w of taken) {
        batch.push(w)
        if (batch.length >= this.limits.batchSize) {
          this.dispatcher.sendWork(actor.shard, batch)
          batches.set(actor.shard, batch = [])
        }
      }
    }
    for (const [shard, batch] of batches) if (batch.length > 0) this.dispatcher.sendWork(shard, batch, this.windowOf)
  }

  /** Each webhook's adaptive window, as it travels with its batches to the worker threads. */
  private readonly windowOf = (webhookId: string): number => this.actors.get(webhookId)?.window.limit ?? this.actorOptions.window.initial

  /** A webhook's adaptive delivery state on this node, or null when it holds no work for it (the API shows it). */
  deliveryState (webhookId: string): { window: number; roundTripMs: number; breaker: BreakerState } | null {
    const a = this.actors.get(webhookId)
    return a ? { window: a.window.limit, roundTripMs: Math.round(a.window.roundTrip), breaker: a.state(this.clock.now()) } : null
  }

  /**
   * Re-drive: the endpoint answers 2xx again after an outage (or was enabled again): its deliveries that
   * wait for a later retry become due now. They come in as any due work does, and go out at the window's
   * pace. Outcomes are written first, so that the retries just decided are among them.
   */
  redrive (webhookId: string): void {
    if (!this.running) return
    this.writer.flush()
      .then(() => this.store.redriveDeliveries(webhookId, this.clock.now()))
      .then((n) => {
        if (n === 0) return
        this.metrics.redrives.inc(n)
        this.log.info({ webhookId, deliveries: n }, 'endpoint answers again: its waiting deliveries are due now')
        this.wake()
      })
      .catch((err) => this.log.error({ err, webhookId }, 're-driving waiting deliveries failed'))
  }

  private onResults (results: DeliveryResult[]): void {
    const now = this.clock.now()
    const requeue = new Map<WebhookActor, DeliveryWork[]>()
    for (const r of results) {
      const work = this.held.get(r.deliveryId)
      if (!work) continue
      this.requests -= 1
      const actor = this.actorFor(work.webhookId)
      if (r.outcome === 'returned') {
        // Handed back unattempted by its worker thread (after a failure, a pause, or when stopping): no
        // attempt is counted. It goes out again as soon as the actor may send (still held), or back to the store.
        actor.returned()
        if (this.running && !actor.isPaused(now)) {
          let list = requeue.get(actor)
          if (!list) requeue.set(actor, list = [])
          list.push(work)
        } else {
          this.held.defer(work, actor.isPaused(now) ? actor.pausedUntil : now)
        }
      } else {
        this.metrics.requestDuration.observe(r.durationMs / 1000)
        this.settleAttempt(actor, work, r, now)
      }
      if (actor.mailbox.length > 0) this.ready.add(actor)
      else if (actor.idle(now) && !this.intake.isSaturated(actor.webhookId) && !requeue.has(actor)) this.actors.delete(actor.webhookId)
      this.intake.refill(actor)
    }
    // Handed back in order: they go to the front of their mailbox, ahead of what came later.
    for (const [actor, works] of requeue) {
      actor.mailbox.unshift(...works)
      this.ready.add(actor)
    }
    this.schedulePump()
    // Room freed: there may be more waiting in the store.
    if (this.starved && this.held.size < this.limits.maxInFlight / 2 && this.waiting() < this.limits.readAhead / 2) this.wake()
    if (this.idleWaiters.length > 0 && this.inFlightRequests() === 0) for (const resolve of this.idleWaiters.splice(0)) resolve()
  }

  /** An attempt that was made: what it means (settle.ts), applied to the actor, and its outcome queued. */
  private settleAttempt (actor: WebhookActor, work: DeliveryWork, r: DeliveryResult, now: number): void {
    const answer = classify(r, actor.isDown(now))
    if (answer === 'returned') return
    const wasPaused = actor.isPaused(now)
    let pushbackWaitMs = 0
    if (answer === 'delivered') {
      if (actor.succeeded(now, r.durationMs)) this.redrive(actor.webhookId)
      this.metrics.latency.observe(Math.max(0, now - work.eventAt) / 1000)
    } else if (answer === 'gone') {
      actor.failed(now)
      // The receiver is gone and its webhook is being disabled: send it nothing more for a while. What
      // waits for it goes back to the store, where the disable cancels it (the claim would, too).
      actor.pause(now + this.actorOptions.cooldownMs)
    } else if (answer === 'pushback') {
      // Busy, not down: the window shrinks and this delivery waits a moment (or its Retry-After).
      pushbackWaitMs = actor.pushedBack(now)
      this.metrics.pushbacks.inc()
    } else {
      if (isOverload(r)) actor.shrink(now)
      const opened = actor.failed(now)
      // A Retry-After from an endpoint that is down pauses the whole webhook (from a busy one, only the delivery).
      if (r.retryAfterMs !== undefined) actor.pause(now + clampRetryAfter(r.retryAfterMs))
      if (opened) this.log.warn({ webhookId: work.webhookId, until: new Date(actor.pausedUntil).toISOString() }, 'webhook circuit breaker opened')
    }
    const outcome = settle(r, work, answer, this.policy, now, pushbackWaitMs)
    this.held.release(work, outcome)
    // Every attempt that ends or moves the retry schedule counts (a retry after a pushback does not).
    if (answer === 'delivered' || answer === 'gone' || (answer === 'failure' && outcome.kind === 'failed')) this.metrics.attempts.observe(work.attempts + 1)
    if (answer === 'gone' || answer === 'failure') this.giveBackWhilePaused(actor, now, wasPaused)
  }

  /**
   * A paused actor sends nothing, so it keeps nothing: its mailbox goes back to the store, due when the
   * pause ends, and what its worker thread holds queued behind the window comes back to be deferred too.
   * (A paused actor with a mailbox would never be made ready again.)
   */
  private giveBackWhilePaused (actor: WebhookActor, now: number, wasPaused: boolean): void {
    if (!actor.isPaused(now)) return
    for (const queued of actor.mailbox.splice(0)) this.held.defer(queued, actor.pausedUntil)
    if (!wasPaused) this.dispatcher.hold(actor.shard, [actor.webhookId])
  }

  private inFlightRequests (): number {
    let n = 0
    for (const actor of this.actors.values()) n += actor.inFlight
    return n
  }

  private breakerCounts (): { open: number; half_open: number } {
    const now = this.clock.now()
    const counts = { open: 0, half_open: 0 }
    for (const actor of this.actors.values()) {
      const state = actor.state(now)
      if (state !== 'closed') counts[state] += 1
    }
    return counts
  }

  /** Store statistics for /metrics, cached briefly (retention.ts). */
  stats (): Promise<DeliveryStats> {
    return this.retention.stats()
  }

  /** Deletes old final deliveries and events (retention.ts). */
  prune (): Promise<void> {
    return this.retention.prune()
  }
}
