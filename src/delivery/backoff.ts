// When to try again. The schedule is API.md's (5 s … 24 h, configurable); each delay gets ±20 % jitter so
// that deliveries failed together by one outage do not all come back in the same instant.

export const RETRY_AFTER_MIN_MS = 1_000
export const RETRY_AFTER_MAX_MS = 3_600_000 // a receiver may ask for a pause, not for a day off

export interface RetryPolicy {
  /** Delay before retry n (index n-1), in ms. Its length is the number of retries. */
  schedule: number[]
  random?: () => number
}

/**
 * The time of the next attempt after `attempts` failed ones (counting the one that just failed), or null
 * when the schedule is used up and the delivery fails. A Retry-After from the receiver replaces the
 * scheduled delay, clamped to a sane range.
 */
export function nextAttemptAt (policy: RetryPolicy, attempts: number, at: number, retryAfterMs?: number): number | null {
  if (attempts > policy.schedule.length) return null
  if (retryAfterMs !== undefined) return at + clampRetryAfter(retryAfterMs)
  const base = policy.schedule[attempts - 1]!
  const random = policy.random ?? Math.random
  return at + Math.round(base * (0.8 + 0.4 * random()))
}

export function clampRetryAfter (ms: number): number {
  return Math.min(RETRY_AFTER_MAX_MS, Math.max(RETRY_AFTER_MIN_MS, ms))
}
