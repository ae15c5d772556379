import { Type, type Static } from 'typebox'
import { EventType, EventTypeSchema, IdParams, Success, Timestamp, component, errors, SESSION_OR_API_KEY } from '../../schemas.js'
import { EVENT_TYPES } from '../../../domain/events.js'

const Url = Type.String({ minLength: 1, maxLength: 2048, description: 'https URL of the receiver (http and localhost only in development)' })
const Events = Type.Array(EventTypeSchema, { minItems: 1, maxItems: EVENT_TYPES.length, uniqueItems: true, description: `an array of 1 to ${EVENT_TYPES.length} distinct event types` })
const Status = Type.Union([Type.Literal('enabled'), Type.Literal('disabled'), Type.Literal('auto_disabled')])
const RateLimit = Type.Union([Type.Integer({ minimum: 1, maximum: 10_000 }), Type.Null()], {
  description: 'deliveries per second at most, held by every node together (a whole number from 1 to 10000), or null for none',
})
/** This process's view of the webhook's delivery: null when it is not delivering for it right now. */
const Delivery = Type.Union([Type.Object({
  window: Type.Integer({ description: 'requests in flight at once that the receiver is given now (adaptive)' }),
  roundTripMs: Type.Integer({ description: 'smoothed time of one request, in ms' }),
  breaker: Type.Union([Type.Literal('closed'), Type.Literal('open'), Type.Literal('half_open')]),
}), Type.Null()], { description: 'the adaptive delivery state on the node that answers (null when it holds no work for this webhook)' })

export const CreateWebhookSchema = Type.Object({ url: Url, events: Events, rateLimit: Type.Optional(RateLimit) }, { additionalProperties: false })
export type CreateWebhook = Static<typeof CreateWebhookSchema>

export const PatchWebhookSchema = Type.Object({
  url: Type.Optional(Url),
  events: Type.Optional(Events),
  status: Type.Optional(Type.Union([Type.Literal('enabled'), Type.Literal('disabled')])),
  rateLimit: Type.Optional(RateLimit),
}, { additionalProperties: false, minProperties: 1 })

export const WebhookSchema = component('Webhook', Type.Object({
  id: Type.String(),
  url: Type.String(),
  events: Type.Array(EventType),
  status: Status,
  rateLimit: RateLimit,
  delivery: Delivery,
  createdAt: Timestamp,
  updatedAt: Timestamp,
}))

export const CreatedWebhookSchema = component('NewWebhook', Type.Object({
  id: Type.String(),
  url: Type.String(),
  events: Type.Array(EventType),
  secret: Type.String({ description: 'whsec_… signing secret. Shown on creation and rotation only.' }),
  status: Status,
  rateLimit: RateLimit,
  createdAt: Timestamp,
}, { description: 'A webhook as created: with its secret, shown this once' }))

const security = SESSION_OR_API_KEY
const tags = ['webhooks']

export const CreateWebhookRoute = {
  operationId: 'createWebhook',
  tags, security, summary: 'Create a webhook',
  body: CreateWebhookSchema,
  response: { 201: Success(CreatedWebhookSchema, 'The webhook, created: keep its secret, shown this once'), ...errors(400, 401, 403, 413, 415, 422) },
}
export const ListWebhooksRoute = {
  operationId: 'listWebhooks',
  tags, security, summary: 'List the webhooks, newest first',
  response: { 200: Success(Type.Array(WebhookSchema), 'The webhooks, newest first'), ...errors(401, 403) },
}
export const GetWebhookRoute = {
  operationId: 'getWebhook',
  tags, security, summary: 'One webhook', params: IdParams,
  response: { 200: Success(WebhookSchema, 'The webhook'), ...errors(401, 403, 404) },
}
export const PatchWebhookRoute = {
  operationId: 'updateWebhook',
  tags, security, summary: 'Change url, events, status (enabled/disabled) or rateLimit', params: IdParams,
  body: PatchWebhookSchema,
  response: { 200: Success(WebhookSchema, 'The webhook, changed'), ...errors(400, 401, 403, 404, 422) },
}
export const DeleteWebhookRoute = {
  operationId: 'deleteWebhook',
  tags, security, summary: 'Delete a webhook; its pending deliveries are cancelled', params: IdParams,
  response: { 200: Success(Type.Object({ id: Type.String(), deleted: Type.Literal(true) }), 'The webhook is deleted'), ...errors(401, 403, 404) },
}
export const RotateSecretRoute = {
  operationId: 'rotateWebhookSecret',
  tags, security, summary: 'New signing secret; the old one keeps signing beside it for 24 hours', params: IdParams,
  response: {
    200: Success(Type.Object({ secret: Type.String(), previousSecretExpiresAt: Timestamp }), 'The new secret, and until when the previous one keeps signing'),
    ...errors(401, 403, 404),
  },
}
