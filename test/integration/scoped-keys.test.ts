// Scoped API keys over real sockets: a full_access key manages its own account on every management route
// as the session cookie does; a sending_access key only sends and reads emails.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createSandboxTransport } from '../../src/mail/sandbox-transport.js'
import { errorOf, signedUp, startServer, type Client, type Response, type TestServer } from '../helpers/server.js'

const RECEIVER = 'https://receiver.example.com/svc-hook'
const EVIL_ORIGIN = 'https://evil.example'
const MAIL = { to: 'someone@example.com', subject: 'Hello', html: '<p>Hi</p>' }

async function setup (t: Parameters<typeof startServer>[0]) {
  return startServer(t, { deps: { transport: createSandboxTransport() } })
}

/** A client that sends nothing but the key (no cookie): what a platform calling svc looks like. */
function keyed (server: TestServer, key: string) {
  const c: Client = server.client()
  const h = (extra?: Record<string, string>) => ({ 'x-api-key': key, ...extra })
  return {
    get: (path: string, extra?: Record<string, string>) => c.get(path, h(extra)),
    post: (path: string, body?: unknown, extra?: Record<string, string>) => c.post(path, body, h(extra)),
    patch: (path: string, body: unknown) => c.patch(path, body, h()),
    delete: (path: string) => c.delete(path, h()),
  }
}

async function newKey (client: Client, permission?: string): Promise<{ id: string; key: string; permission: string }> {
  const res = await client.post('/api/keys', { name: permission ?? 'default', ...(permission ? { permission } : {}) })
  assert.equal(res.status, 201, res.text)
  return res.body.data
}

function expectStatus (res: Response, status: number, what: string): void {
  assert.equal(res.status, status, `${what}: ${res.text}`)
}

test('a full_access key (the default) works on every management route of its own account, as the cookie does', async (t) => {
  const server = await setup(t)
  const alice = await signedUp(server)
  const full = await newKey(alice.client)
  assert.equal(full.permission, 'full_access', 'the default')
  // A foreign Origin does not matter with a key: the Origin check guards cookies, which browsers send on their own.
  const k = keyed(server, full.key)

  const keys = await k.get('/api/keys', { origin: EVIL_ORIGIN })
  expectStatus(keys, 200, 'GET /api/keys')
  assert.deepEqual(keys.body.data.map((x: any) => [x.id, x.permission]), [[full.id, 'full_access']])
  const sending = await k.post('/api/keys', { name: 'mailer', permission: 'sending_access' })
  expectStatus(sending, 201, 'POST /api/keys')
  assert.equal(sending.body.data.permission, 'sending_access')
  expectStatus(await k.delete(`/api/keys/${sending.body.data.id}`), 200, 'DELETE /api/keys/:id')

  const created = await k.post('/api/webhooks', { url: RECEIVER, events: ['email.delivered'] })
  expectStatus(created, 201, 'POST /api/webhooks')
  const hook = created.body.data.id as string
  expectStatus(await k.get('/api/webhooks'), 200, 'GET /api/webhooks')
  expectStatus(await k.get(`/api/webhooks/${hook}`), 200, 'GET /api/webhooks/:id')
  expectStatus(await k.patch(`/api/webhooks/${hook}`, { events: ['email.bounced'] }), 200, 'PATCH /api/webhooks/:id')
  expectStatus(await k.post(`/api/webhooks/${hook}/rotate-secret`), 200, 'rotate-secret')
  expectStatus(await k.post(`/api/webhooks/${hook}/test`, { event: 'email.bounced' }), 202, 'test delivery')
  expectStatus(await k.get(`/api/webhooks/${hook}/deliveries`), 200, 'delivery log')
  expectStatus(await k.post(`/api/webhooks/${hook}/recover`, { since: new Date(Date.now() - 60_000).toISOString() }), 202, 'recover')
  assert.equal(errorOf(await k.post(`/api/webhooks/${hook}/deliveries/dlv_0000000000000000000000000000/retry`)).code, 'not_found')

  expectStatus(await k.post('/api/suppressions', { email: 'gone@example.com' }), 201, 'POST /api/suppressions')
  const listed = await k.get('/api/suppressions')
  expectStatus(listed, 200, 'GET /api/suppressions')
  assert.deepEqual(listed.body.data.map((s: any) => s.email), ['gone@example.com'])
  expectStatus(await k.delete('/api/suppressions/gone@example.com'), 200, 'DELETE /api/suppressions/:email')

  const sent = await k.post('/api/send', MAIL)
  expectStatus(sent, 202, 'POST /api/send')
  expectStatus(await k.get(`/api/emails/${sent.body.data.id}`), 200, 'GET /api/emails/:id')

  // What the key did is the account's: the owner's cookie sees it.
  const seen = await alice.client.get(`/api/webhooks/${hook}`)
  assert.deepEqual(seen.body.data.events, ['email.bounced'])
  expectStatus(await k.delete(`/api/webhooks/${hook}`), 200, 'DELETE /api/webhooks/:id')
  assert.equal((await alice.client.get(`/api/webhooks/${hook}`)).status, 404)
})

