import { Type } from 'typebox'
import { EMAIL_STATUSES } from '../../../app/email-list.js'
import { EventTypeSchema, IdParams, Literals, Page, Success, Timestamp, component, errors, SESSION_OR_API_KEY } from '../../schemas.js'
import { EmailViewSchema, ScheduledAt } from '../emails/schema.js'

export const EmailStatusSchema = Literals(EMAIL_STATUSES)

export const EmailSummarySchema = component('EmailSummary', Type.Object({
  id: Type.String(),
  from: Type.String(),
  to: Type.Array(Type.String()),
  subject: Type.String(),
  status: EmailStatusSchema,
  createdAt: Timestamp,
  updatedAt: Timestamp,
  scheduledAt: Type.Union([Timestamp, Type.Null()], { description: 'when a scheduled email is (or was) due; null for one sent at once' }),
}, { description: 'An email in a list' }))

export const ListEmailsQuery = Type.Object({
  status: Type.Optional(EmailStatusSchema),
  event: Type.Optional(EventTypeSchema),
  to: Type.Optional(Type.String({ minLength: 1, maxLength: 320, description: 'a recipient address (to, cc or bcc), matched exactly, case-insensitively' })),
  tag: Type.Optional(Type.String({ minLength: 1, maxLength: 513, description: 'a tag the email was sent with: its name (any value), or name:value' })),
  since: Type.Optional(Type.String({ format: 'date-time', description: 'created at or after this time (ISO 8601)' })),
  until: Type.Optional(Type.String({ format: 'date-time', description: 'created before this time (ISO 8601)' })),
  limit: Type.Integer({ minimum: 1, maximum: 100, default: 20 }),
  cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 1024, description: 'nextCursor of the previous page' })),
}, { additionalProperties: false })

const security = SESSION_OR_API_KEY
const tags = ['emails']

export const ListEmailsRoute = {
  operationId: 'listEmails',
  tags, security, summary: 'The account\'s emails, newest first, in pages; filtered by status (scheduled…), an event they had (email.complained…), recipient, tag and time',
  querystring: ListEmailsQuery,
  response: {
    200: Page(EmailSummarySchema, 'A page of emails, newest first'),
    ...errors(400, 401, 403, 429),
  },
}

export const RescheduleEmailSchema = Type.Object({ scheduledAt: ScheduledAt }, { additionalProperties: false })

export const RescheduleEmailRoute = {
  operationId: 'rescheduleEmail',
  tags, security, summary: 'Move a scheduled email to another time (409 once it went out, its time came, or it was canceled)',
  params: IdParams,
  body: RescheduleEmailSchema,
  response: {
    200: Success(EmailViewSchema, 'The email, scheduled for its new time'),
    ...errors(400, 401, 403, 404, 413, 415, 429),
    ...errors({
      409: 'The email is no longer scheduled (email_not_scheduled): it went out, its time came, or it was canceled',
      422: 'scheduledAt is malformed, without an offset, in the past or beyond the horizon (invalid_schedule); details name it',
    }),
  },
}

export const CancelEmailRoute = {
  operationId: 'cancelEmail',
  tags, security, summary: 'Cancel a scheduled email: it is never sent and has no event after this (409 once it went out or its time came)',
  params: IdParams,
  response: {
    200: Success(EmailViewSchema, 'The email, canceled (a second cancel answers the same)'),
    ...errors(401, 403, 404, 429),
    ...errors({ 409: 'The email is no longer scheduled (email_not_scheduled): it went out or its time came' }),
  },
}

export const GetEmailRoute = {
  operationId: 'getEmail',
  tags, security, summary: 'An email: its status and its event timeline',
  params: IdParams,
  response: { 200: Success(EmailViewSchema, 'The email'), ...errors(401, 403, 404, 429) },
}
