// Templates: saving them (every change a new version, the old ones kept), reading them and their versions,
// previewing, and rendering the sends that name one. Rendering runs on the thread that answers the API:
// it is bounded per send and per request (src/mail/render-template.ts), and each account has an allowance
// of render time that refills with time, so that no account, however hostile its templates, holds the
// thread for more than its share; past it, its template sends are answered 429 until it refills.
import type { ErrorDetail } from '../errors.js'
import { NotFound, OperationInProgress, RateLimited, TemplateExists, TemplateInvalid, TemplateNotFound, ValidationError } from '../errors.js'
import { iso, type Clock } from '../domain/clock.js'
import { newId } from '../domain/ids.js'
import { planLimit, planLimitReached } from '../domain/plan-limits.js'
import { hasControlCharacter } from '../domain/text.js'
import {
  DEFAULT_RENDER_LIMITS, TEMPLATE_REPLACES, nameProblem, refProblems,
  type RenderLimits, type TemplateContent, type TemplateRef, type TemplateUse, type TemplateVariable,
} from '../domain/templates.js'
import { TemplateCache, compileTemplate, renderBudget, renderTemplate, type CompiledTemplate, type RenderBudget, type Rendered } from '../mail/render-template.js'
import type { TemplateHead, TemplateVersionRecord } from '../store/templates.js'
import type { AccountRecord, Store } from '../store/types.js'

export interface TemplateView {
  id: string
  name: string
  version: number
  subject: string
  html: string | null
  text: string | null
  variables: TemplateVariable[]
  createdAt: string
  updatedAt: string
}

export interface TemplateSummaryView {
  id: string
  name: string
  version: number
  subject: string
  createdAt: string
  updatedAt: string
}

export interface TemplateInput {
  name: string
  subject: string
  html?: string
  text?: string
  variables?: TemplateVariable[]
}

/** A change: fields left out keep their value; html or text null removes it (the other must stay). */
export interface TemplatePatch {
  name?: string
  subject?: string
  html?: string | null
  text?: string | null
  variables?: TemplateVariable[]
}

/**
 * An account's render time: `perSecondMs` comes back every second, up to `burstMs` at once. A request
 * that starts rendering with none left is refused (429) before any work.
 */
export interface RenderAllowance {
  perSecondMs: number
  burstMs: number
}

export const DEFAULT_RENDER_ALLOWANCE: RenderAllowance = { perSecondMs: 200, burstMs: 1000 }

export interface TemplateServiceOptions {
  store: Store
  clock: Clock
  limits?: RenderLimits
  allowance?: RenderAllowance
  /** Compiled versions; default: 500 of them or 32 MiB of source at most. */
  cache?: TemplateCache
  /** Elapsed time for render accounting (ms); default performance.now. */
  elapsed?: () => number
}

/** A send as the template service sees it: the template it names, and the content it fills in. */
interface TemplatedItem {
  template?: TemplateRef
  subject?: string
  html?: string
  text?: string
}

/** How many changes of one template may race before a change gives up (409). */
const UPDATE_TRIES = 5
const MAX_ALLOWANCE_ENTRIES = 10_000
const VERSION_PAGE_MAX = 100

function view (head: TemplateHead, v: TemplateVersionRecord): TemplateView {
  return {
    id: head.id,
    name: head.name,
    version: v.version,
    subject: v.subject,
    html: v.html,
    text: v.text,
    variables: v.variables,
    createdAt: head.createdAt,
    updatedAt: v.createdAt,
  }
}

function declared (variables: TemplateVariable[] | undefined): TemplateVariable[] {
  return (variables ?? []).map((v) => (Object.hasOwn(v, 'default') ? { name: v.name, default: v.default } : { name: v.name }))
}

const prefixed = (prefix: string, errors: ErrorDetail[]): ErrorDetail[] =>
  errors.map((e) => ({ path: e.path === 'body' ? prefix : `${prefix}.${e.path}`, message: e.message }))

