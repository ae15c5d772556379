// The delivery engine: stored events in, signed webhook POSTs out, every outcome written back.
//
//   store ──readEvents (or routeEvents) / claimDeliveries (batches)──► actors (one per webhook) ──batches──►
//   worker threads (sign + POST) ──results, streamed──► outcome writer ──recordOutcomes (batched)──► store
//
// The store is the truth: work is leased, never just taken, so a node that dies loses nothing (its
// leases expire and any node picks the work up), and every retry further out than "now" is a time in the
// store, not a timer in memory. Memory is bounded by `maxInFlight`: what does not fit stays in the store
// and is paged in as room frees.
//
// Written once (a store with readEvents, see ../store/deliveries.ts): new events are read under the
// routing lease and their first attempts live only here until their outcome makes their row; the engine
// counts, per event, the first attempts without an outcome queued, and moves the durable cursor with each
// outcome batch to just before the first event that still has one. What waits (a retry, a deferral, a
// parked or slow delivery) is stored as such, so the cursor never waits long.
import { hostname } from 'node:os'
import { randomBytes } from 'node:crypto'
import pRetry from 'p-retry'
import type { Registry } from 'prom-client'
import type { Clock } from '../domain/clock.js'
import type { ResolvedAddress } from '../domain/webhook-url.js'
import type { Component } from '../service.js'
import type { DeliveryOrigin, DeliveryOutcome, DeliveryStats, DeliveryWork, LeaseRequest, RoutedThrough, RoutingPosition } from '../store/deliveries.js'
import type { Store } from '../store/types.js'
import { WebhookActor, type ActorOptions, type BreakerState } from './actor.js'
import { clampRetryAfter, type RetryPolicy } from './backoff.js'
import { Dispatcher, shardOf } from './dispatcher.js'
import type { DeliveryResult } from './http-sender.js'
import { createDeliveryMetrics, type DeliveryMetrics } from './metrics.js'
import { classify, isOverload, settle } from './settle.js'
import { Pacer, WakeList } from './pacer.js'

export interface EngineLogger {
  info(obj: object, msg: string): void
  warn(obj: object, msg: string): void
  error(obj: object, msg: string): void
}

export interface EngineOptions {
  store: Store
  clock: Clock
  registry: Registry
  logger?: EngineLogger
  /** Worker threads (shards). */
  threads: number
  timeoutMs: number
  retrySchedule: number[]
  /** Requests in flight at once per webhook, at most: the adaptive window's upper bound. */
  window: number
  /** The adaptive window's lower bound and where a new actor starts (default 1 and min(8, window)). */
  windowMin?: number
  windowInitial?: number
  autoDisableMs: number
  retentionMs: number
  production: boolean
  allowedCidrs: string
  /**
   * The signing secret of a stored one (the store keeps them sealed: src/domain/secrets.ts); default: as
   * stored. A secret that does not open signs nothing: its delivery fails and is retried.
   */
  openSecret?: (webhookId: string, stored: string) => string
  /** Fixed DNS answers for the worker threads (tests; see workers/deliver.ts). */
  hosts?: Record<string, ResolvedAddress[]>
  /** DNS_SERVERS, for the worker threads' resolver (empty or absent: the system's). */
  dnsServers?: string[]
  /** This node's name (NODE_ID); the lease owner is `<nodeId>:<pid>:<random>`. Default: the host name. */
  nodeId?: string
  /** The whole lease owner id instead (tests). */
  owner?: string
  leaseMs?: number
  /** How often the store is asked for work when nothing says there is some. */
  pollMs?: number
  /** Deliveries this node holds in memory at most (queued in actors and in flight). */
  maxInFlight?: number
  /** HTTP requests in flight at once across all webhooks (each webhook also has its window). */
  maxRequests?: number
  /**
   * Deliveries read ahead from the store and waiting in actors' mailboxes, at most. The store is read
   * again when fewer than half that wait: enough to keep the threads busy between two reads, and no
   * more, so the store is read as fast as work leaves, not in one burst that holds the heap (and the
   * garbage collector) full of work that could have waited on disk. Default 4 × maxRequests.
   */
  readAhead?: number
  batchSize?: number
  random?: () => number
  breaker?: Partial<Omit<ActorOptions, 'window' | 'ahead'>>
  /** Deliveries per webhook handed to its worker thread beyond the window, in windows; default 3. */
  ahead?: number
  /**
   * A first attempt held in memory longer than this (a slow receiver, a full window) has its row stored,
   * leased to this node, so that the durable cursor moves past its event; default 2 s.
   */
  firstAttemptHoldMs?: number
}

