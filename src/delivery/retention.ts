// The store's delivery statistics for /metrics (cached briefly: a scrape must not cost a table scan each
// time) and the pruning of old final deliveries and events, as a component of its own.
//
// Tested in test/unit/delivery-parts.test.ts.
import type { Component } from '../component.js'
import type { Clock } from '../domain/clock.js'
import type { DeliveryStats, DeliveryStore } from '../store/deliveries.js'
import type { EngineLogger } from './engine-logger.js'

export const STATS_CACHE_MS = 5_000
export const PRUNE_EVERY_MS = 60_000
/** Rows deleted per step; the pruner yields between steps. */
export const PRUNE_STEP = 500

export interface RetentionOptions {
  store: Pick<DeliveryStore, 'deliveryStats' | 'pruneDeliveries' | 'pruneEvents'>
  clock: Clock
  log: EngineLogger
  retentionMs: number
}

export class Retention implements Component {
  readonly name = 'delivery-retention'
  private running = false
  private timer: NodeJS.Timeout | undefined
  private cache: { at: number; value: Promise<DeliveryStats> } | undefined

  constructor (private readonly opts: RetentionOptions) {}

  async start (): Promise<void> {
    this.running = true
    this.timer = setInterval(() => {
      this.prune().catch((err: unknown) => this.opts.log.error({ err }, 'pruning old deliveries failed'))
    }, PRUNE_EVERY_MS).unref()
  }

  async stop (): Promise<void> {
    this.running = false
    clearInterval(this.timer)
    this.timer = undefined
  }

  /** Store statistics, at most STATS_CACHE_MS old (by the injected clock). */
  stats (): Promise<DeliveryStats> {
    const now = this.opts.clock.now()
    if (!this.cache || now - this.cache.at > STATS_CACHE_MS) this.cache = { at: now, value: this.opts.store.deliveryStats(now) }
    return this.cache.value
  }

  /** Deletes final deliveries and events older than the retention, PRUNE_STEP rows at a time, while running. */
  async prune (): Promise<void> {
    const { store } = this.opts
    const before = this.opts.clock.now() - this.opts.retentionMs
    for (const step of [
      (n: number) => store.pruneDeliveries(before, n),
      (n: number) => store.pruneEvents(before, n),
    ]) {
      while (this.running && await step(PRUNE_STEP) === PRUNE_STEP) await new Promise((resolve) => setImmediate(resolve))
    }
  }
}
