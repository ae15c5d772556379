export const EVENT_TYPES = [
  'email.sent',
  'email.delivered',
  'email.opened',
  'email.clicked',
  'email.bounced',
  'email.complained',
  'email.unsubscribed',
  // Mail received at a domain with receiving on (src/app/received.ts): emailId is the rcv_… id.
  'email.received',
] as const

export type EventType = (typeof EVENT_TYPES)[number]

/**
 * Entries of an email's timeline that are not webhook events: a delay reported by a returning DSN
 * (4.x.x, `Action: delayed`). Stored with the events (the timeline reads them in order) but never routed.
 */
export const TIMELINE_ONLY_TYPES = ['email.delayed'] as const
export type TimelineOnlyType = (typeof TIMELINE_ONLY_TYPES)[number]
export type StoredEventType = EventType | TimelineOnlyType

export function isEventType (value: string): value is EventType {
  return (EVENT_TYPES as readonly string[]).includes(value)
}

/**
 * A stored email event: the outbox row the delivery engine turns into webhook deliveries. `payload` is
 * the webhook body, serialised once when the event is made, so every delivery and every retry of it
 * sends (and signs) the same bytes.
 */
export interface EventRecord {
  id: string
  accountId: string
  emailId: string
  type: StoredEventType
  /** The recipient address the event is about. */
  recipient: string
  /** When it happened: ISO 8601 UTC with milliseconds. */
  occurredAt: string
  payload: string
  /**
   * What routing matches webhook filters on (src/domain/webhook-filter.ts eventRoute: the email's From domain
   * and tags), made with the event; absent or null when not known here (routing then looks the email up).
   */
  route?: string | null
}

/** Extra facts some events carry in their body, beside the five fields every event has. */
export interface EventData {
  /** email.clicked: the original link. */
  url?: string
  /** email.bounced / email.complained: what the receiving server said. */
  reason?: string
}

/** What an event body's `data` may be: the facts above, or a received message (src/app/received.ts). */
export type EventBodyData = EventData | Record<string, unknown>

/**
 * What a test event (POST /api/webhooks/:id/test) carries beside the five fields, so that a receiver sees
 * the shape a real event of that type has: a click names a link, a bounce or complaint a reason.
 */
export const TEST_EVENT_DATA: Partial<Record<EventType, EventBodyData>> = {
  'email.clicked': { url: 'https://example.com/?utm_source=svc-test' },
  'email.bounced': { reason: '550 5.1.1 test event: the mailbox does not exist' },
  'email.complained': { reason: 'test event: the recipient reported the email as spam' },
  'email.received': {
    id: 'rcv_test', recipients: ['support@example.com'], from: 'Sender <sender@example.net>', to: ['support@example.com'], cc: [], subject: 'test event', text: 'A test of email.received',
    textTruncated: false, html: null, htmlTruncated: false, headers: [], messageId: '<test@example.net>', inReplyTo: null, attachments: [],
    authentication: { spf: 'none', dkim: 'none', dmarc: 'none', arc: null },
  },
}

/**
 * What every event of a sent email carries of the sender's own: its tags and metadata (src/domain/metadata.ts).
 * Structural here so that this file imports nothing.
 */
export interface EventLabels {
  tags: Array<{ name: string; value: string }>
  metadata: Record<string, string>
  /** The email's routing facts for webhook filters (EventRecord.route), made once per email; not in the payload. */
  route?: string
}

/**
 * The webhook body: the seed's `emailId`, `to` and `timestamp` first, then `type` and `eventId`
 * (API.md), then the email's `tags` and `metadata` when it has labels (every event of a sent email does;
 * email.received does not), then `data` when the event has any. Additive: a receiver that reads only the
 * first fields reads them as before.
 */
export function eventPayload (e: { id: string; emailId: string; type: StoredEventType; recipient: string; occurredAt: string }, data?: EventBodyData, labels?: EventLabels): string {
  const body: Record<string, unknown> = { emailId: e.emailId, to: e.recipient, timestamp: e.occurredAt, type: e.type, eventId: e.id }
  if (labels !== undefined) {
    body.tags = labels.tags.map((t) => ({ name: t.name, value: t.value }))
    body.metadata = labels.metadata
  }
  if (data && Object.keys(data).length > 0) body.data = data
  return JSON.stringify(body)
}
