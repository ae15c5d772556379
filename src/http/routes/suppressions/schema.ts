import { Type } from 'typebox'
import { SUPPRESSION_REASONS } from '../../../app/suppressions.js'
import { Literals, Page, Success, Timestamp, component, errors, SESSION_OR_API_KEY } from '../../schemas.js'

const Reason = (description?: string) => Literals(SUPPRESSION_REASONS, description ? { description } : {})

export const SuppressionSchema = component('Suppression', Type.Object({
  email: Type.String(),
  reason: Reason(),
  createdAt: Timestamp,
}, { description: 'An address that is never sent to, and why' }))

export const ListQuery = Type.Object({
  limit: Type.Integer({ minimum: 1, maximum: 100, default: 50 }),
  cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 1024, description: 'nextCursor of the previous page' })),
}, { additionalProperties: false })

export const AddSuppressionSchema = Type.Object({
  email: Type.String({ minLength: 1, maxLength: 500 }),
  reason: Type.Optional(Reason('default: manual')),
}, { additionalProperties: false })

export const EmailParams = Type.Object({ email: Type.String({ minLength: 1, maxLength: 500 }) })

const security = SESSION_OR_API_KEY
const tags = ['suppressions']

export const ListSuppressionsRoute = {
  operationId: 'listSuppressions',
  tags, security, summary: 'The suppression list, newest first, in pages',
  querystring: ListQuery,
  response: {
    200: Page(SuppressionSchema, 'A page of the suppression list, newest first'),
    ...errors(400, 401, 403),
  },
}

export const AddSuppressionRoute = {
  operationId: 'addSuppression',
  tags, security, summary: 'Suppress an address (201; 200 with the existing entry when it already is)',
  body: AddSuppressionSchema,
  response: { 200: Success(SuppressionSchema, 'The address was suppressed already: its entry'), 201: Success(SuppressionSchema, 'The address is suppressed: its new entry'), ...errors(400, 401, 403, 413, 415) },
}

export const GetSuppressionRoute = {
  operationId: 'getSuppression',
  tags, security, summary: 'Look an address up: its entry, or 404 when it is not suppressed',
  params: EmailParams,
  response: { 200: Success(SuppressionSchema, 'The address is suppressed: its entry'), ...errors(401, 403, 404) },
}

export const DeleteSuppressionRoute = {
  operationId: 'deleteSuppression',
  tags, security, summary: 'Remove an address from the list: later sends reach it again',
  params: EmailParams,
  response: { 200: Success(Type.Object({ email: Type.String(), deleted: Type.Literal(true) }), 'The address is no longer suppressed'), ...errors(401, 403, 404) },
}
