// API keys over real sockets: POST/GET/DELETE /api/keys with a session cookie, and the x-api-key check
// that sending routes use (a /probe route registered before listen stands in for POST /api/send).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { apiKeyAuth } from '../../src/http/auth.js'
import { hashToken } from '../../src/domain/secrets.js'
import type { App } from '../../src/http/build-app.js'
import {
  TEST_SECRET, errorOf, signedUp, startServer, type Client, type Response, type TestServer,
} from '../helpers/server.js'

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const KEY_SHAPE = /^svc_sk_[A-Za-z0-9_-]{43,}$/
const LISTED_FIELDS = ['createdAt', 'id', 'keyPrefix', 'lastUsedAt', 'name', 'permission', 'revokedAt', 'status']
const EVIL_ORIGIN = 'https://evil.example'

/** A stand-in for an x-api-key route: answers with the id of the key that authenticated. */
function withProbe (app: App): void {
  app.get('/probe', { preHandler: apiKeyAuth(app.services.apiKeys) }, async (req) => ({ keyId: req.apiKey!.id }))
}

function probe (server: TestServer, key?: string): Promise<Response> {
  return server.client().get('/probe', key === undefined ? undefined : { 'x-api-key': key })
}

async function createKey (client: Client, name = 'production'): Promise<{ id: string; key: string; keyPrefix: string; createdAt: string; name: string }> {
  const res = await client.post('/api/keys', { name })
  assert.equal(res.status, 201, res.text)
  return res.body.data
}

async function listKeys (client: Client): Promise<any[]> {
  const res = await client.get('/api/keys')
  assert.equal(res.status, 200, res.text)
  assert.equal(res.body.success, true)
  assert.ok(Array.isArray(res.body.data))
  return res.body.data
}

/** Waits until the wall clock shows a new millisecond, so that "newest first" is not a coin toss. */
async function nextMillisecond (): Promise<void> {
  const start = Date.now()
  while (Date.now() === start) await new Promise((resolve) => setImmediate(resolve))
}

test('creating a key answers 201 with exactly the envelope and the fields of API.md', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)

  const res = await client.post('/api/keys', { name: 'production' })

  assert.equal(res.status, 201, res.text)
  assert.deepEqual(Object.keys(res.body).sort(), ['data', 'message', 'success'])
  assert.equal(res.body.success, true)
  assert.equal(typeof res.body.message, 'string')
  assert.ok(res.body.message.length > 0)
  const data = res.body.data
  assert.deepEqual(Object.keys(data).sort(), ['createdAt', 'id', 'key', 'keyPrefix', 'name', 'permission'])
  assert.equal(data.permission, 'full_access', 'the default permission')
  assert.equal(data.name, 'production')
  assert.match(data.id, /^key_/)
  assert.match(data.key, KEY_SHAPE)
  assert.equal(data.keyPrefix, data.key.slice(0, 12))
  assert.match(data.createdAt, ISO_MS)
  assert.equal(new Date(data.createdAt).toISOString(), data.createdAt)
})

test('the key name is stored trimmed', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)

  const created = await createKey(client, '   staging key  ')

  assert.equal(created.name, 'staging key')
  const [listed] = await listKeys(client)
  assert.equal(listed.name, 'staging key')
})

