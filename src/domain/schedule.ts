// Scheduled sends: what a `scheduledAt` may be. A time with its offset (RFC 3339: `2026-12-01T09:00:00+01:00`
// or `…Z`), not in the past, and at most the horizon ahead (SCHEDULE_HORIZON_DAYS, 30 days unless the
// operator says otherwise). A time without an offset is refused: whose 9:00 it means is not svc's guess.
// Pure: the clock is a parameter (test/unit/schedule-metadata.test.ts).

/** How far ahead an email may be scheduled unless SCHEDULE_HORIZON_DAYS says otherwise. */
export const DEFAULT_SCHEDULE_HORIZON_DAYS = 30
/** The longest horizon an operator may set: tracking links live 180 days from the send, and a year is plenty. */
export const MAX_SCHEDULE_HORIZON_DAYS = 365
/** Longer than any RFC 3339 date-time with nanoseconds: refused before it is looked at. */
export const MAX_SCHEDULED_AT_LENGTH = 64

const DAY_MS = 86_400_000
// Date, time with seconds, an optional fraction, then Z or ±hh:mm. No nested quantifier: linear.
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/

export const SCHEDULED_AT_EXAMPLE = '2026-12-01T09:00:00+01:00'

/**
 * The instant a date-time with an offset names (ms since the epoch), or null when it is not one: wrong
 * shape, no offset, a date that does not exist (Feb 30), an hour past 23, an offset past ±23:59.
 */
export function parseScheduledAt (text: string): number | null {
  if (typeof text !== 'string' || text.length > MAX_SCHEDULED_AT_LENGTH) return null
  const m = RFC3339.exec(text)
  if (m === null) return null
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number]
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59) return null
  // The day must exist in that month (Date.UTC would roll Feb 30 over into March).
  if (day > new Date(Date.UTC(year, month, 0)).getUTCDate()) return null
  let offsetMin = 0
  const zone = m[8]!
  if (zone !== 'Z' && zone !== 'z') {
    const oh = Number(zone.slice(1, 3))
    const om = Number(zone.slice(4, 6))
    if (oh > 23 || om > 59) return null
    offsetMin = (zone[0] === '-' ? -1 : 1) * (oh * 60 + om)
  }
  // Milliseconds: a finer fraction is cut (svc stores times to the millisecond).
  const ms = m[7] === undefined ? 0 : Number(m[7].slice(1, 4).padEnd(3, '0'))
  const at = Date.UTC(year, month - 1, day, hour, minute, second, ms) - offsetMin * 60_000
  return Number.isFinite(at) ? at : null
}

export type ScheduleVerdict = { at: number } | { error: string }

/**
 * Whether an email may be scheduled for `text` at `now`: the instant, or why not (the message of a 422
 * that names the field). A time equal to now is accepted (it is due at once); one before now is not.
 */
export function checkSchedule (text: string, now: number, horizonDays: number = DEFAULT_SCHEDULE_HORIZON_DAYS): ScheduleVerdict {
  const at = parseScheduledAt(text)
  if (at === null) return { error: `is not a date-time with an offset, like ${SCHEDULED_AT_EXAMPLE} or 2026-12-01T08:00:00Z` }
  if (at < now) return { error: `is in the past (the time at svc is ${new Date(now).toISOString()})` }
  if (at > now + horizonDays * DAY_MS) return { error: `is more than ${horizonDays} days ahead (the time at svc is ${new Date(now).toISOString()})` }
  return { at }
}
