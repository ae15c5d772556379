import { Type } from 'typebox'
import { AUTH_RESULTS, LIMITS } from '../../../app/received.js'
import { Literals, Page, Success, Timestamp, component, errors, SESSION_OR_API_KEY } from '../../schemas.js'

const Verdict = Literals(AUTH_RESULTS)

export const ReceivedAttachmentSchema = Type.Object({
  id: Type.String({ description: 'att_1, att_2, … in the order of the message' }),
  filename: Type.Union([Type.String(), Type.Null()]),
  contentType: Type.String({ description: 'type/subtype as the message says (application/octet-stream when it says nothing valid)' }),
  size: Type.Integer({ description: 'bytes, decoded' }),
})

export const AuthenticationSchema = Type.Object({
  spf: Verdict,
  dkim: Verdict,
  dmarc: Verdict,
  arc: Type.Union([Verdict, Type.Null()], { description: 'null when the message carries no ARC chain' }),
}, { description: 'The sender as mailauth judges it when the message arrived (pass, fail, softfail, neutral, none, temperror, permerror, policy)' })

/** The fields of email.received's `data`, and of GET /api/received/:id. */
export const ReceivedDataFields = {
  id: Type.String({ description: 'rcv_…' }),
  recipients: Type.Array(Type.String(), { description: 'every address of this account the SMTP transaction named (RCPT TO), lower case, in order: one message for all of them' }),
  from: Type.String({ description: 'the From header as written, like "Alice <alice@example.net>"' }),
  to: Type.Array(Type.String(), { description: `addresses of the To header (at most ${LIMITS.addresses})` }),
  cc: Type.Array(Type.String(), { description: `addresses of the Cc header (at most ${LIMITS.addresses})` }),
  subject: Type.String(),
  text: Type.Union([Type.String(), Type.Null()], { description: `the text part, at most ${LIMITS.text} characters` }),
  textTruncated: Type.Boolean({ description: 'true when text was cut (GET …/raw has it whole)' }),
  html: Type.Union([Type.String(), Type.Null()], { description: `the html part as written, at most ${LIMITS.html} characters: sanitise it before showing it` }),
  htmlTruncated: Type.Boolean(),
  headers: Type.Array(Type.Object({ name: Type.String(), value: Type.String() }), { description: `header fields in order, unfolded (at most ${LIMITS.headers}, each value at most ${LIMITS.headerValue} characters)` }),
  messageId: Type.Union([Type.String(), Type.Null()]),
  inReplyTo: Type.Union([Type.String(), Type.Null()], { description: 'the id (em_…) of this account\'s email that In-Reply-To or References names, else null' }),
  attachments: Type.Array(ReceivedAttachmentSchema),
  authentication: AuthenticationSchema,
}

export const ReceivedSchema = component('ReceivedEmail', Type.Object({
  ...ReceivedDataFields,
  recipient: Type.String({ description: 'the first of `recipients` (kept for clients that read one address)' }),
  mailFrom: Type.String({ description: 'the envelope sender (MAIL FROM); empty for the null sender' }),
  size: Type.Integer({ description: 'the raw message\'s bytes, counted once whatever the number of recipients (what the plan\'s storage counts; its attachments are inside it)' }),
  createdAt: Timestamp,
}, { description: 'A message received at one of the account\'s domains, as parsed and judged on arrival' }))

export const ReceivedParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) })
export const AttachmentParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 64 }),
  attachmentId: Type.String({ pattern: '^att_[1-9][0-9]{0,3}$', description: 'att_1, att_2, …' }),
})

export const ListReceivedQuery = Type.Object({
  limit: Type.Integer({ minimum: 1, maximum: 100, default: 20 }),
  cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'nextCursor of the previous page' })),
  to: Type.Optional(Type.String({ minLength: 1, maxLength: 320, description: 'a recipient (RCPT TO): messages whose `recipients` hold it, matched exactly, case-insensitively' })),
}, { additionalProperties: false })

const security = SESSION_OR_API_KEY
const tags = ['received']
const binary = (type: string, description: string) => ({ description, content: { [type]: { schema: { type: 'string', format: 'binary' } } } })

export const ListReceivedRoute = {
  operationId: 'listReceived', tags, security, summary: 'Mail received at the account\'s domains, newest first, in pages',
  querystring: ListReceivedQuery,
  response: {
    200: Page(ReceivedSchema, 'A page of received messages, newest first'),
    ...errors(400, 401, 403),
  },
}
export const GetReceivedRoute = {
  operationId: 'getReceived', tags, security, summary: 'One received message: parsed fields, attachments, authentication', params: ReceivedParams,
  response: { 200: Success(ReceivedSchema, 'The received message'), ...errors(401, 403, 404) },
}
export const GetReceivedRawRoute = {
  operationId: 'getReceivedRaw', tags, security, summary: 'The message exactly as received (message/rfc822)', params: ReceivedParams,
  response: { 200: binary('message/rfc822', 'The message\'s bytes as they arrived'), ...errors(401, 403, 404) },
}
export const GetReceivedAttachmentRoute = {
  operationId: 'getReceivedAttachment', tags, security, summary: 'One attachment\'s bytes, as a download (Content-Disposition: attachment)', params: AttachmentParams,
  response: { 200: binary('application/octet-stream', 'The attachment, decoded, under its own Content-Type'), ...errors(401, 403, 404) },
}
export const DeleteReceivedRoute = {
  operationId: 'deleteReceived', tags, security,
  summary: 'Delete a received message, its raw bytes and its attachments; its size no longer counts toward the plan\'s storage',
  params: ReceivedParams,
  response: {
    200: Success(Type.Object({ id: Type.String(), deleted: Type.Literal(true) }), 'The message is deleted and its bytes are free'),
    ...errors(401, 403, 404),
  },
}
