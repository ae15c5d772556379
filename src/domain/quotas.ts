// Sending quotas: recipients accepted per account, per UTC day and per UTC month, by plan (QUOTA_* in
// the configuration). A send is charged all its recipients at once, in the write that accepts it, and is
// refused whole when any period would pass its limit (src/store/emails.ts QuotaCharge).
import type { Plan } from './plans.js'

/** Recipients accepted per UTC day and month for each plan (null: no limit). */
export type Quotas = Record<Plan, { day: number | null; month: number | null }>

export type QuotaPeriodKind = 'day' | 'month'

export interface QuotaPeriod {
  kind: QuotaPeriodKind
  /** The store's name of the period: `d:2026-11-26`, `m:2026-11`. */
  period: string
  /** null: no limit in this period (still counted, for GET /api/account). */
  limit: number | null
  /** When the period ends and its count starts again (ms). */
  resetsAt: number
}

/** The day and month that `now` falls in (UTC), with the plan's limits. */
export function quotaPeriods (plan: Plan, quotas: Quotas | null, now: number): QuotaPeriod[] {
  const d = new Date(now)
  const y = d.getUTCFullYear()
  const m = d.getUTCMonth()
  const day = d.toISOString().slice(0, 10)
  const limits = quotas?.[plan] ?? { day: null, month: null }
  return [
    { kind: 'day', period: `d:${day}`, limit: limits.day, resetsAt: Date.UTC(y, m, d.getUTCDate() + 1) },
    { kind: 'month', period: `m:${day.slice(0, 7)}`, limit: limits.month, resetsAt: Date.UTC(y, m + 1, 1) },
  ]
}

/** Whole seconds until `at`, at least 1: a Retry-After. */
export function secondsUntil (at: number, now: number): number {
  return Math.max(1, Math.ceil((at - now) / 1000))
}
