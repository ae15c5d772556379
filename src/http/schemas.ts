import { Type, type TLiteral, type TSchema, type TSchemaOptions, type TUnion } from 'typebox'
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

/**
 * Request body limits in bytes, per kind of route: small bodies (credentials, a key name, an address, a
 * time window), the default for routes with a body (a webhook: a URL of up to 2,048 characters, JSON-
 * escaped at worst), none at all for routes without a body. The send route takes BODY_LIMIT_BYTES, and a
 * batch `batchFactor` times that.
 */
export const BODY_LIMITS = { none: 1024, small: 4 * 1024, default: 16 * 1024, batchFactor: 4 } as const

export const Timestamp = Type.String({ format: 'date-time', maxLength: 64, description: 'ISO 8601 UTC, with milliseconds' })
/**
 * One of a list of strings, as `anyOf` of `const`s (what Type.Union of Type.Literals gives), typed as the
 * union of the values. TypeBox 1.x types a union by walking a tuple, so a union built from `.map` over an
 * array would be typed `never`; this keeps the list's own type.
 */
export function Literals<const T extends readonly string[]> (values: T, options?: TSchemaOptions): TUnion<LiteralTuple<T>> {
  return Type.Union(values.map((v) => Type.Literal(v)), options) as unknown as TUnion<LiteralTuple<T>>
}
type LiteralTuple<T extends readonly string[]> = { -readonly [K in keyof T]: TLiteral<T[K]> }

export const EventTypeSchema = Literals(EVENT_TYPES)
export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) })
