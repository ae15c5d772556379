// An email as GET /api/emails/:id shows it: its fields and its event timeline.
import type { AttachmentMeta } from '../domain/attachments.js'
import type { EventData, EventRecord, StoredEventType } from '../domain/events.js'
import type { EmailMetadata } from '../domain/metadata.js'
import type { TemplateUse } from '../domain/templates.js'
import type { EmailRecord, EmailStatus, EmailTag } from '../store/emails.js'

export interface EmailView {
  id: string
  from: string
  to: string[]
  cc: string[]
  bcc: string[]
  replyTo: string[]
  subject: string
  status: EmailStatus
  createdAt: string
  suppressed: string[]
  tags: EmailTag[]
  metadata: EmailMetadata
  /** When it is (or was) due; null for an email sent at once. */
  scheduledAt: string | null
  /** Whether its copies carry an open pixel and tracked links, and the List-Unsubscribe headers. */
  tracking: { opens: boolean; clicks: boolean }
  unsubscribe: boolean
  /** The template and version it was rendered from; null when it named none. */
  template: TemplateUse | null
  /** The attachments' facts (filename, contentType, size, sha256, contentId): kept after their bytes are dropped. */
  attachments: AttachmentMeta[]
  /** The content as it was sent (before each recipient's tracking and unsubscribe link). */
  html: string | null
  text: string | null
  events: Array<{ id: string; type: StoredEventType; recipient: string; occurredAt: string; reason?: string; url?: string }>
}

/** What an event's body says in `data`, beside its five fields (a bounce's or complaint's reason, a click's link). */
function eventFacts (payload: string): EventData {
  try {
    const body = (JSON.parse(payload) as { data?: EventData }).data ?? {}
    return {
      ...(typeof body.reason === 'string' ? { reason: body.reason } : {}),
      ...(typeof body.url === 'string' ? { url: body.url } : {}),
    }
  } catch {
    return {}
  }
}

/** The email and its events (in order) as the API shows them. */
export function emailView (email: EmailRecord, events: EventRecord[]): EmailView {
  return {
    id: email.id,
    from: email.from,
    to: email.to,
    cc: email.cc,
    bcc: email.bcc,
    replyTo: email.replyTo,
    subject: email.subject,
    status: email.status,
    createdAt: email.createdAt,
    suppressed: email.suppressed,
    tags: email.tags,
    metadata: email.metadata ?? {},
    scheduledAt: email.scheduledAt ?? null,
    tracking: email.tracking ?? { opens: true, clicks: true },
    unsubscribe: email.unsubscribe !== false,
    template: email.template ?? null,
    attachments: email.attachments ?? [],
    html: email.html,
    text: email.text,
    events: events.map((e) => ({ id: e.id, type: e.type, recipient: e.recipient, occurredAt: e.occurredAt, ...eventFacts(e.payload) })),
  }
}
