// The sender's own data on an email: `metadata` (string keys and values) stored with it and carried, with
// its tags, in every webhook payload of that email. Bounded, because every event of the email repeats it
// (a handful of events per recipient, once per webhook): at most 20 keys, each 1 to 40 characters of
// letters, digits, `_` and `-`, each value at most 500 characters, and at most 2,048 bytes (UTF-8) of keys
// and values together. Also the tag filter of the email list (`tag=name` or `tag=name:value`).
// Pure and linear: sizes are checked before any per-key work (test/unit/schedule-metadata.test.ts).
import type { ErrorDetail } from '../errors.js'

export type EmailMetadata = Record<string, string>

export const METADATA_LIMITS = {
  maxKeys: 20,
  maxKeyLength: 40,
  maxValueLength: 500,
  /** Keys and values together, in UTF-8 bytes. */
  maxTotalBytes: 2048,
} as const

export const METADATA_KEY_PATTERN = `^[A-Za-z0-9_-]{1,${METADATA_LIMITS.maxKeyLength}}$`
const KEY = new RegExp(METADATA_KEY_PATTERN)
/** A key that an object in JavaScript treats specially; refused rather than stored. */
const RESERVED_KEYS = new Set(['__proto__', 'constructor', 'prototype'])

/** The email's tags and metadata together: what every webhook payload of the email carries. */
export interface EmailLabels {
  tags: Array<{ name: string; value: string }>
  metadata: EmailMetadata
}

/**
 * What is wrong with a send's `metadata` (paths relative to the send: `metadata`, `metadata.<key>`); an
 * empty list when it is fine or absent. Safe on any input: the count is checked before a key is read, and
 * each string's length before its bytes are counted.
 */
export function metadataProblems (input: unknown): ErrorDetail[] {
  if (input === undefined) return []
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return [{ path: 'metadata', message: 'must be an object of string values' }]
  const keys = Object.keys(input)
  if (keys.length > METADATA_LIMITS.maxKeys) return [{ path: 'metadata', message: `takes at most ${METADATA_LIMITS.maxKeys} keys` }]
  const problems: ErrorDetail[] = []
  let bytes = 0
  for (const key of keys) {
    // A key is echoed in the path; one that is not a key anyway is cut short there.
    const at = `metadata.${key.length > METADATA_LIMITS.maxKeyLength ? `${key.slice(0, METADATA_LIMITS.maxKeyLength)}…` : key}`
    if (!KEY.test(key)) {
      problems.push({ path: at, message: `is not a metadata key (1 to ${METADATA_LIMITS.maxKeyLength} letters, digits, _ or -)` })
      continue
    }
    if (RESERVED_KEYS.has(key)) {
      problems.push({ path: at, message: 'is a reserved name; choose another key' })
      continue
    }
    const value = (input as Record<string, unknown>)[key]
    if (typeof value !== 'string') {
      problems.push({ path: at, message: 'must be a string' })
      continue
    }
    if (value.length > METADATA_LIMITS.maxValueLength) {
      problems.push({ path: at, message: `is longer than ${METADATA_LIMITS.maxValueLength} characters` })
      continue
    }
    bytes += key.length + Buffer.byteLength(value, 'utf8')
  }
  if (problems.length === 0 && bytes > METADATA_LIMITS.maxTotalBytes) {
    problems.push({ path: 'metadata', message: `holds ${bytes} bytes of keys and values; at most ${METADATA_LIMITS.maxTotalBytes} are kept with an email` })
  }
  return problems
}

/** A checked metadata object as stored: own string properties only, in the order given. */
export function normaliseMetadata (input: Record<string, string> | undefined): EmailMetadata {
  if (input === undefined) return {}
  return Object.fromEntries(Object.entries(input).map(([k, v]) => [k, String(v)]))
}

/** A stored metadata value read back (a JSON column, a document field): anything else is no metadata. */
export function metadataOf (value: unknown): EmailMetadata {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return {}
  const out: EmailMetadata = {}
  for (const [k, v] of Object.entries(value)) if (typeof v === 'string' && !RESERVED_KEYS.has(k)) out[k] = v
  return out
}

/** The email list's `tag` filter: a tag's name, or `name:value`. */
export interface TagFilter {
  name: string
  value?: string
}

const TAG_PART = /^[A-Za-z0-9_-]{1,256}$/

/** `name` or `name:value` (tags hold letters, digits, _ and -, so the first colon splits); null when neither. */
export function parseTagFilter (text: string): TagFilter | null {
  if (typeof text !== 'string' || text.length > 513) return null
  const colon = text.indexOf(':')
  const name = colon < 0 ? text : text.slice(0, colon)
  if (!TAG_PART.test(name)) return null
  if (colon < 0) return { name }
  const value = text.slice(colon + 1)
  return TAG_PART.test(value) ? { name, value } : null
}
