// Webhooks over real sockets: create, list, get, patch, delete and rotate-secret with a session cookie,
// plan limits, validation, and the URL guard in development and in production (with an injected
// resolver: no test touches public DNS, and no webhook URL is ever contacted).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { ResolvedAddress, Resolver } from '../../src/domain/webhook-url.js'
import { TEST_SECRET, errorOf, signedUp, startServer, type Client, type Response } from '../helpers/server.js'
import { openWebhookSecret } from '../../src/domain/secrets.js'

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const ALL_EVENTS = [
  'email.sent', 'email.delivered', 'email.opened', 'email.clicked', 'email.bounced', 'email.complained', 'email.unsubscribed',
]
const SHOWN_FIELDS = ['createdAt', 'delivery', 'events', 'filter', 'id', 'rateLimit', 'status', 'updatedAt', 'url']
const RECEIVER = 'https://receiver.example.com/svc-hook'
const DAY_MS = 24 * 3_600_000
/** Every code API.md lists; a refusal must use one of them. */
const API_CODES = new Set([
  'validation_error', 'authentication_required', 'invalid_api_key', 'invalid_session', 'invalid_credentials',
  'plan_limit_reached', 'forbidden_origin', 'insufficient_permission', 'not_found', 'email_taken', 'idempotency_conflict', 'payload_too_large',
  'unsupported_media_type', 'webhook_url_not_allowed', 'recipient_suppressed', 'rate_limited', 'internal_error', 'unavailable',
])

/** Names the production tests use, each resolving to a fixed answer; anything else does not resolve. */
const DNS: Record<string, string[]> = {
  'public.example.test': ['93.184.216.34'],
  'loopback.example.test': ['127.0.0.1'],
  'private.example.test': ['10.0.0.5'],
  'metadata.example.test': ['169.254.169.254'],
  'v6-loopback.example.test': ['::1'],
  'ula.example.test': ['fd00::1'],
  'cgnat.example.test': ['100.64.1.1'],
  'mixed.example.test': ['93.184.216.34', '10.0.0.5'],
}

/**
 * A resolver with a fixed table for `*.example.test` (other names there do not resolve) that answers a
 * public address for any other name, like wildcard DNS would: the odd loopback spellings must be refused
 * for what they are, not because DNS happened to fail on them.
 */
function fixedResolver (): Resolver & { asked: string[] } {
  const asked: string[] = []
  const resolve = async (hostname: string): Promise<ResolvedAddress[]> => {
    asked.push(hostname)
    const addresses = DNS[hostname] ?? (hostname.endsWith('.example.test') ? undefined : ['93.184.216.34'])
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' })
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
  }
  return Object.assign(resolve, { asked })
}

interface Created { id: string; url: string; events: string[]; secret: string; status: string; createdAt: string }

async function createWebhook (client: Client, url = RECEIVER, events: string[] = ['email.delivered', 'email.bounced']): Promise<Created> {
  const res = await client.post('/api/webhooks', { url, events })
  assert.equal(res.status, 201, res.text)
  return res.body.data
}

async function listWebhooks (client: Client): Promise<{ res: Response; items: any[] }> {
  const res = await client.get('/api/webhooks')
  assert.equal(res.status, 200, res.text)
  assert.equal(res.body.success, true)
  assert.ok(Array.isArray(res.body.data))
  return { res, items: res.body.data }
}

function refusedAs (res: Response, status: number, code: string, label: string): void {
  assert.equal(res.status, status, `${label}: ${res.text}`)
  const err = errorOf(res)
  assert.equal(err.code, code, label)
  assert.ok(API_CODES.has(err.code), `${label}: ${err.code} is not an API.md code`)
}