const noopLogger: EngineLogger = { info () {}, warn () {}, error () {} }

/** What an outcome names of its work; a first attempt held in memory brings its origin (its row is made from it). */
function of (w: DeliveryWork): { id: string; webhookId: string; lease: number; origin?: DeliveryOrigin } {
  return w.origin === undefined ? { id: w.id, webhookId: w.webhookId, lease: w.lease } : { id: w.id, webhookId: w.webhookId, lease: w.lease, origin: w.origin }
}
const OUTCOME_BATCH = 512
const OUTCOME_LINGER_MS = 5
/** A failed outcome write is tried 5 times in all, 200, 400, 800 and 800 ms apart (p-retry's options). */
const OUTCOME_WRITE_RETRY = { retries: 4, minTimeout: 200, factor: 2, maxTimeout: 800 } as const

export class DeliveryEngine implements Component {
  readonly name = 'delivery-engine'
  readonly owner: string
  private readonly store: Store
  private readonly clock: Clock
  private readonly log: EngineLogger
  private readonly leaseMs: number
  private readonly pollMs: number
  private readonly maxInFlight: number
  private readonly maxRequests: number
  private readonly readAhead: number
  private readonly firstAttemptHoldMs: number
  /** Requests handed to the workers and not yet answered. */
  private requests = 0
  private readonly batchSize: number
  private readonly policy: RetryPolicy
  private readonly actorOptions: ActorOptions
  private readonly dispatcher: Dispatcher
  private readonly metrics: DeliveryMetrics

  private readonly actors = new Map<string, WebhookActor>()
  /** Work by delivery id, from the moment it is leased until its outcome is queued for writing. */
  private readonly held = new Map<string, DeliveryWork>()
  private readonly ready = new Set<WebhookActor>()
  /** Actors with work that may not send before a time (a pushback hold, a rate-limit window). */
  private readonly later: WakeList
  /** Rate-limited webhooks' permits, from the store's shared counters. */
  private readonly pacer: Pacer
  /** Webhooks with more due work in the store than room in their actor: they page it in themselves. */
  private readonly saturated = new Set<string>()
  private readonly refilling = new Set<string>()
  private outcomes: DeliveryOutcome[] = []
  /** The batch of outcomes being written now: still this node's leases until the write lands. */
  private inWrite: DeliveryOutcome[] = []

  private running = false

  /**
   * Written once (a store with readEvents): this node's place in the event stream while it holds the
   * routing lease, and, per event read under that lease (by seq, ascending), how many of its first
   * attempts have no outcome queued yet. The durable cursor may move up to just before the first of them.
   */
  private routing: RoutingPosition | null = null
  private readonly unwritten = new Map<number, number>()
  /** The cursor last written (under the current routing token). */
  private routedWritten = -1

  /** True between start() and stop(). */
  get started (): boolean {
    return this.running
  }
  private fetching = false
  private fetchAgain = false
  private pumpScheduled = false
  private writeTimer: NodeJS.Timeout | undefined
  private writeSoon = false
  /** The last fetch stopped for want of room, not of work: freed room should trigger another. */
  private starved = false
  private writing: Promise<void> = Promise.resolve()
  private timers: NodeJS.Timeout[] = []
  private unsubscribe: (() => void) | undefined
  private statsCache: { at: number; value: Promise<DeliveryStats> } | undefined
  private idleWaiters: Array<() => void> = []

