// What a send request must hold: the rules applied after the schema check, for one send or for the
// fields of a send the schema refused in part (so that one answer names every field that is wrong).
import type { ErrorDetail } from '../errors.js'
import { formatAddress, parseAddress } from './addresses.js'
import { hasControlCharacter } from './text.js'
import type { TemplateRef } from './templates.js'
import type { AttachmentInput } from './attachments.js'
import { metadataProblems, normaliseMetadata, type EmailMetadata } from './metadata.js'

/** A tag of a send, as given and as stored. */
export interface EmailTag {
  name: string
  value: string
}

/** to, cc and bcc each take at most this many addresses. */
export const MAX_RECIPIENTS = 50
export const MAX_REPLY_TO = 10
export const MAX_HEADERS = 50

/** A send request after schema validation (src/http/routes/emails/schema.ts). */
export interface SendInput {
  from?: string
  to: string | string[]
  cc?: string | string[]
  bcc?: string | string[]
  replyTo?: string | string[]
  /** Required unless `template` is given. */
  subject?: string
  html?: string
  text?: string
  /** A stored template in place of subject, html and text: src/app/templates.ts renders it before these rules. */
  template?: TemplateRef
  /** Checked and decoded by src/domain/attachments.ts (src/app/attachments.ts), apart from the rules here. */
  attachments?: AttachmentInput[]
  headers?: Record<string, string>
  tags?: EmailTag[]
  /** When to send it (src/domain/schedule.ts checks it against the clock, in src/app/emails.ts). */
  scheduledAt?: string
  /** Per send; an absent choice takes the sending domain's default, then the account's (on). */
  tracking?: { opens?: boolean; clicks?: boolean }
  /** false: no List-Unsubscribe headers (mail a recipient cannot opt out of). Default true. */
  unsubscribe?: boolean
  metadata?: Record<string, string>
}

export type RecipientField = 'to' | 'cc' | 'bcc'

export interface Recipient {
  field: RecipientField
  /** Where it was in the request, for error paths: `to[2]`, or `to` when the field was one string. */
  path: string
  formatted: string
  address: string
}

export interface NormalisedSend {
  from: string
  recipients: Recipient[]
  replyTo: string[]
  subject: string
  html: string | null
  text: string | null
  headers: Record<string, string>
  tags: EmailTag[]
  /** As given; checked against the clock by the send (src/domain/schedule.ts). */
  scheduledAt: string | undefined
  /** The choices the send made; what it left out is decided by the domain's defaults. */
  tracking: { opens?: boolean; clicks?: boolean }
  unsubscribe: boolean
  metadata: EmailMetadata
}

// Headers the message owns: set from the fields, by svc itself (Message-ID, List-Unsubscribe), or by the
// MIME structure. A custom header with one of these names would duplicate or fight the real one.
const RESERVED_HEADERS = new Map<string, string>([
  ['from', 'use the from field'], ['to', 'use the to field'], ['cc', 'use the cc field'], ['bcc', 'use the bcc field'],
  ['reply-to', 'use the replyTo field'], ['subject', 'use the subject field'],
  ['sender', 'is set by svc'], ['message-id', 'is set by svc'], ['date', 'is set by svc'], ['return-path', 'is set by svc'],
  ['mime-version', 'is set by svc'], ['content-type', 'is set by svc'], ['content-transfer-encoding', 'is set by svc'],
  ['list-unsubscribe', 'is set by svc (one-click unsubscribe)'], ['list-unsubscribe-post', 'is set by svc (one-click unsubscribe)'],
])
// RFC 5322 field-name: printable US-ASCII except the colon.
const FIELD_NAME = /^[\x21-\x39\x3b-\x7e]{1,100}$/
// Header values (the subject among them): folding is the composer's job, so no CR/LF or other control
// character (tab aside): see src/domain/text.ts.
const CONTROL_IN_HEADER = 'must not contain CR, LF or other control characters (U+0085, U+2028, …)'
const HTML_OR_TEXT = 'html or text is required (or both)'

function listOf (value: string | string[] | undefined): Array<{ value: string; path: (field: string) => string }> {
  if (value === undefined) return []
  if (typeof value === 'string') return [{ value, path: (field) => field }]
  return value.map((v, i) => ({ value: v, path: (field) => `${field}[${i}]` }))
}