test('creating a webhook answers 201 with exactly { id, url, events, secret, status, rateLimit, filter, createdAt }', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)

  const res = await client.post('/api/webhooks', { url: RECEIVER, events: ['email.delivered', 'email.bounced'] })

  assert.equal(res.status, 201, res.text)
  assert.equal(res.body.success, true)
  assert.equal(typeof res.body.message, 'string')
  const data = res.body.data
  assert.deepEqual(Object.keys(data).sort(), ['createdAt', 'events', 'filter', 'id', 'rateLimit', 'secret', 'status', 'url'])
  assert.equal(data.filter, null)
  assert.match(data.id, /^wh_/)
  assert.equal(data.url, RECEIVER)
  assert.deepEqual(data.events, ['email.delivered', 'email.bounced'])
  assert.match(data.secret, /^whsec_[A-Za-z0-9+/]{43}=$/)
  assert.equal(data.status, 'enabled')
  assert.match(data.createdAt, ISO_MS)
})

test('list and get show { id, url, events, status, rateLimit, filter, delivery, createdAt, updatedAt } and never the secret', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  const a = await createWebhook(client, 'https://a.example.com/hook', ['email.sent'])
  const b = await createWebhook(client, 'https://b.example.com/hook', ALL_EVENTS)

  const { res: listRes, items } = await listWebhooks(client)

  assert.equal(items.length, 2)
  for (const item of items) assert.deepEqual(Object.keys(item).sort(), SHOWN_FIELDS)
  const byId = new Map(items.map((w) => [w.id, w]))
  for (const c of [a, b]) {
    const item = byId.get(c.id)
    assert.equal(item.url, c.url)
    assert.deepEqual(item.events, c.events)
    assert.equal(item.status, 'enabled')
    assert.equal(item.createdAt, c.createdAt)
    assert.match(item.updatedAt, ISO_MS)
  }

  const got = await client.get(`/api/webhooks/${a.id}`)
  assert.equal(got.status, 200, got.text)
  assert.deepEqual(Object.keys(got.body.data).sort(), SHOWN_FIELDS)
  assert.deepEqual(got.body.data, byId.get(a.id))

  for (const res of [listRes, got]) {
    for (const c of [a, b]) assert.ok(!res.text.includes(c.secret), `a secret leaked: ${res.text}`)
    assert.doesNotMatch(res.text, /secret|whsec_/i)
  }
})

test('PATCH changes url, events and status (enabled ↔ disabled); {} and auto_disabled are 400', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  const hook = await createWebhook(client)

  const url = await client.patch(`/api/webhooks/${hook.id}`, { url: 'https://other.example.com/new' })
  assert.equal(url.status, 200, url.text)
  assert.equal(url.body.data.url, 'https://other.example.com/new')
  assert.deepEqual(Object.keys(url.body.data).sort(), SHOWN_FIELDS)
  assert.doesNotMatch(url.text, /whsec_/)

  const events = await client.patch(`/api/webhooks/${hook.id}`, { events: ['email.opened', 'email.clicked'] })
  assert.equal(events.status, 200, events.text)
  assert.deepEqual(events.body.data.events, ['email.opened', 'email.clicked'])

  const disabled = await client.patch(`/api/webhooks/${hook.id}`, { status: 'disabled' })
  assert.equal(disabled.status, 200, disabled.text)
  assert.equal(disabled.body.data.status, 'disabled')
  assert.equal((await client.get(`/api/webhooks/${hook.id}`)).body.data.status, 'disabled')

  const enabled = await client.patch(`/api/webhooks/${hook.id}`, { status: 'enabled' })
  assert.equal(enabled.status, 200, enabled.text)
  assert.equal(enabled.body.data.status, 'enabled')

  refusedAs(await client.patch(`/api/webhooks/${hook.id}`, {}), 400, 'validation_error', 'empty patch')
  refusedAs(await client.patch(`/api/webhooks/${hook.id}`, { status: 'auto_disabled' }), 400, 'validation_error', 'auto_disabled')
  refusedAs(await client.patch(`/api/webhooks/${hook.id}`, { secret: 'whsec_mine' }), 400, 'validation_error', 'secret')
  refusedAs(await client.patch(`/api/webhooks/${hook.id}`, { events: [] }), 400, 'validation_error', 'no events')
  refusedAs(await client.patch(`/api/webhooks/${hook.id}`, { events: ['email.sent', 'email.sent'] }), 400, 'validation_error', 'duplicate events')
  refusedAs(await client.patch(`/api/webhooks/${hook.id}`, { url: 'ftp://files.example.com/hook' }), 422, 'webhook_url_not_allowed', 'ftp url')

  const final = await client.get(`/api/webhooks/${hook.id}`)
  assert.equal(final.status, 200, final.text)
  assert.equal(final.body.data.url, 'https://other.example.com/new')
  assert.deepEqual(final.body.data.events, ['email.opened', 'email.clicked'])
  assert.equal(final.body.data.status, 'enabled')
  assert.equal(final.body.data.createdAt, hook.createdAt)
  assert.ok(final.body.data.updatedAt >= hook.createdAt)
})