  constructor (private readonly opts: EngineOptions) {
    this.store = opts.store
    this.clock = opts.clock
    this.log = opts.logger ?? noopLogger
    this.owner = opts.owner ?? `${opts.nodeId ?? hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`
    this.leaseMs = opts.leaseMs ?? 30_000
    this.pollMs = opts.pollMs ?? 250
    this.maxInFlight = opts.maxInFlight ?? 20_000
    this.maxRequests = opts.maxRequests ?? 1024
    this.readAhead = opts.readAhead ?? this.maxRequests * 4
    this.firstAttemptHoldMs = opts.firstAttemptHoldMs ?? 2_000
    this.batchSize = opts.batchSize ?? 512
    this.policy = { schedule: opts.retrySchedule, ...(opts.random ? { random: opts.random } : {}) }
    const windowMin = Math.min(opts.window, Math.max(1, opts.windowMin ?? 1))
    this.actorOptions = {
      window: { min: windowMin, max: opts.window, initial: Math.max(windowMin, Math.min(opts.window, opts.windowInitial ?? 8)) },
      ahead: opts.ahead ?? 3,
      mailboxLimit: opts.breaker?.mailboxLimit ?? Math.max(opts.window * 16, 1024),
      failureThreshold: opts.breaker?.failureThreshold ?? 5,
      cooldownMs: opts.breaker?.cooldownMs ?? 1_000,
      maxCooldownMs: opts.breaker?.maxCooldownMs ?? 600_000,
      downAfterMs: opts.breaker?.downAfterMs ?? 5_000,
      maxHoldMs: opts.breaker?.maxHoldMs ?? 1_000,
    }
    this.dispatcher = new Dispatcher({
      threads: opts.threads,
      workerData: {
        window: opts.window,
        timeoutMs: opts.timeoutMs,
        maxResponseBytes: 1024,
        // Sockets per receiving host and thread: many webhooks on one host share them (and queue in
        // undici beyond them) instead of opening a socket per request.
        connections: 128,
        production: opts.production,
        allowedCidrs: opts.allowedCidrs,
        ...(opts.hosts ? { hosts: opts.hosts } : {}),
        ...(opts.dnsServers && opts.dnsServers.length > 0 ? { dnsServers: opts.dnsServers } : {}),
      },
      onResults: (results) => this.onResults(results),
      onLost: (ids, error) => {
        this.log.error({ deliveries: ids.length, error }, 'a delivery worker thread died; its unanswered deliveries will be retried')
        this.onResults(ids.map((deliveryId) => ({ deliveryId, outcome: 'retry', error, durationMs: 0 })))
      },
    })
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
    every(this.pollMs, () => this.wake())
    every(Math.max(1000, Math.floor(this.leaseMs / 3)), () => {
      const ids = this.heldIds()
      if (ids.length > 0) this.store.renewLeases(this.owner, ids, this.clock.now() + this.leaseMs).catch((err) => this.log.error({ err }, 'renewing delivery leases failed'))
      const routing = this.routing
      if (routing !== null && this.store.renewRouting !== undefined) {
        this.store.renewRouting(this.owner, routing.token, this.clock.now() + this.leaseMs).then(
          (held) => { if (!held && this.routing === routing) this.loseRouting() },
          (err) => this.log.error({ err }, 'renewing the routing lease failed'),
        )
      }
    })
    every(Math.max(10, Math.min(1000, Math.floor(this.firstAttemptHoldMs / 2))), () => this.storeSlowFirstAttempts())
    every(60_000, () => { this.prune().catch((err) => this.log.error({ err }, 'pruning old deliveries failed')) })
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
    this.later.close()
    const now = this.clock.now()
    for (const actor of this.actors.values()) {
      for (const work of actor.mailbox.splice(0)) this.defer(work, now)
    }
    this.ready.clear()
    // What the threads hold queued and have not started comes back too, unattempted.
    this.dispatcher.holdAll()
    await new Promise<void>((resolve) => {
      if (this.inFlightRequests() === 0) resolve()
      else this.idleWaiters.push(resolve)
    })
    try {
      await this.flushOutcomes()
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
    for (const o of this.outcomes) if (o.origin === undefined) ids.push(o.id)
    for (const o of this.inWrite) if (o.origin === undefined) ids.push(o.id)
    return ids
  }

  /** Resolves once nothing is held in memory (tests and benchmarks wait on this, never on time). */
  async drained (): Promise<void> {
    while (this.held.size > 0 || this.outcomes.length > 0 || this.routedThrough() !== undefined) {
      await new Promise((resolve) => setTimeout(resolve, 5))
      if (this.held.size === 0) await this.flushOutcomes()
      else await this.writing
    }
  }

  /**
   * What may still be taken in. Outcomes waiting to be written count too: if the store falls behind,
   * the engine slows down instead of piling results up in memory.
   */
  private room (): number {
    return Math.min(this.maxInFlight - this.held.size - this.outcomes.length, this.readAhead - this.waiting())
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
      if (room <= 0) {
        this.starved = true
        return
      }
      const now = this.clock.now()
      const req = { owner: this.owner, now, leaseUntil: now + this.leaseMs, limit: Math.min(room, 2000), saturated: [...this.saturated] }
      // An event fans out to up to 10 webhooks (the Pro plan's limit): route no more events than there
      // is room for their deliveries.
      const eventLimit = Math.max(1, Math.floor(req.limit / 10))
      const routed = await this.readEvents({ ...req, limit: eventLimit })
      this.accept(routed.work)
      const claimRoom = this.room()
      let claimed: DeliveryWork[] = []
      if (claimRoom > 0) {
        claimed = await this.store.claimDeliveries({ ...req, limit: Math.min(claimRoom, 2000) })
        this.accept(claimed)
      }
      if (routed.events < eventLimit && claimed.length < Math.min(claimRoom, 2000)) return
    }
    this.starved = true
  }

