// Replay (POST /api/webhooks/:id/replay): a webhook's deliveries whose event happened in a window are sent
// again, delivered ones included, as new attempts of the same deliveries (same delivery id, so the same
// X-Svc-Delivery and webhook-id: a receiver that keeps what it has drops them). The rules of the window,
// and how a window becomes a range of delivery ids (deliveryId keeps its event's time to the millisecond,
// so a window of event times is a range of ids on the (webhook, id) index: no scan, no extra index).
//
// - `since` (inclusive) before `until` (exclusive); `until` defaults to now and is never later than now;
//   at most REPLAY_MAX_SPAN_MS between them. Older than the retention period is allowed but finds
//   nothing: deliveries are pruned after RETENTION_DAYS.
// - Only deliveries that exist are replayed: an event that made none for this webhook (it happened before
//   the webhook subscribed, or its filter left it out) is not sent now.
// - One replay per webhook at a time: while a delivery of the last replay's range is still pending or
//   retrying, another replay of that webhook is refused (409).
// Pure; tested in test/unit/replay.test.ts.
import type { ErrorDetail } from '../errors.js'
import type { EventType } from './events.js'

export const REPLAY_MAX_SPAN_MS = 7 * 24 * 3_600_000

/** A window of event times (ms): [since, until), of `types` only when not null. */
export interface ReplayRange {
  since: number
  until: number
  types: EventType[] | null
}

/** The last replay asked of a webhook, as stored with it. */
export interface ReplayState {
  since: string
  until: string
  /** Null: every type. */
  types: EventType[] | null
  startedAt: string
}

/**
 * The window to replay, or every problem with it (paths under `body`). `since` and `until` are the
 * request's times already parsed (ms; `until` undefined when not given); `now` is the clock's.
 */
export function replayRange (input: { since: number; until?: number | undefined; events?: EventType[] | undefined }, now: number):
  { range: ReplayRange } | { problems: ErrorDetail[] } {
  const until = input.until ?? now
  const problems: ErrorDetail[] = []
  if (until > now) problems.push({ path: 'body.until', message: 'must not be later than now' })
  if (!(input.since < until)) {
    problems.push({ path: 'body.since', message: 'must be before until' })
  } else if (until - input.since > REPLAY_MAX_SPAN_MS) {
    problems.push({ path: 'body.since', message: `must be at most ${REPLAY_MAX_SPAN_MS / 86_400_000} days before until; replay a longer time in parts` })
  }
  if (problems.length > 0) return { problems }
  const types = input.events !== undefined && input.events.length > 0 ? [...new Set(input.events)] : null
  return { range: { since: input.since, until, types } }
}

/** The state stored for a replay of `range` started at `now`. */
export function replayState (range: ReplayRange, now: number): ReplayState {
  return { since: new Date(range.since).toISOString(), until: new Date(range.until).toISOString(), types: range.types, startedAt: new Date(now).toISOString() }
}

/** The range a stored replay covers; null when the stored value is not one. */
export function rangeOfState (state: ReplayState | null | undefined): ReplayRange | null {
  if (state === null || state === undefined) return null
  const since = Date.parse(state.since)
  const until = Date.parse(state.until)
  if (Number.isNaN(since) || Number.isNaN(until)) return null
  return { since, until, types: Array.isArray(state.types) ? state.types : null }
}

/** A stored replay read back (a JSON column, a document field); null when absent or not one. */
export function replayStateOf (value: unknown): ReplayState | null {
  let v = value
  if (typeof v === 'string') {
    try {
      v = JSON.parse(v)
    } catch {
      return null
    }
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return null
  const s = v as Partial<ReplayState>
  if (typeof s.since !== 'string' || typeof s.until !== 'string' || typeof s.startedAt !== 'string') return null
  const types = Array.isArray(s.types) ? s.types.filter((t): t is EventType => typeof t === 'string') : null
  return { since: s.since, until: s.until, types, startedAt: s.startedAt }
}

/**
 * The smallest delivery id of an event at `ms` (src/domain/ids.ts deliveryId: `dlv_` + 12 hex digits of
 * the event's milliseconds + 16 more). Every delivery of an event in [since, until) has an id in
 * [deliveryIdAt(since), deliveryIdAt(until)).
 */
export function deliveryIdAt (ms: number): string {
  const clamped = Math.min(Math.max(0, Math.floor(ms)), 0xffffffffffff)
  return `dlv_${clamped.toString(16).padStart(12, '0')}`
}
