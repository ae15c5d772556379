// Sender domains: cookie routes like the webhooks' (same hooks, so whatever auth they gain, these gain).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { requireAccount } from '../../auth.js'
import { cookieOrKey } from '../../cookie-or-key.js'
import type { RouteContext } from '../context.js'
import { CreateDomainRoute, DeleteDomainRoute, GetDomainRoute, ListDomainsRoute, UpdateDomainRoute, VerifyDomainRoute } from './schema.js'
import { BODY_LIMITS } from '../../schemas.js'

const domainRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services, config }) => {
  // The session cookie (Origin checked) or a full_access API key.
  app.addHook('onRequest', cookieOrKey(services, config, 'manage'))
  const domains = services.domains

  app.post('/api/domains', { schema: CreateDomainRoute }, async (request, reply) => {
    const d = await domains.create(requireAccount(request), request.body)
    return reply.code(201).send({ success: true, data: d, message: 'Domain added. Publish its DNS records, then verify it.' })
  })

  app.get('/api/domains', { schema: ListDomainsRoute }, async (request) => {
    const list = await domains.list(requireAccount(request).id)
    return { success: true as const, data: list, message: `${list.length} domain(s)` }
  })

  app.get('/api/domains/:id', { schema: GetDomainRoute }, async (request) => {
    return { success: true as const, data: await domains.get(requireAccount(request).id, request.params.id), message: 'Domain' }
  })

  app.post('/api/domains/:id/verify', { schema: VerifyDomainRoute }, async (request) => {
    const d = await domains.verify(requireAccount(request).id, request.params.id)
    return { success: true as const, data: d, message: d.status === 'verified' ? 'Domain verified' : 'Some required records are not published yet' }
  })

  app.patch('/api/domains/:id', { schema: UpdateDomainRoute, bodyLimit: BODY_LIMITS.small }, async (request) => {
    const accountId = requireAccount(request).id
    const { receiving, tracking } = request.body
    let d = tracking !== undefined ? await domains.setTracking(accountId, request.params.id, tracking) : undefined
    if (receiving !== undefined) d = await domains.setReceiving(accountId, request.params.id, receiving)
    const said: string[] = []
    if (receiving !== undefined) said.push(d!.receiving ? `Receiving on: publish the MX record of ${d!.name}; mail is taken while the domain is verified` : 'Receiving off')
    if (tracking !== undefined) said.push(`Tracking by default: opens ${d!.tracking.opens ? 'on' : 'off'}, clicks ${d!.tracking.clicks ? 'on' : 'off'}`)
    return { success: true as const, data: d!, message: said.join('. ') }
  })

  app.delete('/api/domains/:id', { schema: DeleteDomainRoute }, async (request) => {
    await domains.remove(requireAccount(request).id, request.params.id)
    return { success: true as const, data: { id: request.params.id, deleted: true as const }, message: 'Domain deleted' }
  })
}

export default domainRoutes