  /**
   * New events: read into memory under the routing lease (written once), or routed into the store by an
   * adapter without readEvents.
   */
  private async readEvents (req: LeaseRequest): Promise<{ events: number; work: DeliveryWork[] }> {
    if (this.store.readEvents === undefined) return await this.store.routeEvents(req)
    const before = this.routing
    const read = await this.store.readEvents(before ? { ...req, routing: before } : req)
    if (this.routing !== before) return { events: 0, work: [] } // lost meanwhile (a failed write): read again
    if (read.routing === null) {
      if (before !== null) this.loseRouting()
      return read
    }
    // Taken (again): counting starts afresh under the new token; the reads start at the durable cursor.
    if (before === null || read.routing.token !== before.token) this.loseRouting()
    this.routing = read.routing
    // Events that made no delivery (or only ones already stored) let the cursor move: write it soon.
    if (read.events > 0) this.scheduleWrite()
    return read
  }

  /** The routing lease is gone (taken over, or given up after a failed write): what was read is read again. */
  private loseRouting (): void {
    this.routing = null
    this.unwritten.clear()
    this.routedWritten = -1
  }

  /** Where the durable cursor may move now: past every event whose first attempts all have outcomes queued. */
  private routedThrough (): RoutedThrough | undefined {
    if (this.routing === null) return undefined
    let through = this.routing.through
    for (const seq of this.unwritten.keys()) {
      through = seq - 1
      break
    }
    if (through <= this.routedWritten) return undefined
    return { owner: this.owner, token: this.routing.token, through }
  }

  /**
   * First attempts held in memory for longer than firstAttemptHoldMs get their row now, leased to this
   * node: one slow receiver must not hold the durable cursor (and what a crash would read again) back.
   * From then on they are leased deliveries like any other (token 1, renewed, their outcome an update).
   */
  private storeSlowFirstAttempts (): void {
    if (this.routing === null || this.unwritten.size === 0) return
    const now = this.clock.now()
    const before = now - this.firstAttemptHoldMs
    for (const w of this.held.values()) {
      if (w.origin === undefined || w.origin.createdAt > before) continue
      this.queueOutcome({ kind: 'leased', ...of(w), owner: this.owner, leaseUntil: now + this.leaseMs })
      delete w.origin
      w.lease = 1
    }
  }

  private countUnwritten (origin: DeliveryOrigin | undefined, by: number): void {
    if (origin === undefined || this.routing === null || origin.router !== this.routing.token) return
    const n = (this.unwritten.get(origin.seq) ?? 0) + by
    if (n > 0) this.unwritten.set(origin.seq, n)
    else this.unwritten.delete(origin.seq)
  }

  private actorFor (webhookId: string): WebhookActor {
    let actor = this.actors.get(webhookId)
    if (!actor) {
      actor = new WebhookActor(webhookId, shardOf(webhookId, this.dispatcher.shards), this.actorOptions)
      this.actors.set(webhookId, actor)
    }
    return actor
  }

  /** Opened secrets per webhook and stored secrets: one array per webhook's live secrets, shared by its work. */
  private readonly opened = new Map<string, { stored: string[]; secrets: string[] }>()