test("a full_access key gets 404 for another account's key, webhook, deliveries, suppression and email, and changes nothing", async (t) => {
  const server = await setup(t)
  const alice = await signedUp(server)
  const bob = await signedUp(server)
  const k = keyed(server, (await newKey(alice.client)).key)
  const bobKey = await newKey(bob.client)
  const bobHook = (await bob.client.post('/api/webhooks', { url: RECEIVER, events: ['email.delivered'] })).body.data.id as string
  expectStatus(await bob.client.post('/api/suppressions', { email: 'bob-only@example.com' }), 201, 'bob suppression')
  const bobEmail = (await keyed(server, bobKey.key).post('/api/send', MAIL)).body.data.id as string

  const refused: Array<[string, Promise<Response>]> = [
    ['DELETE key', k.delete(`/api/keys/${bobKey.id}`)],
    ['GET webhook', k.get(`/api/webhooks/${bobHook}`)],
    ['PATCH webhook', k.patch(`/api/webhooks/${bobHook}`, { status: 'disabled' })],
    ['rotate-secret', k.post(`/api/webhooks/${bobHook}/rotate-secret`)],
    ['test', k.post(`/api/webhooks/${bobHook}/test`)],
    ['deliveries', k.get(`/api/webhooks/${bobHook}/deliveries`)],
    ['recover', k.post(`/api/webhooks/${bobHook}/recover`, { since: new Date(Date.now() - 60_000).toISOString() })],
    ['DELETE webhook', k.delete(`/api/webhooks/${bobHook}`)],
    ['DELETE suppression', k.delete('/api/suppressions/bob-only@example.com')],
    ['GET email', k.get(`/api/emails/${bobEmail}`)],
  ]
  for (const [what, pending] of refused) {
    const res = await pending
    expectStatus(res, 404, what)
    assert.equal(errorOf(res).code, 'not_found', what)
  }
  assert.deepEqual((await k.get('/api/webhooks')).body.data, [], 'lists hold only its own account')
  assert.deepEqual((await k.get('/api/suppressions')).body.data, [])

  const hook = await bob.client.get(`/api/webhooks/${bobHook}`)
  assert.equal(hook.body.data.status, 'enabled')
  assert.deepEqual((await bob.client.get('/api/keys')).body.data.map((x: any) => x.status), ['active'])
  assert.equal((await bob.client.get('/api/suppressions')).body.data.length, 1)
})

test('a sending_access key sends and reads emails; every management route is 403 insufficient_permission and changes nothing', async (t) => {
  const server = await setup(t)
  const alice = await signedUp(server)
  const other = await newKey(alice.client)
  const hook = (await alice.client.post('/api/webhooks', { url: RECEIVER, events: ['email.delivered'] })).body.data.id as string
  const sending = await newKey(alice.client, 'sending_access')
  assert.equal(sending.permission, 'sending_access')
  const k = keyed(server, sending.key)

  const sent = await k.post('/api/send', MAIL)
  expectStatus(sent, 202, 'POST /api/send')
  expectStatus(await k.post('/api/send/batch', [MAIL, { ...MAIL, to: 'other@example.com' }]), 202, 'POST /api/send/batch')
  expectStatus(await k.get(`/api/emails/${sent.body.data.id}`), 200, 'GET /api/emails/:id')

  const refused: Array<[string, Promise<Response>]> = [
    ['GET /api/keys', k.get('/api/keys')],
    ['POST /api/keys', k.post('/api/keys', { name: 'escalate', permission: 'full_access' })],
    ['POST /api/keys (sending)', k.post('/api/keys', { name: 'same', permission: 'sending_access' })],
    ['DELETE /api/keys/:id', k.delete(`/api/keys/${other.id}`)],
    ['GET /api/webhooks', k.get('/api/webhooks')],
    ['POST /api/webhooks', k.post('/api/webhooks', { url: RECEIVER, events: ['email.sent'] })],
    ['GET /api/webhooks/:id', k.get(`/api/webhooks/${hook}`)],
    ['PATCH /api/webhooks/:id', k.patch(`/api/webhooks/${hook}`, { status: 'disabled' })],
    ['DELETE /api/webhooks/:id', k.delete(`/api/webhooks/${hook}`)],
    ['rotate-secret', k.post(`/api/webhooks/${hook}/rotate-secret`)],
    ['deliveries', k.get(`/api/webhooks/${hook}/deliveries`)],
    ['test', k.post(`/api/webhooks/${hook}/test`)],
    ['recover', k.post(`/api/webhooks/${hook}/recover`, { since: new Date(Date.now() - 60_000).toISOString() })],
    ['retry', k.post(`/api/webhooks/${hook}/deliveries/dlv_0000000000000000000000000000/retry`)],
    ['GET /api/suppressions', k.get('/api/suppressions')],
    ['POST /api/suppressions', k.post('/api/suppressions', { email: 'x@example.com' })],
    ['DELETE /api/suppressions/:email', k.delete('/api/suppressions/x@example.com')],
  ]
  for (const [what, pending] of refused) {
    const res = await pending
    expectStatus(res, 403, what)
    assert.equal(errorOf(res).code, 'insufficient_permission', what)
    assert.ok(!res.text.includes(RECEIVER) && !res.text.includes(other.id), `${what}: nothing of the account in the refusal`)
  }

  const keys = (await alice.client.get('/api/keys')).body.data
  assert.deepEqual(keys.map((x: any) => [x.id, x.permission, x.status]).sort(),
    [[other.id, 'full_access', 'active'], [sending.id, 'sending_access', 'active']].sort(), 'no key made, none revoked')
  const hooks = (await alice.client.get('/api/webhooks')).body.data
  assert.deepEqual(hooks.map((h: any) => [h.id, h.status]), [[hook, 'enabled']])
  assert.deepEqual((await alice.client.get('/api/suppressions')).body.data, [])
})

