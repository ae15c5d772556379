// The OpenAPI document that svc serves, as tools and clients take it: Redocly's linter with its
// recommended rules finds nothing wrong; every route Fastify serves is in it with its methods; every
// operation has an operationId and declared security; and what routes really answer (probed here) is
// among the statuses the document declares for them.
import { createConfig, lintFromString } from '@redocly/openapi-core'
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { errorKinds } from '../../src/errors.js'
import { loadWebFiles, WEB_ROOT } from '../../src/http/dashboard.js'
import { componentNames } from '../../src/http/schemas.js'
import { createSandboxTransport } from '../../src/mail/sandbox-transport.js'
import { routesOf } from '../fuzz/harness.js'
import { sender } from '../helpers/sending.js'
import { startServer, type TestServer } from '../helpers/server.js'

interface Operation {
  operationId?: string
  parameters?: Array<{ in: string; name: string; required?: boolean; schema?: { default?: unknown } }>
  requestBody?: { content: Record<string, { schema: Record<string, unknown> }> }
  security?: Array<Record<string, string[]>>
  responses: Record<string, { description?: string; content?: Record<string, unknown>; headers?: Record<string, unknown> }>
}
interface Document {
  components: { schemas: Record<string, any> }
  servers?: Array<{ url: string }>
  info: { license?: { name: string } }
  paths: Record<string, Record<string, Operation>>
}

const METHODS = ['get', 'head', 'post', 'put', 'patch', 'delete', 'options']

async function served (server: TestServer): Promise<{ text: string; doc: Document }> {
  const res = await server.app.inject({ method: 'GET', url: '/openapi.json' })
  assert.equal(res.statusCode, 200)
  return { text: res.body, doc: JSON.parse(res.body) as Document }
}

function operations (doc: Document): Array<{ path: string; method: string; op: Operation }> {
  return Object.entries(doc.paths).flatMap(([path, ops]) =>
    Object.entries(ops).filter(([method]) => METHODS.includes(method)).map(([method, op]) => ({ path, method, op })))
}

/** The document's path for a Fastify URL: `/api/keys/:id` → `/api/keys/{id}`. */
const documented = (url: string) => url.replace(/:([A-Za-z0-9_]+)/g, '{$1}')