test('the list shows each key newest first with exactly the listed fields, never the key nor its hash', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  const responses: Response[] = []

  const created = []
  for (const name of ['first', 'second', 'third']) {
    await nextMillisecond()
    const res = await client.post('/api/keys', { name })
    assert.equal(res.status, 201, res.text)
    responses.push(res)
    created.push(res.body.data as { id: string; key: string; keyPrefix: string; createdAt: string; name: string })
  }
  const revoked = await client.delete(`/api/keys/${created[1]!.id}`)
  assert.equal(revoked.status, 200, revoked.text)
  responses.push(revoked)
  const listRes = await client.get('/api/keys')
  assert.equal(listRes.status, 200, listRes.text)
  responses.push(listRes)

  const items = listRes.body.data as any[]
  assert.deepEqual(items.map((k) => k.name), ['third', 'second', 'first'])
  for (const item of items) assert.deepEqual(Object.keys(item).sort(), LISTED_FIELDS)
  const byId = new Map(items.map((k) => [k.id, k]))
  for (const c of created) {
    const item = byId.get(c.id)
    assert.equal(item.keyPrefix, c.keyPrefix)
    assert.equal(item.createdAt, c.createdAt)
    assert.equal(item.lastUsedAt, null)
  }
  assert.equal(byId.get(created[0]!.id).status, 'active')
  assert.equal(byId.get(created[0]!.id).revokedAt, null)
  assert.equal(byId.get(created[1]!.id).status, 'revoked')
  assert.match(byId.get(created[1]!.id).revokedAt, ISO_MS)

  for (const c of created) {
    // The hash we look for is the one actually stored, so its absence below means something.
    const hash = hashToken(TEST_SECRET, c.key, 'api-key')
    const stored = await server.store.findApiKeyByHash(hash)
    assert.ok(stored, 'the computed hash must be the stored one')
    assert.equal(stored.id, c.id)
    assert.equal(stored.keyHash, hash)
    assert.ok(!listRes.text.includes(c.key), 'the list must not contain a full key')
    for (const res of responses) assert.ok(!res.text.includes(hash), `a response contains the stored key hash: ${res.text}`)
  }
  assert.doesNotMatch(listRes.text, /hash/i)
})

test('the free plan refuses a 4th active key with 403 plan_limit_reached naming Free and 3; revoking frees a slot', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  const keys = [await createKey(client, 'a'), await createKey(client, 'b'), await createKey(client, 'c')]

  const fourth = await client.post('/api/keys', { name: 'd' })

  assert.equal(fourth.status, 403, fourth.text)
  const err = errorOf(fourth)
  assert.equal(err.code, 'plan_limit_reached')
  assert.match(err.message, /\bFree\b/)
  assert.match(err.message, /\b3\b/)
  assert.equal((await listKeys(client)).length, 3)

  const revoked = await client.delete(`/api/keys/${keys[0]!.id}`)
  assert.equal(revoked.status, 200, revoked.text)
  const again = await client.post('/api/keys', { name: 'd' })
  assert.equal(again.status, 201, again.text)
  const fifth = await client.post('/api/keys', { name: 'e' })
  assert.equal(fifth.status, 403, fifth.text)
  assert.equal(errorOf(fifth).code, 'plan_limit_reached')
  const listed = await listKeys(client)
  assert.equal(listed.filter((k) => k.status === 'active').length, 3)
  assert.equal(listed.length, 4)
})

test('10 concurrent creations on a fresh free account yield exactly three keys', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)

  const results = await Promise.all(Array.from({ length: 10 }, (_, i) => client.post('/api/keys', { name: `race ${i}` })))

  const statuses = results.map((r) => r.status).sort()
  assert.deepEqual(statuses, [201, 201, 201, 403, 403, 403, 403, 403, 403, 403], results.map((r) => r.text).join('\n'))
  for (const r of results.filter((r) => r.status === 403)) assert.equal(errorOf(r).code, 'plan_limit_reached')
  const listed = await listKeys(client)
  assert.equal(listed.length, 3)
  assert.deepEqual(
    listed.map((k) => k.id).sort(),
    results.filter((r) => r.status === 201).map((r) => r.body.data.id).sort(),
  )
})

test('revoking answers 200 { id, status: revoked, revokedAt }, and the same answer again', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  const key = await createKey(client)

  const first = await client.delete(`/api/keys/${key.id}`)

  assert.equal(first.status, 200, first.text)
  assert.equal(first.body.success, true)
  assert.deepEqual(Object.keys(first.body.data).sort(), ['id', 'revokedAt', 'status'])
  assert.equal(first.body.data.id, key.id)
  assert.equal(first.body.data.status, 'revoked')
  assert.match(first.body.data.revokedAt, ISO_MS)

  await nextMillisecond()
  const second = await client.delete(`/api/keys/${key.id}`)
  assert.equal(second.status, 200, second.text)
  assert.deepEqual(second.body.data, first.body.data)

  const [listed] = await listKeys(client)
  assert.equal(listed.status, 'revoked')
  assert.equal(listed.revokedAt, first.body.data.revokedAt)
})