test('a key never creates a key with more permission than its own; a full key creates either; the plan limit holds', async (t) => {
  const server = await setup(t)
  const alice = await signedUp(server)
  const full = keyed(server, (await newKey(alice.client)).key)
  const asFull = await full.post('/api/keys', { name: 'full again', permission: 'full_access' })
  expectStatus(asFull, 201, 'full creates full')
  assert.equal(asFull.body.data.permission, 'full_access')
  const asSending = await full.post('/api/keys', { name: 'sender', permission: 'sending_access' })
  expectStatus(asSending, 201, 'full creates sending')

  const sending = keyed(server, asSending.body.data.key)
  for (const permission of ['sending_access', 'full_access']) {
    const res = await sending.post('/api/keys', { name: 'nope', permission })
    expectStatus(res, 403, `sending creates ${permission}`)
    assert.equal(errorOf(res).code, 'insufficient_permission')
  }

  // The free plan's three active keys, whoever asks and whatever the permission.
  const fourth = await full.post('/api/keys', { name: 'fourth', permission: 'sending_access' })
  expectStatus(fourth, 403, 'a fourth key')
  assert.equal(errorOf(fourth).code, 'plan_limit_reached')

  const bad = await alice.client.post('/api/keys', { name: 'admin', permission: 'admin' })
  expectStatus(bad, 400, 'an unknown permission')
  assert.equal(errorOf(bad).code, 'validation_error')
  assert.equal((await alice.client.get('/api/keys')).body.data.length, 3)
})

test('a revoked full_access key is 401 on the very next management request, revoked by the cookie or by itself', async (t) => {
  const server = await setup(t)
  const alice = await signedUp(server)
  const first = await newKey(alice.client)
  const k = keyed(server, first.key)
  expectStatus(await k.get('/api/webhooks'), 200, 'before')
  expectStatus(await alice.client.delete(`/api/keys/${first.id}`), 200, 'revoke')
  for (const res of [await k.get('/api/webhooks'), await k.post('/api/keys', { name: 'late' }), await k.post('/api/send', MAIL)]) {
    expectStatus(res, 401, 'after')
    assert.equal(errorOf(res).code, 'invalid_api_key')
  }

  const second = await newKey(alice.client)
  const self = keyed(server, second.key)
  expectStatus(await self.delete(`/api/keys/${second.id}`), 200, 'a key revokes itself')
  const after = await self.get('/api/keys')
  expectStatus(after, 401, 'after revoking itself')
  assert.equal(errorOf(after).code, 'invalid_api_key')
})

test('cookie requests keep the Origin check; a request with a key acts for the key\'s account alone; a bad key is 401', async (t) => {
  const server = await setup(t)
  const alice = await signedUp(server)
  const bob = await signedUp(server)
  const aliceKey = await newKey(alice.client)
  await alice.client.post('/api/webhooks', { url: RECEIVER, events: ['email.delivered'] })

  const foreign = await bob.client.get('/api/webhooks', { origin: EVIL_ORIGIN })
  expectStatus(foreign, 403, 'a cookie from a foreign origin')
  assert.equal(errorOf(foreign).code, 'forbidden_origin')

  // Bob's cookie beside Alice's key: the key decides, the cookie is not read.
  const both = await bob.client.get('/api/webhooks', { 'x-api-key': aliceKey.key })
  expectStatus(both, 200, 'key and cookie')
  assert.equal(both.body.data.length, 1, "Alice's webhook")

  for (const key of ['', 'svc_sk_' + 'x'.repeat(43), 'not-a-key']) {
    const res = await bob.client.get('/api/webhooks', { 'x-api-key': key })
    expectStatus(res, 401, `x-api-key ${JSON.stringify(key)}`)
    assert.equal(errorOf(res).code, 'invalid_api_key')
  }
})
