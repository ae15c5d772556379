import { Type, type Static } from 'typebox'
import { NO_CONTROL_CHARACTERS_PATTERN } from '../../../domain/text.js'
import { IdParams, Success, Timestamp, component, errors, SESSION_OR_API_KEY } from '../../schemas.js'

const permission = (extra: { default?: string } = {}) => Type.Union([Type.Literal('full_access'), Type.Literal('sending_access')], {
  description: 'full_access: every route of this account, as the session cookie; sending_access: send and read emails only',
  ...extra,
})
export const PermissionSchema = permission()

export const CreateKeySchema = Type.Object({
  // Trimmed before validation (see the route), then 1 to 50 characters with no control characters
  // (src/domain/text.ts: a name is printed in terminals by the CLI and in logs).
  name: Type.String({ minLength: 1, maxLength: 50, pattern: NO_CONTROL_CHARACTERS_PATTERN }),
  permission: Type.Optional(permission({ default: 'full_access' })),
}, { additionalProperties: false })
export type CreateKey = Static<typeof CreateKeySchema>

export const CreatedKeySchema = component('NewApiKey', Type.Object({
  id: Type.String(),
  name: Type.String(),
  key: Type.String({ description: 'The full key. Shown in this response only: store it now.' }),
  keyPrefix: Type.String(),
  permission: PermissionSchema,
  createdAt: Timestamp,
}, { description: 'An API key as created: with the key itself, shown this once' }))

export const KeySchema = component('ApiKey', Type.Object({
  id: Type.String(),
  name: Type.String(),
  keyPrefix: Type.String(),
  permission: PermissionSchema,
  createdAt: Timestamp,
  lastUsedAt: Type.Union([Timestamp, Type.Null()]),
  status: Type.Union([Type.Literal('active'), Type.Literal('revoked')]),
  revokedAt: Type.Union([Timestamp, Type.Null()]),
}))

const security = SESSION_OR_API_KEY

export const CreateKeyRoute = {
  operationId: 'createApiKey',
  tags: ['api keys'], summary: 'Create an API key', security,
  body: CreateKeySchema,
  description: 'With a session or a full_access key. A key never creates a key with more permission than its own.',
  response: { 201: Success(CreatedKeySchema, 'The key, created: store `key` now, it is never shown again'), ...errors(400, 401, 403, 413, 415) },
}

export const ListKeysRoute = {
  operationId: 'listApiKeys',
  tags: ['api keys'], summary: 'List the API keys, newest first', security,
  response: { 200: Success(Type.Array(KeySchema), 'The API keys, newest first'), ...errors(401, 403) },
}

export const RevokeKeyRoute = {
  operationId: 'revokeApiKey',
  tags: ['api keys'], summary: 'Revoke an API key (at once, idempotent)', security,
  params: IdParams,
  response: {
    200: Success(Type.Object({ id: Type.String(), status: Type.Literal('revoked'), revokedAt: Timestamp }), 'The key is revoked (or already was)'),
    ...errors(401, 403, 404),
  },
}