test('a revoked key is refused on the very next request, exactly like an unknown key', async (t) => {
  const server = await startServer(t, { beforeListen: withProbe })
  const { client } = await signedUp(server)
  const key = await createKey(client)

  const before = await probe(server, key.key)
  assert.equal(before.status, 200, before.text)
  assert.deepEqual(before.body, { keyId: key.id })

  const revoked = await client.delete(`/api/keys/${key.id}`)
  assert.equal(revoked.status, 200, revoked.text)
  const after = await probe(server, key.key)

  assert.equal(after.status, 401, after.text)
  assert.equal(errorOf(after).code, 'invalid_api_key')

  const unknown = await probe(server, 'svc_sk_' + randomBytes(32).toString('base64url'))
  assert.equal(unknown.status, 401, unknown.text)
  assert.deepEqual(unknown.body, after.body, 'an unknown key and a revoked key must get the same answer')

  const missing = await probe(server)
  assert.equal(missing.status, 401, missing.text)
  assert.equal(errorOf(missing).code, 'authentication_required')
})

test("another account's key id is 404 not_found on DELETE, and that key keeps working", async (t) => {
  const server = await startServer(t, { beforeListen: withProbe })
  const owner = await signedUp(server)
  const other = await signedUp(server)
  const key = await createKey(owner.client)

  const res = await other.client.delete(`/api/keys/${key.id}`)

  assert.equal(res.status, 404, res.text)
  assert.equal(errorOf(res).code, 'not_found')
  const unknown = await other.client.delete('/api/keys/key_0000000000000000000000000000')
  assert.equal(unknown.status, 404, unknown.text)
  assert.equal(errorOf(unknown).message, errorOf(res).message, "another account's key must look like an unknown one")
  const still = await probe(server, key.key)
  assert.equal(still.status, 200, still.text)
  assert.deepEqual(still.body, { keyId: key.id })
  const [listed] = await listKeys(owner.client)
  assert.equal(listed.status, 'active')
  assert.deepEqual(await listKeys(other.client), [])
})

test('a 51-character name is 400 validation_error with a detail at body.name; 50 characters is fine', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)

  const long = await client.post('/api/keys', { name: 'x'.repeat(51) })

  assert.equal(long.status, 400, long.text)
  const err = errorOf(long)
  assert.equal(err.code, 'validation_error')
  assert.ok(err.details?.some((d) => d.path === 'body.name'), `details: ${JSON.stringify(err.details)}`)
  assert.deepEqual(await listKeys(client), [])

  const exact = await createKey(client, 'y'.repeat(50))
  assert.equal(exact.name, 'y'.repeat(50))
})

test('the 50-character limit applies to the trimmed name: 50 characters with padding around them is fine', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)

  const res = await client.post('/api/keys', { name: `  ${'p'.repeat(50)} ` })

  assert.equal(res.status, 201, res.text)
  assert.equal(res.body.data.name, 'p'.repeat(50))
})

test('C1 control characters in a name are refused like C0 ones (U+009B is a terminal escape)', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)

  for (const name of ['csi\u009b31mred', 'next\u0085line']) {
    const res = await client.post('/api/keys', { name })
    assert.equal(res.status, 400, `${JSON.stringify(name)}: ${res.text}`)
    assert.equal(errorOf(res).code, 'validation_error')
  }
  assert.deepEqual(await listKeys(client), [])
})

test('bad names are 400 validation_error and create nothing', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  await createKey(client, 'existing')
  const before = await listKeys(client)

  const bodies: Array<[string, string]> = [
    ['missing name', '{}'],
    ['empty name', '{"name":""}'],
    ['blank name', '{"name":"   "}'],
    ['51 characters', JSON.stringify({ name: 'z'.repeat(51) })],
    ['a number', '{"name":123}'],
    ['null', '{"name":null}'],
    ['an operator object', '{"name":{"$ne":null}}'],
    ['an array', '{"name":["a"]}'],
    ['an extra field', '{"name":"ok","admin":true}'],
    ['a control character', JSON.stringify({ name: 'bell\u0007name' })],
    ['a newline', JSON.stringify({ name: 'two\nlines' })],
  ]
  for (const [label, body] of bodies) {
    const res = await client.request('POST', '/api/keys', { body, headers: { 'content-type': 'application/json' } })
    assert.equal(res.status, 400, `${label}: ${res.text}`)
    assert.equal(errorOf(res).code, 'validation_error', label)
  }

  assert.deepEqual(await listKeys(client), before)
})

