// Generators for the fuzz suite (test/fuzz/routes.test.ts). They know nothing about a running server:
// they produce *plans* (which credential, which kind of id, what text goes where) that the harness
// (test/fuzz/harness.ts) turns into real requests against the fixtures of the moment.
import fc from 'fast-check'

export type JsonSchema = Record<string, any>

// ---------------------------------------------------------------------------------------------------
// Hostile text

/** Strings that have broken parsers, routers, SQL, templates and terminals before. */
export const NASTY = [
  '', ' ', '%', '%%', '%zz', '%E0%A4%A', '%00', '%2F', '%2e%2e', '..', '../..', '../../../etc/passwd', '.', '/', '//',
  '\\', '?', '#', '&', '=', ';', '*', ':', '\u0000', 'a\u0000b', '\u0085', '\u2028', '\u2029', '\r\n', '\r\nX-Injected: 1',
  '\n', '\t', '\u001b[31m', '\u007f', '\u009b', '💩', '\uD800', '\uDFFF', 'é', 'İ', 'ß', '\u202E', '\uFEFF', '\u200B',
  '__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', 'null', 'undefined', 'NaN', 'Infinity', '-1',
  '0', '-0', '1e309', '9'.repeat(400), "' OR '1'='1", '"; DROP TABLE accounts; --', '<script>alert(1)</script>',
  '${7*7}', '{{7*7}}', '%s%s%s%n', 'key_', 'wh_', 'em_', 'dlv_', 'svc_sk_', 'whsec_', 'key_00000000000000000000000000',
  'a@b', '@', 'x@y.z', 'Some One <a@b.c>', '"q"@x.test', 'delivered@simulator.test', '<>', 'true', '[]', '{}',
]

const HUGE_SIZES = [1024, 8192, 8193, 65_536]
const HUGE_UNITS = ['a', '%', 'é', '\u0000', '💩', '/', ' ', '\u2028']

export const hostileString: fc.Arbitrary<string> = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom(...NASTY) },
  { weight: 3, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: fc.constantFrom('\u0000', '\u0085', '\u2028', '\u001b', '\u007f', '\uD800', '%', '/', '.', 'a', '"', '\\'), maxLength: 30 }) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...HUGE_UNITS), fc.constantFrom(...HUGE_SIZES)).map(([u, n]) => u.repeat(n)) },
)

