import { Type, type Static, type TLiteral, type TSchema, type TSchemaOptions, type TUnion, type TUnsafe } from 'typebox'
import { EVENT_TYPES } from '../domain/events.js'
import { errorKinds } from '../errors.js'

/**
 * The named schemas of the API, by name: `#/components/schemas/<name>` in the OpenAPI document, so that a
 * generated client has a `Webhook` or a `Delivery` type rather than the same object written inline at
 * every route. component() is the one place a schema gets its name; addSharedSchemas() adds them all to
 * the app (Fastify serializes the answers with them too).
 */
const components = new Map<string, TSchema>()

/**
 * Names `schema` and answers a reference to it (`{ $ref: 'Name#' }`), typed as the schema itself, for use
 * in responses: `data: Webhook`. A request schema stays inline (the validator reads it field by field).
 */
export function component<T extends TSchema> (name: string, schema: T): TUnsafe<Static<T>> {
  if (components.has(name)) throw new Error(`The schema name ${name} is given twice`)
  components.set(name, { ...schema, $id: name })
  return Type.Unsafe<Static<T>>({ $ref: `${name}#` })
}

/** The names given so far (the OpenAPI test checks each one is in the document). */
export function componentNames (): string[] {
  return [...components.keys()]
}

/** Every machine code of src/errors.ts's table: what `error.code` can be. */
export const ERROR_CODES = [...errorKinds.keys()]

// `type: string` with an `enum` rather than a union of consts: a client gets the union of the codes, and
// the serializer writes any string (a code added to the table is in the enum at once anyway).
export const ErrorEnvelope = component('ErrorEnvelope', Type.Object({
  success: Type.Literal(false),
  error: Type.Object({
    code: Type.Unsafe<string>({ type: 'string', enum: ERROR_CODES, description: 'the machine code: match on it, never on the message' }),
    message: Type.String({ description: 'for people; may change' }),
    details: Type.Optional(Type.Array(Type.Object({
      path: Type.String({ description: 'the offending field, like body.events[1] or query.limit' }),
      message: Type.String(),
    }))),
  }),
}, { description: 'Every non-2xx answer' }))

/**
 * The OpenAPI security of a management route: the session cookie (the dashboard) or an API key (a
 * program), as cookieOrKey() accepts them (src/http/cookie-or-key.ts).
 */
export const SESSION_OR_API_KEY: Array<Record<string, string[]>> = [{ session: [] }, { apiKey: [] }]

/** Response headers, declared where a route sets them (OpenAPI `headers` of an answer). */
export const HEADERS = {
  setCookie: { 'set-cookie': { type: 'string', description: 'svc_session=…; HttpOnly; SameSite=Lax; Path=/ (Secure in production)' } },
  clearCookie: { 'set-cookie': { type: 'string', description: 'svc_session=; Max-Age=0: the session cookie cleared' } },
  idempotentReplayed: { 'idempotent-replayed': { type: 'string', enum: ['true'], description: 'present when this is the stored answer of an earlier request with the same Idempotency-Key' } },
} as const

/** `{ success: true, data, message }`, the envelope of the seed; `description` says what the answer is. */
export function Success<T extends TSchema> (data: T, description?: string, headers?: Record<string, unknown>) {
  return Type.Object({ success: Type.Literal(true), data, message: Type.String() }, {
    ...(description !== undefined ? { description } : {}),
    ...(headers !== undefined ? { headers } : {}),
  })
}

/** A page of a list: `{ success, data: [...], nextCursor, message }`. */
export function Page<T extends TSchema> (item: T, description: string) {
  return Type.Object({
    success: Type.Literal(true),
    data: Type.Array(item),
    nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'pass it as `cursor` for the next page; null on the last one' }),
    message: Type.String(),
  }, { description })
}

/** Adds the named schemas that route schemas reference (`Webhook#`): every app that has routes calls it first. */
export function addSharedSchemas (app: { addSchema: (schema: object) => unknown }): void {
  for (const schema of components.values()) app.addSchema(schema)
}

/** What each error status means in this API: the description of that answer in the OpenAPI document. */
export const ERROR_MEANINGS: Readonly<Record<number, string>> = {
  400: 'The request is not valid (validation_error): `details` names every field that is wrong, and what is allowed there',
  401: 'No credentials, or unknown, expired or revoked ones (authentication_required, invalid_session, invalid_api_key, invalid_credentials)',
  403: 'Not allowed: a browser request from an origin other than PUBLIC_URL (forbidden_origin), a plan limit (plan_limit_reached), or an API key without the permission (insufficient_permission)',
  404: 'No such resource (not_found)',
  408: 'The request did not arrive in time (request_timeout); answered before any route runs',
  409: 'Conflict with what exists (email_taken, idempotency_conflict, domain_exists, email_not_scheduled, template_exists)',
  413: 'The request body is larger than this route takes (payload_too_large)',
  415: 'The request body is not application/json (unsupported_media_type)',
  422: 'Understood but refused (webhook_url_not_allowed, recipient_suppressed, domain_not_verified, invalid_schedule, template_not_found, template_invalid)',
  429: 'Too many requests (rate_limited); Retry-After says in how many seconds to try again',
  431: 'The request headers are too large (headers_too_large); answered before any route runs',
  500: 'An unexpected failure (internal_error); the x-request-id header names it in the server log',
  503: 'The store is unreachable or cannot write (unavailable); Retry-After says when to try again',
}

