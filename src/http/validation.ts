// Request validation: every field of a request is checked at once and answered in plain words.
//
// Ajv's `allErrors: true` reports every problem, but its cost grows with what a hostile body holds (every
// item of a 100,000-item array, every branch of every union). Here Ajv runs with `allErrors: false` (it
// stops at a field's first problem, and size limits are checked before any item is looked at), once per
// top-level field of an object: the fields' keys, `required` and `additionalProperties` are checked by
// this module, on a key set that is itself bounded. So a client still learns about every field in one
// answer, and each field's message says what is allowed there ("must be 1–50 characters", "must be one
// of: email.sent, …"), never Ajv's own words.
import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv'
import addFormats from 'ajv-formats'
import type { FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify'
import type { ErrorDetail } from '../errors.js'
import { NO_CONTROL_CHARACTERS_PATTERN } from '../domain/text.js'

// Bodies are JSON and keep their types: a number where a string belongs is an error, never coerced to
// "123". Query strings and path parameters are text by nature and are coerced to their declared types.
function makeAjv (coerceTypes: boolean) {
  // verbose: errors carry their schema, which is what the messages below are written from. The errors
  // never leave this module: only a path and a message do.
  const ajv = new Ajv.default({ allErrors: false, verbose: true, coerceTypes, useDefaults: true, removeAdditional: false, strict: false })
  addFormats.default(ajv)
  // The bound of a base64 string, by its length (see asciiLengths).
  ajv.addKeyword({ keyword: 'maxUnits', type: 'string', schemaType: 'number', compile: (max: number) => (data: string) => data.length <= max, errors: false })
  return ajv
}

const strict = makeAjv(false)
const coercing = makeAjv(true)

/** Unknown fields named in one answer, at most; the rest of a hostile body's keys are not even read. */
const MAX_UNKNOWN_REPORTED = 10
/** Keys echoed in a path are cut to this length. */
const MAX_KEY_ECHO = 64

/** What a pattern allows, in words; keyed by the pattern's source. */
const PATTERNS = new Map<string, string>([
  ['^[A-Za-z0-9_-]+$', 'must hold only letters, digits, _ and -'],
  ['^[\\x20-\\x7E]+$', 'must hold only printable ASCII characters'],
  [NO_CONTROL_CHARACTERS_PATTERN, 'must not contain control characters (CR, LF, tab, U+0085, U+2028, …)'],
])
const FORMATS: Record<string, string> = {
  'date-time': 'must be a date and time in ISO 8601 (RFC 3339), like 2026-01-31T09:30:00Z',
  email: 'must be an email address',
  uri: 'must be a URL',
}

interface Problem {
  /** JSON pointer into the validated part ('' is the part itself). */
  at: string
  message: string
}

type Schema = Record<string, any>

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`

function typeName (type: unknown): string {
  if (Array.isArray(type)) return type.map(typeName).join(' or ')
  switch (type) {
    case 'string': return 'a string'
    case 'integer': return 'a whole number'
    case 'number': return 'a number'
    case 'boolean': return 'true or false'
    case 'object': return 'a JSON object'
    case 'array': return 'an array'
    case 'null': return 'null'
    default: return 'a valid value'
  }
}

function jsonType (value: unknown): string {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'array'
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number'
  return typeof value
}

function acceptsType (type: unknown, actual: string): boolean {
  if (type === undefined) return true
  const types = Array.isArray(type) ? type : [type]
  return types.includes(actual) || (actual === 'integer' && types.includes('number'))
}

function lengthRule (s: Schema): string {
  const min = s.minLength as number | undefined
  const max = s.maxLength as number | undefined
  if (min !== undefined && max !== undefined) return min === max ? `exactly ${plural(max, 'character')}` : `${min}–${max} characters`
  if (max !== undefined) return `at most ${plural(max, 'character')}`
  return `at least ${plural(min ?? 0, 'character')}`
}

function countRule (s: Schema): string {
  const min = s.minItems as number | undefined
  const max = s.maxItems as number | undefined
  if (min !== undefined && max !== undefined) return `an array of ${min} to ${max} items`
  if (max !== undefined) return `an array of at most ${plural(max, 'item')}`
  return `an array of at least ${plural(min ?? 0, 'item')}`
}

function numberRule (s: Schema): string {
  const what = s.type === 'integer' ? 'a whole number' : 'a number'
  const min = s.minimum ?? s.exclusiveMinimum
  const max = s.maximum ?? s.exclusiveMaximum
  if (min !== undefined && max !== undefined) return `${what} from ${min} to ${max}`
  if (max !== undefined) return `${what} of at most ${max}`
  return `${what} of at least ${min}`
}

function oneOf (values: unknown[]): string {
  return `must be one of: ${values.map((v) => (typeof v === 'string' ? v : JSON.stringify(v))).join(', ')}`
}

function escapeKey (key: string): string {
  const shown = key.length > MAX_KEY_ECHO ? `${key.slice(0, MAX_KEY_ECHO)}…` : key
  return shown.replace(/~/g, '~0').replace(/\//g, '~1')
}

function fieldList (s: Schema): string {
  return Object.keys(s.properties ?? {}).join(', ')
}

const SIZE_KEYWORDS = new Set(['minItems', 'maxItems', 'uniqueItems'])

/** The one problem Ajv's errors (from a validator with allErrors: false) come down to. */
function explain (e: ErrorObject, all: ErrorObject[]): Problem {
  const s = (e.parentSchema ?? {}) as Schema
  const params = e.params ?? {}
  const at = e.instancePath
  switch (e.keyword) {
    case 'type':
      // Say the whole rule where there is one: "must be a whole number from 1 to 100", "must be an email address".
      if ((s.type === 'integer' || s.type === 'number') && (s.minimum ?? s.maximum) !== undefined) return { at, message: `must be ${numberRule(s)}` }
      if (s.type === 'string' && typeof s.format === 'string' && FORMATS[s.format] !== undefined) return { at, message: FORMATS[s.format]! }
      if (s.type === 'string' && (s.minLength ?? s.maxLength) !== undefined) return { at, message: `must be a string of ${lengthRule(s)}` }
      return { at, message: `must be ${typeName(e.schema)}` }
    case 'minLength':
    case 'maxLength': return { at, message: `must be ${lengthRule(s)}` }
    case 'maxUnits': return { at, message: `must be at most ${plural(Number(e.schema), 'character')}` }
    case 'pattern': return { at, message: PATTERNS.get(String(e.schema)) ?? 'holds characters that are not allowed here' }
    case 'format': return { at, message: FORMATS[String(e.schema)] ?? `must be a valid ${String(e.schema)}` }
    case 'minItems':
    case 'maxItems':
    case 'uniqueItems':
      if (typeof s.description === 'string') return { at, message: `must be ${s.description}` }
      if (e.keyword === 'uniqueItems') return { at, message: `must not hold the same item twice (items ${params.j} and ${params.i})` }
      return { at, message: `must be ${countRule(s)}` }
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum': return { at, message: `must be ${numberRule(s)}` }
    case 'const': return { at, message: oneOf([e.schema]) }
    case 'enum': return { at, message: oneOf(e.schema as unknown[]) }
    case 'required': return { at: `${at}/${escapeKey(String(params.missingProperty))}`, message: 'is required' }
    case 'additionalProperties':
      return { at: `${at}/${escapeKey(String(params.additionalProperty))}`, message: `is not a known field; the fields are: ${fieldList(s)}` }
    case 'minProperties': return { at, message: `must have at least ${plural(params.limit, 'entry', 'entries')}` }
    case 'maxProperties': return { at, message: `must have at most ${plural(params.limit, 'entry', 'entries')}` }
    case 'propertyNames': {
      const inner = all[all.indexOf(e) - 1]
      return { at, message: inner ? `names ${explain(inner, all).message}` : 'has a name that is not allowed' }
    }
    case 'anyOf':
    case 'oneOf': return explainUnion(e, all)
    default: return { at, message: e.message ?? 'is not valid' }
  }
}

/**
 * A union failed. A union of constants is "one of: …". Otherwise, when exactly one branch takes the
 * value's JSON type, that branch's own problem is the one to tell (an array of addresses with a bad
 * item: that item); else the union is described as a whole, by its description when it has one.
 */
function explainUnion (e: ErrorObject, all: ErrorObject[]): Problem {
  const s = (e.parentSchema ?? {}) as Schema
  const branches = (Array.isArray(e.schema) ? e.schema : []) as Schema[]
  if (branches.length > 0 && branches.every((b) => 'const' in b)) return { at: e.instancePath, message: oneOf(branches.map((b) => b.const)) }
  const whole = { at: e.instancePath, message: typeof s.description === 'string' ? `must be ${s.description}` : `must be ${branches.map((b) => typeName(b.type)).join(' or ')}` }
  const actual = jsonType(e.data)
  const matching = branches.flatMap((b, i) => (acceptsType(b.type, actual) ? [i] : []))
  if (matching.length !== 1) return whole
  const prefix = `${e.schemaPath}/${matching[0]}/`
  const inner = all.filter((x) => x.schemaPath.startsWith(prefix)).at(-1)
  if (inner === undefined) return whole
  // The array as a whole is the wrong size: the union's description says what is allowed.
  if (inner.instancePath === e.instancePath && SIZE_KEYWORDS.has(inner.keyword) && typeof s.description === 'string') return whole
  return explain(inner, all)
}

/** Checks one value; pushes its problems (pointers under `at`). */
type Check = (data: unknown, at: string, problems: Problem[], parent?: Record<string, unknown>, key?: string) => void

function leafCheck (validate: ValidateFunction): Check {
  return (data, at, problems, parent, key) => {
    const ok = parent === undefined
      ? validate(data, { instancePath: at, rootData: data } as any)
      : validate(data, { instancePath: at, parentData: parent, parentDataProperty: key, rootData: parent } as any)
    if (!ok) problems.push(explain(validate.errors!.at(-1)!, validate.errors!))
  }
}

/**
 * The schema with each base64 string's maxLength checked by its length (`maxUnits`): base64 is ASCII, so
 * its characters are its UTF-16 units, while Ajv's maxLength counts code points one by one (about 3 ms of
 * the main thread for the 1.4 MB of a 1 MiB attachment, 30 ms for a full allowance). The document keeps
 * maxLength; only the validator is compiled from this copy.
 */
function asciiLengths (s: unknown): unknown {
  if (Array.isArray(s)) return s.map(asciiLengths)
  if (s === null || typeof s !== 'object') return s
  const out: Schema = {}
  for (const [k, v] of Object.entries(s)) out[k] = asciiLengths(v)
  if (out.type === 'string' && out.contentEncoding === 'base64' && typeof out.maxLength === 'number') {
    out.maxUnits = out.maxLength
    delete out.maxLength
  }
  return out
}

function isObjectSchema (s: Schema): boolean {
  return s.type === 'object' && typeof s.properties === 'object' && s.properties !== null
}

function isPlainObject (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** One validator per field, each stopping at its field's first problem; keys checked here. */
function objectCheck (schema: Schema, ajv: Ajv.default): Check {
  const fields = Object.entries(schema.properties as Record<string, Schema>).map(([name, s]) => ({
    name, schema: s, check: compileCheck(s, ajv, false), path: `/${escapeKey(name)}`,
  }))
  const known = new Set(fields.map((f) => f.name))
  const required = new Set<string>(schema.required ?? [])
  const closed = schema.additionalProperties === false
  const minProperties = schema.minProperties as number | undefined
  const names = fields.map((f) => f.name).join(', ')
  return (data, at, problems) => {
    if (!isPlainObject(data)) {
      problems.push({ at, message: names ? `must be a JSON object (fields: ${names})` : 'must be a JSON object' })
      return
    }
    if (closed) {
      let unknown = 0
      for (const key in data) {
        if (known.has(key) || !Object.hasOwn(data, key)) continue
        problems.push({ at: `${at}/${escapeKey(key)}`, message: `is not a known field; the fields are: ${names}` })
        if (++unknown === MAX_UNKNOWN_REPORTED) break
      }
    }
    let present = 0
    for (const f of fields) {
      if (!Object.hasOwn(data, f.name) || data[f.name] === undefined) {
        if ('default' in f.schema) {
          data[f.name] = structuredClone(f.schema.default)
          present++
        } else if (required.has(f.name)) {
          problems.push({ at: `${at}${f.path}`, message: typeof f.schema.description === 'string' ? `is required (${f.schema.description})` : 'is required' })
        }
        continue
      }
      present++
      f.check(data[f.name], `${at}${f.path}`, problems, data, f.name)
    }
    if (minProperties !== undefined && present < minProperties) {
      problems.push({ at, message: `must name at least ${minProperties} of the fields: ${names}` })
    }
  }
}

/** An array of objects (a batch): its size first, then each item field by field. */
function arrayCheck (schema: Schema, ajv: Ajv.default): Check {
  const item = objectCheck(schema.items as Schema, ajv)
  const size = typeof schema.description === 'string' ? `must be ${schema.description}` : `must be ${countRule(schema)}`
  return (data, at, problems) => {
    if (!Array.isArray(data)) return void problems.push({ at, message: size })
    if ((schema.minItems !== undefined && data.length < schema.minItems) || (schema.maxItems !== undefined && data.length > schema.maxItems)) {
      return void problems.push({ at, message: size })
    }
    data.forEach((v, i) => item(v, `${at}/${i}`, problems))
  }
}

function compileCheck (schema: Schema, ajv: Ajv.default, root: boolean): Check {
  if (root && isObjectSchema(schema)) return objectCheck(schema, ajv)
  if (root && schema.type === 'array' && isObjectSchema(schema.items ?? {})) return arrayCheck(schema, ajv)
  return leafCheck(ajv.compile(schema))
}

type FastifyValidator = ((data: unknown) => boolean | { value: unknown }) & { errors?: FastifySchemaValidationError[] | null }

/**
 * Each route's schema is a module constant that every app built in this process shares (a test file builds
 * dozens): its checks are compiled once, not once per app, and reused. Ajv's own cache cannot do it, as the
 * copy asciiLengths makes is new each time. A validator keeps no state between calls but its `errors`,
 * which it sets at each (synchronous) call.
 */
const compiled = new WeakMap<object, Map<string, FastifyValidator>>()

export const validatorCompiler: FastifySchemaCompiler<any> = ({ schema, httpPart }) => {
  const part = String(httpPart)
  let byPart = compiled.get(schema)
  if (byPart === undefined) {
    byPart = new Map()
    compiled.set(schema, byPart)
  }
  let validate = byPart.get(part)
  if (validate === undefined) {
    validate = compileValidator(schema, httpPart)
    byPart.set(part, validate)
  }
  return validate
}

function compileValidator (schema: unknown, httpPart: string | undefined): FastifyValidator {
  const s = asciiLengths(schema) as Schema
  const body = httpPart === 'body'
  const check = compileCheck(s, body ? strict : coercing, true)
  // A body whose every field is optional may be left out (or be empty): the handler sees {}.
  const optional = body && isObjectSchema(s) && (s.required ?? []).length === 0 && !s.minProperties
  const validate: FastifyValidator = (data) => {
    validate.errors = null
    // Fastify hands a missing part over as null (and JSON null is no better).
    if (data === null && body) {
      if (optional) return { value: {} }
      validate.errors = [asFastifyError({ at: '', message: isObjectSchema(s) ? `is required: a JSON object (fields: ${fieldList(s)})` : 'is required' })]
      return false
    }
    const problems: Problem[] = []
    check(data, '', problems)
    if (problems.length === 0) return true
    validate.errors = problems.map(asFastifyError)
    return false
  }
  return validate
}

function asFastifyError (p: Problem): FastifySchemaValidationError {
  return { keyword: 'svc', instancePath: p.at, schemaPath: '#', params: {}, message: p.message }
}

function pointerToPath (pointer: string): string {
  return pointer.split('/').slice(1)
    .map((seg) => seg.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((path, seg) => (/^\d+$/.test(seg) ? `${path}[${seg}]` : path ? `${path}.${seg}` : seg), '')
}

/** One entry per offending field, with its path (`body.events[1]`, `query.limit`) and a plain message. */
export function validationDetails (errors: FastifySchemaValidationError[], httpPart: string): ErrorDetail[] {
  // Fastify calls the query string "querystring"; paths say `query.limit`, as the rest of svc does.
  const part = httpPart === 'querystring' ? 'query' : httpPart
  const details: ErrorDetail[] = []
  const seen = new Set<string>()
  for (const e of errors) {
    const at = pointerToPath(e.instancePath ?? '')
    // A batch body is an array: its items are `body[3].subject`, not `body.[3].subject`.
    const path = at ? (at.startsWith('[') ? `${part}${at}` : `${part}.${at}`) : part
    if (seen.has(path)) continue
    seen.add(path)
    details.push({ path, message: e.message ?? 'is not valid' })
  }
  return details
}
