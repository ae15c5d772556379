// How the deliveries table is read and written, apart from when: the UPDATE each outcome kind makes
// (built from the transition table, src/domain/delivery-transition.ts), a row as a DeliveryRecord, a
// replay range's parameters and a webhook's live signing secrets. SqliteDeliveries (./deliveries.ts) runs them.
import { isoOrNull as iso } from '../../domain/clock.js'
import type { EventType } from '../../domain/events.js'
import { shownNextAttempt, transition, type OutcomeKind, type Transition } from '../../domain/delivery-transition.js'
import { GONE_ERROR } from '../../domain/webhook-health.js'
import { deliveryIdAt, type ReplayRange } from '../../domain/replay.js'
import type { DeliveryOutcome, DeliveryRecord, DeliveryStatus } from '../deliveries.js'

export type Row = Record<string, any>

export const LIVE = `status IN ('pending', 'retrying')`
/** An outcome's row: this delivery, still under the lease token the outcome was claimed under (fencing). */
const HELD = `id = @id AND lease = @lease AND status IN ('pending', 'retrying', 'cancelled')`

/** What each column becomes under one row of the transition table (named parameters: see outcomeParams). */
function columnsOf (t: Transition): Record<string, string> {
  return {
    status: t.status === 'same' ? 'status' : `'${t.status}'`,
    attempts: t.attempt ? 'attempts + 1' : 'attempts',
    pushbacks: t.attempt ? 'pushbacks + @pushbacks' : 'pushbacks',
    next_attempt_at: t.next === null ? 'NULL' : t.next === 'nextAttemptAt' ? '@next' : '@leaseUntil',
    lease_owner: t.lease === 'ended' ? 'NULL' : '@owner',
    parked: t.lease === 'parked' ? '1' : '0',
    lease: t.lease === 'ended' ? 'lease + 1' : 'lease',
    last_attempt_at: t.attempt ? '@at' : 'last_attempt_at',
    last_status_code: t.attempt ? '@code' : 'last_status_code',
    last_error: t.attempt ? '@error' : 'last_error',
    last_duration_ms: t.attempt ? '@duration' : 'last_duration_ms',
    updated_at: t.attempt ? '@now' : 'updated_at',
  }
}

/** The UPDATE that applies an outcome of `kind` (src/domain/delivery-transition.ts), live or cancelled alike. */
export function outcomeSql (kind: OutcomeKind): string | null {
  const live = transition('live', kind)
  const cancelled = transition('cancelled', kind)
  if (live === null || cancelled === null) return null
  const l = columnsOf(live)
  const c = columnsOf(cancelled)
  const set = Object.keys(l)
    .filter((col) => l[col] !== col || c[col] !== col)
    .map((col) => `${col} = ${l[col] === c[col] ? l[col] : `CASE WHEN status = 'cancelled' THEN ${c[col]} ELSE ${l[col]} END`}`)
  return `UPDATE deliveries SET ${set.join(', ')} WHERE ${HELD}`
}

/** Every named parameter an outcome's UPDATE may use. */
export function outcomeParams (o: DeliveryOutcome, now: number): Record<string, unknown> {
  const attempt = 'at' in o
  return {
    id: o.id,
    lease: o.lease,
    now,
    pushbacks: o.kind === 'retry' && o.pushback ? 1 : 0,
    next: 'nextAttemptAt' in o ? o.nextAttemptAt : null,
    leaseUntil: 'leaseUntil' in o ? o.leaseUntil : null,
    owner: 'owner' in o ? o.owner : null,
    at: attempt ? o.at : null,
    code: attempt ? (o.statusCode ?? null) : null,
    error: o.kind === 'gone' ? GONE_ERROR : o.kind === 'retry' || o.kind === 'failed' ? o.error : null,
    duration: attempt ? o.durationMs : null,
  }
}

/**
 * The engine's bookkeeping is written without fsync (see WriteQueue): losing the last of it to a power
 * cut makes deliveries happen again, never disappear, because the work they describe is leased and its
 * lease runs out.
 */
export const ENGINE = { durable: false }

export function toRecord (r: Row): DeliveryRecord {
  return {
    id: r.id,
    webhookId: r.webhook_id,
    eventId: r.event_id,
    event: r.event_type as EventType,
    emailId: r.email_id,
    status: r.status as DeliveryStatus,
    attempts: r.attempts,
    lastAttemptAt: iso(r.last_attempt_at),
    nextAttemptAt: iso(shownNextAttempt(r.status, r.lease_owner !== null, r.next_attempt_at)),
    lastStatusCode: r.last_status_code ?? null,
    lastError: r.last_error ?? null,
    lastDurationMs: r.last_duration_ms ?? null,
    createdAt: iso(r.created_at)!,
  }
}

/** A replay range's named parameters: its delivery ids [from, to), its types as JSON (null: all). */
export function rangeParams (accountId: string, webhookId: string, range: ReplayRange) {
  return {
    account: accountId, webhook: webhookId, from: deliveryIdAt(range.since), to: deliveryIdAt(range.until),
    types: range.types === null ? null : JSON.stringify(range.types),
  }
}

/** The secrets that sign now: the current one, and the previous one until its overlap ends. */
export function liveSecrets (r: Row, now: number): string[] {
  const secrets = [r.secret as string]
  if (r.previous_secret && r.previous_secret_expires_at && Date.parse(r.previous_secret_expires_at) > now) secrets.push(r.previous_secret)
  return secrets
}
