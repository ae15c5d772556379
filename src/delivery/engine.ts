// The delivery engine: stored events in, signed webhook POSTs out, every outcome written back.
//
//   event source ──new events──┐
//   store ──claimDeliveries────┴► intake ──► scheduler: actors (one per webhook) ──batches──► port: worker
//   threads (sign + POST) ──results, streamed──► scheduler: what each answer means ──► outcome writer
//   ──batches──► store
//
// The store is the truth: work is leased, never just taken, so a node that dies loses nothing (its
// leases expire and any node picks the work up), and every retry further out than "now" is a time in the
// store, not a timer in memory. Memory is bounded by `maxInFlight`: what does not fit stays in the store
// and is paged in as room frees.
//
// This file keeps the lifecycle, the reads from the store and the wiring; each part does one job in its
// own file:
//   event-source.ts  new events: the routing lease and durable cursor (written once), or routed rows
//   intake.ts        work into actors: parking, saturation, refill
//   held.ts          what is held in memory from its lease until its outcome is queued; the leases
//   scheduler.ts     what goes out when (the node's budget, actors' turns) and what each answer does
//   attempt-outcome.ts  what one answer means (pure)
//   outcome-writer.ts  batched, retried outcome writes that carry the cursor
//   retention.ts     store statistics and pruning
//   actor.ts, pacer.ts, window.ts  per-webhook state and pacing
//   port.ts, dispatcher.ts  where work goes: the worker threads (or a test's fake)
import { hostname } from 'node:os'
import { leaseOwner } from '../domain/lease-owner.js'
import { PLANS } from '../domain/plans.js'
import type { Component } from '../component.js'
import type { Clock } from '../domain/clock.js'
import type { DeliveryStats, DeliveryWork } from '../store/deliveries.js'
import type { BreakerState } from './actor.js'
import { noopLogger, type EngineLogger } from './engine-logger.js'
import { actorOptionsOf, engineLimitsOf, workerDataOf, type EngineLimits, type EngineOptions, type EngineStore } from './engine-options.js'
import { eventSourceFor, type EventSource } from './event-source.js'
import { HeldWork, Leases, workIdentity } from './held.js'
import { Intake } from './intake.js'
import { createDeliveryMetrics, type DeliveryMetrics } from './metrics.js'
import { OutcomeWriter } from './outcome-writer.js'
import { workerThreadPort, type DeliveryPort } from './port.js'
import { Retention } from './retention.js'
import { Scheduler } from './scheduler.js'
import { SecretOpener } from './secret-opener.js'

/** An event fans out to at most this many webhooks: the most any plan allows an account. */
const MAX_WEBHOOKS_PER_EVENT = Math.max(...Object.values(PLANS).map((plan) => plan.webhooks))
/**
 * Stored deliveries leased in one claim, at most. A claim is one transaction on the API's thread, shared
 * with the sends that commit in the same batch: after a restart, when a dead process's leases run out and
 * its backlog comes due at once, pages of 2,000 rows held each batch (and the sends in it) for 100 ms and
 * more on a busy machine. Smaller pages cost a few more reads and keep each one short.
 */
const CLAIM_PAGE = 256

export type { EngineLogger, EngineOptions }

export class DeliveryEngine implements Component {
  readonly name = 'delivery-engine'
  readonly owner: string
  private readonly store: EngineStore
  private readonly clock: Clock
  private readonly log: EngineLogger
  private readonly leases: Leases
  private readonly limits: EngineLimits
  /** The least room a busy engine reads into (see fetch). */
  private readonly minRead: number
  private readonly port: DeliveryPort
  private readonly metrics: DeliveryMetrics

  private readonly held: HeldWork
  private readonly source: EventSource
  private readonly writer: OutcomeWriter
  private readonly intake: Intake
  private readonly scheduler: Scheduler
  private readonly retention: Retention
  private readonly secrets: SecretOpener

  private running = false
  /** True between start() and stop(). */
  get started (): boolean {
    return this.running
  }

  private fetching = false
  private fetchAgain = false
  /** The last fetch stopped for want of room, not of work: freed room should trigger another. */
  private starved = false
  private timers: NodeJS.Timeout[] = []
  private unsubscribe: (() => void) | undefined

