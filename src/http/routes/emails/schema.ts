import { Type, type Static } from 'typebox'
import { MAX_BATCH, MAX_HEADERS, MAX_RECIPIENTS, MAX_REPLY_TO } from '../../../app/emails.js'
import { EMAIL_STATUSES } from '../../../app/email-list.js'
import { EventType, HEADERS, Success, Timestamp, component, errors, Literals } from '../../schemas.js'
import { TemplateSendSchema } from '../templates/schema.js'
import { MAX_ATTACHMENTS, MAX_CONTENT_CHARS, MAX_CONTENT_ID_LENGTH } from '../../../domain/attachments.js'
import { METADATA_KEY_PATTERN, METADATA_LIMITS } from '../../../domain/metadata.js'
import { MAX_SCHEDULED_AT_LENGTH } from '../../../domain/schedule.js'

// The schema checks shapes and sizes; what an address or a header may hold (no CR/LF, a real address,
// no reserved header) is checked by src/domain/send-input.ts, which names the exact field in its answer.
// Every string and array has its bound here, so that no rule ever looks at more than these allow: a 51st
// address is refused before any of the 50 others is parsed.
const Address = Type.String({ minLength: 1, maxLength: 500, description: 'someone@example.com or Some One <someone@example.com>' })
const Addresses = (max: number, min = 0) => Type.Union([Address, Type.Array(Address, { minItems: min, maxItems: max })], {
  description: `one address or an array of ${min > 0 ? `${min} to ${max}` : `at most ${max}`} addresses`,
})
/** html and text: each at most this many characters (the body limit comes first anyway). */
export const MAX_CONTENT_LENGTH = 1024 * 1024
const Content = Type.String({ minLength: 1, maxLength: MAX_CONTENT_LENGTH })
const Tag = Type.String({ minLength: 1, maxLength: 256, pattern: '^[A-Za-z0-9_-]+$', description: 'letters, digits, _ and -' })
// An attachment's content is bounded by the largest allowance (ATTACHMENTS_MAX_BYTES at its maximum, in
// base64); the body limit (SEND_BODY_LIMIT_BYTES) comes first, and src/domain/attachments.ts measures the
// configured allowance by the strings' lengths before it decodes anything. As base64 (contentEncoding),
// its bound is checked by its length, not character by character (src/http/validation.ts asciiLengths).
const Attachment = Type.Object({
  filename: Type.String({
    minLength: 1, maxLength: 1000,
    description: 'the name the recipient sees; any path, control characters and trailing dots are removed, and .exe, .bat, .js, .msi and other programs are refused (422 attachment_not_allowed)',
  }),
  content: Type.String({ maxLength: MAX_CONTENT_CHARS, contentEncoding: 'base64', description: 'the bytes in base64 (standard alphabet, padded, no line breaks)' }),
  contentType: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'like application/pdf; default: from the filename\'s extension, else application/octet-stream' })),
  contentId: Type.Optional(Type.String({
    minLength: 1, maxLength: MAX_CONTENT_ID_LENGTH,
    description: 'makes it inline: the html shows it with <img src="cid:THIS">; letters, digits and !#$%&\'*+/=?^_`{|}~.@-',
  })),
}, { additionalProperties: false })
/** A date-time with its offset; its shape and time are checked by src/domain/schedule.ts (422 invalid_schedule, naming it). */
export const ScheduledAt = Type.String({
  minLength: 1, maxLength: MAX_SCHEDULED_AT_LENGTH,
  description: 'send at this time, not before: ISO 8601 with an offset (2026-12-01T09:00:00+01:00 or …Z), from now to the horizon (30 days by default); 422 invalid_schedule otherwise',
})
export const Metadata = Type.Record(Type.String({ pattern: METADATA_KEY_PATTERN }), Type.String({ maxLength: METADATA_LIMITS.maxValueLength }), {
  maxProperties: METADATA_LIMITS.maxKeys,
  description: `your own data, carried in every webhook payload of the email: at most ${METADATA_LIMITS.maxKeys} keys of 1 to ${METADATA_LIMITS.maxKeyLength} ` +
    `letters, digits, _ or -, string values of at most ${METADATA_LIMITS.maxValueLength} characters, ${METADATA_LIMITS.maxTotalBytes} bytes (UTF-8) in all`,
})
const TrackingChoice = Type.Object({
  opens: Type.Optional(Type.Boolean({ description: 'an open pixel in the html' })),
  clicks: Type.Optional(Type.Boolean({ description: 'http(s) links rewritten to tracked ones; false: every link exactly as written' })),
}, { additionalProperties: false, description: 'what is left out takes the sending domain\'s default, then the account\'s (on)' })

