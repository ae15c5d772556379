// Rate limits shared by every node: the rule for counting lives here, the store only counts.
//
// Fixed windows aligned on the epoch (a 1 s limit counts in [k·1000, (k+1)·1000)), so that every node
// names the same window for the same instant without asking anyone: one atomic increment per request.
// Like any fixed window (and like @fastify/rate-limit's in-memory store), a key can get up to twice its
// limit across a window boundary; a node whose clock lags counts into the window the store already has
// (SQLite) or into its own (MongoDB), which bounds the error by the clock skew.
import { createHash } from 'node:crypto'
import type { Clock } from './clock.js'

export interface RateLimitCounter {
  hitRateLimit(hit: { key: string; windowStart: number; windowEnd: number }): Promise<number>
  pruneRateLimits(now: number): Promise<number>
}

export interface RateLimitHit {
  /** Hits in the window so far, this one included. */
  current: number
  /** Milliseconds until the window ends. */
  ttl: number
}

/** How often ended windows are removed from the store (lazily, on a hit). */
export const PRUNE_EVERY_MS = 60_000

export function windowOf (now: number, windowMs: number): { windowStart: number; windowEnd: number } {
  const size = Math.max(1, Math.trunc(windowMs))
  const windowStart = Math.floor(now / size) * size
  return { windowStart, windowEnd: windowStart + size }
}

/**
 * What the store is given as the key: a hash, never the key itself. Keys carry email addresses
 * (`login:<email>`) and client addresses, which have no business in a table every node reads; the
 * hash also bounds the key's size whatever the request carried. `scope` keeps two limits apart.
 */
export function storedKey (scope: string, key: string): string {
  return createHash('sha256').update(scope).update('\0').update(key).digest('base64url').slice(0, 32)
}

/** One limiter's view of the shared counters (one per route limit: `scope` names it). */
export function sharedLimiter (counter: RateLimitCounter, clock: Clock, scope: string, onPruneError: (err: unknown) => void) {
  let nextPrune = 0
  return async (key: string, windowMs: number): Promise<RateLimitHit> => {
    const now = clock.now()
    const window = windowOf(now, windowMs)
    // The window's size is part of the key: two limits never share a count.
    const current = await counter.hitRateLimit({ key: storedKey(`${scope}|${window.windowEnd - window.windowStart}`, key), ...window })
    if (now >= nextPrune) {
      nextPrune = now + PRUNE_EVERY_MS
      counter.pruneRateLimits(now).catch(onPruneError)
    }
    return { current, ttl: window.windowEnd - now }
  }
}

/**
 * A webhook's rateLimit (deliveries per second) as slices of the shared counters: `permits` in each window
 * of `windowMs`, windows aligned on the epoch like every limit here. Small slices (about 50 a second) keep
 * arrivals even: any one second overlaps at most 1000/windowMs + 1 windows, so it sees at most
 * rate + permits, about 2 % over the limit (one more at low limits), and never a second's worth in one burst.
 */
export function webhookPace (ratePerSecond: number): { permits: number; windowMs: number } {
  const rate = Math.max(1, Math.floor(ratePerSecond))
  const permits = Math.max(1, Math.ceil(rate / 50))
  return { permits, windowMs: Math.max(1, Math.round((1000 * permits) / rate)) }
}

/** The shared counter's key for a webhook's rate limit (its id is not a secret, but keys are hashed alike). */
export function webhookPaceKey (webhookId: string, windowMs: number): string {
  return storedKey(`webhook-rate|${windowMs}`, webhookId)
}