test('DELETE answers 200 { id, deleted: true }; afterwards the webhook is 404 everywhere', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  const hook = await createWebhook(client)
  const kept = await createWebhook(client, 'https://kept.example.com/hook')

  const res = await client.delete(`/api/webhooks/${hook.id}`)

  assert.equal(res.status, 200, res.text)
  assert.equal(res.body.success, true)
  assert.deepEqual(res.body.data, { id: hook.id, deleted: true })
  refusedAs(await client.get(`/api/webhooks/${hook.id}`), 404, 'not_found', 'GET after delete')
  refusedAs(await client.patch(`/api/webhooks/${hook.id}`, { status: 'disabled' }), 404, 'not_found', 'PATCH after delete')
  refusedAs(await client.delete(`/api/webhooks/${hook.id}`), 404, 'not_found', 'DELETE after delete')
  refusedAs(await client.post(`/api/webhooks/${hook.id}/rotate-secret`), 404, 'not_found', 'rotate after delete')
  const { items } = await listWebhooks(client)
  assert.deepEqual(items.map((w) => w.id), [kept.id])
})

test('the 6th webhook on Free is 403 plan_limit_reached naming Free and 5; deleting one frees a slot', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  const hooks = []
  for (let i = 0; i < 5; i++) hooks.push(await createWebhook(client, `https://h${i}.example.com/hook`))

  const sixth = await client.post('/api/webhooks', { url: 'https://h5.example.com/hook', events: ['email.sent'] })

  refusedAs(sixth, 403, 'plan_limit_reached', 'sixth webhook')
  const message = errorOf(sixth).message
  assert.match(message, /\bFree\b/)
  assert.match(message, /\b5\b/)
  assert.equal((await listWebhooks(client)).items.length, 5)

  const deleted = await client.delete(`/api/webhooks/${hooks[0]!.id}`)
  assert.equal(deleted.status, 200, deleted.text)
  const again = await client.post('/api/webhooks', { url: 'https://h5.example.com/hook', events: ['email.sent'] })
  assert.equal(again.status, 201, again.text)
  refusedAs(await client.post('/api/webhooks', { url: 'https://h6.example.com/hook', events: ['email.sent'] }), 403, 'plan_limit_reached', 'seventh')
  assert.equal((await listWebhooks(client)).items.length, 5)
})

test('concurrent creations never exceed the 5 webhooks of Free', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)

  const results = await Promise.all(Array.from({ length: 9 }, (_, i) =>
    client.post('/api/webhooks', { url: `https://race${i}.example.com/hook`, events: ['email.sent'] })))

  const statuses = results.map((r) => r.status).sort()
  assert.deepEqual(statuses, [201, 201, 201, 201, 201, 403, 403, 403, 403], results.map((r) => r.text).join('\n'))
  for (const r of results.filter((r) => r.status === 403)) assert.equal(errorOf(r).code, 'plan_limit_reached')
  const { items } = await listWebhooks(client)
  assert.deepEqual(items.map((w) => w.id).sort(), results.filter((r) => r.status === 201).map((r) => r.body.data.id).sort())
})