export const SendSchema = Type.Object({
  from: Type.Optional(Type.String({ minLength: 1, maxLength: 500, description: 'the sender; default: MAIL_FROM' })),
  to: Addresses(MAX_RECIPIENTS, 1),
  cc: Type.Optional(Addresses(MAX_RECIPIENTS)),
  bcc: Type.Optional(Addresses(MAX_RECIPIENTS)),
  replyTo: Type.Optional(Addresses(MAX_REPLY_TO)),
  subject: Type.Optional(Type.String({ minLength: 1, maxLength: 998, description: 'no CR or LF; required unless template is given' })),
  html: Type.Optional(Content),
  text: Type.Optional(Content),
  template: Type.Optional(TemplateSendSchema),
  attachments: Type.Optional(Type.Array(Attachment, {
    maxItems: MAX_ATTACHMENTS,
    description: `at most ${MAX_ATTACHMENTS} files, together at most ATTACHMENTS_MAX_BYTES decoded (7,000,000 bytes by default; 413 past it)`,
  })),
  headers: Type.Optional(Type.Record(Type.String(), Type.String({ maxLength: 998 }), {
    maxProperties: MAX_HEADERS, description: 'custom headers; From, To, Message-ID, List-Unsubscribe and the like are set by svc',
  })),
  tags: Type.Optional(Type.Array(Type.Object({ name: Tag, value: Tag }, { additionalProperties: false }), {
    maxItems: 50, description: 'an array of at most 50 tags ({ name, value })',
  })),
  scheduledAt: Type.Optional(ScheduledAt),
  tracking: Type.Optional(TrackingChoice),
  unsubscribe: Type.Optional(Type.Boolean({
    description: 'false: no List-Unsubscribe headers, for mail a recipient cannot opt out of (a password reset); default true, which bulk mail needs',
  })),
  metadata: Type.Optional(Metadata),
}, {
  additionalProperties: false,
  description: 'subject, and html or text (or both); or a template in place of all three',
  // The rule, for clients and generators; src/domain/send-input.ts checks it and answers in words. Each branch
  // names its field's type and sits in an allOf, so that a generated type is
  // `{ …fields } & ({ html: string } | { text: string })`: a body with neither does not compile.
  allOf: [
    { anyOf: [...['html', 'text'].map((field) => ({ type: 'object', properties: { [field]: Content }, required: [field] })), { type: 'object', properties: { template: TemplateSendSchema }, required: ['template'] }] },
    { anyOf: [{ type: 'object', properties: { subject: Type.String({ minLength: 1, maxLength: 998 }) }, required: ['subject'] }, { type: 'object', properties: { template: TemplateSendSchema }, required: ['template'] }] },
  ],
})
export type Send = Static<typeof SendSchema>

const IdempotencyHeaders = Type.Object({
  'idempotency-key': Type.Optional(Type.String({
    minLength: 1, maxLength: 256, pattern: '^[\\x20-\\x7E]+$',
    description: 'the same key and body within 24 hours answer the first response and send nothing new',
  })),
})

const Accepted = component('SendResult', Type.Object({
  id: Type.String({ description: 'the email\'s id (em_…)' }),
  suppressed: Type.Optional(Type.Array(Type.String(), { description: 'recipients dropped because they are suppressed' })),
  scheduledAt: Type.Optional(Type.String({ format: 'date-time', maxLength: 64, description: 'a scheduled send: when it goes out (UTC)' })),
}, { description: 'A send, accepted and stored' }))

