// A webhook's filter: which emails' events it takes, beside the event types it subscribes to.
//
// - `domains`: the email's sending domain is one of them: the domain of its From address, compared exactly
//   and without regard to case (a subdomain is another domain: list `news.example.com` beside
//   `example.com` to take both). Received mail (`email.received`) matches when one of its recipients is at
//   one of them: the domain it was received at.
// - `tags`: the email carries at least one of them: `{ name }` matches any value of that tag, `{ name,
//   value }` that value only (tags are compared as written, case included).
// - Both given: both must match. An empty or absent list sets no condition; a filter with neither is no
//   filter. A condition on something the event has not (received mail has no tags; an event whose email
//   is gone has no domain either) does not match.
// - Test events (POST /api/webhooks/:id/test) go to their webhook whatever its filter.
//
// Routing (src/store/*/deliveries.ts) compiles each webhook's filter once per read into sets and checks
// every event against them: no per-event parsing of the filter, and a check costs a lookup per domain and
// per tag of the email (both bounded). Pure; tested in test/unit/webhook-filter.test.ts.
import type { ErrorDetail } from '../errors.js'
import { bareOf } from './addresses.js'

export const FILTER_LIMITS = {
  /** Domains in one filter. */
  maxDomains: 20,
  /** Tags in one filter. */
  maxTags: 20,
  /** A tag's name or value, in characters (as on a send). */
  maxTagLength: 256,
} as const

/** The characters of a tag's name and value, as a send takes them. */
export const TAG_PATTERN = '^[A-Za-z0-9_-]+$'
const TAG = /^[A-Za-z0-9_-]+$/

export interface TagCondition {
  name: string
  /** Absent: any value of the tag. */
  value?: string
}

/** A filter as stored and shown: at least one list non-empty (otherwise there is no filter: null). */
export interface WebhookFilter {
  domains: string[]
  tags: TagCondition[]
}

/** The filter as the API takes it (after the schema check). */
export interface WebhookFilterInput {
  domains?: string[] | undefined
  tags?: TagCondition[] | undefined
}

/** A domain name as given → lower-case ASCII, or what is wrong with it (src/app/domains.ts normaliseDomainName). */
export type DomainNameRule = (input: string) => { name: string } | { error: string }

/**
 * The filter to store (null: none), or every problem with it (paths under `body.filter`). Sizes are
 * checked before any per-item work; duplicates are dropped, first one kept.
 */
export function normaliseWebhookFilter (input: WebhookFilterInput | null | undefined, domainName: DomainNameRule):
  { filter: WebhookFilter | null } | { problems: ErrorDetail[] } {
  if (input === null || input === undefined) return { filter: null }
  const problems: ErrorDetail[] = []
  const domainsIn = input.domains ?? []
  const tagsIn = input.tags ?? []
  if (!Array.isArray(domainsIn) || domainsIn.length > FILTER_LIMITS.maxDomains) {
    problems.push({ path: 'body.filter.domains', message: `must be an array of at most ${FILTER_LIMITS.maxDomains} domain names` })
  }
  if (!Array.isArray(tagsIn) || tagsIn.length > FILTER_LIMITS.maxTags) {
    problems.push({ path: 'body.filter.tags', message: `must be an array of at most ${FILTER_LIMITS.maxTags} tags ({ name, value? })` })
  }
  if (problems.length > 0) return { problems }

  const domains: string[] = []
  domainsIn.forEach((raw, i) => {
    const n = typeof raw === 'string' ? domainName(raw) : { error: 'must be a domain name' }
    if ('error' in n) problems.push({ path: `body.filter.domains[${i}]`, message: n.error })
    else if (!domains.includes(n.name)) domains.push(n.name)
  })
  const tags: TagCondition[] = []
  const seen = new Set<string>()
  tagsIn.forEach((raw, i) => {
    const at = `body.filter.tags[${i}]`
    const t = raw as Partial<TagCondition> | null
    if (t === null || typeof t !== 'object' || !isTagPart(t.name) || (t.value !== undefined && !isTagPart(t.value))) {
      problems.push({ path: at, message: `must be { name, value? }, each 1 to ${FILTER_LIMITS.maxTagLength} letters, digits, _ or -` })
      return
    }
    const key = t.value === undefined ? t.name : tagKey(t.name, t.value)
    if (seen.has(key)) return
    seen.add(key)
    tags.push(t.value === undefined ? { name: t.name } : { name: t.name, value: t.value })
  })
  if (problems.length > 0) return { problems }
  return { filter: domains.length === 0 && tags.length === 0 ? null : { domains, tags } }
}

