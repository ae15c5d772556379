// Templates: the session cookie or a full_access API key, like the other management routes. Their bodies
// take BODY_LIMIT_BYTES (a template's html and text are up to 256 Ki characters each).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { requireAccount } from '../../auth.js'
import { cookieOrKey } from '../../cookie-or-key.js'
import type { RouteContext } from '../context.js'
import {
  CreateTemplateRoute, DeleteTemplateRoute, GetTemplateRoute, GetTemplateVersionRoute, ListTemplateVersionsRoute, ListTemplatesRoute,
  PreviewTemplateRoute, UpdateTemplateRoute,
} from './schema.js'

const templateRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  app.addHook('onRequest', cookieOrKey(services, config, 'manage'))
  const templates = services.templates
  const bodyLimit = config.bodyLimit

  app.post('/api/templates', { schema: CreateTemplateRoute, bodyLimit }, async (request, reply) => {
    const t = await templates.create(requireAccount(request), request.body)
    return reply.code(201).send({ success: true, data: t, message: `Template ${t.name} saved (version 1)` })
  })

  app.get('/api/templates', { schema: ListTemplatesRoute }, async (request) => {
    const list = await templates.list(requireAccount(request).id)
    return { success: true as const, data: list, message: `${list.length} template(s)` }
  })

  app.get('/api/templates/:id', { schema: GetTemplateRoute }, async (request) => {
    return { success: true as const, data: await templates.get(requireAccount(request).id, request.params.id), message: 'Template' }
  })

  app.patch('/api/templates/:id', { schema: UpdateTemplateRoute, bodyLimit }, async (request) => {
    const t = await templates.update(requireAccount(request).id, request.params.id, request.body)
    return { success: true as const, data: t, message: `Template ${t.name} saved as version ${t.version}` }
  })

  app.delete('/api/templates/:id', { schema: DeleteTemplateRoute }, async (request) => {
    await templates.remove(requireAccount(request).id, request.params.id)
    return { success: true as const, data: { id: request.params.id, deleted: true as const }, message: 'Template and its versions deleted' }
  })

  app.get('/api/templates/:id/versions', { schema: ListTemplateVersionsRoute }, async (request) => {
    const { limit, cursor } = request.query
    const page = await templates.versions(requireAccount(request).id, request.params.id, { limit, ...(cursor !== undefined ? { before: Number(cursor) } : {}) })
    return { success: true as const, data: page.items, nextCursor: page.nextCursor, message: `${page.items.length} version(s)` }
  })

  app.get('/api/templates/:id/versions/:version', { schema: GetTemplateVersionRoute }, async (request) => {
    const t = await templates.get(requireAccount(request).id, request.params.id, request.params.version)
    return { success: true as const, data: t, message: `Template at version ${t.version}` }
  })

  app.post('/api/templates/:id/preview', { schema: PreviewTemplateRoute, bodyLimit }, async (request) => {
    const r = await templates.preview(requireAccount(request).id, request.params.id, request.body)
    return { success: true as const, data: r, message: 'Rendered; nothing was sent' }
  })
}

export default templateRoutes