  private openSecrets (w: DeliveryWork): string[] {
    const open = this.opts.openSecret
    if (open === undefined) return w.secrets
    const known = this.opened.get(w.webhookId)
    if (known !== undefined && known.stored.length === w.secrets.length && known.stored.every((s, i) => s === w.secrets[i])) return known.secrets
    let secrets: string[]
    try {
      secrets = w.secrets.map((s) => open(w.webhookId, s))
    } catch (err) {
      this.log.error({ err, webhookId: w.webhookId }, 'a webhook signing secret does not open (was SVC_SECRET changed?); its deliveries fail until it is rotated')
      secrets = []
    }
    if (this.opened.size >= 10_000) this.opened.clear()
    this.opened.set(w.webhookId, { stored: w.secrets, secrets })
    return secrets
  }

  private accept (work: DeliveryWork[]): void {
    if (work.length === 0) return
    const now = this.clock.now()
    const share = this.mailboxShare()
    for (const w of work) {
      w.secrets = this.openSecrets(w)
      const known = this.held.get(w.id)
      if (known) {
        // Already here, and claimed again (its lease ran out, say, and this node won it back): the new
        // token is the one that holds, so the attempt under way records itself with it. A first attempt
        // read again under a new routing token records itself under that one.
        if (w.origin !== undefined) {
          // Read again as not stored (under a new routing token): it is a first attempt under that one.
          known.origin = w.origin
          known.lease = 0
          this.countUnwritten(known.origin, 1)
        } else {
          known.lease = Math.max(known.lease, w.lease)
        }
        continue
      }
      this.held.set(w.id, w)
      this.countUnwritten(w.origin, 1)
      const actor = this.actorFor(w.webhookId)
      // The latest claim carries the webhook's rate limit as it is now.
      if (w.rateLimit !== undefined) actor.rateLimit = w.rateLimit
      if (w.origin !== undefined && this.saturated.has(w.webhookId)) {
        // This webhook's backlog waits in the store: a new delivery goes behind it, not ahead.
        this.held.delete(w.id)
        this.queueOutcome({ kind: 'parked', ...of(w), owner: this.owner, leaseUntil: now + this.leaseMs })
      } else if (actor.isPaused(now)) {
        this.defer(w, actor.pausedUntil)
      } else if (!actor.hasRoom(share)) {
        // This endpoint has more queued than it can take soon: the rest waits in the store, still leased to
        // this node, and the actor pages it back in as its mailbox empties (refill).
        this.held.delete(w.id)
        this.queueOutcome({ kind: 'parked', ...of(w), owner: this.owner, leaseUntil: now + this.leaseMs })
        this.saturated.add(w.webhookId)
      } else {
        actor.mailbox.push(w)
        this.ready.add(actor)
      }
    }
    this.schedulePump()
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
      const budget = this.maxRequests - this.requests
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
        if (batch.length >= this.batchSize) {
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
    this.flushOutcomes()
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
      this.held.delete(r.deliveryId)
      this.requests -= 1
      const actor = this.actorFor(work.webhookId)
      if (r.outcome !== 'returned') this.metrics.requestDuration.observe(r.durationMs / 1000)
      if (r.outcome === 'returned') {
        // Handed back unattempted by its worker thread (after a failure, a pause, or when stopping): no
        // attempt is counted. It goes out again as soon as the actor may send, or back to the store.
        actor.returned()
        if (this.running && !actor.isPaused(now)) {
          let list = requeue.get(actor)
          if (!list) requeue.set(actor, list = [])
          list.push(work)
          this.held.set(work.id, work)
        } else {
          this.defer(work, actor.isPaused(now) ? actor.pausedUntil : now)
        }
      } else {
        this.settleAttempt(actor, work, r, now)
      }
      if (actor.mailbox.length > 0) this.ready.add(actor)
      else if (actor.idle(now) && !this.saturated.has(actor.webhookId) && !requeue.has(actor)) this.actors.delete(actor.webhookId)
      this.refill(actor)
    }
    // Handed back in order: they go to the front of their mailbox, ahead of what came later.
    for (const [actor, works] of requeue) {
      actor.mailbox.unshift(...works)
      this.ready.add(actor)
    }
    this.schedulePump()
    // Room freed: there may be more waiting in the store.
    if (this.starved && this.held.size < this.maxInFlight / 2 && this.waiting() < this.readAhead / 2) this.wake()
    if (this.idleWaiters.length > 0 && this.inFlightRequests() === 0) for (const resolve of this.idleWaiters.splice(0)) resolve()
  }

