// Received mail (cookie or a full_access key; a sending_access key gets 403): the list, one message, its
// raw bytes and its attachments, and its deletion. The bytes are answered as downloads that a browser never renders:
// Content-Disposition: attachment, nosniff, and a sandbox policy in case one does.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { attachmentDisposition } from '../../../app/received.js'
import { accountIdOf, cookieOrKey } from '../../cookie-or-key.js'
import type { RouteContext } from '../context.js'
import { DeleteReceivedRoute, GetReceivedAttachmentRoute, GetReceivedRawRoute, GetReceivedRoute, ListReceivedRoute } from './schema.js'

const DOWNLOAD_HEADERS = {
  'x-content-type-options': 'nosniff',
  'content-security-policy': "default-src 'none'; sandbox",
  'cache-control': 'private, no-store',
}

const receivedRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  app.addHook('onRequest', cookieOrKey(services, config, 'manage'))
  const received = services.received

  app.get('/api/received', { schema: ListReceivedRoute }, async (request) => {
    const { limit, cursor, to } = request.query
    const page = await received.list(accountIdOf(request), { limit, ...(cursor !== undefined ? { cursor } : {}), ...(to !== undefined ? { to } : {}) })
    return { success: true as const, data: page.items, nextCursor: page.nextCursor, message: `${page.items.length} received message(s)` }
  })

  app.get('/api/received/:id', { schema: GetReceivedRoute }, async (request) => {
    return { success: true as const, data: await received.get(accountIdOf(request), request.params.id), message: 'Received message' }
  })

  app.delete('/api/received/:id', { schema: DeleteReceivedRoute }, async (request) => {
    const m = await received.remove(accountIdOf(request), request.params.id)
    return { success: true as const, data: { id: m.id, deleted: true as const }, message: 'Received message deleted' }
  })

  app.get('/api/received/:id/raw', { schema: GetReceivedRawRoute }, async (request, reply) => {
    const raw = await received.raw(accountIdOf(request), request.params.id)
    return reply.headers({
      ...DOWNLOAD_HEADERS, 'content-type': 'message/rfc822', 'content-disposition': `attachment; filename="${request.params.id}.eml"`,
    }).send(raw)
  })

  app.get('/api/received/:id/attachments/:attachmentId', { schema: GetReceivedAttachmentRoute }, async (request, reply) => {
    const { meta, content } = await received.attachment(accountIdOf(request), request.params.id, request.params.attachmentId)
    return reply.headers({
      ...DOWNLOAD_HEADERS, 'content-type': meta.contentType, 'content-disposition': attachmentDisposition(meta.filename, meta.id),
    }).send(content)
  })
}

export default receivedRoutes
