// Templates with LiquidJS: compiled once per version, rendered once per send, within bounds. A template
// is a tenant's text and runs on the API thread, so the engine is shut in:
// - no code: Liquid has no way to call JavaScript, and variables are read as own properties only
//   (ownPropertyOnly: `{{ user.constructor }}` is an undefined variable, never a prototype);
// - no files: the tags that read other templates (include, render, layout, block) are removed, so a
//   template that names one does not parse, and the file system given to the engine refuses every read;
//   the multi-statement `liquid` tag is removed too (its lines would parse outside the tag count);
// - bounded parse: the caller counted the tags already (src/domain/templates.ts contentProblems), and a
//   parse is refused past TEMPLATE_LIMITS' sizes and nesting;
// - bounded render: LiquidJS's render deadline (checked before each node it renders, loops included) and
//   memory count (ranges, joins, appends…), shared by a send's subject, html and text, and an output cap
//   checked at every write, so a loop that prints cannot grow a string past the content limit.
// Variables are HTML-escaped in html (outputEscape; `| raw` opts out, the template's own choice) and
// printed as given in subject and text; the caller refuses a rendered subject with control characters.
import { Context, Liquid, toValue, toValueSync, type FS, type Template } from 'liquidjs'
import type { ErrorDetail } from '../errors.js'
import {
  DEFAULT_RENDER_LIMITS, TEMPLATE_LIMITS, contentProblems, scopeOf,
  type RenderLimits, type TemplateContent, type TemplateVariable,
} from '../domain/templates.js'

const NO_FILES: FS = {
  exists: async () => false,
  existsSync: () => false,
  readFile: async () => { throw new Error('templates cannot read files') },
  readFileSync: () => { throw new Error('templates cannot read files') },
  resolve: (_dir, file) => file,
  contains: async () => false,
  containsSync: () => false,
  sep: '/',
  dirname: () => '',
}

const REMOVED_TAGS = ['include', 'render', 'layout', 'block', 'liquid']

function engine (html: boolean): Liquid {
  const liquid = new Liquid({
    strictVariables: true,
    // `{% if order.coupon %}` and `{{ x.y | default: … }}` read an absent property as nil, not an error.
    lenientIf: true,
    strictFilters: true,
    ownPropertyOnly: true,
    fs: NO_FILES,
    relativeReference: false,
    dynamicPartials: false,
    cache: false,
    // The date filter writes UTC, whatever the server's zone.
    timezoneOffset: 0,
    parseLimit: TEMPLATE_LIMITS.bodyLength,
    renderLimit: DEFAULT_RENDER_LIMITS.sendMs,
    memoryLimit: DEFAULT_RENDER_LIMITS.memory,
    ...(html ? { outputEscape: 'escape' as const } : {}),
  })
  for (const tag of REMOVED_TAGS) delete liquid.tags[tag]
  // In html every output is escaped already: an explicit escape filter is the last word, not escaped twice.
  if (html) for (const name of ['escape', 'escape_once', 'xml_escape']) liquid.registerFilter(name, { handler: liquid.filters[name] as (v: unknown) => string, raw: true })
  return liquid
}

const htmlEngine = engine(true)
const plainEngine = engine(false)

type Part = 'subject' | 'html' | 'text'

/** One version, parsed: what a render needs and nothing else. */
export interface CompiledTemplate {
  subject: Template[]
  html: Template[] | null
  text: Template[] | null
  variables: TemplateVariable[]
  /** Characters of source, for the cache's bound. */
  size: number
}

/** The deepest block nesting of `templates`, walked without recursion; stops once past `max`. */
function nestingOf (templates: Template[], max: number): number {
  let deepest = 0
  const stack: Array<{ list: Template[]; depth: number }> = [{ list: templates, depth: 0 }]
  while (stack.length > 0) {
    const { list, depth } = stack.pop()!
    deepest = Math.max(deepest, depth)
    if (deepest > max) return deepest
    for (const t of list) {
      if (typeof t.children === 'function') stack.push({ list: toValueSync<Template[]>(t.children(false, true)), depth: depth + 1 })
    }
  }
  return deepest
}

/** A LiquidJS message without its stack, one line, bounded (it may quote the template: the tenant's own text). */
function reason (err: unknown): string {
  const message = err instanceof Error ? err.message : String(err)
  const line = message.split('\n', 1)[0] ?? ''
  return line.length > 300 ? `${line.slice(0, 300)}…` : line
}

