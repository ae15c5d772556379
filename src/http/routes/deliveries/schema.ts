import { Type, type TSchema } from 'typebox'
import { EventType, EventTypeSchema, Literals, Page, Success, Timestamp, component, errors, SESSION_OR_API_KEY } from '../../schemas.js'

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()])

export const DeliveryStatusSchema = Literals(['pending', 'succeeded', 'retrying', 'failed', 'cancelled'])

export const DeliverySchema = component('Delivery', Type.Object({
  id: Type.String(),
  eventId: Type.String(),
  event: EventType,
  emailId: Type.String(),
  status: DeliveryStatusSchema,
  attempts: Type.Integer(),
  lastAttemptAt: Nullable(Timestamp),
  nextAttemptAt: Nullable(Timestamp),
  lastStatusCode: Nullable(Type.Integer()),
  lastError: Nullable(Type.String()),
  lastDurationMs: Nullable(Type.Number()),
  createdAt: Timestamp,
}, { description: 'One event delivered (or being delivered) to one webhook' }))

const WebhookParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) })
const DeliveryParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 64 }),
  deliveryId: Type.String({ minLength: 1, maxLength: 64 }),
})
const security = SESSION_OR_API_KEY
const tags = ['deliveries']

export const ListDeliveriesRoute = {
  operationId: 'listDeliveries',
  tags, security, summary: 'The delivery log of a webhook, newest first',
  params: WebhookParams,
  querystring: Type.Object({
    status: Type.Optional(DeliveryStatusSchema),
    limit: Type.Integer({ minimum: 1, maximum: 100, default: 20 }),
    cursor: Type.Optional(Type.String({ maxLength: 200 })),
  }, { additionalProperties: false }),
  response: {
    200: Page(DeliverySchema, 'A page of the delivery log, newest first'),
    ...errors(400, 401, 403, 404),
  },
}

export const RetryDeliveryRoute = {
  operationId: 'retryDelivery',
  tags, security, summary: 'Deliver again now',
  params: DeliveryParams,
  response: { 202: Success(DeliverySchema, 'The delivery, queued to be delivered now'), ...errors(401, 403, 404) },
}

export const TestDeliveryRoute = {
  operationId: 'sendTestEvent',
  tags, security, summary: 'Send a signed test event to this webhook (default email.sent); the body is optional',
  params: WebhookParams,
  body: Type.Optional(Type.Object({ event: Type.Optional(EventTypeSchema) }, { additionalProperties: false })),
  response: { 202: Success(DeliverySchema, 'The test delivery, queued'), ...errors(400, 401, 403, 404) },
}

export const RecoverRoute = {
  operationId: 'recoverDeliveries',
  tags, security,
  summary: 'Queue again every failed delivery of a time window (default: every one still in the log, until now); the body is optional',
  params: WebhookParams,
  body: Type.Object({ since: Type.Optional(Timestamp), until: Type.Optional(Timestamp) }, { additionalProperties: false }),
  response: { 202: Success(Type.Object({ queued: Type.Integer() }), 'How many failed deliveries are queued again (in the background)'), ...errors(400, 401, 403, 404) },
}