test('the key routes need the session cookie or a full_access key: none is 401 authentication_required, an unknown key 401 invalid_api_key', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  const key = await createKey(client)
  const anonymous = server.client()

  const create = await anonymous.post('/api/keys', { name: 'sneaky' })
  assert.equal(create.status, 401, create.text)
  assert.equal(errorOf(create).code, 'authentication_required')
  const list = await anonymous.get('/api/keys')
  assert.equal(list.status, 401, list.text)
  assert.equal(errorOf(list).code, 'authentication_required')
  const revoke = await anonymous.delete(`/api/keys/${key.id}`)
  assert.equal(revoke.status, 401, revoke.text)
  assert.equal(errorOf(revoke).code, 'authentication_required')

  // Keys with full_access are accepted (test/integration/scoped-keys.test.ts); a key that is not one is not.
  const withKey = { 'x-api-key': `${key.key.slice(0, -4)}AAAA` }
  const listByKey = await anonymous.get('/api/keys', withKey)
  assert.equal(listByKey.status, 401, listByKey.text)
  assert.equal(errorOf(listByKey).code, 'invalid_api_key')
  assert.ok(!listByKey.text.includes(key.keyPrefix), 'the list leaked through an x-api-key')
  const createByKey = await anonymous.post('/api/keys', { name: 'by key' }, withKey)
  assert.equal(createByKey.status, 401, createByKey.text)
  const revokeByKey = await anonymous.delete(`/api/keys/${key.id}`, withKey)
  assert.equal(revokeByKey.status, 401, revokeByKey.text)

  const listed = await listKeys(client)
  assert.equal(listed.length, 1)
  assert.equal(listed[0].status, 'active')
})

test('a cookie request from a foreign Origin is 403 forbidden_origin and changes nothing; the own origin works', async (t) => {
  const server = await startServer(t)
  const { client } = await signedUp(server)
  const key = await createKey(client)

  const create = await client.post('/api/keys', { name: 'csrf' }, { origin: EVIL_ORIGIN })
  assert.equal(create.status, 403, create.text)
  assert.equal(errorOf(create).code, 'forbidden_origin')
  const revoke = await client.delete(`/api/keys/${key.id}`, { origin: EVIL_ORIGIN })
  assert.equal(revoke.status, 403, revoke.text)
  assert.equal(errorOf(revoke).code, 'forbidden_origin')
  const list = await client.get('/api/keys', { origin: EVIL_ORIGIN })
  assert.equal(list.status, 403, list.text)
  assert.ok(!list.text.includes(key.keyPrefix))

  const listed = await listKeys(client)
  assert.deepEqual(listed.map((k) => [k.id, k.status]), [[key.id, 'active']])

  const own = await client.post('/api/keys', { name: 'same site' }, { origin: server.config.publicUrl })
  assert.equal(own.status, 201, own.text)
  assert.equal((await listKeys(client)).length, 2)
})

test('lastUsedAt becomes a timestamp once the key has been used and usage is flushed', async (t) => {
  const server = await startServer(t, { beforeListen: withProbe })
  const { client } = await signedUp(server)
  const used = await createKey(client, 'used')
  const idle = await createKey(client, 'idle')
  assert.ok((await listKeys(client)).every((k) => k.lastUsedAt === null))

  const startedAt = new Date().toISOString()
  const res = await probe(server, used.key)
  assert.equal(res.status, 200, res.text)
  await server.app.services.apiKeys.flushUsage()
  const finishedAt = new Date().toISOString()

  const byId = new Map((await listKeys(client)).map((k) => [k.id, k]))
  const lastUsedAt = byId.get(used.id).lastUsedAt
  assert.match(lastUsedAt, ISO_MS)
  assert.ok(lastUsedAt >= startedAt && lastUsedAt <= finishedAt, `${lastUsedAt} not within ${startedAt}..${finishedAt}`)
  assert.equal(byId.get(idle.id).lastUsedAt, null)
})