describe('the OpenAPI document', () => {
  test('lints clean under Redocly\'s recommended rules: no error, no warning', async (t) => {
    // As deployed: `servers` is PUBLIC_URL (on the localhost default, Redocly warns no-server-example.com).
    const server = await startServer(t, { env: { PUBLIC_URL: 'https://mail.acme.test' } })
    const { text } = await served(server)
    const config = await createConfig({ extends: ['recommended'] })
    const problems = await lintFromString({ source: text, absoluteRef: `${server.url}/openapi.json`, config })
    const listed = problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location.map((l) => l.pointer).join(', ')}`)
    assert.deepEqual(listed.filter((p) => p.startsWith('error')), [], `errors:\n${listed.join('\n')}`)
    assert.deepEqual(listed, [], `warnings:\n${listed.join('\n')}`)
  })

  test('every route Fastify serves is in it, with its methods; each operation has a unique operationId and declared security', async (t) => {
    const server = await startServer(t)
    const { doc } = await served(server)
    // Left out on purpose: the dashboard's static files and Swagger UI's own pages (both are UIs, not API).
    const ui = new Set(['/', ...loadWebFiles(WEB_ROOT).map((f) => f.path)])
    const missing: string[] = []
    for (const { url, methods } of routesOf(server.app)) {
      if (ui.has(url) || url === '/docs' || url.startsWith('/docs/')) continue
      const ops = doc.paths[documented(url)]
      for (const method of methods) {
        // Fastify answers HEAD on every GET route, and the document declares each one.
        if (ops?.[method.toLowerCase()] === undefined) missing.push(`${method} ${url}`)
      }
    }
    assert.deepEqual(missing, [], 'routes missing from the document')
    for (const path of ['/metrics', '/healthz', '/readyz', '/t/o/{token}', '/t/c/{token}']) assert.ok(doc.paths[path], path)
    assert.ok(doc.paths['/t/c/{token}']!.head, 'HEAD of a tracked link (link checkers) is documented')

    const ids = operations(doc).map(({ op, method, path }) => op.operationId ?? `(none: ${method} ${path})`)
    assert.deepEqual(ids.filter((id) => id.startsWith('(none')), [])
    assert.equal(new Set(ids).size, ids.length, 'operationIds are unique')
    assert.ok(ids.every((id) => /^[a-z][A-Za-z]+$/.test(id)), `camelCase operationIds: ${ids.join(', ')}`)
    assert.equal(doc.paths['/api/keys']!.post!.operationId, 'createApiKey')
    assert.equal(doc.paths['/api/webhooks']!.get!.operationId, 'listWebhooks')

    assert.deepEqual(operations(doc).filter(({ op }) => op.security === undefined).map(({ method, path }) => `${method} ${path}`), [])
    const isPublic = (path: string, method = 'get') => doc.paths[path]![method]!.security!.length === 0
    for (const path of ['/healthz', '/readyz', '/openapi.json', '/t/o/{token}', '/t/c/{token}', '/t/u/{token}']) assert.ok(isPublic(path), path)
    assert.ok(isPublic('/api/auth/signup', 'post') && isPublic('/api/auth/login', 'post'))
    // The management routes take the session cookie or a full_access key.
    assert.deepEqual(doc.paths['/api/keys']!.get!.security, [{ session: [] }, { apiKey: [] }])
    assert.deepEqual(doc.servers, [{ url: server.config.publicUrl, description: 'PUBLIC_URL' }])
    assert.equal(doc.info.license?.name, 'MIT')
  })

  test('what the routes answer is declared: a probe of every operation, /readyz 503, a tracked link 302 and 404', async (t) => {
    const transport = createSandboxTransport()
    const server = await startServer(t, { deps: { transport } })
    const { doc } = await served(server)
    const s = await sender(server)
    const cookie = s.client.cookie!
    const undeclared: string[] = []
    const check = (method: string, path: string, status: number, why: string) => {
      const op = doc.paths[path]?.[method.toLowerCase()]
      if (op === undefined) undeclared.push(`${method} ${path}: not in the document`)
      else if (op.responses[String(status)] === undefined) undeclared.push(`${method} ${path} answered ${status} (${why}), which it does not declare`)
    }
    const inject = async (method: string, path: string, url: string, why: string, opts: { headers?: Record<string, string>; payload?: string | Buffer } = {}) => {
      const res = await server.app.inject({ method: method as 'GET', url, ...opts })
      check(method, path, res.statusCode, why)
      return res
    }

    // Every operation, as a stranger, with credentials, with a body of another type and with one too large.
    const huge = Buffer.alloc(server.config.bodyLimit * 4 + 1024, 0x20)
    for (const { path, method, op } of operations(doc)) {
      const M = method.toUpperCase()
      const url = path.replace(/\{[^}]+\}/g, 'nope')
      const credentials = { cookie, 'x-api-key': s.key }
      const withBody = M !== 'GET' && M !== 'HEAD'
      const json = withBody ? { payload: '{}', headers: { 'content-type': 'application/json' } } : {}
      await inject(M, path, url, 'no credentials', json)
      await inject(M, path, url, 'credentials', { ...json, headers: { ...json.headers, ...credentials } })
      if (withBody) {
        await inject(M, path, url, 'a text/plain body', { payload: 'hello', headers: { ...credentials, 'content-type': 'text/plain' } })
        await inject(M, path, url, 'a body over every limit', { payload: huge, headers: { ...credentials, 'content-type': 'application/json' } })
      }
      assert.ok(op.operationId)
    }

    // Not ready: 503, declared.
    server.app.services.readiness.set('probe', () => 'the probe says no')
    const notReady = await inject('GET', '/readyz', '/readyz', 'a readiness check fails')
    assert.equal(notReady.statusCode, 503)
    server.app.services.readiness.delete('probe')

    // A tracked link: 302 to the original URL when valid, the HTML 404 page when not; HEAD likewise.
    const sent = await s.send({ to: 'reader@example.com', subject: 'Links', html: '<p><a href="https://shop.example.com/item">Item</a></p>' })
    assert.equal(sent.status, 202, sent.text)
    await s.settled(sent.body.data.id)
    const html = transport.sent().find((m) => m.messageId === sent.body.data.id)!.html!
    const click = new URL(/<a href="([^"]+)"/.exec(html)![1]!.replace(/&amp;/g, '&')).pathname
    const redirect = await inject('GET', '/t/c/{token}', click, 'a valid click token')
    assert.equal(redirect.statusCode, 302)
    assert.equal(redirect.headers.location, 'https://shop.example.com/item')
    const invalid = await inject('GET', '/t/c/{token}', '/t/c/not-a-token', 'a forged token')
    assert.equal(invalid.statusCode, 404)
    assert.match(String(invalid.headers['content-type']), /^text\/html/)
    assert.ok(doc.paths['/t/c/{token}']!.get!.responses['404']!.content!['text/html'], 'the 404 is documented as the HTML page it is')
    await inject('HEAD', '/t/c/{token}', click, 'HEAD of a valid click token')
    await inject('HEAD', '/t/o/{token}', '/t/o/not-a-token', 'HEAD of a forged pixel token')
    const metrics = await inject('GET', '/metrics', '/metrics', 'a scrape')
    assert.equal(metrics.statusCode, 200)

    assert.deepEqual(undeclared, [])
  })

  test('ready for a generated SDK: named resources, the error codes as an enum, described answers, declared headers, HEAD beside every GET', async (t) => {
    const server = await startServer(t)
    const { doc } = await served(server)
    const schemas = doc.components.schemas
    for (const name of ['ErrorEnvelope', 'EventType', 'Account', 'AccountDetails', 'ApiKey', 'NewApiKey', 'Webhook', 'NewWebhook', 'Delivery',
      'Email', 'EmailEvent', 'EmailSummary', 'SendResult', 'Suppression', 'Domain', 'DnsRecord', 'Stats', 'Health']) {
      assert.ok(schemas[name], `components.schemas.${name}`)
    }
    assert.deepEqual(Object.keys(schemas).sort(), componentNames().sort())
    assert.deepEqual(schemas.ErrorEnvelope.properties.error.properties.code.enum, [...errorKinds.keys()])
    // A resource is one schema, referenced wherever it is answered; its enums are the closed sets.
    const data = (path: string, method: string, status: string) =>
      (doc.paths[path]![method]!.responses[status]!.content!['application/json'] as { schema: { properties: { data: any } } }).schema.properties.data
    assert.deepEqual(data('/api/webhooks/{id}', 'get', '200'), { $ref: '#/components/schemas/Webhook' })
    assert.deepEqual(data('/api/webhooks', 'get', '200').items, { $ref: '#/components/schemas/Webhook' })
    assert.deepEqual(data('/api/webhooks/{id}/deliveries/{deliveryId}/retry', 'post', '202'), { $ref: '#/components/schemas/Delivery' })
    assert.deepEqual(data('/api/domains', 'post', '201'), { $ref: '#/components/schemas/Domain' })
    assert.deepEqual(schemas.Webhook.properties.events.items, { $ref: '#/components/schemas/EventType' })
    assert.deepEqual(schemas.Delivery.properties.event, { $ref: '#/components/schemas/EventType' })
    // html or text, and a subject; or a template in place of all three: the rule is in the schema.
    const send = doc.paths['/api/send']!.post!.requestBody!.content['application/json']!.schema as { allOf: Array<{ anyOf: Array<{ required: string[] }> }> }
    assert.deepEqual(send.allOf.map((rule) => rule.anyOf.map((b) => b.required)), [[['html'], ['text'], ['template']], [['subject'], ['template']]])

    const ops = operations(doc)
    const undescribed: string[] = []
    const withoutRequestId: string[] = []
    for (const { path, method, op } of ops) {
      for (const [status, r] of Object.entries(op.responses)) {
        if (r.description === undefined || r.description === 'Default Response') undescribed.push(`${method} ${path} ${status}`)
        if (r.headers?.['x-request-id'] === undefined) withoutRequestId.push(`${method} ${path} ${status}`)
      }
      // A query parameter with a default may be left out.
      for (const p of op.parameters ?? []) if (p.schema?.default !== undefined) assert.notEqual(p.required, true, `${method} ${path} ${p.name}`)
      if (method === 'get') assert.ok(doc.paths[path]!.head, `HEAD ${path}`)
    }
    assert.deepEqual(undescribed, [], 'answers described "Default Response" or not at all')
    assert.deepEqual(withoutRequestId, [])
    assert.ok(doc.paths['/api/auth/login']!.post!.responses['200']!.headers!['set-cookie'])
    assert.ok(doc.paths['/api/auth/logout']!.post!.responses['200']!.headers!['set-cookie'])
    assert.ok(doc.paths['/api/send']!.post!.responses['202']!.headers!['idempotent-replayed'])
    for (const h of ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset']) {
      assert.ok(doc.paths['/api/send']!.post!.responses['202']!.headers![h], h)
      assert.ok(doc.paths['/api/emails']!.get!.responses['429']!.headers![h], h)
    }
    assert.ok(doc.paths['/api/emails']!.get!.responses['429']!.headers!['retry-after'])
  })

  test('the headers an answer carries are declared for it', async (t) => {
    const server = await startServer(t)
    const { doc } = await served(server)
    const s = await sender(server)
    const WATCHED = ['x-request-id', 'set-cookie', 'idempotent-replayed', 'ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset', 'retry-after']
    const undeclared: string[] = []
    const check = (method: string, path: string, res: { statusCode: number; headers: Record<string, unknown> }) => {
      const declared = doc.paths[path]![method]!.responses[String(res.statusCode)]?.headers ?? {}
      for (const h of WATCHED) if (res.headers[h] !== undefined && declared[h] === undefined) undeclared.push(`${method} ${path} ${res.statusCode} ${h}`)
    }
    const json = { 'content-type': 'application/json' }
    const email = `headers-${Date.now()}@example.test`
    const signup = await server.app.inject({ method: 'POST', url: '/api/auth/signup', headers: json, payload: JSON.stringify({ email, password: 'correct horse battery' }) })
    check('post', '/api/auth/signup', signup)
    const login = await server.app.inject({ method: 'POST', url: '/api/auth/login', headers: json, payload: JSON.stringify({ email, password: 'correct horse battery' }) })
    check('post', '/api/auth/login', login)
    const cookie = String(login.headers['set-cookie']).split(';')[0]!
    check('get', '/api/account', await server.app.inject({ method: 'GET', url: '/api/account', headers: { cookie } }))
    check('post', '/api/auth/logout', await server.app.inject({ method: 'POST', url: '/api/auth/logout', headers: { cookie } }))
    const body = JSON.stringify({ to: 'delivered@simulator.test', subject: 'Hi', text: 'Hello' })
    const send = { method: 'POST' as const, url: '/api/send', headers: { ...json, 'x-api-key': s.key, 'idempotency-key': 'headers-1' }, payload: body }
    check('post', '/api/send', await server.app.inject(send))
    const replayed = await server.app.inject(send)
    assert.equal(replayed.headers['idempotent-replayed'], 'true')
    check('post', '/api/send', replayed)
    check('get', '/api/emails', await server.app.inject({ method: 'GET', url: '/api/emails', headers: { 'x-api-key': s.key } }))
    check('get', '/healthz', await server.app.inject({ method: 'GET', url: '/healthz' }))
    assert.deepEqual(undeclared, [])
  })
})
