import { Type, type Static } from 'typebox'
import { EventType, EventTypeSchema, IdParams, Success, Timestamp, component, errors, SESSION_OR_API_KEY } from '../../schemas.js'
import { EVENT_TYPES } from '../../../domain/events.js'
import { FILTER_LIMITS, TAG_PATTERN } from '../../../domain/webhook-filter.js'
import { REPLAY_MAX_SPAN_MS } from '../../../domain/replay.js'

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

// The parts of a filter are checked by its rule (src/domain/webhook-filter.ts), so that one answer names every
// wrong field, domains and tags alike; the schema only bounds the shape.
// Each string still has a bound here (twice the rule's, so a value just over it is named by the rule).
const TagPart = Type.String({ maxLength: 2 * FILTER_LIMITS.maxTagLength, description: `1 to ${FILTER_LIMITS.maxTagLength} letters, digits, _ and - (${TAG_PATTERN})` })
const TagCondition = Type.Object({
  name: TagPart,
  value: Type.Optional(TagPart),
}, { additionalProperties: false, description: 'a tag the email carries: with `value`, that value only; without, any value' })
const FILTER_RULES = 'domains: the From address\'s domain is one of them (exactly, any case; received mail: a recipient\'s domain); ' +
  'tags: the email carries at least one of them; both given, both must match; an empty or absent list sets no condition'
/** The filter as POST and PATCH take it; null (PATCH) removes it. */
const FilterInput = Type.Union([Type.Object({
  domains: Type.Optional(Type.Array(Type.String({ maxLength: 2 * 253, description: 'a domain name, like example.com (an IDN is stored in punycode)' }), {
    maxItems: FILTER_LIMITS.maxDomains, description: `at most ${FILTER_LIMITS.maxDomains} domain names, like example.com`,
  })),
  tags: Type.Optional(Type.Array(TagCondition, { maxItems: FILTER_LIMITS.maxTags, description: `at most ${FILTER_LIMITS.maxTags} tags ({ name, value? })` })),
}, { additionalProperties: false }), Type.Null()], { description: `Which emails' events the webhook takes (null: every email's). ${FILTER_RULES}` })
const Filter = component('WebhookFilter', Type.Union([Type.Object({
  domains: Type.Array(Type.String()),
  tags: Type.Array(Type.Object({ name: Type.String(), value: Type.Optional(Type.String()) })),
}), Type.Null()], { description: `Which emails' events the webhook takes; null: every email's. ${FILTER_RULES}` }))

export const CreateWebhookSchema = Type.Object({ url: Url, events: Events, rateLimit: Type.Optional(RateLimit), filter: Type.Optional(FilterInput) }, { additionalProperties: false })
export type CreateWebhook = Static<typeof CreateWebhookSchema>

export const PatchWebhookSchema = Type.Object({
  url: Type.Optional(Url),
  events: Type.Optional(Events),
  status: Type.Optional(Type.Union([Type.Literal('enabled'), Type.Literal('disabled')])),
  rateLimit: Type.Optional(RateLimit),
  filter: Type.Optional(FilterInput),
}, { additionalProperties: false, minProperties: 1 })

export const WebhookSchema = component('Webhook', Type.Object({
  id: Type.String(),
  url: Type.String(),
  events: Type.Array(EventType),
  status: Status,
  rateLimit: RateLimit,
  filter: Filter,
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
  filter: Filter,
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
  tags, security, summary: 'Change url, events, status (enabled/disabled), rateLimit or filter', params: IdParams,
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

const REPLAY_DAYS = REPLAY_MAX_SPAN_MS / 86_400_000
export const ReplayWebhookSchema = Type.Object({
  since: { ...Timestamp, description: 'the window\'s start (inclusive): events that happened at or after it' },
  until: Type.Optional({ ...Timestamp, description: `the window's end (exclusive), at most now and ${REPLAY_DAYS} days after since; default: now` }),
  events: Type.Optional({ ...Events, description: 'only deliveries of these event types (default: every type)' }),
}, { additionalProperties: false })

export const ReplayWebhookRoute = {
  operationId: 'replayWebhook',
  tags, security, params: IdParams,
  summary: 'Send again every delivery of this webhook whose event happened in a window, delivered ones included',
  description: 'Each delivery of the window is attempted again as itself (the same X-Svc-Delivery and webhook-id, so a receiver ' +
    'drops what it already has), at the webhook\'s pace, in the background; each attempt is appended to the delivery log. ' +
    'Only deliveries that exist are sent: an event that made none for this webhook (before it subscribed, or left out by its ' +
    `filter) is not. The window is at most ${REPLAY_DAYS} days and ends at now at the latest. One replay per webhook at a time.`,
  body: ReplayWebhookSchema,
  response: {
    202: Success(Type.Object({
      queued: Type.Integer({ description: 'deliveries of the window, sent again in the background' }),
      since: Timestamp,
      until: Timestamp,
    }), 'The replay started (or found nothing to send: queued 0)'),
    ...errors({
      400: 'The body is not valid, or the window is not (since not before until, until later than now, longer than the limit); details name the field',
      404: 'No webhook with this id',
      409: 'A replay of this webhook is still going out (operation_in_progress), or the webhook is not enabled (webhook_not_enabled)',
    }),
    ...errors(401, 403),
  },
}
