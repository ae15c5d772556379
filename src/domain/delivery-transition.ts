// What an outcome does to its delivery, decided once for every store: (status before, outcome) →
// (status, attempts, next attempt, lease). SQLite and MongoDB apply this table (as SQL and as an update
// pipeline, both built from it), and test/contract/delivery-contract.ts checks every row on both.
//
// - An attempt that was made counts (attempts + 1, the last attempt's time, status, error, duration),
//   even when the delivery was cancelled while it was in flight: it was made.
// - A success succeeds, cancelled or not: it did arrive.
// - A failure (retry, failed, gone) of a cancelled delivery stays cancelled, with no next attempt.
// - A deferral and a parking are no attempt; for a cancelled delivery they only end the lease.
// - `leased` stores a first attempt held in memory (written once) as pending and leased to its node; of a
//   stored delivery it is stale, like an outcome under a token that no longer holds.
//
// A first attempt held in memory has no row yet: its "status before" is live (the row starts pending), or
// cancelled when its webhook may no longer be called (the row starts cancelled, with the reason).

export type OutcomeKind = 'succeeded' | 'retry' | 'failed' | 'gone' | 'deferred' | 'parked' | 'leased'
export const OUTCOME_KINDS: readonly OutcomeKind[] = ['succeeded', 'retry', 'failed', 'gone', 'deferred', 'parked', 'leased']

/** The delivery when its outcome arrives: live (pending or retrying) or cancelled while in flight. */
export type Before = 'live' | 'cancelled'
export const BEFORE: readonly Before[] = ['live', 'cancelled']

export interface Transition {
  /** The status after; `same` keeps the one before (a first attempt's row starts pending, or cancelled). */
  status: 'succeeded' | 'retrying' | 'failed' | 'cancelled' | 'same'
  /** An attempt was made: attempts + 1 and the last attempt's fields written. */
  attempt: boolean
  /** The next attempt after: the outcome's `nextAttemptAt`, the outcome's `leaseUntil`, or none. */
  next: 'nextAttemptAt' | 'leaseUntil' | null
  /**
   * The lease after: `ended` (no owner, the token moves on, so any later outcome under it is stale),
   * `parked` (the outcome's owner, parked, same token), `kept` (the outcome's owner, same token).
   */
  lease: 'ended' | 'parked' | 'kept'
}

const attempt = (status: Transition['status'], next: Transition['next'] = null): Transition => ({ status, attempt: true, next, lease: 'ended' })
const ended = (next: Transition['next'] = null): Transition => ({ status: 'same', attempt: false, next, lease: 'ended' })

/** Every row. `null`: the outcome does not apply to a stored delivery (it counts as stale). */
export const TRANSITIONS: Readonly<Record<OutcomeKind, Readonly<Record<Before, Transition | null>>>> = {
  succeeded: { live: attempt('succeeded'), cancelled: attempt('succeeded') },
  retry: { live: attempt('retrying', 'nextAttemptAt'), cancelled: attempt('cancelled') },
  failed: { live: attempt('failed'), cancelled: attempt('cancelled') },
  gone: { live: attempt('failed'), cancelled: attempt('cancelled') },
  deferred: { live: ended('nextAttemptAt'), cancelled: ended() },
  parked: { live: { status: 'same', attempt: false, next: 'leaseUntil', lease: 'parked' }, cancelled: ended() },
  // Only a first attempt held in memory is stored this way (see firstTransition).
  leased: { live: null, cancelled: null },
}

/** The row for an outcome of a stored delivery; null when it does not apply (stale). */
export function transition (before: Before, kind: OutcomeKind): Transition | null {
  return TRANSITIONS[kind][before]
}

/** The row for a first attempt held in memory, which makes its delivery's row. */
export function firstTransition (before: Before, kind: OutcomeKind): Transition {
  if (kind === 'leased') return before === 'live' ? { status: 'same', attempt: false, next: 'leaseUntil', lease: 'kept' } : ended()
  return TRANSITIONS[kind][before] as Transition
}

/** The status a first attempt's row is written with. */
export function firstStatus (before: Before, t: Transition): 'pending' | 'succeeded' | 'retrying' | 'failed' | 'cancelled' {
  if (t.status !== 'same') return t.status
  return before === 'cancelled' ? 'cancelled' : 'pending'
}

/** Whether a status is live: the delivery may still be attempted. */
export function isLive (status: string): boolean {
  return status === 'pending' || status === 'retrying'
}

/**
 * The next attempt the delivery log shows (ms): only a live delivery that no node holds has one; one in
 * flight (leased, parked) or final shows none.
 */
export function shownNextAttempt (status: string, leased: boolean, nextAttemptAt: number | null | undefined): number | null {
  return isLive(status) && !leased && nextAttemptAt !== null && nextAttemptAt !== undefined ? nextAttemptAt : null
}