test('bad events are 400 validation_error and create nothing', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)

  const cases: Array<[string, unknown]> = [
    ['missing', { url: RECEIVER }],
    ['empty', { url: RECEIVER, events: [] }],
    ['unknown type', { url: RECEIVER, events: ['email.sent', 'email.exploded'] }],
    ['duplicates', { url: RECEIVER, events: ['email.sent', 'email.sent'] }],
    ['more than the seven types', { url: RECEIVER, events: [...ALL_EVENTS, 'email.sent'] }],
    ['not strings', { url: RECEIVER, events: [1] }],
    ['not an array', { url: RECEIVER, events: 'email.sent' }],
  ]
  for (const [label, body] of cases) {
    const res = await client.post('/api/webhooks', body)
    refusedAs(res, 400, 'validation_error', `events ${label}`)
    const details = errorOf(res).details ?? []
    assert.ok(details.some((d) => d.path.startsWith('body.events')), `events ${label}: details ${JSON.stringify(details)}`)
  }

  assert.deepEqual((await listWebhooks(client)).items, [])
})

test('bad URLs are refused with the code API.md gives them and create nothing', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  const events = ['email.sent']

  const cases: Array<[string, unknown, number, string]> = [
    ['missing', { events }, 400, 'validation_error'],
    ['not a string', { url: 42, events }, 400, 'validation_error'],
    ['relative', { url: '/hooks/svc', events }, 422, 'webhook_url_not_allowed'],
    ['ftp', { url: 'ftp://files.example.com/hook', events }, 422, 'webhook_url_not_allowed'],
    ['credentials', { url: 'https://user:pw@host.example.com/', events }, 422, 'webhook_url_not_allowed'],
    ['too long', { url: `https://long.example.com/${'a'.repeat(2048)}`, events }, 400, 'validation_error'],
  ]
  for (const [label, body, status, code] of cases) {
    refusedAs(await client.post('/api/webhooks', body), status, code, `url ${label}`)
  }

  assert.deepEqual((await listWebhooks(client)).items, [])
})

test('development mode accepts http receivers on 127.0.0.1 and localhost', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)

  const ip = await createWebhook(client, 'http://127.0.0.1:9/hook')
  const name = await createWebhook(client, 'http://localhost:9/hook')

  assert.equal(ip.url, 'http://127.0.0.1:9/hook')
  assert.equal(name.url, 'http://localhost:9/hook')
})

test('production refuses http, and https hosts that resolve to loopback, private, link-local, metadata or CGNAT', async (t) => {
  const resolver = fixedResolver()
  const server = await startServer(t, { env: { NODE_ENV: 'production' }, deps: { resolver } })
  const { client } = await signedUp(server)
  const events = ['email.sent']

  const refused = [
    'http://public.example.test/hook',
    'https://loopback.example.test/hook',
    'https://private.example.test/hook',
    'https://metadata.example.test/latest/meta-data/',
    'https://v6-loopback.example.test/hook',
    'https://ula.example.test/hook',
    'https://cgnat.example.test/hook',
    'https://mixed.example.test/hook',
    'https://127.1/',
    'https://0x7f000001/',
    'https://[::ffff:127.0.0.1]/',
    'https://localhost./',
    'https://2130706433/',
    'https://127.0.0.1/hook',
    'https://[::1]/hook',
    'https://169.254.169.254/latest/meta-data/',
    'https://does-not-resolve.example.test/hook',
  ]
  for (const url of refused) {
    refusedAs(await client.post('/api/webhooks', { url, events }), 422, 'webhook_url_not_allowed', url)
  }
  assert.deepEqual((await listWebhooks(client)).items, [])

  const accepted = await createWebhook(client, 'https://public.example.test/hook', events)
  assert.equal(accepted.url, 'https://public.example.test/hook')
  assert.ok(resolver.asked.includes('public.example.test'), 'the host was not checked against DNS')
})