  constructor (opts: EngineOptions) {
    this.store = opts.store
    this.clock = opts.clock
    this.log = opts.logger ?? noopLogger
    this.owner = opts.owner ?? leaseOwner(opts.nodeId ?? hostname())
    this.leases = new Leases(this.owner, opts.leaseMs ?? 30_000)
    this.limits = engineLimitsOf(opts)
    this.minRead = Math.min(this.limits.readAhead, this.limits.maxInFlight) / 8
    const actorOptions = actorOptionsOf(opts)
    this.port = (opts.port ?? workerThreadPort(opts.threads, workerDataOf(opts)))({
      results: (results) => this.scheduler.answer(results),
      lost: (ids, error) => this.scheduler.lost(ids, error),
    })
    // Events that made no delivery let the cursor move: a write soon carries it.
    this.source = eventSourceFor(this.store, this.owner, this.log, () => this.writer.schedule())
    this.writer = new OutcomeWriter({
      store: this.store,
      clock: this.clock,
      log: this.log,
      source: this.source,
      autoDisableMs: opts.autoDisableMs,
      onQueued: (outcome) => this.metrics.countOutcome(outcome.kind),
      onStale: (n) => this.metrics.staleOutcomes.inc(n),
      ...(opts.timers ? { timers: opts.timers } : {}),
    })
    this.held = new HeldWork((outcome) => this.writer.queue(outcome))
    this.metrics = createDeliveryMetrics(opts.registry, {
      stats: () => this.stats(),
      inFlight: () => this.held.size,
      breakers: () => this.scheduler.breakerCounts(),
      utilization: () => this.port.utilization(),
      threadIds: () => this.port.threadIds(),
      windows: () => this.scheduler.windows(),
    })
    this.scheduler = new Scheduler({
      clock: this.clock,
      log: this.log,
      held: this.held,
      port: this.port,
      maxRequests: this.limits.maxRequests,
      batchSize: this.limits.batchSize,
      policy: { schedule: opts.retrySchedule, ...(opts.random ? { random: opts.random } : {}) },
      actorOptions,
      counter: this.store,
      metrics: this.metrics,
      ...(opts.timers ? { timers: opts.timers } : {}),
      host: {
        running: () => this.running,
        isSaturated: (id) => this.intake.isSaturated(id),
        refill: (actor) => this.intake.refill(actor),
        redrive: (id) => this.redrive(id),
        answered: () => {
          // Room freed: there may be more waiting in the store.
          if (this.starved && this.held.size < this.limits.maxInFlight / 2 && this.waiting() < this.limits.readAhead / 2) this.wake()
        },
      },
    })
    this.intake = new Intake({
      store: this.store,
      clock: this.clock,
      log: this.log,
      held: this.held,
      leases: this.leases,
      source: this.source,
      // Mailboxes hold what is read ahead: their shares add up to the read-ahead, not to all of memory.
      // Shares of maxInFlight (20,000 / actors) let two or three slow webhooks fill the read-ahead (4,096)
      // without ever parking, and then no webhook got new work.
      maxInFlight: Math.min(this.limits.maxInFlight, this.limits.readAhead),
      mailboxLimit: actorOptions.mailboxLimit,
      host: {
        running: () => this.running,
        actorFor: (id) => this.scheduler.actorFor(id),
        actorCount: () => this.scheduler.actorCount,
        ready: (actor) => this.scheduler.markReady(actor),
        pump: () => this.scheduler.schedulePump(),
        room: () => this.room(),
        flushOutcomes: () => this.writer.flush(),
      },
    })
    this.secrets = new SecretOpener(opts.openSecret, this.log)
    this.retention = new Retention({ store: this.store, clock: this.clock, log: this.log, retentionMs: opts.retentionMs })
  }

  async start (): Promise<void> {
    this.running = true
    this.unsubscribe = this.store.subscribe(() => this.wake())
    const every = (ms: number, fn: () => void) => { this.timers.push(setInterval(fn, ms).unref()) }
    every(this.limits.pollMs, () => this.wake())
    every(Math.max(1000, Math.floor(this.leases.ms / 3)), () => {
      const leaseUntil = this.leases.until(this.clock.now())
      const ids = this.heldIds()
      if (ids.length > 0) this.store.renewLeases(this.owner, ids, leaseUntil).catch((err: unknown) => this.log.error({ err }, 'renewing delivery leases failed'))
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
    // Nothing more goes out; what waits comes back, and what is in flight is answered (bounded by the timeout).
    await this.scheduler.stop()
    try {
      await this.writer.flush()
      await this.store.releaseLeases(this.owner, this.clock.now())
    } catch (err) {
      // The store is gone: the leases expire on their own and the work is picked up again.
      this.log.error({ err }, 'could not hand back deliveries while stopping')
    }
    await this.port.close()
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
    this.fetch().catch((err: unknown) => { if (!this.store.health.failed(err)) this.log.error({ err }, 'fetching deliveries failed') }).finally(() => {
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

  /**
   * Held in mailboxes, not yet handed to the port, less what waits for saturated webhooks: their backlog
   * is parked in the store and paged in by their own actors, so it does not use up the read-ahead (a few
   * slow receivers with full mailboxes would otherwise hold every other webhook's new work back).
   */
  private waiting (): number {
    let parkedBehind = 0
    for (const id of this.intake.saturated()) parkedBehind += this.scheduler.actorFor(id).queued
    return this.held.size - this.scheduler.inFlight - parkedBehind
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
      if (room <= 0 || (round === 0 && room < this.minRead && this.scheduler.inFlight > 0)) {
        this.starved = true
        return
      }
      const now = this.clock.now()
      const req = { owner: this.owner, now, leaseUntil: this.leases.until(now), limit: Math.min(room, 2000), saturated: this.intake.saturated() }
      // An event fans out to up to MAX_WEBHOOKS_PER_EVENT webhooks: route no more events than there is
      // room for their deliveries.
      const eventLimit = Math.max(1, Math.floor(req.limit / MAX_WEBHOOKS_PER_EVENT))
      const routed = await this.source.read({ ...req, limit: eventLimit })
      this.intake.accept(this.secrets.apply(routed.work))
      const claimRoom = this.room()
      let claimed: DeliveryWork[] = []
      if (claimRoom > 0) {
        claimed = await this.store.claimDeliveries({ ...req, limit: Math.min(claimRoom, CLAIM_PAGE) })
        this.intake.accept(this.secrets.apply(claimed))
      }
      if (routed.events < eventLimit && claimed.length < Math.min(claimRoom, CLAIM_PAGE)) return
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
      this.writer.queue({ kind: 'leased', ...workIdentity(w), owner: this.owner, leaseUntil: this.leases.until(now) })
      delete w.origin
      w.lease = 1
    }
  }

  /** A webhook's adaptive delivery state on this node, or null when it holds no work for it (the API shows it). */
  deliveryState (webhookId: string): { window: number; roundTripMs: number; breaker: BreakerState } | null {
    return this.scheduler.deliveryState(webhookId)
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
      .catch((err: unknown) => this.log.error({ err, webhookId }, 're-driving waiting deliveries failed'))
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
