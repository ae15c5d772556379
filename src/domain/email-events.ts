// The events of a sent email, made one way wherever they are raised (the send, an attempt, a returning
// DSN, received mail): each carries the email's tags and metadata, and the route webhook filters match on.
import { iso } from './clock.js'
import { eventPayload, type EventBodyData, type EventLabels, type EventRecord, type StoredEventType } from './events.js'
import { newId } from './ids.js'
import type { EmailMetadata } from './metadata.js'
import type { EmailTag } from './send-input.js'
import { eventRoute } from './webhook-filter.js'

/**
 * An event of an email. `labels`: the email's tags and metadata, which every webhook payload of a sent
 * email carries (labelsOf); absent only for events that are not about a sent email (email.received).
 */
export function makeEvent (
  e: { accountId: string; emailId: string; type: StoredEventType; recipient: string; at: number; labels?: EventLabels }, data?: EventBodyData,
): EventRecord {
  const base = { id: newId('evt', e.at), emailId: e.emailId, type: e.type, recipient: e.recipient, occurredAt: iso(e.at) }
  return { ...base, accountId: e.accountId, payload: eventPayload(base, data, e.labels), ...(e.labels?.route !== undefined ? { route: e.labels.route } : {}) }
}

/**
 * What every event of this email carries of the sender's own (empty lists for an email that has none), and
 * what routing matches webhook filters on (its From domain and tags: ./webhook-filter.ts).
 */
export function labelsOf (email: { from: string; tags: EmailTag[]; metadata?: EmailMetadata }): EventLabels {
  return { tags: email.tags, metadata: email.metadata ?? {}, route: eventRoute(email.from, email.tags) }
}