test('WEBHOOK_ALLOWED_CIDRS lets an operator-vouched private range through, and nothing else', async (t) => {
  const resolver = fixedResolver()
  const server = await startServer(t, { env: { NODE_ENV: 'production', WEBHOOK_ALLOWED_CIDRS: '10.0.0.0/8' }, deps: { resolver } })
  const { client } = await signedUp(server)

  const internal = await createWebhook(client, 'https://private.example.test/hook', ['email.sent'])
  assert.equal(internal.url, 'https://private.example.test/hook')

  refusedAs(await client.post('/api/webhooks', { url: 'https://loopback.example.test/hook', events: ['email.sent'] }),
    422, 'webhook_url_not_allowed', 'loopback still refused')
  refusedAs(await client.post('/api/webhooks', { url: 'https://metadata.example.test/', events: ['email.sent'] }),
    422, 'webhook_url_not_allowed', 'metadata still refused')
})

test('PATCH to a forbidden URL is refused in production and the webhook keeps its old URL', async (t) => {
  const resolver = fixedResolver()
  const server = await startServer(t, { env: { NODE_ENV: 'production' }, deps: { resolver } })
  const { client } = await signedUp(server)
  const hook = await createWebhook(client, 'https://public.example.test/hook', ['email.sent'])

  for (const url of ['https://private.example.test/hook', 'http://public.example.test/hook', 'https://127.1/']) {
    refusedAs(await client.patch(`/api/webhooks/${hook.id}`, { url, status: 'disabled' }), 422, 'webhook_url_not_allowed', url)
  }

  const got = await client.get(`/api/webhooks/${hook.id}`)
  assert.equal(got.status, 200, got.text)
  assert.equal(got.body.data.url, 'https://public.example.test/hook')
  assert.equal(got.body.data.status, 'enabled', 'a refused PATCH must not apply its other fields')
})

test('rotate-secret answers a new whsec_ secret and keeps the old one for about 24 hours', async (t) => {
  const server = await startServer(t)
  const { client, id: accountId } = await signedUp(server)
  const hook = await createWebhook(client)

  const before = Date.now()
  const res = await client.post(`/api/webhooks/${hook.id}/rotate-secret`)
  const after = Date.now()

  assert.equal(res.status, 200, res.text)
  assert.equal(res.body.success, true)
  assert.deepEqual(Object.keys(res.body.data).sort(), ['previousSecretExpiresAt', 'secret'])
  const { secret, previousSecretExpiresAt } = res.body.data
  assert.match(secret, /^whsec_[A-Za-z0-9+/]{43}=$/)
  assert.notEqual(secret, hook.secret)
  assert.match(previousSecretExpiresAt, ISO_MS)
  const expires = Date.parse(previousSecretExpiresAt)
  assert.ok(expires >= before + DAY_MS - 1000 && expires <= after + DAY_MS + 1000, `expires ${previousSecretExpiresAt}`)

  // Stored sealed (src/domain/secrets.ts): they open to the secrets shown.
  const stored = await server.store.findWebhook(accountId, hook.id)
  assert.ok(stored)
  assert.ok(!stored.secret.includes('whsec_') && !stored.previousSecret!.includes('whsec_'))
  assert.equal(openWebhookSecret(TEST_SECRET, hook.id, stored.secret), secret)
  assert.equal(openWebhookSecret(TEST_SECRET, hook.id, stored.previousSecret!), hook.secret)
  assert.equal(stored.previousSecretExpiresAt, previousSecretExpiresAt)

  const { res: listRes } = await listWebhooks(client)
  const got = await client.get(`/api/webhooks/${hook.id}`)
  for (const r of [listRes, got]) {
    assert.ok(!r.text.includes(secret) && !r.text.includes(hook.secret), `a secret leaked: ${r.text}`)
  }
})