/** Checks what the schema cannot; paths are relative to the send (`to[1]`, `headers.X-Campaign`). */
export function normaliseSend (input: SendInput, defaultFrom: string): NormalisedSend | { errors: ErrorDetail[] } {
  const errors: ErrorDetail[] = []

  let from = defaultFrom
  if (input.from !== undefined) {
    const parsed = parseAddress(input.from)
    if ('error' in parsed) errors.push({ path: 'from', message: parsed.error })
    else from = formatAddress(parsed)
  }

  const recipients: Recipient[] = []
  const seen = new Set<string>()
  for (const field of ['to', 'cc', 'bcc'] as const) {
    const entries = listOf(input[field])
    // Sizes before per-item work: a 51st address means none of them is parsed.
    if (entries.length > MAX_RECIPIENTS) {
      errors.push({ path: field, message: `takes at most ${MAX_RECIPIENTS} addresses` })
      continue
    }
    for (const entry of entries) {
      const parsed = parseAddress(entry.value)
      if ('error' in parsed) {
        errors.push({ path: entry.path(field), message: parsed.error })
        continue
      }
      // One mailbox gets one copy and one set of events, wherever else it is named.
      if (seen.has(parsed.address)) continue
      seen.add(parsed.address)
      recipients.push({ field, path: entry.path(field), formatted: formatAddress(parsed), address: parsed.address })
    }
  }
  if (listOf(input.to).length === 0) errors.push({ path: 'to', message: 'needs at least one address' })

  const replyTo: string[] = []
  const replyEntries = listOf(input.replyTo)
  if (replyEntries.length > MAX_REPLY_TO) errors.push({ path: 'replyTo', message: `takes at most ${MAX_REPLY_TO} addresses` })
  for (const entry of replyEntries.length > MAX_REPLY_TO ? [] : replyEntries) {
    const parsed = parseAddress(entry.value)
    if ('error' in parsed) errors.push({ path: entry.path('replyTo'), message: parsed.error })
    else replyTo.push(formatAddress(parsed))
  }

  if (typeof input.subject === 'string' && hasControlCharacter(input.subject, { allowTab: true })) errors.push({ path: 'subject', message: CONTROL_IN_HEADER })
  if (input.subject === undefined && input.template === undefined) errors.push({ path: 'subject', message: 'is required (or a template)' })
  if (input.html === undefined && input.text === undefined && input.template === undefined) {
    errors.push({ path: 'html', message: HTML_OR_TEXT })
  }

  const headers: Record<string, string> = {}
  const names = new Set<string>()
  const headerEntries = Object.entries(input.headers ?? {})
  if (headerEntries.length > MAX_HEADERS) errors.push({ path: 'headers', message: `takes at most ${MAX_HEADERS} headers` })
  for (const [name, value] of headerEntries.length > MAX_HEADERS ? [] : headerEntries) {
    const lower = name.toLowerCase()
    // A name is echoed in the answer's path; one that is not a header name anyway is cut short there.
    const at = `headers.${name.length > 100 ? `${name.slice(0, 64)}…` : name}`
    if (!FIELD_NAME.test(name)) errors.push({ path: at, message: 'is not a header name (printable ASCII without colon or space)' })
    else if (RESERVED_HEADERS.has(lower)) errors.push({ path: at, message: RESERVED_HEADERS.get(lower)! })
    else if (names.has(lower)) errors.push({ path: at, message: 'is given twice (header names ignore case)' })
    else if (typeof value !== 'string' || hasControlCharacter(value, { allowTab: true })) errors.push({ path: at, message: CONTROL_IN_HEADER })
    else headers[name] = value
    names.add(lower)
  }

  for (const p of metadataProblems(input.metadata)) errors.push(p)

  if (errors.length > 0) return { errors }
  return {
    from,
    recipients,
    replyTo,
    subject: input.subject ?? '',
    html: input.html ?? null,
    text: input.text ?? null,
    headers,
    tags: (input.tags ?? []).map((t) => ({ name: t.name, value: t.value })),
    scheduledAt: input.scheduledAt,
    tracking: {
      ...(input.tracking?.opens !== undefined ? { opens: input.tracking.opens } : {}),
      ...(input.tracking?.clicks !== undefined ? { clicks: input.tracking.clicks } : {}),
    },
    unsubscribe: input.unsubscribe !== false,
    metadata: normaliseMetadata(input.metadata),
  }
}

const SEND_FIELDS = ['from', 'to', 'cc', 'bcc', 'replyTo', 'subject', 'html', 'text', 'headers', 'tags', 'metadata', 'template'] as const

/**
 * The rules above for a send whose schema check refused the top-level fields in `invalid`: those are
 * left out (the client hears their schema problem), the others are checked, so that one answer names
 * every field that is wrong. Paths are relative to the send, as in normaliseSend.
 */
export function sendProblems (input: unknown, invalid: ReadonlySet<string>): ErrorDetail[] {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return []
  const partial: Record<string, unknown> = {}
  for (const field of SEND_FIELDS) {
    if (!invalid.has(field) && Object.hasOwn(input, field)) partial[field] = (input as Record<string, unknown>)[field]
  }
  const result = normaliseSend(partial as unknown as SendInput, '')
  if (!('errors' in result)) return []
  const bodyRefused = invalid.has('html') || invalid.has('text')
  return result.errors.filter((e) => {
    const field = /^[A-Za-z]+/.exec(e.path)?.[0] ?? ''
    return !invalid.has(field) && !(bodyRefused && e.message === HTML_OR_TEXT)
  })
}