function isTagPart (v: unknown): v is string {
  return typeof v === 'string' && v.length >= 1 && v.length <= FILTER_LIMITS.maxTagLength && TAG.test(v)
}

/** A tag's name and value as one set key: neither can hold a newline. */
function tagKey (name: string, value: string): string {
  return `${name}\n${value}`
}

/** What routing knows of an event's email: its sending domain(s) and its tags. */
export interface EmailFacts {
  /** Lower case. A sent email: the From address's domain; received mail: its recipients' domains. */
  domains: readonly string[]
  tags: ReadonlyArray<{ name: string; value: string }>
  /** Each tag as a `name\nvalue` set key, made once per email rather than once per webhook checked. */
  tagKeys: readonly string[]
}

function facts (domains: readonly string[], tags: ReadonlyArray<{ name: string; value: string }>): EmailFacts {
  return { domains, tags, tagKeys: tags.map((t) => tagKey(t.name, t.value)) }
}

/** The domain of an address (bare or header form), lower case; '' when it has none. Linear. */
export function domainOf (address: string): string {
  const bare = bareOf(address)
  const at = bare.lastIndexOf('@')
  return at < 0 ? '' : bare.slice(at + 1).toLowerCase()
}

/** A sent email's facts: its From (as stored: `addr` or `Name <addr>`) and its tags. */
export function sentEmailFacts (from: string, tags: ReadonlyArray<{ name: string; value: string }>): EmailFacts {
  return facts([domainOf(from)], tags)
}

/** An email's stored tags read back (a JSON column or a document's array): `{ name, value }` strings only. */
export function emailTagsOf (stored: unknown): Array<{ name: string; value: string }> {
  let value = stored
  if (typeof stored === 'string') {
    try {
      value = JSON.parse(stored)
    } catch {
      return []
    }
  }
  if (!Array.isArray(value)) return []
  const tags: Array<{ name: string; value: string }> = []
  for (const t of value as unknown[]) {
    const tag = t as { name?: unknown; value?: unknown } | null
    if (tag !== null && typeof tag === 'object' && typeof tag.name === 'string' && typeof tag.value === 'string') tags.push({ name: tag.name, value: tag.value })
  }
  return tags
}

/**
 * What a sent email's events carry for routing (EventRecord.route): its From domain and its tags, made once
 * per email when its events are made, so that routing reads them with the event instead of the email's row
 * (whose tags sit after its bodies: a read of pages the size of the email).
 */
export function eventRoute (from: string, tags: ReadonlyArray<{ name: string; value: string }>): string {
  return JSON.stringify({ domain: domainOf(from), tags: tags.map((t) => [t.name, t.value]) })
}

