// Templates: what a stored template may hold, the bounds on it, which variables a send must give, and
// the words of each refusal. A template is a tenant's own text, rendered on the thread that answers the
// API, so everything here is bounded before any per-item work: sizes and counts first, then the engine
// (src/mail/render-template.ts, LiquidJS) with its own time and memory limits.
import type { ErrorDetail } from '../errors.js'
import { hasControlCharacter } from './text.js'

/** Any JSON value (a variable's value or default). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue }

/** A declared variable: a default makes it optional at send. */
export interface TemplateVariable {
  name: string
  /** A JSON value (as parsed from a request body). */
  default?: unknown
}

/** What one version of a template holds. */
export interface TemplateContent {
  subject: string
  html: string | null
  text: string | null
  variables: TemplateVariable[]
}

/** Where a send or a preview names a template: by id or by name, a version or the current one. */
export interface TemplateRef {
  id?: string
  name?: string
  version?: number
  variables?: Record<string, unknown>
}

/** The template and version an email was rendered from. */
export interface TemplateUse {
  id: string
  version: number
}

export const TEMPLATE_LIMITS = {
  /** Name: a slug, so that a send can name it plainly. */
  nameLength: 100,
  /** Subject (before rendering and after): one header line's worth. */
  subjectLength: 998,
  /**
   * html and text, each, in characters. Gmail clips a message's html past about 102 KB, so a template
   * needs far less than this; the bound keeps parsing and storing each version small.
   */
  bodyLength: 256 * 1024,
  /**
   * Tags (`{{ … }}` and `{% … %}`) in subject, html and text together. LiquidJS's parser takes time
   * quadratic in its tokens (about 0.2 s for 20,000 on this machine), so the count is checked, in linear
   * time, before the parser sees anything: 1,000 tags parse in a few milliseconds.
   */
  tags: 1000,
  /** Blocks inside blocks (`if` in `for` in …). */
  nesting: 20,
  /** Declared variables. */
  variables: 100,
  variableName: 64,
  /** Variables given at a send or a preview. */
  givenVariables: 200,
} as const

/**
 * The bounds of a render, on the thread that answers the API. `sendMs`: one send's subject, html and text
 * together; `requestMs`: every render of one request (a batch of 100 included), so that a hostile batch
 * holds the thread for that long at most. `memory`: LiquidJS's count of characters and array items its
 * filters and ranges make in one render. The output of html and text is bounded like a plain send's
 * content; a rendered subject like a plain subject.
 */
export interface RenderLimits {
  sendMs: number
  requestMs: number
  memory: number
  outputLength: number
}

export const DEFAULT_RENDER_LIMITS: RenderLimits = {
  sendMs: 100,
  requestMs: 250,
  memory: 4_000_000,
  outputLength: 1024 * 1024,
}

export const TEMPLATE_NAME_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._-]*$'
export const VARIABLE_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]*$'
const NAME = new RegExp(TEMPLATE_NAME_PATTERN)
const VARIABLE = new RegExp(VARIABLE_NAME_PATTERN)

export const NAME_RULE = `letters, digits, '.', '_' and '-', starting with a letter or digit, at most ${TEMPLATE_LIMITS.nameLength} characters`

/** Checks a template name; null when it is fine. */
export function nameProblem (name: string): string | null {
  if (name.length === 0 || name.length > TEMPLATE_LIMITS.nameLength || !NAME.test(name)) return `must be ${NAME_RULE}`
  return null
}

/**
 * The number of `{{` and `{%` openings in `text`, counting no further than `max + 1`: a linear scan with
 * indexOf, so a megabyte of tags costs one pass, never a parse.
 */
export function countTags (text: string, max: number): number {
  let n = 0
  let at = text.indexOf('{')
  while (at >= 0 && n <= max) {
    const next = text.charCodeAt(at + 1)
    if (next === 0x7b /* { */ || next === 0x25 /* % */) {
      n++
      at = text.indexOf('{', at + 2)
    } else {
      at = text.indexOf('{', at + 1)
    }
  }
  return n
}

/**
 * What is wrong with a template's content before it is parsed (paths relative to the body: `html`,
 * `variables[2].name`); empty when nothing is. The schema has bounded every string and array already.
 */
export function contentProblems (c: TemplateContent): ErrorDetail[] {
  const errors: ErrorDetail[] = []
  if (c.subject.length === 0 || c.subject.length > TEMPLATE_LIMITS.subjectLength) {
    errors.push({ path: 'subject', message: `must be 1 to ${TEMPLATE_LIMITS.subjectLength} characters` })
  } else if (hasControlCharacter(c.subject, { allowTab: true })) {
    errors.push({ path: 'subject', message: 'must not contain CR, LF or other control characters' })
  }
  if (c.html === null && c.text === null) errors.push({ path: 'html', message: 'html or text is required (or both)' })
  for (const field of ['html', 'text'] as const) {
    const value = c[field]
    if (value !== null && (value.length === 0 || value.length > TEMPLATE_LIMITS.bodyLength)) {
      errors.push({ path: field, message: `must be 1 to ${TEMPLATE_LIMITS.bodyLength} characters` })
    }
  }
  if (c.variables.length > TEMPLATE_LIMITS.variables) {
    errors.push({ path: 'variables', message: `takes at most ${TEMPLATE_LIMITS.variables} variables` })
    return errors
  }
  const seen = new Set<string>()
  c.variables.forEach((v, i) => {
    if (v.name.length > TEMPLATE_LIMITS.variableName || !VARIABLE.test(v.name)) {
      errors.push({ path: `variables[${i}].name`, message: `must be a letter or _ then letters, digits or _, at most ${TEMPLATE_LIMITS.variableName} characters` })
    } else if (seen.has(v.name)) {
      errors.push({ path: `variables[${i}].name`, message: 'is declared twice' })
    }
    seen.add(v.name)
  })
  if (errors.length > 0) return errors
  // Sizes are fine: now the one linear scan over the text for its tags.
  const tags = countTags(c.subject, TEMPLATE_LIMITS.tags) +
    countTags(c.html ?? '', TEMPLATE_LIMITS.tags) + countTags(c.text ?? '', TEMPLATE_LIMITS.tags)
  if (tags > TEMPLATE_LIMITS.tags) {
    errors.push({ path: 'body', message: `holds more than ${TEMPLATE_LIMITS.tags} tags ({{ … }} and {% … %}) in subject, html and text together` })
  }
  return errors
}

/** The scope of a render: each declared default, then what the send gave over it. */
export function scopeOf (declared: readonly TemplateVariable[], given: Record<string, unknown>): Record<string, unknown> {
  const scope: Record<string, unknown> = {}
  for (const v of declared) if (Object.hasOwn(v, 'default')) scope[v.name] = v.default
  for (const [name, value] of Object.entries(given)) scope[name] = value
  return scope
}

/** The fields a template send must leave out: the template gives them. */
export const TEMPLATE_REPLACES = ['subject', 'html', 'text'] as const

/** What is wrong with how a send names its template (paths relative to `template`). */
export function refProblems (ref: TemplateRef): ErrorDetail[] {
  const errors: ErrorDetail[] = []
  if ((ref.id === undefined) === (ref.name === undefined)) errors.push({ path: 'template', message: 'names the template by id or by name (one of them)' })
  if (ref.variables !== undefined) {
    const names = Object.keys(ref.variables)
    if (names.length > TEMPLATE_LIMITS.givenVariables) errors.push({ path: 'template.variables', message: `takes at most ${TEMPLATE_LIMITS.givenVariables} variables` })
  }
  return errors
}
