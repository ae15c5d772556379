import { Type, type TSchema } from 'typebox'
import { EVENT_TYPES } from '../../../domain/events.js'
import { MAX_STATS_DAYS } from '../../../app/stats.js'
import { Success, Timestamp, component, errors, SESSION_OR_API_KEY } from '../../schemas.js'

// Typed as a record so that the schema's type is one count per any event name (what Stats' EventCounts is).
const countProperties: Record<string, TSchema> = Object.fromEntries(EVENT_TYPES.map((t) => [t, Type.Integer()]))
const Counts = Type.Object(countProperties)
const Rate = Type.Union([Type.Number(), Type.Null()])
const Threshold = Type.Object({ warn: Type.Number(), limit: Type.Number() })

export const StatsSchema = component('Stats', Type.Object({
  since: Timestamp,
  until: Timestamp,
  totals: Counts,
  rates: Type.Object({
    deliveryRate: Rate,
    bounceRate: Rate,
    complaintRate: Rate,
  }, { description: 'fractions (0.02 is 2 %); null when there was nothing to divide by' }),
  thresholds: Type.Object({ complaintRate: Threshold, bounceRate: Threshold }),
  // `type: 'object'` beside the allOf, as TypeBox 0.x wrote it (1.x leaves it out): tools reading the
  // OpenAPI document see an object without merging the allOf first.
  daily: Type.Array(Type.Intersect([Type.Object({ day: Type.String({ description: 'YYYY-MM-DD (UTC)' }) }), Counts], { type: 'object' })),
}, { description: 'Events counted over a window' }))

export const StatsQuery = Type.Object({
  since: Type.Optional(Type.String({ format: 'date-time', description: 'default: the start of the UTC day 29 days before until' })),
  until: Type.Optional(Type.String({ format: 'date-time', description: 'default: now' })),
}, { additionalProperties: false })

export const StatsRoute = {
  operationId: 'getStats',
  tags: ['emails'],
  security: SESSION_OR_API_KEY,
  summary: `Events counted over a window of at most ${MAX_STATS_DAYS} days: totals, rates, thresholds, and one entry per day`,
  querystring: StatsQuery,
  response: { 200: Success(StatsSchema, 'The counts, rates and thresholds of the window'), ...errors(400, 401, 403, 429) },
}
