// What the overview shows: the account's events counted over a window, per day, and the rates mailbox
// providers judge a sender by, beside the thresholds they publish.
import { ValidationError } from '../errors.js'
import type { Store } from '../store/types.js'
import type { Clock } from '../domain/clock.js'
import { EVENT_TYPES, type EventType } from '../domain/events.js'

const DAY_MS = 86_400_000
/** The widest window one request may ask for; the count is per day, so this bounds the answer too. */
export const MAX_STATS_DAYS = 90
/** The window when none is asked for: today and the 29 days before it (UTC). */
export const DEFAULT_STATS_DAYS = 30

/**
 * The lines mailbox providers draw (sources in README, "Dashboard"):
 * - complaints: Google's sender guidelines ask to stay under 0.1 % and never reach 0.3 %;
 * - bounces: Amazon SES puts an account under review at a 5 % bounce rate; we warn at 2 %, a margin
 *   before it.
 */
export const THRESHOLDS = {
  complaintRate: { warn: 0.001, limit: 0.003 },
  bounceRate: { warn: 0.02, limit: 0.05 },
} as const

export type EventCounts = Record<EventType, number>

export interface Stats {
  since: string
  until: string
  totals: EventCounts
  /** Null when nothing was there to divide by. */
  rates: {
    /** delivered / (delivered + bounced), per recipient. */
    deliveryRate: number | null
    /** bounced / sent, per recipient. */
    bounceRate: number | null
    /** complained / delivered, per recipient. */
    complaintRate: number | null
  }
  thresholds: typeof THRESHOLDS
  /** One entry per UTC day of the window, oldest first, zeros included. */
  daily: Array<{ day: string } & EventCounts>
}

function zeros (): EventCounts {
  return Object.fromEntries(EVENT_TYPES.map((t) => [t, 0])) as EventCounts
}

const ratio = (n: number, d: number): number | null => (d > 0 ? n / d : null)

export function createStatsService ({ store, clock }: { store: Store; clock: Clock }) {
  return {
    /** `since` and `until` are ISO timestamps (checked by the route schema); until defaults to now. */
    async stats (accountId: string, window: { since?: string; until?: string }): Promise<Stats> {
      const until = window.until !== undefined ? Date.parse(window.until) : clock.now()
      const since = window.since !== undefined
        ? Date.parse(window.since)
        : Math.floor(until / DAY_MS) * DAY_MS - (DEFAULT_STATS_DAYS - 1) * DAY_MS
      if (!(since < until)) throw ValidationError('The request is not valid', [{ path: 'query.since', message: 'must be before until' }])
      if (until - since > MAX_STATS_DAYS * DAY_MS) {
        throw ValidationError('The request is not valid', [{ path: 'query.since', message: `must be at most ${MAX_STATS_DAYS} days before until` }])
      }
      const sinceIso = new Date(since).toISOString()
      const untilIso = new Date(until).toISOString()
      const counts = await store.countEvents(accountId, { since: sinceIso, until: untilIso })

      const totals = zeros()
      const byDay = new Map<string, { day: string } & EventCounts>()
      // Every day of the window, so a chart has no gaps: at most MAX_STATS_DAYS + 1 of them.
      for (let d = Math.floor(since / DAY_MS) * DAY_MS; d < until; d += DAY_MS) {
        const day = new Date(d).toISOString().slice(0, 10)
        byDay.set(day, { day, ...zeros() })
      }
      for (const c of counts) {
        if (!Object.hasOwn(totals, c.type)) continue
        totals[c.type] += c.count
        const entry = byDay.get(c.day)
        if (entry) entry[c.type] += c.count
      }
      const sent = totals['email.sent']
      const delivered = totals['email.delivered']
      const bounced = totals['email.bounced']
      return {
        since: sinceIso,
        until: untilIso,
        totals,
        rates: {
          deliveryRate: ratio(delivered, delivered + bounced),
          bounceRate: ratio(bounced, sent),
          complaintRate: ratio(totals['email.complained'], delivered),
        },
        thresholds: THRESHOLDS,
        daily: [...byDay.values()],
      }
    },
  }
}

export type StatsService = ReturnType<typeof createStatsService>