  /** An attempt that was made: what it means (settle.ts), applied to the actor, and its outcome queued. */
  private settleAttempt (actor: WebhookActor, work: DeliveryWork, r: DeliveryResult, now: number): void {
    const answer = classify(r, actor.isDown(now))
    if (answer === 'returned') return
    if (answer === 'delivered') {
      if (actor.succeeded(now, r.durationMs)) this.redrive(actor.webhookId)
      this.queueOutcome(settle(r, work, answer, this.policy, now))
      this.metrics.latency.observe(Math.max(0, now - work.eventAt) / 1000)
      this.metrics.attempts.observe(work.attempts + 1)
    } else if (answer === 'gone') {
      const wasPaused = actor.isPaused(now)
      actor.failed(now)
      // The receiver is gone and its webhook is being disabled: send it nothing more for a while. What
      // waits for it goes back to the store, where the disable cancels it (the claim would, too).
      actor.pause(now + this.actorOptions.cooldownMs)
      this.queueOutcome(settle(r, work, answer, this.policy, now))
      this.metrics.attempts.observe(work.attempts + 1)
      this.giveBackWhilePaused(actor, now, wasPaused)
    } else if (answer === 'pushback') {
      // Busy, not down: the window shrinks and this delivery waits a moment (or its Retry-After).
      const wait = actor.pushedBack(now)
      this.metrics.pushbacks.inc()
      this.queueOutcome(settle(r, work, answer, this.policy, now, wait))
    } else {
      const wasPaused = actor.isPaused(now)
      if (isOverload(r)) actor.shrink(now)
      const opened = actor.failed(now)
      // A Retry-After from an endpoint that is down pauses the whole webhook (from a busy one, only the delivery).
      if (r.retryAfterMs !== undefined) actor.pause(now + clampRetryAfter(r.retryAfterMs))
      if (opened) this.log.warn({ webhookId: work.webhookId, until: new Date(actor.pausedUntil).toISOString() }, 'webhook circuit breaker opened')
      const outcome = settle(r, work, answer, this.policy, now)
      this.queueOutcome(outcome)
      if (outcome.kind === 'failed') this.metrics.attempts.observe(work.attempts + 1)
      this.giveBackWhilePaused(actor, now, wasPaused)
    }
  }

  /**
   * A paused actor sends nothing, so it keeps nothing: its mailbox goes back to the store, due when the
   * pause ends, and what its worker thread holds queued behind the window comes back to be deferred too.
   * (A paused actor with a mailbox would never be made ready again.)
   */
  private giveBackWhilePaused (actor: WebhookActor, now: number, wasPaused: boolean): void {
    if (!actor.isPaused(now)) return
    for (const queued of actor.mailbox.splice(0)) this.defer(queued, actor.pausedUntil)
    if (!wasPaused) this.dispatcher.hold(actor.shard, [actor.webhookId])
  }

  /**
   * An actor may queue at least mailboxLimit, and more when few actors share the node's budget: one busy
   * webhook alone gets the whole of it, many share it.
   */
  private mailboxShare (): number {
    return Math.floor(this.maxInFlight / Math.max(1, this.actors.size))
  }

  /** A saturated actor whose mailbox has half emptied pulls its own backlog from the store. */
  private refill (actor: WebhookActor): void {
    const id = actor.webhookId
    if (!this.running || !this.saturated.has(id) || this.refilling.has(id)) return
    const limit = Math.max(this.actorOptions.mailboxLimit, this.mailboxShare())
    const want = Math.min(this.room(), limit - actor.mailbox.length)
    if (actor.mailbox.length > limit / 2 || want <= 0) return
    this.refilling.add(id)
    // Outcomes first: a deferred delivery must be back in the store before it can be claimed again.
    this.flushOutcomes()
      .then(() => {
        const now = this.clock.now()
        return this.store.unparkDeliveries({ owner: this.owner, now, leaseUntil: now + this.leaseMs, limit: want, webhookId: id })
      })
      .then((work) => {
        if (work.length < want) this.saturated.delete(id)
        this.accept(work)
      })
      .catch((err) => this.log.error({ err, webhookId: id }, 'paging in a webhook backlog failed'))
      .finally(() => { this.refilling.delete(id) })
  }