/** A stored route read back (eventRoute's JSON); null when it is not one (routing then looks the email up). */
export function routeFacts (route: string): EmailFacts | null {
  let value: unknown
  try {
    value = JSON.parse(route)
  } catch {
    return null
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null
  const { domain, tags } = value as { domain?: unknown; tags?: unknown }
  if (typeof domain !== 'string' || !Array.isArray(tags)) return null
  const out: Array<{ name: string; value: string }> = []
  for (const t of tags) {
    if (!Array.isArray(t) || typeof t[0] !== 'string' || typeof t[1] !== 'string') return null
    out.push({ name: t[0], value: t[1] })
  }
  return facts([domain], out)
}

/** Received mail's facts: the domains of its recipients (bare addresses), no tags. */
export function receivedFacts (recipients: readonly string[]): EmailFacts {
  return facts([...new Set(recipients.map(domainOf))], [])
}

/** A filter made into sets, once per routing read. */
export interface CompiledFilter {
  /** Null: no condition on the domain. Empty: matches nothing (a stored filter that could not be read). */
  domains: ReadonlySet<string> | null
  /** Null: no condition on tags. Otherwise the names taken with any value, and `name\nvalue` pairs. */
  tags: { names: ReadonlySet<string>; pairs: ReadonlySet<string> } | null
}

export function compileFilter (filter: WebhookFilter | null): CompiledFilter | null {
  if (filter === null || (filter.domains.length === 0 && filter.tags.length === 0)) return null
  const names = new Set<string>()
  const pairs = new Set<string>()
  for (const t of filter.tags) {
    if (t.value === undefined) names.add(t.name)
    else pairs.add(tagKey(t.name, t.value))
  }
  return {
    domains: filter.domains.length > 0 ? new Set(filter.domains.map((d) => d.toLowerCase())) : null,
    tags: filter.tags.length > 0 ? { names, pairs } : null,
  }
}

/** Matches nothing: what a stored filter that cannot be read becomes (a filter fails closed). */
const NOTHING: CompiledFilter = { domains: new Set(), tags: null }

/**
 * A stored filter (the JSON that serialiseFilter made, or a document's field) made into sets; null for none.
 * One that cannot be read matches nothing rather than everything: a filter may be what keeps one
 * domain's mail away from another's receiver.
 */
export function compileStoredFilter (stored: unknown): CompiledFilter | null {
  if (stored === null || stored === undefined) return null
  let value: unknown = stored
  if (typeof stored === 'string') {
    try {
      value = JSON.parse(stored)
    } catch {
      return NOTHING
    }
  }
  const f = storedFilterOf(value)
  return f === undefined ? NOTHING : compileFilter(f)
}

/** A stored filter read back; null for none, undefined when it is not a filter. */
export function storedFilterOf (value: unknown): WebhookFilter | null | undefined {
  if (value === null || value === undefined) return null
  if (typeof value !== 'object' || Array.isArray(value)) return undefined
  const v = value as { domains?: unknown; tags?: unknown }
  if (!Array.isArray(v.domains ?? []) || !Array.isArray(v.tags ?? [])) return undefined
  const domains = (v.domains ?? []) as unknown[]
  const tags = (v.tags ?? []) as unknown[]
  if (!domains.every((d) => typeof d === 'string')) return undefined
  if (!tags.every((t) => t !== null && typeof t === 'object' && typeof (t as TagCondition).name === 'string' &&
    ((t as TagCondition).value === undefined || typeof (t as TagCondition).value === 'string'))) return undefined
  return {
    domains,
    tags: (tags as TagCondition[]).map((t) => t.value === undefined ? { name: t.name } : { name: t.name, value: t.value }),
  }
}

/** A stored filter (JSON text or a document's field) as the API shows it; null for none or one that cannot be read. */
export function readStoredFilter (stored: unknown): WebhookFilter | null {
  if (typeof stored !== 'string') return storedFilterOf(stored) ?? null
  try {
    return storedFilterOf(JSON.parse(stored)) ?? null
  } catch {
    return null
  }
}

/**
 * A webhook record's `filter` and `replay` fields, present only when set, so that a webhook stored without
 * them reads back as it was written (both are optional in the record).
 */
export function withFilterAndReplay<R> (filter: WebhookFilter | null, replay: R | null): { filter?: WebhookFilter; replay?: R } {
  return { ...(filter !== null ? { filter } : {}), ...(replay !== null ? { replay } : {}) }
}

/** The stored form (SQLite's column): JSON, or null for no filter. */
export function serialiseFilter (filter: WebhookFilter | null): string | null {
  return filter === null ? null : JSON.stringify({ domains: filter.domains, tags: filter.tags })
}

/**
 * Whether a webhook with this filter takes an event whose email has `facts` (null: the event has no
 * email, or it is gone). No filter takes everything.
 */
export function filterAccepts (filter: CompiledFilter | null, email: EmailFacts | null): boolean {
  if (filter === null) return true
  if (email === null) return false
  // Plain loops: this runs for every event and filtered webhook of a routing read.
  if (filter.domains !== null) {
    let found = false
    for (let i = 0; i < email.domains.length && !found; i++) found = filter.domains.has(email.domains[i]!)
    if (!found) return false
  }
  if (filter.tags !== null) {
    const { names, pairs } = filter.tags
    let found = false
    for (let i = 0; i < email.tags.length && !found; i++) {
      found = names.has(email.tags[i]!.name) || (pairs.size > 0 && pairs.has(email.tagKeys[i]!))
    }
    if (!found) return false
  }
  return true
}