const RETRY_AFTER = { 'retry-after': { type: 'integer', description: 'seconds to wait before trying again' } }

/**
 * The answer with status `status`: the ErrorEnvelope (a reference to the shared schema, registered by
 * the app with addSchema), described by what it means here.
 */
export function errorResponse (status: number, description = ERROR_MEANINGS[status] ?? 'An error') {
  // (Typed as src/http/errors.ts's envelope() builds it.)
  return Type.Unsafe<{ success: false; error: { code: string; message: string; details?: unknown } }>({
    ...ErrorEnvelope,
    description,
    ...(status === 429 || status === 503 ? { headers: RETRY_AFTER } : {}),
  })
}

/**
 * The error responses a route gives beyond those every route of its kind gives (those are added to each
 * route by `withStandardErrors`): `errors(409, 422)`, or with this route's own words,
 * `errors({ 409: 'An account with this email exists (email_taken)' })`. Listing a standard one is harmless.
 */
export function errors<K extends number> (meanings: Record<K, string>): Record<K, ErrorResponse>
export function errors (...statuses: number[]): Record<number, ErrorResponse>
export function errors (...statuses: Array<number | Record<number, string>>): Record<number, ErrorResponse> {
  const out: Record<number, ErrorResponse> = {}
  for (const s of statuses) {
    if (typeof s === 'number') out[s] = errorResponse(s)
    else for (const [status, description] of Object.entries(s)) out[Number(status)] = errorResponse(Number(status), description)
  }
  return out
}
type ErrorResponse = ReturnType<typeof errorResponse>

/** The schema keys `withStandardErrors` reads (beside Fastify's own: params, querystring, headers, body). */
interface DocumentedSchema {
  hide?: boolean
  security?: Array<Record<string, string[]>>
  response?: Record<string | number, unknown>
  /** Standard errors this route never gives (e.g. 415 on a route that takes any body type). */
  omitErrors?: number[]
  [key: string]: unknown
}

const BODYLESS = new Set(['GET', 'HEAD'])

/**
 * Adds to a route's schema the error responses that every route of its kind gives, so that a route
 * declares only its successes and the errors of its own (409, 422, a rate limit its plugin applies…):
 * - 400 when it reads anything of the request (parameters, query, headers, a body), and whenever the
 *   method may carry a body (a route without a body schema refuses one; JSON that does not parse);
 * - 401 when its `security` requires a credential, and 403 when a session cookie is one of them (the
 *   origin guard, plan limits);
 * - 404 when its path has a parameter (the resource it names may not exist);
 * - 413 and 415 when the method may carry a body (every route has a body limit; bodies are JSON only);
 * - 429 when the route has its own rate limit (`config.rateLimit`), or needs a credential (the per-account limits);
 * - 408 and 431 always: Node answers them for any request, before routing (a request that never finished,
 *   headers too large);
 * - 500 always, and 503 always (a store fault).
 * What a route declares itself wins; `omitErrors` takes standard ones away. Hidden routes are left alone.
 */
export function withStandardErrors (route: { method: string | string[]; url: string; schema?: object; config?: unknown }): void {
  const schema = route.schema as DocumentedSchema | undefined
  if (schema === undefined || schema.hide === true) return
  const methods = (Array.isArray(route.method) ? route.method : [route.method]).map((m) => m.toUpperCase())
  const takesBody = methods.some((m) => !BODYLESS.has(m))
  const security = schema.security ?? []
  const statuses = new Set<number>([408, 431, 500, 503])
  if (takesBody || ['params', 'querystring', 'headers', 'body'].some((k) => schema[k] !== undefined)) statuses.add(400)
  // Every authenticated route has a per-account rate limit (src/http/account-limits.ts).
  if (security.some((r) => Object.keys(r).length > 0)) statuses.add(401)
  if (security.some((r) => 'session' in r || 'apiKey' in r)) statuses.add(429)
  if (security.some((r) => 'session' in r)) statuses.add(403)
  if (route.url.includes(':')) statuses.add(404)
  if (takesBody) { statuses.add(413); statuses.add(415) }
  if ((route.config as { rateLimit?: unknown } | undefined)?.rateLimit !== undefined) statuses.add(429)
  for (const s of schema.omitErrors ?? []) statuses.delete(s)
  const response: Record<string | number, unknown> = { ...schema.response }
  for (const s of statuses) if (response[s] === undefined) response[s] = errorResponse(s)
  route.schema = { ...schema, response }
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
/** The event types, named: what responses carry (a request's events are checked inline, field by field). */
export const EventType = component('EventType', Literals(EVENT_TYPES, { description: 'an event type' }))
export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) })