  /** Gives work back to the store, due at `at`, without counting an attempt. */
  private defer (work: DeliveryWork, at: number): void {
    this.held.delete(work.id)
    this.queueOutcome({ kind: 'deferred', ...of(work), nextAttemptAt: at })
  }

  private inFlightRequests (): number {
    let n = 0
    for (const actor of this.actors.values()) n += actor.inFlight
    return n
  }

  /**
   * Outcomes are written in batches: at once when many are waiting, else within OUTCOME_LINGER_MS, so a
   * busy engine makes one store write per few hundred deliveries rather than one per handful. (The
   * delivery itself is not delayed: only its record.)
   */
  private queueOutcome (outcome: DeliveryOutcome): void {
    this.outcomes.push(outcome)
    this.metrics.outcomes.inc({ outcome: outcome.kind })
    this.countUnwritten(outcome.origin, -1)
    this.scheduleWrite()
  }

  private scheduleWrite (): void {
    if (this.outcomes.length >= OUTCOME_BATCH && !this.writeSoon) {
      this.writeSoon = true
      setImmediate(() => {
        this.writeSoon = false
        void this.flushOutcomes()
      })
    } else {
      this.writeTimer ??= setTimeout(() => {
        this.writeTimer = undefined
        void this.flushOutcomes()
      }, OUTCOME_LINGER_MS)
    }
  }

  /** Writes every queued outcome in one store call; outcomes are written in the order they happened. */
  private flushOutcomes (): Promise<void> {
    if (this.writeTimer) {
      clearTimeout(this.writeTimer)
      this.writeTimer = undefined
    }
    this.writing = this.writing.then(async () => {
      for (;;) {
        // The cursor moves with the outcomes that complete its events, in the same write.
        const routed = this.routedThrough()
        if (this.outcomes.length === 0 && routed === undefined) break
        const batch = this.outcomes
        this.outcomes = []
        this.inWrite = batch
        try {
          let stale: number
          try {
            ({ stale } = await pRetry(
              () => this.store.recordOutcomes(batch, { now: this.clock.now(), autoDisableMs: this.opts.autoDisableMs, ...(routed ? { routed } : {}) }),
              {
                ...OUTCOME_WRITE_RETRY,
                // A store fault is logged once, by the store's health; anything else at every attempt.
                onFailedAttempt: ({ error, attemptNumber }) => {
                  if (!this.store.health.failed(error)) this.log.error({ err: error, attempt: attemptNumber, outcomes: batch.length }, 'writing delivery outcomes failed')
                },
              },
            ))
          } catch {
            // Given up. The leases still stood while the batch was retried (they are renewed); now they run
            // out and the work is simply done again. First attempts held in memory have no lease: the
            // routing lease is given up instead, so that their events are read again from the durable cursor.
            if (routed !== undefined || batch.some((o) => o.origin !== undefined)) this.loseRouting()
            return
          }
          if (routed !== undefined && this.routing !== null && routed.token === this.routing.token) {
            this.routedWritten = Math.max(this.routedWritten, routed.through)
          }
          if (stale > 0) {
            // Another node took these deliveries over (this one stalled past their leases): its work stands.
            this.metrics.staleOutcomes.inc(stale)
            this.log.warn({ stale }, 'delivery outcomes arrived after their lease was lost; they were not applied')
          }
        } finally {
          this.inWrite = []
        }
      }
    })
    return this.writing
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

  /** Store statistics for /metrics, cached briefly: a scrape must not cost a table scan each time. */
  stats (): Promise<DeliveryStats> {
    const now = Date.now()
    if (!this.statsCache || now - this.statsCache.at > 5_000) {
      this.statsCache = { at: now, value: this.store.deliveryStats(this.clock.now()) }
    }
    return this.statsCache.value
  }

  /** Deletes old final deliveries and events in small batches, yielding between them. */
  async prune (): Promise<void> {
    const before = this.clock.now() - this.opts.retentionMs
    for (const step of [
      (n: number) => this.store.pruneDeliveries(before, n),
      (n: number) => this.store.pruneEvents(before, n),
    ]) {
      while (this.running && await step(500) === 500) await new Promise((resolve) => setImmediate(resolve))
    }
  }
}
