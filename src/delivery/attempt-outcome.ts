// What one answer means for its delivery: a pure decision, made here once, applied by the scheduler.
//
// - 2xx: delivered. 410: gone (the webhook is disabled). Handed back unattempted: nothing happened.
// - 429 or 503 from an endpoint that is not down: the receiver pushing back. It is an attempt (the log
//   shows it) but not a step of the retry schedule: the delivery is due again after a short wait, or after
//   its Retry-After when it names one (Retry-After wins), and it never fails a delivery on its own.
// - Anything else, and 429/503 from an endpoint that is down (no 2xx for a while): a failure, retried at
//   the schedule's next step (or at Retry-After), failed when the schedule is used up. A timeout or a
//   connection error also shrinks the window (it may be the load that caused it).
// Tested in test/unit/delivery-attempt-outcome.test.ts.
import { isPushbackStatus } from '../domain/pushback.js'
import type { DeliveryOutcome, DeliveryWork } from '../store/deliveries.js'
import { clampRetryAfter, nextAttemptAt, type RetryPolicy } from './backoff.js'
import { workIdentity } from './held.js'
import type { DeliveryResult } from './http-sender.js'

export type Answer = 'delivered' | 'gone' | 'returned' | 'pushback' | 'failure'

export function classify (result: DeliveryResult, down: boolean): Answer {
  switch (result.outcome) {
    case 'delivered': return 'delivered'
    case 'gone': return 'gone'
    case 'returned': return 'returned'
    default: return isPushbackStatus(result.status) && !down ? 'pushback' : 'failure'
  }
}

/** A failure that says the receiver may be overloaded (no answer at all: timeout, connection error). */
export function isOverload (result: DeliveryResult): boolean {
  return result.outcome === 'retry' && result.status === undefined
}

/**
 * The outcome to record for an attempt that was made. `pushbackWaitMs` is how long the actor asks a
 * pushed-back delivery to wait (see actor.ts); only pushbacks use it.
 */
export function attemptOutcome (result: DeliveryResult, work: DeliveryWork, answer: Exclude<Answer, 'returned'>, policy: RetryPolicy, now: number, pushbackWaitMs = 0): DeliveryOutcome {
  if (answer === 'delivered') {
    // The common case, built in one object (no spread): most of what the engine records.
    return work.origin === undefined
      ? { kind: 'succeeded', id: work.id, webhookId: work.webhookId, lease: work.lease, at: now, statusCode: result.status ?? 200, durationMs: result.durationMs }
      : { kind: 'succeeded', id: work.id, webhookId: work.webhookId, lease: work.lease, origin: work.origin, at: now, statusCode: result.status ?? 200, durationMs: result.durationMs }
  }
  const of = workIdentity(work)
  if (answer === 'gone') return { kind: 'gone', ...of, at: now, statusCode: result.status ?? 410, durationMs: result.durationMs }
  const common = {
    ...of, at: now, error: result.error ?? 'failed', durationMs: result.durationMs,
    ...(result.status !== undefined ? { statusCode: result.status } : {}),
  }
  if (answer === 'pushback') {
    const wait = result.retryAfterMs !== undefined ? clampRetryAfter(result.retryAfterMs) : Math.max(1, pushbackWaitMs)
    return { kind: 'retry', ...common, nextAttemptAt: now + wait, pushback: true }
  }
  // Pushbacks are attempts but not steps: the schedule counts the other attempts only.
  const steps = work.attempts + 1 - (work.pushbacks ?? 0)
  const next = nextAttemptAt(policy, steps, now, result.retryAfterMs)
  return next === null ? { kind: 'failed', ...common } : { kind: 'retry', ...common, nextAttemptAt: next }
}