/**
 * Parses a template's content; `{ errors }` (paths relative to the template's body) when it is refused:
 * over a size or count of contentProblems, a syntax error, a tag that is not available, too deep.
 */
export function compileTemplate (content: TemplateContent): { compiled: CompiledTemplate } | { errors: ErrorDetail[] } {
  const problems = contentProblems(content)
  if (problems.length > 0) return { errors: problems }
  const errors: ErrorDetail[] = []
  const parse = (part: Part, source: string | null): Template[] | null => {
    if (source === null) return null
    try {
      const parsed = (part === 'html' ? htmlEngine : plainEngine).parse(source)
      if (nestingOf(parsed, TEMPLATE_LIMITS.nesting) > TEMPLATE_LIMITS.nesting) {
        errors.push({ path: part, message: `nests blocks more than ${TEMPLATE_LIMITS.nesting} deep` })
        return null
      }
      return parsed
    } catch (err) {
      // A stack overflow in the parser is nesting too (the tag count keeps it far from happening).
      const first = flatten(err, 3)
      errors.push({
        path: part,
        message: first.some((e) => original(e) instanceof RangeError)
          ? `nests blocks too deep (at most ${TEMPLATE_LIMITS.nesting})`
          : `does not parse: ${first.map((e) => reason(e)).join('; ')}`,
      })
      return null
    }
  }
  const subject = parse('subject', content.subject)
  const html = parse('html', content.html)
  const text = parse('text', content.text)
  if (errors.length > 0 || subject === null) return { errors }
  const size = content.subject.length + (content.html?.length ?? 0) + (content.text?.length ?? 0)
  return { compiled: { subject, html, text, variables: content.variables, size } }
}

/** Where a render stands in its request: the deadline of every render of the request (performance.now() ms). */
export interface RenderBudget {
  limits: RenderLimits
  requestDeadline: number
}

export function renderBudget (limits: RenderLimits = DEFAULT_RENDER_LIMITS, now = performance.now()): RenderBudget {
  return { limits, requestDeadline: now + limits.requestMs }
}

export interface Rendered {
  subject: string
  html: string | null
  text: string | null
}

/**
 * Why a render stopped. `variables`: variables the template needs that the send did not give (names, or
 * dotted paths for properties found missing while rendering); `limit`: a bound was reached; `failed`: the
 * template could not be rendered with these values (a filter given the wrong type…).
 */
export type RenderRefusal =
  | { kind: 'variables'; names: string[] }
  | { kind: 'limit'; part: Part; message: string }
  | { kind: 'failed'; part: Part; message: string }

class OutputTooLong extends Error {}

function stringify (value: unknown): string {
  const v = toValue(value) as unknown
  if (typeof v === 'string') return v
  if (v === null || v === undefined) return ''
  if (Array.isArray(v)) return v.map(stringify).join('')
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- any other value prints as JavaScript prints it
  return String(v)
}

/** LiquidJS's emitter, with a cap on what it holds: a loop that prints stops at the cap, not at the deadline. */
class CappedEmitter {
  buffer = ''
  constructor (private readonly max: number) {}
  write (html: unknown): void {
    const s = stringify(html)
    if (this.buffer.length + s.length > this.max) throw new OutputTooLong(`the output would pass ${this.max} characters`)
    this.buffer += s
  }
}

const UNDEFINED_VARIABLE = /^undefined variable: ([^,\s]{1,200})/
/** A refusal names at most this many missing variables. */
const MAX_NAMED = 20

/** LiquidJS's errors as a list (a parse may collect several), at most `max`. */
function flatten (err: unknown, max: number, out: unknown[] = []): unknown[] {
  const nested = (err as { errors?: unknown[] } | null)?.errors
  if (Array.isArray(nested)) {
    for (const e of nested) if (out.length < max) flatten(e, max, out)
  } else {
    out.push(err)
  }
  return out
}

/** The error a LiquidJS error wraps (ours, a RangeError…), or the error itself. */
function original (err: unknown): unknown {
  return (err as { originalError?: unknown } | null)?.originalError ?? err
}

/**
 * Renders one send's subject, html and text from `variables` over the declared defaults, within the
 * budget: this send's share of the request's time, and LiquidJS's memory count, both shared by the three
 * parts. A render stops at its first error. When that error is an undefined top-level variable, the name
 * is noted, stands in as '' and the render runs again (within the same deadline), so that one refusal
 * names every variable missing, up to MAX_NAMED; a missing property (`order.total`) is named alone.
 */