const security = [{ apiKey: [] }]
const tags = ['sending']

export const SendRoute = {
  operationId: 'sendEmail',
  tags, security, summary: 'Send an email (202: accepted and stored; it goes out in the background)',
  headers: IdempotencyHeaders,
  body: SendSchema,
  response: { 202: Success(Accepted, 'Accepted and stored: it goes out in the background (a scheduled one at its time)', HEADERS.idempotentReplayed), ...errors(400, 401, 409, 413, 415, 422, 429) },
}

export const SendBatchRoute = {
  operationId: 'sendEmailBatch',
  tags, security, summary: `Send up to ${MAX_BATCH} emails at once, validated as a whole`,
  headers: IdempotencyHeaders,
  body: Type.Array(SendSchema, { minItems: 1, maxItems: MAX_BATCH, description: `an array of 1 to ${MAX_BATCH} sends` }),
  response: { 202: Success(Type.Array(Accepted), 'Every send accepted and stored, in the order given', HEADERS.idempotentReplayed), ...errors(400, 401, 409, 413, 415, 422, 429) },
}

const EmailEventSchema = component('EmailEvent', Type.Object({
  id: Type.String(),
  // email.delayed: a timeline entry from a returning DSN, never a webhook event.
  type: Type.Union([EventType, Type.Literal('email.delayed')]),
  recipient: Type.String(),
  occurredAt: Timestamp,
  reason: Type.Optional(Type.String({ description: 'email.bounced, email.complained, email.delayed: what the receiving side said' })),
  url: Type.Optional(Type.String({ description: 'email.clicked: the link' })),
}, { description: 'One entry of an email\'s timeline' }))

export const EmailViewSchema = component('Email', Type.Object({
  id: Type.String(),
  from: Type.String(),
  to: Type.Array(Type.String()),
  cc: Type.Array(Type.String()),
  bcc: Type.Array(Type.String()),
  replyTo: Type.Array(Type.String()),
  subject: Type.String(),
  status: Literals(EMAIL_STATUSES),
  createdAt: Timestamp,
  suppressed: Type.Array(Type.String()),
  tags: Type.Array(Type.Object({ name: Type.String(), value: Type.String() })),
  metadata: Type.Record(Type.String(), Type.String(), { description: 'the send\'s metadata ({} when none)' }),
  scheduledAt: Type.Union([Timestamp, Type.Null()], { description: 'when a scheduled email is (or was) due; null for one sent at once' }),
  tracking: Type.Object({ opens: Type.Boolean(), clicks: Type.Boolean() }, { description: 'whether its copies carry an open pixel and tracked links, as decided at acceptance' }),
  unsubscribe: Type.Boolean({ description: 'whether its copies carry the List-Unsubscribe headers' }),
  attachments: Type.Array(component('EmailAttachment', Type.Object({
    filename: Type.String({ description: 'as sent (cleaned)' }),
    contentType: Type.String(),
    size: Type.Integer({ description: 'bytes, decoded' }),
    sha256: Type.String({ description: 'SHA-256 of the bytes, lower-case hex' }),
    contentId: Type.Optional(Type.String({ description: 'an inline attachment\'s content id (the html\'s cid:…)' })),
  }, { description: 'An attachment of a sent email; svc drops its bytes ATTACHMENT_RETENTION_HOURS after the email\'s last attempt and keeps this' })), {
    description: 'the attachments, in the order given ([] when none)',
  }),
  template: Type.Union([Type.Object({ id: Type.String(), version: Type.Integer() }), Type.Null()], { description: 'the template and version it was rendered from; null when the send named none' }),
  html: Type.Union([Type.String(), Type.Null()], { description: 'the html as it was sent, before each recipient\'s tracking' }),
  text: Type.Union([Type.String(), Type.Null()], { description: 'the text as it was sent' }),
  events: Type.Array(EmailEventSchema),
}, { description: 'An email: who it went to, its status and its timeline' }))

// GET /api/emails/:id is in ../email-list (the session cookie or an API key).
