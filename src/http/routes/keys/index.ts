import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { preValidationAsyncHookHandler } from 'fastify'
import type { ApiKeyRecord } from '../../../store/types.js'
import { requireAccount } from '../../auth.js'
import { cookieOrKey } from '../../cookie-or-key.js'
import { BODY_LIMITS } from '../../schemas.js'
import type { RouteContext } from '../context.js'
import { CreateKeyRoute, ListKeysRoute, RevokeKeyRoute } from './schema.js'

function listed (k: ApiKeyRecord) {
  return {
    id: k.id,
    name: k.name,
    keyPrefix: k.keyPrefix,
    permission: k.permission,
    createdAt: k.createdAt,
    lastUsedAt: k.lastUsedAt,
    status: k.revokedAt === null ? 'active' as const : 'revoked' as const,
    revokedAt: k.revokedAt,
  }
}

const keyRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  // Who is asking is settled before the body is even read: a stranger learns nothing from validation.
  // The session cookie (Origin checked) or a full_access API key.
  app.addHook('onRequest', cookieOrKey(services, config, 'manage'))

  const trimName: preValidationAsyncHookHandler = async (request) => {
    const body = request.body as { name?: unknown } | undefined
    if (body && typeof body === 'object' && typeof body.name === 'string') body.name = body.name.trim()
  }

  app.post('/api/keys', { schema: CreateKeyRoute, bodyLimit: BODY_LIMITS.small, preValidation: trimName }, async (request, reply) => {
    const { record, key } = await services.apiKeys.create(requireAccount(request), request.body.name, request.body.permission, request.apiKey)
    request.log.warn({ security: 'api_key_created', accountId: record.accountId, keyId: record.id, permission: record.permission }, 'security: API key created')
    return reply.code(201).send({
      success: true,
      data: { id: record.id, name: record.name, key, keyPrefix: record.keyPrefix, permission: record.permission, createdAt: record.createdAt },
      message: 'API key created. Copy it now: it will not be shown again.',
    })
  })

  app.get('/api/keys', { schema: ListKeysRoute }, async (request) => {
    const keys = await services.apiKeys.list(requireAccount(request).id)
    return { success: true as const, data: keys.map(listed), message: `${keys.length} API key(s)` }
  })

  app.delete('/api/keys/:id', { schema: RevokeKeyRoute }, async (request) => {
    const key = await services.apiKeys.revoke(requireAccount(request).id, request.params.id)
    request.log.warn({ security: 'api_key_revoked', accountId: key.accountId, keyId: key.id }, 'security: API key revoked')
    return {
      success: true as const,
      data: { id: key.id, status: 'revoked' as const, revokedAt: key.revokedAt! },
      message: 'API key revoked',
    }
  })
}

export default keyRoutes
