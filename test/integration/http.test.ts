// Behaviour every route shares: the error envelope, request ids, body limits and types, rate limits,
// logs without secrets, health, metrics and the OpenAPI document.
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { Writable } from 'node:stream'
import { describe, test } from 'node:test'
import pino from 'pino'
import { request } from 'undici'
import { errorKinds } from '../../src/errors.js'
import { PASSWORD, errorOf, signedUp, startServer, uniqueEmail } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

describe('errors', () => {
  test('every error code is documented in the README with its status', () => {
    const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8')
    for (const kind of errorKinds.values()) {
      assert.match(readme, new RegExp(`\\| ${kind.statusCode} \\| \`${kind.code}\` \\|`), `README documents ${kind.code}`)
    }
  })

  test('an unknown route is a 404 envelope with a request id', async (t) => {
    const server = await startServer(t)
    const res = await server.client().get('/api/nothing-here')
    assert.equal(res.status, 404)
    assert.equal(errorOf(res).code, 'not_found')
    assert.match(String(res.headers['x-request-id']), /^req_[0-9a-f]{24}$/)
  })

  test('a well-formed x-request-id from the client is kept; a bad one is replaced', async (t) => {
    const server = await startServer(t)
    const kept = await server.client().get('/healthz', { 'x-request-id': 'trace-123.abc' })
    assert.equal(kept.headers['x-request-id'], 'trace-123.abc')
    const replaced = await server.client().get('/healthz', { 'x-request-id': 'bad id\twith spaces' })
    assert.match(String(replaced.headers['x-request-id']), /^req_/)
  })

  test('malformed JSON is 400 validation_error; __proto__ keys are refused', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const bad = await client.request('POST', '/api/keys', { body: '{"name": ', headers: { 'content-type': 'application/json' } })
    assert.equal(bad.status, 400)
    assert.equal(errorOf(bad).code, 'validation_error')
    const proto = await client.request('POST', '/api/keys', { body: '{"name":"x","__proto__":{"admin":true}}', headers: { 'content-type': 'application/json' } })
    assert.equal(proto.status, 400)
    assert.equal(errorOf(proto).code, 'validation_error')
    assert.equal((await client.get('/api/keys')).body.data.length, 0)
  })

  test('a body that is not JSON is 415; a body over the limit is 413; nothing is created', async (t) => {
    const server = await startServer(t, { env: { BODY_LIMIT_BYTES: '2048' } })
    const { client, id } = await signedUp(server)
    const text = await client.request('POST', '/api/keys', { body: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } })
    assert.equal(text.status, 415)
    assert.equal(errorOf(text).code, 'unsupported_media_type')
    const huge = await client.post('/api/keys', { name: 'x', padding: 'y'.repeat(4096) })
    assert.equal(huge.status, 413)
    assert.equal(errorOf(huge).code, 'payload_too_large')
    assert.equal(await server.store.countActiveApiKeys(id), 0)
  })

  test('a DELETE with a JSON content type and no body is accepted', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const key = await client.post('/api/keys', { name: 'k' })
    const res = await client.request('DELETE', `/api/keys/${key.body.data.id}`, { headers: { 'content-type': 'application/json' } })
    assert.equal(res.status, 200)
  })

  test('an unexpected failure is a 500 internal_error that leaks nothing', async (t) => {
    const server = await startServer(t, {
      beforeListen: (app) => app.get('/boom', async () => { throw new Error('secret internals at /srv/db') }),
    })
    const res = await server.client().get('/boom')
    assert.equal(res.status, 500)
    assert.equal(errorOf(res).code, 'internal_error')
    assert.equal(res.text.includes('secret internals'), false)
    assert.equal(res.text.includes('stack'), false)
  })
})

describe('rate limits', () => {
  test('login is limited per client address, with Retry-After and RateLimit headers', async (t) => {
    const server = await startServer(t, { env: { RATE_LIMIT_AUTH_PER_MINUTE: '3' } })
    const client = server.client()
    const answers = []
    for (let i = 0; i < 4; i++) answers.push(await client.post('/api/auth/login', { email: uniqueEmail(), password: PASSWORD }))
    assert.deepEqual(answers.map((r) => r.status), [401, 401, 401, 429])
    const limited = answers[3]!
    assert.equal(errorOf(limited).code, 'rate_limited')
    assert.ok(Number(limited.headers['retry-after']) > 0)
    assert.ok(limited.headers['ratelimit-limit'])
    // Another address is not held back by the first one's attempts.
    const other = server.client({ localAddress: '127.0.0.2' })
    assert.equal((await other.post('/api/auth/login', { email: uniqueEmail(), password: PASSWORD })).status, 401)
  })

  test('password guessing on one email is limited across client addresses', async (t) => {
    const server = await startServer(t, { env: { RATE_LIMIT_LOGIN_PER_EMAIL: '2' } })
    const { email } = await signedUp(server)
    const statuses = []
    for (const address of ['127.0.0.2', '127.0.0.3', '127.0.0.4']) {
      statuses.push((await server.client({ localAddress: address }).post('/api/auth/login', { email, password: 'guess guess guess' })).status)
    }
    assert.deepEqual(statuses, [401, 401, 429])
  })
})

