import { Type, type TSchema } from '@sinclair/typebox'
import { EVENT_TYPES } from '../domain/events.js'

export const ErrorEnvelope = Type.Object({
  success: Type.Literal(false),
  error: Type.Object({
    code: Type.String(),
    message: Type.String(),
    details: Type.Optional(Type.Array(Type.Object({ path: Type.String(), message: Type.String() }))),
  }),
}, { $id: 'ErrorEnvelope', description: 'Every non-2xx answer' })

/** `{ success: true, data, message }`, the envelope of the seed. */
export function Success<T extends TSchema> (data: T) {
  return Type.Object({ success: Type.Literal(true), data, message: Type.String() })
}

/** Error responses a route can give, for the OpenAPI document; the shape is always ErrorEnvelope. */
export function errors (...statuses: number[]): Record<number, typeof ErrorEnvelope> {
  return Object.fromEntries(statuses.map((s) => [s, ErrorEnvelope]))
}

export const Timestamp = Type.String({ format: 'date-time', description: 'ISO 8601 UTC, with milliseconds' })
export const EventTypeSchema = Type.Union(EVENT_TYPES.map((t) => Type.Literal(t)))
export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) })