export function renderTemplate (c: CompiledTemplate, variables: Record<string, unknown>, budget: RenderBudget): Rendered | { refused: RenderRefusal } {
  const scope = scopeOf(c.variables, variables)
  const ms = Math.max(0, Math.min(budget.limits.sendMs, budget.requestDeadline - performance.now()))
  let shared: { memoryLimit: Context['memoryLimit']; renderLimit: Context['renderLimit'] } | undefined
  const render = (part: Part, templates: Template[] | null): string | null => {
    if (templates === null) return null
    const liquid = part === 'html' ? htmlEngine : plainEngine
    const ctx = new Context(scope, liquid.options, { sync: true, renderLimit: ms, memoryLimit: budget.limits.memory }, { ...shared, liquid })
    shared ??= { memoryLimit: ctx.memoryLimit, renderLimit: ctx.renderLimit }
    const max = part === 'subject' ? TEMPLATE_LIMITS.subjectLength : budget.limits.outputLength
    return toValueSync(liquid.renderer.renderTemplates(templates, ctx, new CappedEmitter(max))) as string
  }
  const missing: string[] = []
  for (;;) {
    let part: Part = 'subject'
    try {
      const subject = render(part, c.subject)!
      part = 'html'
      const html = render(part, c.html)
      part = 'text'
      const text = render(part, c.text)
      if (missing.length > 0) return { refused: { kind: 'variables', names: missing } }
      return { subject, html, text }
    } catch (err) {
      const cause = original(flatten(err, 1)[0])
      const message = reason(cause)
      const name = UNDEFINED_VARIABLE.exec(message)?.[1]
      if (name !== undefined) {
        missing.push(name)
        // Another pass finds the next one; a property path, or the cap, ends the search.
        if (name.includes('.') || name.includes('[') || missing.length >= MAX_NAMED || Object.hasOwn(scope, name)) {
          return { refused: { kind: 'variables', names: missing } }
        }
        scope[name] = ''
        continue
      }
      if (missing.length > 0) return { refused: { kind: 'variables', names: missing } }
      if (cause instanceof OutputTooLong) {
        return { refused: { kind: 'limit', part, message: part === 'subject' ? `the rendered subject would pass ${TEMPLATE_LIMITS.subjectLength} characters` : `the rendered ${part} would pass ${budget.limits.outputLength} characters` } }
      }
      if (message.includes('template render limit exceeded')) {
        return { refused: { kind: 'limit', part, message: `rendering took longer than its bound (${budget.limits.sendMs} ms a send, ${budget.limits.requestMs} ms a request)` } }
      }
      if (message.includes('memory alloc limit exceeded')) return { refused: { kind: 'limit', part, message: 'rendering would make more than its memory bound allows' } }
      if (cause instanceof RangeError) return { refused: { kind: 'limit', part, message: 'rendering nests too deep' } }
      return { refused: { kind: 'failed', part, message: reason(err) } }
    }
  }
}

/**
 * Compiled templates by id and version (a version never changes, so an entry is never stale), the least
 * recently used dropped first once there are `maxEntries` or their sources hold more than `maxChars`.
 */
export class TemplateCache {
  private readonly entries = new Map<string, CompiledTemplate>()
  private chars = 0

  constructor (private readonly maxEntries = 500, private readonly maxChars = 32 * 1024 * 1024) {}

  get size (): number { return this.entries.size }

  get (id: string, version: number): CompiledTemplate | undefined {
    const key = `${id}\n${version}`
    const hit = this.entries.get(key)
    if (hit !== undefined) {
      this.entries.delete(key)
      this.entries.set(key, hit)
    }
    return hit
  }

  set (id: string, version: number, compiled: CompiledTemplate): void {
    const key = `${id}\n${version}`
    const old = this.entries.get(key)
    if (old !== undefined) {
      this.entries.delete(key)
      this.chars -= old.size
    }
    this.entries.set(key, compiled)
    this.chars += compiled.size
    for (const [k, v] of this.entries) {
      if (this.entries.size <= this.maxEntries && this.chars <= this.maxChars) break
      this.entries.delete(k)
      this.chars -= v.size
    }
  }

  /** Forgets every version of a template (deleted). */
  forget (id: string): void {
    for (const [k, v] of this.entries) {
      if (k.startsWith(`${id}\n`)) {
        this.entries.delete(k)
        this.chars -= v.size
      }
    }
  }
}
