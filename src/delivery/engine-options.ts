// The engine's options, and the actors', limits and worker threads' settings they resolve to (defaults
// written here once).
import type { Registry } from 'prom-client'
import type { Clock, Timers } from '../domain/clock.js'
import type { ResolvedAddress } from '../domain/webhook-url.js'
import type { StoreHealth } from '../store/faults.js'
import type { Store } from '../store/types.js'
import type { DeliverWorkerData } from '../../workers/deliver.js'
import type { ActorOptions } from './actor.js'
import type { EngineLogger } from './engine-logger.js'
import type { DeliveryPortFactory } from './port.js'

/** What the engine uses of the store (the service's whole store is one; a unit test's fake has just these). */
export type EngineStore = Pick<Store,
  | 'subscribe' | 'routeEvents' | 'readEvents' | 'renewRouting' | 'claimDeliveries' | 'unparkDeliveries'
  | 'renewLeases' | 'releaseLeases' | 'recordOutcomes' | 'redriveDeliveries' | 'hitRateLimit'
  | 'deliveryStats' | 'pruneDeliveries' | 'pruneEvents'> & { readonly health: Pick<StoreHealth, 'failed'> }

export interface EngineOptions {
  store: EngineStore
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
  /**
   * Where batches of work go and answers come from. Default: `threads` worker threads signing and POSTing
   * (port.ts); a unit test gives a fake that answers by hand.
   */
  port?: DeliveryPortFactory
  /** Timeouts of the engine's own waits (pacing, outcome batching); default Node's. Tests fire them by hand. */
  timers?: Timers
}

/** Each webhook actor's options: the adaptive window's bounds and the breaker's settings. */
export function actorOptionsOf (opts: Pick<EngineOptions, 'window' | 'windowMin' | 'windowInitial' | 'ahead' | 'breaker'>): ActorOptions {
  const windowMin = Math.min(opts.window, Math.max(1, opts.windowMin ?? 1))
  return {
    window: { min: windowMin, max: opts.window, initial: Math.max(windowMin, Math.min(opts.window, opts.windowInitial ?? 8)) },
    ahead: opts.ahead ?? 3,
    mailboxLimit: opts.breaker?.mailboxLimit ?? Math.max(opts.window * 16, 1024),
    failureThreshold: opts.breaker?.failureThreshold ?? 5,
    cooldownMs: opts.breaker?.cooldownMs ?? 1_000,
    maxCooldownMs: opts.breaker?.maxCooldownMs ?? 600_000,
    downAfterMs: opts.breaker?.downAfterMs ?? 5_000,
    maxHoldMs: opts.breaker?.maxHoldMs ?? 1_000,
  }
}

/** The engine's own limits and periods, defaults resolved. */
export interface EngineLimits {
  pollMs: number
  maxInFlight: number
  maxRequests: number
  readAhead: number
  firstAttemptHoldMs: number
  batchSize: number
}

export function engineLimitsOf (opts: Pick<EngineOptions, keyof EngineLimits>): EngineLimits {
  const maxRequests = opts.maxRequests ?? 1024
  return {
    pollMs: opts.pollMs ?? 250,
    maxInFlight: opts.maxInFlight ?? 20_000,
    maxRequests,
    readAhead: opts.readAhead ?? maxRequests * 4,
    firstAttemptHoldMs: opts.firstAttemptHoldMs ?? 2_000,
    batchSize: opts.batchSize ?? 512,
  }
}

/** What each delivery worker thread is started with. */
export function workerDataOf (opts: Pick<EngineOptions, 'window' | 'timeoutMs' | 'production' | 'allowedCidrs' | 'hosts' | 'dnsServers'>): DeliverWorkerData {
  return {
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
  }
}