/** Percent-encodes every byte that is not unreserved, from the UTF-8 of `s` (lone surrogates become U+FFFD). */
export function pctEncode (s: string): string {
  let out = ''
  for (const byte of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(byte)
    out += /[A-Za-z0-9\-._~]/.test(c) ? c : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`
  }
  return out
}

// ---------------------------------------------------------------------------------------------------
// Plans

export type AuthChoice =
  | 'none' | 'sessionA' | 'sessionB' | 'keyA' | 'keyB' | 'revokedKeyA' | 'deadSessionA'
  | 'garbageCookie' | 'garbageKey' | 'sessionA+keyA' | 'sessionA+revokedKeyA'

export const AUTH_CHOICES: AuthChoice[] = [
  'none', 'sessionA', 'sessionB', 'keyA', 'keyB', 'revokedKeyA', 'deadSessionA', 'garbageCookie', 'garbageKey',
  'sessionA+keyA', 'sessionA+revokedKeyA',
]

/** A path parameter: an id of the caller's own account, of the other account, or hostile text. */
export type ParamChoice =
  | { kind: 'own' }
  | { kind: 'other' }
  | { kind: 'hostile'; value: string; raw: boolean }

export interface BodyPlan {
  kind: string
  /** undefined: no body at all. */
  text: string | undefined
  /** undefined: no Content-Type header. */
  contentType: string | undefined
}

export interface Plan {
  method: string
  params: Record<string, ParamChoice>
  query: string
  auth: AuthChoice
  origin: string | undefined
  body: BodyPlan
  headers: Record<string, string>
  via: 'inject' | 'socket'
}

export interface RouteInfo {
  url: string
  methods: string[]
  /** Names of the path parameters (`*` for a wildcard). */
  params: string[]
  /** From the app's OpenAPI document (built from the routes' TypeBox schemas), per method. */
  ops: Record<string, {
    body: JsonSchema | undefined
    bodyRequired: boolean
    query: Record<string, JsonSchema>
    headers: Record<string, JsonSchema>
    security: 'session' | 'apiKey' | 'public'
    acceptsKey: boolean
  }>
}

export interface Hints {
  /** A webhook URL that answers 200 (the test receiver). */
  hookUrl: string
}

// ---------------------------------------------------------------------------------------------------
// A valid-looking value for a schema: the base that one mutation at a time then spoils.

const FIELD_HINTS: Record<string, (h: Hints) => unknown> = {
  email: () => 'fuzz-ok@example.test',
  password: () => 'correct horse battery staple',
  to: () => 'delivered@simulator.test',
  cc: () => 'delivered@simulator.test',
  bcc: () => 'delivered@simulator.test',
  replyTo: () => 'delivered@simulator.test',
  from: () => 'Fuzz <fuzz@example.test>',
  subject: () => 'fuzz subject',
  text: () => 'hello',
  html: () => '<p>hello <a href="https://example.test/x">x</a></p>',
  name: () => 'fuzz key',
  url: (h) => h.hookUrl,
  events: () => ['email.sent'],
  event: () => 'email.sent',
  since: () => '2020-01-01T00:00:00.000Z',
  until: () => '2020-01-02T00:00:00.000Z',
  reason: () => 'manual',
}
/** Optional fields the base carries anyway, so that the base itself would be accepted. */
const OPTIONAL_IN_BASE = new Set(['text'])

export function sample (schema: JsonSchema | undefined, hints: Hints, field?: string): unknown {
  if (schema === undefined) return {}
  if (field !== undefined && FIELD_HINTS[field]) return FIELD_HINTS[field](hints)
  if ('const' in schema) return schema.const
  if (Array.isArray(schema.enum)) return schema.enum[0]
  // (An object's own anyOf is a rule about its fields, like the send's "html or text", not a union.)
  const union = schema.type === undefined ? schema.anyOf ?? schema.oneOf : undefined
  if (Array.isArray(union)) return sample(union[0], hints)
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type
  switch (type) {
    case 'object': {
      const out: Record<string, unknown> = {}
      const props = schema.properties ?? {}
      for (const k of Object.keys(props)) {
        if ((schema.required ?? []).includes(k) || OPTIONAL_IN_BASE.has(k)) out[k] = sample(props[k], hints, k)
      }
      if (Object.keys(out).length < (schema.minProperties ?? 0)) {
        const k = Object.keys(props)[0]
        if (k !== undefined) out[k] = sample(props[k], hints, k)
      }
      return out
    }
    case 'array': return Array.from({ length: Math.max(1, schema.minItems ?? 1) }, () => sample(schema.items, hints))
    case 'string': {
      if (schema.format === 'email') return 'fuzz-ok@example.test'
      if (schema.format === 'date-time') return '2020-01-01T00:00:00.000Z'
      return 'x'.repeat(Math.max(1, schema.minLength ?? 1))
    }
    case 'integer': case 'number': return schema.minimum ?? 1
    case 'boolean': return true
    case 'null': return null
    default: return {}
  }
}

function jsonTypesOf (schema: JsonSchema | undefined): Set<string> {
  const out = new Set<string>()
  if (schema === undefined) return out
  const union = schema.anyOf ?? schema.oneOf
  if (Array.isArray(union)) for (const s of union) for (const t of jsonTypesOf(s)) out.add(t)
  if ('const' in schema) out.add(schema.const === null ? 'null' : Array.isArray(schema.const) ? 'array' : typeof schema.const)
  for (const t of [schema.type ?? []].flat()) out.add(t === 'integer' ? 'number' : t)
  return out
}

function jsonTypeOf (v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v
}

const anyJsonValue: fc.Arbitrary<unknown> = fc.oneof(
  hostileString, fc.constantFrom(0, -1, 1.5, 1e308, -1e308, 2 ** 53 + 1, true, false, null, [], {}, [null], { a: 1 }),
  fc.jsonValue({ maxDepth: 3 }),
)

/** A value whose JSON type the schema does not allow (or, when it allows everything, a hostile one). */
function wrongTypeValue (schema: JsonSchema | undefined): fc.Arbitrary<unknown> {
  const allowed = jsonTypesOf(schema)
  return anyJsonValue.filter((v) => allowed.size === 0 || !allowed.has(jsonTypeOf(v)))
}

/** Paths (arrays of keys) to the fields of a schema, two levels deep, through arrays' first item. */
export function fieldPaths (schema: JsonSchema | undefined, depth = 2): Array<{ path: Array<string | number>; schema: JsonSchema }> {
  if (schema === undefined || depth === 0) return []
  const out: Array<{ path: Array<string | number>; schema: JsonSchema }> = []
  if (schema.type === 'object' && schema.properties) {
    for (const [k, s] of Object.entries<JsonSchema>(schema.properties)) {
      out.push({ path: [k], schema: s })
      for (const sub of fieldPaths(s, depth - 1)) out.push({ path: [k, ...sub.path], schema: sub.schema })
    }
  } else if (schema.type === 'array' && schema.items) {
    out.push({ path: [0], schema: schema.items })
    for (const sub of fieldPaths(schema.items, depth)) out.push({ path: [0, ...sub.path], schema: sub.schema })
  }
  return out
}

function setAt (root: unknown, path: Array<string | number>, value: unknown): unknown {
  if (path.length === 0) return value
  const base: any = root !== null && typeof root === 'object' ? structuredClone(root) : (typeof path[0] === 'number' ? [] : {})
  let cur = base
  for (let i = 0; i < path.length - 1; i++) {
    const k = path[i]!
    if (cur[k] === null || typeof cur[k] !== 'object') cur[k] = typeof path[i + 1] === 'number' ? [] : {}
    cur = cur[k]
  }
  cur[path[path.length - 1]!] = value
  return base
}

// ---------------------------------------------------------------------------------------------------
// Bodies

const JSON_TYPES = ['application/json', 'application/json; charset=utf-8']
const OTHER_TYPES = [
  'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml',
  'application/json; charset=utf-16', 'APPLICATION/JSON', 'application/vnd.api+json', 'application/json\t; x=y',
  '*/*', 'application/', 'json', 'application/json, text/plain', 'text/html; charset=utf-8',
]

/** Nested `[` or `{"a":` to the given depth, closed (or not: a truncated document). */
export function deepJson (depth: number, shape: 'array' | 'object', closed = true): string {
  const open = shape === 'array' ? '[' : '{"a":'
  const close = shape === 'array' ? ']' : '}'
  return open.repeat(depth) + '1' + (closed ? close.repeat(depth) : '')
}

// A byte-order mark before JSON is not here: RFC 8259 lets a parser ignore one, and svc's does.
const INVALID_JSON = [
  '{', '}', '[', '{"a":}', "{'a':1}", '{"a":1,}', '{a:1}', 'NaN', 'undefined', '{"a":1}garbage', '{"a":1}{"b":2}',
  '/* c */{}', '{"a":"\\ud800"}', '{"a":"\\x41"}', '{"a":"\u0000"}', '{"a":1e999999}', '"unterminated',
  '{"a":01}', '\u0000', 'ÿþ{}', '{"a":-}', '[1,2', 'null null', '{"__proto__":1}',
]

function bodyText (kind: string, value: unknown): fc.Arbitrary<{ kind: string; text: string }> {
  return fc.constant({ kind, text: JSON.stringify(value) })
}

/** Splices `"key": <json>` into the text of an object (or wraps a non-object). */
function withRawKey (baseText: string, key: string, json: string): string {
  if (baseText.startsWith('{') && baseText !== '{}') return `{"${key}":${json},${baseText.slice(1)}`
  if (baseText.startsWith('{')) return `{"${key}":${json}}`
  if (baseText.startsWith('[{')) return `[{"${key}":${json},${baseText.slice(2)}`
  return `{"${key}":${json}}`
}

/** Every kind of hostile JSON body for a route whose body schema is `schema` (undefined: no body taken). */
export function bodyContent (schema: JsonSchema | undefined, hints: Hints): fc.Arbitrary<{ kind: string; text: string | undefined }> {
  const base = sample(schema, hints)
  const baseText = JSON.stringify(base)
  const fields = fieldPaths(schema)
  const stringFields = fields.filter((f) => jsonTypesOf(f.schema).has('string'))
  const anyField = fields.length ? fc.constantFrom(...fields) : fc.constant<{ path: Array<string | number>; schema: JsonSchema }>({ path: ['x'], schema: {} })
  const strField = stringFields.length ? fc.constantFrom(...stringFields) : anyField

  const kinds: Array<fc.Arbitrary<{ kind: string; text: string | undefined }>> = [
    bodyText('valid-base', base),
    anyField.chain((f) => wrongTypeValue(f.schema).map((v) => ({ kind: `wrong-type@${f.path.join('.')}`, text: JSON.stringify(setAt(base, f.path, v)) }))),
    strField.chain((f) => hostileString.map((v) => ({ kind: `hostile-string@${f.path.join('.')}`, text: JSON.stringify(setAt(base, f.path, v)) }))),
    fc.tuple(fc.constantFrom('extra', 'constructor', 'prototype', 'hasOwnProperty', 'toString', '', '$where', 'a'.repeat(300)), anyJsonValue)
      .map(([k, v]) => ({ kind: `extra-field:${k.slice(0, 20)}`, text: withRawKey(baseText, k, JSON.stringify(v) ?? 'null') })),
    fc.constantFrom(
      ['__proto__', '{"isAdmin":true}'], ['__proto__', 'null'], ['constructor', '{"prototype":{"isAdmin":true}}'],
      ['__proto__', '{"__proto__":{"x":1}}'],
    ).map(([k, json]) => ({ kind: `proto:${k}`, text: withRawKey(baseText, k, json) })),
    fc.tuple(fc.constantFrom(64, 1000, 10_000, 100_000, 200_000), fc.constantFrom<'array' | 'object'>('array', 'object'), fc.boolean(), anyField)
      .map(([d, shape, top, f]) => ({
        kind: `deep:${shape}:${d}${top ? '' : `@${f.path.join('.')}`}`,
        text: top ? deepJson(d, shape) : JSON.stringify(setAt(base, f.path, '__DEEP__')).replace('"__DEEP__"', deepJson(d, shape)),
      })),
    fc.tuple(strField, fc.constantFrom(10_000, 100_000, 1_000_000, 1_100_000), fc.constantFrom('x', 'é', '\u2028', ' ', '<a href="', '\\u0000'))
      .map(([f, n, unit]) => ({
        kind: `huge-string:${n}@${f.path.join('.')}`,
        // The unit is spliced in as JSON text, so '\\u0000' arrives as an escaped NUL.
        text: JSON.stringify(setAt(base, f.path, '__HUGE__')).replace('"__HUGE__"', `"${unit.repeat(Math.ceil(n / unit.length))}"`),
      })),
    fc.tuple(anyField, fc.constantFrom(1000, 10_000, 60_000))
      .map(([f, n]) => {
        const item = JSON.stringify(sample(f.schema?.items ?? f.schema, hints, String(f.path[f.path.length - 1])))
        const arr = `[${Array.from({ length: n }, () => item ?? '1').join(',')}]`
        return { kind: `huge-array:${n}@${f.path.join('.')}`, text: JSON.stringify(setAt(base, f.path, '__ARR__')).replace('"__ARR__"', arr) }
      }),
    fc.constantFrom(...INVALID_JSON).map((t) => ({ kind: 'invalid-json', text: t })),
    fc.constantFrom('', ' ', '\r\n\t ').map((t) => ({ kind: 'empty', text: t })),
    fc.constant({ kind: 'absent', text: undefined }),
    fc.constantFrom('null', '42', '"s"', '[]', 'true', '[{}]', '{}', '[[]]', '-0', '1e400').map((t) => ({ kind: `top-level:${t}`, text: t })),
  ]
  return fc.oneof(...kinds)
}

export function bodyPlan (schema: JsonSchema | undefined, hints: Hints): fc.Arbitrary<BodyPlan> {
  return fc.tuple(
    bodyContent(schema, hints),
    fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...JSON_TYPES) }, { weight: 2, arbitrary: fc.constantFrom(...OTHER_TYPES) }, { weight: 1, arbitrary: fc.constant(undefined) }),
  ).map(([c, contentType]) => ({ kind: c.kind, text: c.text, contentType: c.text === undefined && contentType !== undefined && contentType.startsWith('application/json') ? undefined : contentType }))
}

// ---------------------------------------------------------------------------------------------------
// Query strings and headers

const QUERY_VALUES = [
  '', '-1', '0', '1', '1.5', '100', '101', '1e400', '99999999999999999999999', 'NaN', 'Infinity', 'true', 'null', '[]', '{}',
  'abc', '%', '%zz', '%00', '%E2%80%A8', 'pending', 'PENDING', 'failed,succeeded', 'eyJ4IjoxfQ', 'eyJ4IjoxfQ==',
  'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', '....', 'a'.repeat(1025), 'a'.repeat(8000), '2020-01-01T00:00:00.000Z|x',
]

function queryPair (names: string[]): fc.Arbitrary<string> {
  const name = fc.oneof(
    { weight: 4, arbitrary: names.length ? fc.constantFrom(...names) : fc.constant('limit') },
    { weight: 1, arbitrary: fc.constantFrom('__proto__', '__proto__[x]', 'constructor[prototype][x]', 'limit[]', 'limit[0]', 'x', '', '&', 'a'.repeat(300)) },
  )
  const value = fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...QUERY_VALUES) }, { weight: 2, arbitrary: hostileString })
  // Unencoded: printable ASCII stays as it is ('%', '[', '&'…); anything else is encoded, as a client
  // must (raw bytes in a request-target have a property of their own).
  const loose = (t: string) => t.replace(/[^\x21-\x7e]|#/gu, (c) => pctEncode(c))
  return fc.tuple(name, value, fc.boolean()).map(([n, v, encode]) => (encode ? `${pctEncode(n)}=${pctEncode(v)}` : `${loose(n)}=${loose(v)}`))
}

/** Node refuses a request head over 16 KiB; a query string is kept under 12,000 characters (whole pairs). */
export const MAX_QUERY = 12_000

function capQuery (pairs: string[]): string {
  const kept: string[] = []
  let size = 0
  for (const p of pairs) {
    if (size + p.length + 1 > MAX_QUERY) break
    kept.push(p)
    size += p.length + 1
  }
  if (kept.length === 0 && pairs[0] !== undefined) kept.push(pairs[0].slice(0, MAX_QUERY).replace(/%[0-9A-Fa-f]?$/, ''))
  return kept.join('&')
}

export function queryPlan (names: string[]): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 1, arbitrary: fc.constant('') },
    { weight: 4, arbitrary: fc.array(queryPair(names), { minLength: 1, maxLength: 5 }).map(capQuery) },
    // the same key again and again
    { weight: 1, arbitrary: fc.tuple(queryPair(names), fc.integer({ min: 2, max: 200 })).map(([p, n]) => capQuery(Array(n).fill(p))) },
  )
}

/** Headers a client may send anyway; their values are text a socket can carry (no CR/LF). */
export const extraHeaders: fc.Arbitrary<Record<string, string>> = fc.dictionary(
  fc.constantFrom('x-request-id', 'idempotency-key', 'accept', 'accept-encoding', 'x-forwarded-for', 'user-agent', 'x-api-key', 'cookie', 'authorization', 'x-http-method-override'),
  fc.oneof(hostileString, fc.constantFrom('gzip, br, deflate', '*/*', 'order-1', '1.2.3.4, 5.6.7.8', 'svc_session=', 'svc_session=a; svc_session=b', 'DELETE'))
    .map((v) => v.replace(/[\r\n\u0000]/g, '').replace(/[^\t\x20-\x7e\x80-\xff]/g, '?').slice(0, 4096)),
  { maxKeys: 2 },
)

// ---------------------------------------------------------------------------------------------------
// A whole plan for a route

/**
 * A plan for one request to `route`: a request that would be accepted (the caller's own credential and
 * ids, a valid body from the route's schema, nothing else), then one to three hostile changes to it
 * (a hostile or foreign id, a hostile query, another credential or none, a bad Origin, a hostile body,
 * another Content-Type, odd headers, the other transport). Starting from a valid request keeps most
 * requests past authentication and validation, where the handlers are; a tenth go out unchanged.
 */
export function planFor (route: RouteInfo, hints: Hints): fc.Arbitrary<Plan> {
  return fc.constantFrom(...route.methods).chain((method) => {
    const op = route.ops[method] ?? route.ops.GET ?? { body: undefined, bodyRequired: false, query: {}, headers: {}, security: 'public' as const, acceptsKey: false }
    const takesBody = op.body !== undefined
    const baseline: Plan = {
      method,
      params: Object.fromEntries(route.params.map((p) => [p, { kind: 'own' as const }])),
      query: '',
      auth: op.security === 'session' ? 'sessionA' : op.security === 'apiKey' ? 'keyA' : 'none',
      origin: undefined,
      body: takesBody ? { kind: 'valid-base', text: JSON.stringify(sample(op.body, hints)), contentType: 'application/json' } : { kind: 'absent', text: undefined, contentType: undefined },
      headers: {},
      via: 'inject',
    }
    type Change = (p: Plan) => Plan
    const hostileParam: fc.Arbitrary<ParamChoice> = fc.oneof(
      { weight: 1, arbitrary: fc.constant({ kind: 'other' as const }) },
      { weight: 3, arbitrary: fc.tuple(hostileString, fc.boolean()).map(([value, raw]) => ({ kind: 'hostile' as const, value, raw })) },
    )
    const changes: Array<{ weight: number; arbitrary: fc.Arbitrary<Change> }> = [
      { weight: 2, arbitrary: queryPlan(Object.keys(op.query)).map((query): Change => (p) => ({ ...p, query })) },
      { weight: 2, arbitrary: fc.constantFrom(...AUTH_CHOICES).map((auth): Change => (p) => ({ ...p, auth })) },
      { weight: 1, arbitrary: fc.constantFrom('https://evil.example', 'null', '').map((origin): Change => (p) => ({ ...p, origin })) },
      { weight: 1, arbitrary: extraHeaders.map((headers): Change => (p) => ({ ...p, headers: { ...p.headers, ...headers } })) },
      { weight: 1, arbitrary: fc.constant<Change>((p) => ({ ...p, via: 'socket' })) },
    ]
    if (route.params.length) {
      changes.push({ weight: 4, arbitrary: fc.tuple(fc.constantFrom(...route.params), hostileParam).map(([name, choice]): Change => (p) => ({ ...p, params: { ...p.params, [name]: choice } })) })
    }
    if (takesBody || !['GET', 'HEAD'].includes(method)) {
      changes.push({ weight: takesBody ? 6 : 2, arbitrary: bodyPlan(op.body, hints).map((body): Change => (p) => ({ ...p, body })) })
      changes.push({ weight: 1, arbitrary: fc.constantFrom(...OTHER_TYPES, undefined).map((contentType): Change => (p) => ({ ...p, body: { ...p.body, contentType } })) })
    } else {
      changes.push({ weight: 1, arbitrary: bodyPlan(undefined, hints).map((body): Change => (p) => ({ ...p, body })) })
    }
    const howMany = fc.oneof({ weight: 1, arbitrary: fc.constant(0) }, { weight: 5, arbitrary: fc.constant(1) }, { weight: 3, arbitrary: fc.constant(2) }, { weight: 1, arbitrary: fc.constant(3) })
    return howMany.chain((n) => fc.array(fc.oneof(...changes), { minLength: n, maxLength: n }))
      .map((picked) => picked.reduce((p, change) => change(p), baseline))
  })
}