export function createTemplateService (opts: TemplateServiceOptions) {
  const { store, clock } = opts
  const limits = opts.limits ?? DEFAULT_RENDER_LIMITS
  const allowance = opts.allowance ?? DEFAULT_RENDER_ALLOWANCE
  const cache = opts.cache ?? new TemplateCache()
  const elapsed = opts.elapsed ?? (() => performance.now())
  // Each account's render time left and when it was counted; accounts back to a full allowance are dropped.
  const spent = new Map<string, { ms: number; at: number }>()

  function available (accountId: string, now: number): number {
    const entry = spent.get(accountId)
    if (entry === undefined) return allowance.burstMs
    return Math.min(allowance.burstMs, entry.ms + ((now - entry.at) / 1000) * allowance.perSecondMs)
  }

  function charge (accountId: string, ms: number): void {
    const now = clock.now()
    const left = available(accountId, now) - ms
    if (spent.size >= MAX_ALLOWANCE_ENTRIES && !spent.has(accountId)) {
      for (const [id] of spent) if (available(id, now) >= allowance.burstMs) spent.delete(id)
      // Still full: the oldest entry goes (its account gets a full allowance back early, the safe side for it).
      if (spent.size >= MAX_ALLOWANCE_ENTRIES) spent.delete(spent.keys().next().value!)
    }
    spent.delete(accountId)
    spent.set(accountId, { ms: left, at: now })
  }

  function assertAllowance (accountId: string): void {
    const left = available(accountId, clock.now())
    if (left > 0) return
    // Whole seconds until some time is back (more than none).
    const wait = Math.floor(-left / allowance.perSecondMs) + 1
    throw RateLimited(`This account used its template render time; retry in ${wait} s`, undefined, { 'retry-after': String(wait) })
  }

  async function head (accountId: string, id: string): Promise<TemplateHead> {
    const h = await store.findTemplate(accountId, { id })
    if (h === null) throw NotFound('No template with this id')
    return h
  }

  async function versionOf (h: TemplateHead, version: number): Promise<TemplateVersionRecord> {
    const v = await store.findTemplateVersion(h.accountId, h.id, version)
    if (v === null) throw NotFound(`This template has no version ${version}`)
    return v
  }

  /** Compiles (or refuses) content about to be saved; paths relative to `body`. */
  function compileForSave (content: TemplateContent): CompiledTemplate {
    const result = compileTemplate(content)
    if ('errors' in result) throw TemplateInvalid('The template was not saved: it is over a bound or does not parse', prefixed('body', result.errors))
    return result.compiled
  }

  /** The compiled version: from the cache, else read and compiled once (a version never changes). */
  async function compiled (h: TemplateHead, version: number, path: string): Promise<CompiledTemplate> {
    const hit = cache.get(h.id, version)
    if (hit !== undefined) return hit
    const v = await store.findTemplateVersion(h.accountId, h.id, version)
    // Deleted between the two reads.
    if (v === null) throw TemplateNotFound('The template named does not exist; nothing was sent', [{ path, message: 'no longer exists' }])
    const result = compileTemplate({ subject: v.subject, html: v.html, text: v.text, variables: v.variables })
    if ('errors' in result) {
      // Saved under other bounds than this release's: refused until it is saved again.
      throw TemplateInvalid(`Version ${version} of template ${h.name} is over this server's bounds; save it again`, prefixed(path, result.errors))
    }
    cache.set(h.id, version, result.compiled)
    return result.compiled
  }

  /**
   * One render's answer, or its refusal as details: `variablesPath` is where the variables were given
   * (`body.template.variables`, `body.variables`), `path` where the template is named.
   */
  function renderOne (c: CompiledTemplate, given: Record<string, unknown>, budget: RenderBudget, path: string, variablesPath: string): Rendered | { details: ErrorDetail[]; stop: boolean } {
    const r = renderTemplate(c, given, budget)
    if ('refused' in r) {
      const refusal = r.refused
      if (refusal.kind === 'variables') {
        return {
          details: refusal.names.map((name) => ({ path: `${variablesPath}.${name}`, message: 'is required: the template uses it and declares no default' })),
          stop: false,
        }
      }
      return { details: [{ path, message: `${refusal.part}: ${refusal.message}` }], stop: refusal.kind === 'limit' }
    }
    if ((r.html ?? '') === '' && (r.text ?? '') === '') {
      return { details: [{ path, message: 'renders an empty html and text with these variables: there is nothing to send' }], stop: false }
    }
    if (hasControlCharacter(r.subject, { allowTab: true })) {
      // Name the variables that carry one into the subject, when that can be seen.
      const culprits = Object.entries(given)
        .filter(([, value]) => typeof value === 'string' && hasControlCharacter(value, { allowTab: true }) && r.subject.includes(value))
        .map(([name]) => name)
      const message = 'holds CR, LF or another control character, and the subject prints it'
      return {
        details: culprits.length > 0
          ? culprits.map((name) => ({ path: `${variablesPath}.${name}`, message }))
          : [{ path, message: 'the rendered subject holds CR, LF or another control character' }],
        stop: false,
      }
    }
    return r
  }

  async function withAllowance<T> (accountId: string, work: (budget: RenderBudget) => Promise<T> | T): Promise<T> {
    assertAllowance(accountId)
    const start = elapsed()
    const budget = renderBudget(limits)
    try {
      return await work(budget)
    } finally {
      charge(accountId, elapsed() - start)
    }
  }

  return {
    async create (account: AccountRecord, input: TemplateInput): Promise<TemplateView> {
      const problem = nameProblem(input.name)
      if (problem !== null) throw ValidationError('The request is not valid', [{ path: 'body.name', message: problem }])
      const content: TemplateContent = { subject: input.subject, html: input.html ?? null, text: input.text ?? null, variables: declared(input.variables) }
      const c = compileForSave(content)
      const now = iso(clock.now())
      const h: TemplateHead = { id: newId('tpl'), accountId: account.id, name: input.name, version: 1, createdAt: now, updatedAt: now }
      const v: TemplateVersionRecord = { templateId: h.id, accountId: account.id, version: 1, ...content, createdAt: now }
      const outcome = await store.insertTemplate(h, v, planLimit(account.plan, 'templates'))
      if (outcome === 'name_taken') throw TemplateExists(`This account already has a template named ${input.name}`)
      if (outcome === 'limit_reached') throw planLimitReached(account.plan, 'templates')
      cache.set(h.id, 1, c)
      return view(h, v)
    },

    async list (accountId: string): Promise<TemplateSummaryView[]> {
      return (await store.listTemplates(accountId)).map((t) => ({
        id: t.id, name: t.name, version: t.version, subject: t.subject, createdAt: t.createdAt, updatedAt: t.updatedAt,
      }))
    },

    async get (accountId: string, id: string, version?: number): Promise<TemplateView> {
      const h = await head(accountId, id)
      return view(h, await versionOf(h, version ?? h.version))
    },

    /** The versions, newest first; `before` a version: those older than it. */
    async versions (accountId: string, id: string, page: { limit: number; before?: number }) {
      const h = await head(accountId, id)
      const limit = Math.min(Math.max(1, Math.trunc(page.limit)), VERSION_PAGE_MAX)
      const items = await store.listTemplateVersions(accountId, h.id, { limit: limit + 1, ...(page.before !== undefined ? { before: page.before } : {}) })
      const more = items.length > limit
      const shown = items.slice(0, limit)
      return { items: shown, nextCursor: more ? String(shown[shown.length - 1]!.version) : null }
    },

    /** Makes a new version from the current one and the patch (every change is a version). */
    async update (accountId: string, id: string, patch: TemplatePatch): Promise<TemplateView> {
      if (patch.name !== undefined) {
        const problem = nameProblem(patch.name)
        if (problem !== null) throw ValidationError('The request is not valid', [{ path: 'body.name', message: problem }])
      }
      for (let attempt = 0; attempt < UPDATE_TRIES; attempt++) {
        const h = await head(accountId, id)
        const current = await versionOf(h, h.version)
        const content: TemplateContent = {
          subject: patch.subject ?? current.subject,
          html: patch.html === undefined ? current.html : patch.html,
          text: patch.text === undefined ? current.text : patch.text,
          variables: patch.variables === undefined ? current.variables : declared(patch.variables),
        }
        const c = compileForSave(content)
        const now = iso(clock.now())
        const next: TemplateVersionRecord = { templateId: h.id, accountId, version: h.version + 1, ...content, createdAt: now }
        const outcome = await store.updateTemplate(accountId, h.id, h.version, next, patch.name)
        if (outcome === 'not_found') throw NotFound('No template with this id')
        if (outcome === 'name_taken') throw TemplateExists(`This account already has a template named ${patch.name}`)
        if (outcome === 'updated') {
          cache.set(h.id, next.version, c)
          return view({ ...h, name: patch.name ?? h.name, version: next.version, updatedAt: now }, next)
        }
      }
      throw OperationInProgress('The template is being changed by other requests at this moment; try again')
    },

    async remove (accountId: string, id: string): Promise<void> {
      if (!await store.deleteTemplate(accountId, id)) throw NotFound('No template with this id')
      cache.forget(id)
    },

    /** Renders a version (the current one by default) with these variables, sending nothing. */
    async preview (accountId: string, id: string, input: { variables?: Record<string, unknown>; version?: number }): Promise<Rendered & { version: number }> {
      const h = await head(accountId, id)
      const version = input.version ?? h.version
      if (version > h.version) throw NotFound(`This template has no version ${version}`)
      const c = await compiled(h, version, 'body')
      return await withAllowance(accountId, (budget) => {
        const r = renderOne(c, input.variables ?? {}, budget, 'body', 'body.variables')
        if ('details' in r) throw TemplateInvalid('The template cannot be rendered with these variables', r.details)
        return { ...r, version }
      })
    },

    /**
     * Fills in subject, html and text of every item that names a template (the others are left as they
     * are), and says which template and version each used. Refusals name the item and field: `prefix(i)`
     * is where item i is (`body`, `body[3]`). 400 for a malformed reference, 422 template_not_found for a
     * template or version that does not exist, 422 template_invalid for fields given beside a template,
     * variables missing, or a render refused; 429 when the account has no render time left.
     */
    async renderSends<T extends TemplatedItem> (accountId: string, items: T[], prefix: (i: number) => string): Promise<{ items: T[]; uses: Array<TemplateUse | null> }> {
      const uses: Array<TemplateUse | null> = items.map(() => null)
      if (!items.some((item) => item.template !== undefined)) return { items, uses }

      const malformed: ErrorDetail[] = []
      const conflicts: ErrorDetail[] = []
      items.forEach((item, i) => {
        if (item.template === undefined) return
        malformed.push(...refProblems(item.template).map((e) => ({ path: `${prefix(i)}.${e.path}`, message: e.message })))
        for (const field of TEMPLATE_REPLACES) {
          if (item[field] !== undefined) conflicts.push({ path: `${prefix(i)}.${field}`, message: 'must be left out: the template gives it' })
        }
      })
      if (malformed.length > 0) throw ValidationError('The request is not valid; nothing was sent', malformed)
      if (conflicts.length > 0) throw TemplateInvalid('A send names a template and gives subject, html or text too; nothing was sent', conflicts)

      // Each template named is looked up once per request, whatever the number of sends naming it.
      const heads = new Map<string, Promise<TemplateHead | null>>()
      const missing: ErrorDetail[] = []
      const resolved: Array<{ head: TemplateHead; version: number } | null> = []
      for (const [i, item] of items.entries()) {
        const ref = item.template
        if (ref === undefined) { resolved.push(null); continue }
        const key = ref.id !== undefined ? { id: ref.id } : { name: ref.name! }
        const cacheKey = 'id' in key ? `id:${key.id}` : `name:${key.name}`
        let found = heads.get(cacheKey)
        if (found === undefined) {
          found = store.findTemplate(accountId, key)
          heads.set(cacheKey, found)
        }
        const h = await found
        const at = `${prefix(i)}.template`
        if (h === null) {
          missing.push({ path: 'id' in key ? `${at}.id` : `${at}.name`, message: 'names no template of this account' })
          resolved.push(null)
        } else if (ref.version !== undefined && ref.version > h.version) {
          missing.push({ path: `${at}.version`, message: `names no version of ${h.name} (its current version is ${h.version})` })
          resolved.push(null)
        } else {
          resolved.push({ head: h, version: ref.version ?? h.version })
        }
      }
      if (missing.length > 0) throw TemplateNotFound('A template named does not exist (or has no such version); nothing was sent', missing)

      const compiledOf = new Map<string, CompiledTemplate>()
      for (const [i, r] of resolved.entries()) {
        if (r === null) continue
        const key = `${r.head.id}\n${r.version}`
        if (!compiledOf.has(key)) compiledOf.set(key, await compiled(r.head, r.version, `${prefix(i)}.template`))
      }

      return await withAllowance(accountId, (budget) => {
        const details: ErrorDetail[] = []
        let stopped = false
        const out = items.map((item, i) => {
          const r = resolved[i]
          if (r === null || r === undefined || stopped) return item
          const c = compiledOf.get(`${r.head.id}\n${r.version}`)!
          const rendered = renderOne(c, item.template!.variables ?? {}, budget, `${prefix(i)}.template`, `${prefix(i)}.template.variables`)
          if ('details' in rendered) {
            details.push(...rendered.details)
            // A bound reached: the request is refused; rendering the rest would only spend more.
            if (rendered.stop) stopped = true
            return item
          }
          uses[i] = { id: r.head.id, version: r.version }
          const { template: _template, ...rest } = item
          // A part that renders empty is left out (the other is not empty: renderOne refused that).
          return { ...rest, subject: rendered.subject, ...(rendered.html ? { html: rendered.html } : {}), ...(rendered.text ? { text: rendered.text } : {}) } as T
        })
        if (details.length > 0) throw TemplateInvalid('A template cannot be rendered as asked; nothing was sent', details)
        return { items: out, uses }
      })
    },
  }
}

export type TemplateService = ReturnType<typeof createTemplateService>