describe('logs', () => {
  test('one line per request, and no password, key, secret or session token in any line', async (t) => {
    const lines: string[] = []
    const sink = new Writable({ write (chunk, _enc, done) { lines.push(...String(chunk).split('\n').filter(Boolean)); done() } })
    const logger = pino({ level: 'info' }, sink)
    const server = await startServer(t, { deps: { logger } })
    const email = uniqueEmail()
    const { client } = await signedUp(server, email)
    const key = await client.post('/api/keys', { name: 'k' })
    const hook = await client.post('/api/webhooks', { url: 'http://127.0.0.1:9/h', events: ['email.sent'] })
    await client.post('/api/auth/login', { email, password: PASSWORD })
    await server.client().get('/api/account', { 'x-api-key': key.body.data.key })
    const requestLines = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request')
    assert.equal(requestLines.length, 5, 'one line per request')
    assert.ok(requestLines.every((l) => typeof l.reqId === 'string' && typeof l.status === 'number'))
    const all = lines.join('\n')
    for (const secret of [PASSWORD, key.body.data.key, hook.body.data.secret, client.cookie!.split('=')[1]!]) {
      assert.equal(all.includes(secret), false, 'a secret reached the log')
    }
  })
})

describe('operations', () => {
  test('/healthz and /readyz answer; /readyz is 503 unavailable when the store is gone', async (t) => {
    const server = await startServer(t)
    assert.equal((await server.client().get('/healthz')).status, 200)
    assert.equal((await server.client().get('/readyz')).status, 200)
    await server.store.close()
    const res = await server.client().get('/readyz')
    assert.equal(res.status, 503)
    assert.equal(errorOf(res).code, 'unavailable')
  })

  test('/metrics speaks Prometheus and counts requests by route pattern', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    await client.delete('/api/keys/key_0000000000000000000000000000')
    const res = await request(server.url + '/metrics')
    const text = await res.body.text()
    assert.match(String(res.headers['content-type']), /text\/plain/)
    assert.match(text, /svc_http_request_duration_seconds_count\{method="DELETE",route="\/api\/keys\/:id",status="404"\} 1/)
    // The signup was a durable write: it waited for a flush of the WAL, and that flush was timed.
    assert.match(text, /^svc_store_disk_flush_seconds_count [1-9]\d*$/m)
    // Its commit woke the checkpoint thread, which copied the WAL into the database file (SQLite).
    await waitFor('a checkpoint in /metrics', async () => /^svc_store_checkpoint_seconds_count\{result="ok"\} [1-9]\d*$/m.test(await (await request(server.url + '/metrics')).body.text()))
  })

  test('/metrics can require a bearer token', async (t) => {
    const server = await startServer(t, { env: { METRICS_TOKEN: 'metrics-token-0123456789' } })
    assert.equal((await request(server.url + '/metrics')).statusCode, 401)
    const ok = await request(server.url + '/metrics', { headers: { authorization: 'Bearer metrics-token-0123456789' } })
    assert.equal(ok.statusCode, 200)
    await ok.body.dump()
  })

  test('/openapi.json describes the routes with their schemas, and /docs serves the UI', async (t) => {
    const server = await startServer(t)
    const doc = (await server.client().get('/openapi.json')).body
    assert.ok(doc.openapi.startsWith('3.'))
    const createKey = doc.paths['/api/keys'].post
    assert.equal(createKey.requestBody.content['application/json'].schema.properties.name.maxLength, 50)
    assert.ok(createKey.responses['201'])
    assert.ok(doc.paths['/api/webhooks/{id}/rotate-secret'])
    const docs = await request(server.url + '/docs/')
    assert.equal(docs.statusCode, 200)
    assert.match(await docs.body.text(), /swagger/i)
  })
})