test("another account's webhook is 404 for GET, PATCH, DELETE and rotate-secret, and stays as it was", async (t) => {
  const server = await startServer(t)
  const owner = await signedUp(server)
  const other = await signedUp(server)
  const hook = await createWebhook(owner.client)
  const before = await server.store.findWebhook(owner.id, hook.id)
  assert.ok(before)

  const attempts: Array<[string, Response]> = [
    ['GET', await other.client.get(`/api/webhooks/${hook.id}`)],
    ['PATCH', await other.client.patch(`/api/webhooks/${hook.id}`, { url: 'https://attacker.example.com/', status: 'disabled' })],
    ['DELETE', await other.client.delete(`/api/webhooks/${hook.id}`)],
    ['rotate-secret', await other.client.post(`/api/webhooks/${hook.id}/rotate-secret`)],
  ]
  for (const [label, res] of attempts) {
    refusedAs(res, 404, 'not_found', label)
    assert.ok(!res.text.includes(hook.url) && !res.text.includes(hook.secret), `${label} leaked the webhook: ${res.text}`)
  }

  assert.deepEqual(await server.store.findWebhook(owner.id, hook.id), before)
  const got = await owner.client.get(`/api/webhooks/${hook.id}`)
  assert.equal(got.status, 200, got.text)
  assert.equal(got.body.data.url, RECEIVER)
  assert.equal(got.body.data.status, 'enabled')
  assert.deepEqual((await listWebhooks(other.client)).items, [])
})

test('the webhook routes need the session cookie and the own origin, or a full_access key; a sending key is no substitute', async (t) => {
  const server = await startServer(t)
  const { client, id: accountId } = await signedUp(server)
  const hook = await createWebhook(client)
  const keyRes = await client.post('/api/keys', { name: 'sender', permission: 'sending_access' })
  assert.equal(keyRes.status, 201, keyRes.text)
  const anonymous = server.client()
  const body = { url: 'https://sneaky.example.com/hook', events: ['email.sent'] }

  refusedAs(await anonymous.get('/api/webhooks'), 401, 'authentication_required', 'list without cookie')
  refusedAs(await anonymous.post('/api/webhooks', body), 401, 'authentication_required', 'create without cookie')
  refusedAs(await anonymous.delete(`/api/webhooks/${hook.id}`), 401, 'authentication_required', 'delete without cookie')
  const withKey = { 'x-api-key': keyRes.body.data.key as string }
  const listByKey = await anonymous.get('/api/webhooks', withKey)
  refusedAs(listByKey, 403, 'insufficient_permission', 'list with a sending key')
  assert.ok(!listByKey.text.includes(hook.url))
  assert.equal((await anonymous.post('/api/webhooks', body, withKey)).status, 403)
  assert.equal((await anonymous.post(`/api/webhooks/${hook.id}/rotate-secret`, {}, withKey)).status, 403)

  const evil = { origin: 'https://evil.example' }
  refusedAs(await client.post('/api/webhooks', body, evil), 403, 'forbidden_origin', 'create from a foreign origin')
  refusedAs(await client.delete(`/api/webhooks/${hook.id}`, evil), 403, 'forbidden_origin', 'delete from a foreign origin')
  refusedAs(await client.post(`/api/webhooks/${hook.id}/rotate-secret`, {}, evil), 403, 'forbidden_origin', 'rotate from a foreign origin')

  const { items } = await listWebhooks(client)
  assert.deepEqual(items.map((w) => w.id), [hook.id])
  const stored = await server.store.findWebhook(accountId, hook.id)
  assert.equal(openWebhookSecret(TEST_SECRET, hook.id, stored!.secret), hook.secret)
})
