// @fastify/rate-limit's custom store interface, backed by the svc store: every node that shares the
// store shares the counters, so N nodes give a key its limit once, not N times (RATE_LIMIT_STORE=store).
// The counting rule is src/domain/rate-limits.ts; this is only the adapter to the plugin's callbacks.
import type { FastifyRateLimitStore, FastifyRateLimitStoreCtor } from '@fastify/rate-limit'
import type { Clock } from '../domain/clock.js'
import { sharedLimiter, type RateLimitCounter } from '../domain/rate-limits.js'

interface StoreOptions {
  timeWindow?: unknown
  /** The route a per-route limit belongs to (empty for app.createRateLimit limits). */
  routeInfo?: { method?: string | string[]; url?: string }
}

export function sharedRateLimitStore (counter: RateLimitCounter, clock: Clock, onPruneError: (err: unknown) => void): FastifyRateLimitStoreCtor {
  class SharedRateLimitStore implements FastifyRateLimitStore {
    private readonly hit

    constructor (private readonly options: StoreOptions) {
      // Per-route limits (config.rateLimit) count per route, as the in-memory store does (one LRU per route).
      const route = options.routeInfo ?? {}
      this.hit = sharedLimiter(counter, clock, `${String(route.method ?? '')} ${String(route.url ?? '')}`, onPruneError)
    }

    // The plugin passes the window (it may be computed per request) and the max beyond the typed two.
    incr (key: string, callback: (error: Error | null, result?: { current: number; ttl: number }) => void, timeWindow?: number): void {
      const windowMs = typeof timeWindow === 'number' ? timeWindow : typeof this.options.timeWindow === 'number' ? this.options.timeWindow : 60_000
      this.hit(key, windowMs).then((r) => callback(null, r), (err: unknown) => callback(err instanceof Error ? err : new Error(String(err))))
    }

    child (routeOptions: object): FastifyRateLimitStore {
      return new SharedRateLimitStore({ ...this.options, ...routeOptions })
    }
  }
  return SharedRateLimitStore
}
