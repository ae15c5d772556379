// The account's emails as a list: filters, the window, and the opaque cursor of its pages. Read-only;
// the store does the filtering (src/store/emails.ts listEmails).
import type { EventType } from '../domain/events.js'
import { parseTagFilter } from '../domain/metadata.js'
import { ValidationError, type ErrorDetail } from '../errors.js'
import type { EmailCursor, EmailStatus, EmailSummary } from '../store/emails.js'
import type { Store } from '../store/types.js'

export const EMAIL_STATUSES = ['scheduled', 'queued', 'deferred', 'delivered', 'bounced', 'partially_delivered', 'failed', 'canceled'] as const satisfies readonly EmailStatus[]

export function encodeEmailCursor (c: EmailCursor): string {
  return Buffer.from(JSON.stringify([c.createdAt, c.id])).toString('base64url')
}

export function decodeEmailCursor (cursor: string): EmailCursor | null {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
    if (Array.isArray(value) && value.length === 2 && typeof value[0] === 'string' && typeof value[1] === 'string' &&
        !Number.isNaN(Date.parse(value[0]))) {
      return { createdAt: new Date(value[0]).toISOString(), id: value[1] }
    }
  } catch {}
  return null
}

export interface EmailListRequest {
  status?: EmailStatus
  /** Emails with an event of this type. */
  event?: EventType
  to?: string
  /** `name` or `name:value` (src/domain/metadata.ts parseTagFilter). */
  tag?: string
  /** ISO timestamps (already checked by the route schema); since inclusive, until exclusive. */
  since?: string
  until?: string
  limit: number
  cursor?: string
}

export interface EmailPage {
  items: Array<EmailSummary & { scheduledAt: string | null }>
  nextCursor: string | null
}

export function createEmailListService ({ store }: { store: Store }) {
  return {
    /** Newest first, in pages; nextCursor is null on the last page. */
    async list (accountId: string, req: EmailListRequest): Promise<EmailPage> {
      const errors: ErrorDetail[] = []
      // Stored times are toISOString() strings, so a bound compares as one only in that same form.
      const since = req.since === undefined ? undefined : new Date(req.since).toISOString()
      const until = req.until === undefined ? undefined : new Date(req.until).toISOString()
      if (since !== undefined && until !== undefined && !(since < until)) errors.push({ path: 'query.since', message: 'must be before until' })
      let after: EmailCursor | undefined
      if (req.cursor !== undefined) {
        const decoded = decodeEmailCursor(req.cursor)
        if (decoded === null) errors.push({ path: 'query.cursor', message: 'is not a cursor this API gave out' })
        else after = decoded
      }
      const tag = req.tag === undefined ? undefined : parseTagFilter(req.tag)
      if (tag === null) errors.push({ path: 'query.tag', message: 'is not a tag name or name:value (letters, digits, _ and -)' })
      if (errors.length > 0) throw ValidationError('The request is not valid', errors)
      const to = req.to?.trim().toLowerCase()
      // One more than asked tells whether another page exists without a count.
      const rows = await store.listEmails(accountId, {
        limit: req.limit + 1,
        ...(req.status !== undefined ? { status: req.status } : {}),
        ...(req.event !== undefined ? { event: req.event } : {}),
        ...(to ? { to } : {}),
        ...(tag ? { tag } : {}),
        ...(since !== undefined ? { since } : {}),
        ...(until !== undefined ? { until } : {}),
        ...(after !== undefined ? { after } : {}),
      })
      const items = rows.slice(0, req.limit).map((r) => ({ ...r, scheduledAt: r.scheduledAt ?? null }))
      const last = items.at(-1)
      return { items, nextCursor: rows.length > req.limit && last ? encodeEmailCursor(last) : null }
    },
  }
}

export type EmailListService = ReturnType<typeof createEmailListService>
