// The HTTP edge under hostile and careless input: sizes bounded before per-item work, every field's
// problem in one answer and in plain words, bodies only where a route takes one, errors from the router
// and from Node's HTTP parser as envelopes, 405 with Allow, and request logs that hold no token, key,
// cookie, password or address.
import assert from 'node:assert/strict'
import net from 'node:net'
import { Writable } from 'node:stream'
import { describe, test } from 'node:test'
import pino from 'pino'
import { parseTimestamp } from '../../src/domain/clock.js'
import { normaliseSend } from '../../src/app/emails.js'
import { hasControlCharacter } from '../../src/domain/text.js'
import { MAX_JSON_DEPTH, MAX_OBJECT_MEMBERS, bodyText, jsonShape, parseJsonBody } from '../../src/http/json.js'
import { unroutedPath } from '../../src/http/logging.js'
import { createSandboxTransport } from '../../src/mail/sandbox-transport.js'
import { PASSWORD, errorOf, signedUp, startServer, uniqueEmail, type Response, type TestServer } from '../helpers/server.js'
import { sender, type Sender } from '../helpers/sending.js'

const basic = (over: Record<string, unknown> = {}) => ({ to: 'reader@example.com', subject: 'Hello', html: '<p>Hi</p>', ...over })

function detailsOf (res: Response): Array<{ path: string; message: string }> {
  assert.equal(res.status, 400, res.text)
  const err = errorOf(res)
  assert.equal(err.code, 'validation_error')
  return err.details ?? []
}

/** Writes raw bytes on a fresh connection and reads everything until the server closes it. */
function rawExchange (server: TestServer, request: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(new URL(server.url).port), '127.0.0.1', () => socket.write(request))
    const chunks: Buffer[] = []
    socket.on('data', (c: Buffer) => chunks.push(c))
    socket.on('error', reject)
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')))
  })
}

function parseRaw (raw: string): { status: number; headers: Record<string, string>; body: any } {
  const [head, body] = [raw.slice(0, raw.indexOf('\r\n\r\n')), raw.slice(raw.indexOf('\r\n\r\n') + 4)]
  const [statusLine, ...lines] = head.split('\r\n')
  const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]))
  return { status: Number(statusLine!.split(' ')[1]), headers, body: JSON.parse(body) }
}

describe('sizes are bounded before per-item work', () => {
  test('a send whose to holds 100,000 addresses (900 KB) is one 400 naming to; no address is looked at', async (t) => {
    const transport = createSandboxTransport()
    const server = await startServer(t, { deps: { transport } })
    const s = await sender(server)
    // 100,000 strings that are not addresses: had any been parsed, each would be a detail of its own.
    const body = JSON.stringify(basic({ to: Array.from({ length: 100_000 }, () => 'a.b.c.') }))
    assert.ok(body.length > 900_000 && body.length < 1024 * 1024, `${body.length} bytes`)
    const res = await server.client().request('POST', '/api/send', { body, headers: { 'content-type': 'application/json', 'x-api-key': s.key } })
    assert.deepEqual(detailsOf(res), [{ path: 'body.to', message: 'must be one address or an array of 1 to 50 addresses' }])
    // A 51st recipient, valid or not: the same single answer.
    const fiftyOne = await s.send(basic({ cc: Array.from({ length: 51 }, (_, i) => `r${i}@example.com`) }))
    assert.deepEqual(detailsOf(fiftyOne), [{ path: 'body.cc', message: 'must be one address or an array of at most 50 addresses' }])
    assert.equal(transport.sent().length, 0)
  })

  test('the send rules themselves count before they parse (a caller without the schema)', () => {
    const result = normaliseSend({ to: Array.from({ length: 100_000 }, () => 'not an address'), subject: 's', text: 't' }, 'svc@example.com')
    assert.deepEqual(result, { errors: [{ path: 'to', message: 'takes at most 50 addresses' }] })
    const headers = Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`X-${i}:bad`, 'v']))
    assert.deepEqual(normaliseSend({ to: 'a@example.com', subject: 's', text: 't', headers }, 'svc@example.com'),
      { errors: [{ path: 'headers', message: 'takes at most 50 headers' }] })
  })

  test('every string and array of every request body has a bound in the OpenAPI document', async (t) => {
    const server = await startServer(t)
    const doc = (await server.client().get('/openapi.json')).body
    const unbounded: string[] = []
    const walk = (s: any, at: string) => {
      if (s === null || typeof s !== 'object') return
      if (s.type === 'string' && s.maxLength === undefined && s.enum === undefined && s.const === undefined) unbounded.push(at)
      if (s.type === 'array' && s.maxItems === undefined) unbounded.push(at)
      // (A null in a union is written as { type: object, nullable, enum: [null] }: bounded by its enum.)
      if (s.type === 'object' && s.enum === undefined && s.additionalProperties !== false && s.maxProperties === undefined && s.properties === undefined) unbounded.push(at)
      for (const [k, v] of Object.entries(s.properties ?? {})) walk(v, `${at}.${k}`)
      for (const [i, v] of [...(s.anyOf ?? []), ...(s.oneOf ?? [])].entries()) walk(v, `${at}|${i}`)
      if (s.items) walk(s.items, `${at}[]`)
      if (s.additionalProperties && typeof s.additionalProperties === 'object') walk(s.additionalProperties, `${at}{}`)
      for (const [k, v] of Object.entries(s.patternProperties ?? {})) walk(v, `${at}{${k}}`)
    }
    let bodies = 0
    for (const [path, ops] of Object.entries<any>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(ops)) {
        const schema = op.requestBody?.content?.['application/json']?.schema
        if (schema) { bodies++; walk(schema, `${method.toUpperCase()} ${path}`) }
      }
    }
    assert.ok(bodies >= 10, `${bodies} request bodies`)
    assert.deepEqual(unbounded, [])
    // Optional bodies are documented as optional; the others as required.
    assert.equal(doc.paths['/api/webhooks/{id}/test'].post.requestBody.required, false)
    assert.equal(doc.paths['/api/webhooks/{id}/recover'].post.requestBody.required, false)
    assert.equal(doc.paths['/api/send'].post.requestBody.required, true)
  })

  test('each route takes a body only as large as it needs', async (t) => {
    const server = await startServer(t)
    const { client, id } = await signedUp(server)
    const big = await client.post('/api/keys', { name: 'k', padding: ' '.repeat(8 * 1024) })
    assert.equal(big.status, 413)
    assert.equal(errorOf(big).code, 'payload_too_large')
    assert.equal(await server.store.countActiveApiKeys(id), 0)
    // A send takes SEND_BODY_LIMIT_BYTES (15 MiB): a 900 KB html goes through.
    const s = await sender(server, client)
    const html = `<p>${'x'.repeat(900_000)}</p>`
    assert.equal((await s.send(basic({ html }))).status, 202)
  })

  test('a body refused before it is read is read away first: a client that writes it in pieces gets the 413, one that sends less than it declared gets its answer too', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const cookie = client.cookie!
    const head = (length: number) => Buffer.from(`POST /api/keys HTTP/1.1\r\nhost: x\r\ncookie: ${cookie}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`, 'latin1')
    // 64 KiB in 8 pieces with a pause between them: the answer waits for the whole body, so the client
    // never writes into a closed connection.
    const piece = Buffer.alloc(8 * 1024, 0x20)
    const slow = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(new URL(server.url).port), '127.0.0.1')
      const chunks: Buffer[] = []
      let written = 0
      socket.on('data', (c: Buffer) => chunks.push(c))
      socket.on('error', reject)
      socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')))
      socket.write(head(8 * piece.length))
      const next = () => {
        if (written === 8) return
        assert.equal(chunks.length, 0, 'the answer came before the body was all written')
        written += 1
        socket.write(piece, () => setTimeout(next, 100))
      }
      next()
    })
    const res = parseRaw(slow)
    assert.equal(res.status, 413)
    assert.equal(res.body.error.code, 'payload_too_large')
    // Declared 20 MB, sent 2 bytes, then silence (the connection stays open): answered all the same.
    const short = parseRaw(await rawExchange(server, Buffer.concat([head(20_000_000), Buffer.from('{}')])))
    assert.equal(short.status, 413)
    assert.equal(short.headers.connection, 'close')
  })
})

describe('a request must arrive whole in time', () => {
  test('a body declared and never sent (under the send limit, so it would be read) is answered 408 at HTTP_REQUEST_TIMEOUT_SECONDS, in the envelope, and the connection closed', async (t) => {
    const server = await startServer(t, { env: { HTTP_REQUEST_TIMEOUT_SECONDS: '1' } })
    const { client } = await signedUp(server)
    const s = await sender(server, client)
    const head = `POST /api/send HTTP/1.1\r\nhost: x\r\nx-api-key: ${s.key}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n`
    const res = parseRaw(await rawExchange(server, Buffer.from(`${head}{"to":`, 'latin1')))
    assert.equal(res.status, 408)
    assert.equal(res.body.error.code, 'request_timeout')
    assert.equal(res.headers.connection, 'close')
    assert.equal((await client.get('/api/emails')).body.data.length, 0, 'nothing was sent')
  })
})

describe('validation: every field at once, in words that say what is allowed', () => {
  test('a send with problems in many fields names each of them, schema and send rules together', async (t) => {
    const server = await startServer(t)
    const s = await sender(server)
    const res = await s.send({
      to: 'not-an-address', subject: '', html: 'x', from: 'Me <me@example.com>',
      cc: Array.from({ length: 51 }, () => 'a@example.com'), headers: { 'X-A': 'a\u0085b' }, tags: [{ name: 'a b', value: 'c' }], attachment: [],
    })
    assert.deepEqual(detailsOf(res), [
      { path: 'body.attachment', message: 'is not a known field; the fields are: from, to, cc, bcc, replyTo, subject, html, text, template, attachments, headers, tags, scheduledAt, tracking, unsubscribe, metadata' },
      { path: 'body.to', message: 'is not an email address' },
      { path: 'body.subject', message: 'must be 1–998 characters' },
      { path: 'body.cc', message: 'must be one address or an array of at most 50 addresses' },
      { path: 'body.headers.X-A', message: 'must not contain CR, LF or other control characters (U+0085, U+2028, …)' },
      { path: 'body.tags[0].name', message: 'must hold only letters, digits, _ and -' },
    ])
  })

  test('a batch names every bad item and field', async (t) => {
    const server = await startServer(t)
    const s = await sender(server)
    const res = await s.batch([basic(), { to: 'bad', subject: '' }, 5])
    assert.deepEqual(detailsOf(res), [
      { path: 'body[1].to', message: 'is not an email address' },
      { path: 'body[1].subject', message: 'must be 1–998 characters' },
      { path: 'body[1].html', message: 'html or text is required (or both)' },
      { path: 'body[2]', message: 'must be a JSON object (fields: from, to, cc, bcc, replyTo, subject, html, text, template, attachments, headers, tags, scheduledAt, tracking, unsubscribe, metadata)' },
    ])
    assert.deepEqual(detailsOf(await s.batch(Array.from({ length: 101 }, () => basic()))), [{ path: 'body', message: 'must be an array of 1 to 100 sends' }])
  })

  test('messages name the allowed values and lengths', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    assert.deepEqual(detailsOf(await server.client().post('/api/auth/signup', { email: 'nope', password: 'short' })), [
      { path: 'body.email', message: 'must be an email address' },
      { path: 'body.password', message: 'must be 10–200 characters' },
    ])
    assert.deepEqual(detailsOf(await client.post('/api/keys', { name: '' })), [{ path: 'body.name', message: 'must be 1–50 characters' }])
    assert.deepEqual(detailsOf(await client.post('/api/webhooks', { url: 'http://127.0.0.1:9/h', events: ['email.sent', 'email.sendt'] })), [{
      path: 'body.events[1]',
      message: 'must be one of: email.sent, email.delivered, email.opened, email.clicked, email.bounced, email.complained, email.unsubscribed, email.received',
    }])
    assert.deepEqual(detailsOf(await client.get('/api/suppressions?limit=500&extra=1')), [
      { path: 'query.extra', message: 'is not a known field; the fields are: limit, cursor' },
      { path: 'query.limit', message: 'must be a whole number from 1 to 100' },
    ])
  })

  test('a hostile body of a megabyte of keys is refused before parsing; a few hundred unknown keys are answered with ten', async (t) => {
    const server = await startServer(t)
    const s = await sender(server)
    const post = (body: string) => server.client().request('POST', '/api/send', { body, headers: { 'content-type': 'application/json', 'x-api-key': s.key } })
    const huge = `{${Array.from({ length: 70_000 }, (_, i) => `"k${i}":1`).join(',')}}`
    assert.ok(huge.length > 700_000)
    const refused = await post(huge)
    assert.equal(refused.status, 400)
    assert.match(errorOf(refused).message, /more than 1000 fields/)
    const details = detailsOf(await post(`{${Array.from({ length: 900 }, (_, i) => `"k${i}":1`).join(',')}}`))
    assert.equal(details.filter((d) => d.message.startsWith('is not a known field')).length, 10)
    assert.ok(details.some((d) => d.path === 'body.to' && d.message.startsWith('is required')))
  })
})

describe('bodies only where a route takes one', () => {
  test('test and recover take no body, {} or their fields; another account\'s webhook is 404 either way', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const hook = (await client.post('/api/webhooks', { url: 'http://127.0.0.1:9/h', events: ['email.sent'] })).body.data
    for (const route of ['test', 'recover']) {
      const none = await client.request('POST', `/api/webhooks/${hook.id}/${route}`)
      assert.equal(none.status, 202, `${route} without a body: ${none.text}`)
      assert.equal((await client.post(`/api/webhooks/${hook.id}/${route}`, {})).status, 202, `${route} with {}`)
      const stranger = await signedUp(server)
      const foreign = await stranger.client.request('POST', `/api/webhooks/${hook.id}/${route}`)
      assert.equal(foreign.status, 404, `${route} on another account's webhook`)
      assert.equal(errorOf(foreign).code, 'not_found')
    }
    const test1 = await client.request('POST', `/api/webhooks/${hook.id}/test`)
    assert.equal(test1.body.data.event, 'email.sent')
  })

  test('routes without a body refuse one (but take none or {}), and a 200,000-level body is never parsed', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const hook = (await client.post('/api/webhooks', { url: 'http://127.0.0.1:9/h', events: ['email.sent'] })).body.data
    const key = (await client.post('/api/keys', { name: 'k' })).body.data
    const refused = await client.post(`/api/webhooks/${hook.id}/rotate-secret`, { force: true })
    assert.deepEqual(detailsOf(refused), [{ path: 'body', message: 'must be absent (or {}): this route takes no body' }])
    // (Node's client sends a DELETE body without a length unless told one.)
    const withBody = { body: '[1]', headers: { 'content-type': 'application/json', 'content-length': '3' } }
    assert.equal(errorOf(await client.request('DELETE', `/api/keys/${key.id}`, withBody)).code, 'validation_error')
    assert.equal((await client.get('/api/keys')).body.data[0].status, 'active', 'the refused DELETE changed nothing')
    assert.equal((await client.request('POST', `/api/webhooks/${hook.id}/rotate-secret`)).status, 200)
    assert.equal((await client.post(`/api/webhooks/${hook.id}/rotate-secret`, {})).status, 200)
    const deep = '['.repeat(200_000) + ']'.repeat(200_000)
    const logout = await client.request('POST', '/api/auth/logout', { body: deep, headers: { 'content-type': 'application/json' } })
    assert.ok([400, 413].includes(logout.status), logout.text)
    assert.equal((await client.get('/api/account')).status, 200, 'the session is still there')
    assert.equal((await client.post('/api/auth/logout', { all: true })).status, 400)
    // {} is "no body" on logOut as on every route without one (issue 26 asked: the rule is this one).
    assert.equal((await client.post('/api/auth/logout', {})).status, 200)
  })

  test('a megabyte of nesting is refused unparsed on every JSON route; brackets inside strings do not count', async (t) => {
    const transport = createSandboxTransport()
    const server = await startServer(t, { deps: { transport } })
    const s = await sender(server)
    const deep = '{"to":' + '['.repeat(500_000) + ']'.repeat(500_000) + '}'
    const res = await server.client().request('POST', '/api/send', { body: deep, headers: { 'content-type': 'application/json', 'x-api-key': s.key } })
    assert.equal(res.status, 400)
    assert.match(errorOf(res).message, /nests deeper than 32 levels/)
    // Brackets and quotes inside strings are text, however many: this one is sent.
    const html = `<p>${'[{"\\'.repeat(150_000)}</p>`
    const ok = await s.send(basic({ html }))
    assert.equal(ok.status, 202, ok.text)
    await s.settled(ok.body.data.id)
    assert.equal(transport.sent().length, 1)
  })

  test('the shape scan counts outside strings only, and stops at the bound', () => {
    assert.deepEqual(jsonShape('{"a":[1,{"b":"[[[{{:::"}],"c":"\\":]]"}'), { depth: 3, widest: 2, prototypeKeys: false })
    assert.deepEqual(jsonShape('"\\\\"[[]]'), { depth: 2, widest: 0, prototypeKeys: false })
    assert.equal(jsonShape('['.repeat(1_000_000), { depth: MAX_JSON_DEPTH }).depth, MAX_JSON_DEPTH + 1)
    assert.equal(parseJsonBody('  \n '), undefined)
    const ok = `${'['.repeat(MAX_JSON_DEPTH)}${']'.repeat(MAX_JSON_DEPTH)}`
    assert.deepEqual(parseJsonBody(ok), JSON.parse(ok))
    assert.throws(() => parseJsonBody(`${'['.repeat(MAX_JSON_DEPTH + 1)}${']'.repeat(MAX_JSON_DEPTH + 1)}`), /nests deeper/)
    const wide = (n: number) => `{${Array.from({ length: n }, (_, i) => `"k${i}":{"a":1,"b":2}`).join(',')}}`
    assert.equal(Object.keys(parseJsonBody(wide(MAX_OBJECT_MEMBERS)) as object).length, MAX_OBJECT_MEMBERS)
    assert.throws(() => parseJsonBody(wide(MAX_OBJECT_MEMBERS + 1)), /more than 1000 fields/)
    assert.throws(() => parseJsonBody('{"__proto__":{"x":1}}'), /__proto__/)
    // Prototype keys however written: escaped, spaced, nested; a value or a longer name that says them is no key.
    assert.throws(() => parseJsonBody('{"a":[{"\\u005f_proto__" :{"x":1}}]}'), /__proto__/)
    assert.throws(() => parseJsonBody('{"a":{"constructor":{"prototype":{"x":1}}}}'), /constructor/)
    assert.deepEqual(parseJsonBody('{"constructor":"x","tag":"__proto__","__proto__x":1}'), { constructor: 'x', tag: '__proto__', __proto__x: 1 })
    assert.equal(jsonShape('{"tag":"__proto__","constructorX":1}').prototypeKeys, false)
    assert.equal(jsonShape('{"a\\u0062":1}').prototypeKeys, true)
    // Bytes to text: ASCII byte for byte, anything else as UTF-8 (a broken sequence is U+FFFD, as before).
    assert.equal(bodyText(Buffer.from('{"a":"b"}')), '{"a":"b"}')
    assert.equal(bodyText(Buffer.from('{"name":"Zoë 😀"}')), '{"name":"Zoë 😀"}')
    assert.equal(bodyText(Buffer.from([0x22, 0xc3, 0x22])), '"\ufffd"')
    // A hostile megabyte: every name escaped, a long escaped value; one scan and one checked parse.
    const escapes = `{${Array.from({ length: MAX_OBJECT_MEMBERS }, (_, i) => `"\\u006b${i}":"${'\\n'.repeat(500)}"`).join(',')}}`
    assert.ok(escapes.length > 1_000_000)
    assert.equal(Object.keys(parseJsonBody(escapes) as object).length, MAX_OBJECT_MEMBERS)
    assert.throws(() => parseJsonBody('{"a":'), /not valid JSON/)
  })
})

describe('control characters and timestamps', () => {
  test('U+0085, U+2028 and U+2029 are refused in a subject, a header value and a display name', async (t) => {
    const transport = createSandboxTransport()
    const server = await startServer(t, { deps: { transport } })
    const s = await sender(server)
    for (const c of ['\u0085', '\u2028', '\u2029', '\u009b']) {
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ subject: `Hi${c}Bcc: x@evil.test` }, 'body.subject'],
        [{ headers: { 'X-Note': `a${c}b` } }, 'body.headers.X-Note'],
        [{ to: `"Eve${c}" <eve@example.com>` }, 'body.to'],
      ]
      for (const [over, path] of cases) {
        const details = detailsOf(await s.send(basic(over)))
        assert.ok(details.some((d) => d.path === path && /control characters/.test(d.message)), `${JSON.stringify(over)}: ${JSON.stringify(details)}`)
      }
    }
    // A tab stays allowed in a header value and a subject.
    assert.equal((await s.send(basic({ subject: 'a\tb', headers: { 'X-Note': 'a\tb' } }))).status, 202)
    assert.equal(hasControlCharacter('a\tb', { allowTab: true }), false)
    assert.equal(hasControlCharacter('a\tb'), true)
    assert.equal(hasControlCharacter('Zoë – “quoted” ✓'), false)
  })

  test('a leap second is a valid instant (the last millisecond of its minute); a window still must be ordered', async (t) => {
    assert.equal(parseTimestamp('2020-12-31T23:59:60Z'), Date.parse('2020-12-31T23:59:59.999Z'))
    assert.equal(parseTimestamp('2016-12-31T18:59:60.5-05:00'), Date.parse('2016-12-31T18:59:59.999-05:00'))
    assert.equal(parseTimestamp('2020-01-01T00:00:00Z'), Date.parse('2020-01-01T00:00:00Z'))
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const hook = (await client.post('/api/webhooks', { url: 'http://127.0.0.1:9/h', events: ['email.sent'] })).body.data
    const recover = (body: unknown) => client.post(`/api/webhooks/${hook.id}/recover`, body)
    assert.equal((await recover({ since: '2020-12-31T23:59:60Z', until: '2021-01-01T00:00:00Z' })).status, 202)
    assert.equal((await recover({ since: '2020-12-31T23:59:59Z', until: '2020-12-31T23:59:60Z' })).status, 202)
    assert.deepEqual(detailsOf(await recover({ since: '2021-01-01T00:00:00Z', until: '2020-12-31T23:59:60Z' })), [{ path: 'body.since', message: 'must be before until' }])
    assert.deepEqual(detailsOf(await recover({ since: 'yesterday' })), [{ path: 'body.since', message: 'must be a date and time in ISO 8601 (RFC 3339), like 2026-01-31T09:30:00Z' }])
  })
})

describe('errors before any route are envelopes', () => {
  test('a URL that does not decode is a 400 envelope', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    for (const path of ['/api/keys/%', '/api/keys/%zz', '/t/o/%E0%A4%A']) {
      const res = await client.get(path)
      assert.equal(res.status, 400, path)
      assert.equal(errorOf(res).code, 'validation_error')
      assert.ok(res.headers['x-request-id'])
    }
    // A path parameter over the router's 8,192 characters.
    const long = await client.request('DELETE', `/api/keys/${'k'.repeat(9000)}`)
    assert.equal(long.status, 400)
    assert.equal(errorOf(long).message, 'A segment of the URL path is too long')
  })

  test('a raw non-ASCII byte in the path and oversized headers are envelopes, and the connection closes', async (t) => {
    const server = await startServer(t)
    const bad = parseRaw(await rawExchange(server, Buffer.concat([Buffer.from('GET /api/k'), Buffer.from([0xe9]), Buffer.from('y HTTP/1.1\r\nHost: x\r\n\r\n')])))
    assert.equal(bad.status, 400)
    assert.equal(bad.headers.connection, 'close')
    assert.equal(bad.headers['content-type'], 'application/json; charset=utf-8')
    assert.equal(bad.body.success, false)
    assert.equal(bad.body.error.code, 'validation_error')
    const huge = parseRaw(await rawExchange(server, Buffer.from(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(64 * 1024)}\r\n\r\n`)))
    assert.equal(huge.status, 431)
    assert.equal(huge.body.error.code, 'headers_too_large')
    assert.equal((await server.client().get('/healthz')).status, 200, 'the server goes on')
  })

  test('a path that exists with other methods is 405 with Allow; HEAD and unknown methods too', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const put = await client.request('PUT', '/api/keys', { json: { name: 'k' } })
    assert.equal(put.status, 405)
    assert.equal(errorOf(put).code, 'method_not_allowed')
    assert.equal(put.headers.allow, 'GET, HEAD, POST')
    const head = await fetch(`${server.url}/api/auth/signup`, { method: 'HEAD' })
    assert.equal(head.status, 405)
    assert.equal(head.headers.get('allow'), 'POST')
    const propfind = await rawExchange(server, Buffer.from('PROPFIND /api/keys/key_0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'))
    assert.match(propfind, /^HTTP\/1\.1 405 /)
    assert.match(propfind, /\r\nallow: DELETE\r\n/i)
    const missing = await client.request('PUT', '/api/nothing-here')
    assert.equal(missing.status, 404)
    assert.equal(errorOf(missing).code, 'not_found')
    assert.equal((await client.get('/api/keys')).body.data.length, 0, 'the PUT created nothing')
  })
})

describe('logs', () => {
  test('a whole session logs no token, key, cookie, password or address', async (t) => {
    const lines: string[] = []
    const sink = new Writable({ write (chunk, _enc, done) { lines.push(...String(chunk).split('\n').filter(Boolean)); done() } })
    const logger = pino({ level: 'debug' }, sink)
    const transport = createSandboxTransport()
    const server = await startServer(t, { deps: { logger, transport } })
    const email = uniqueEmail('owner')
    const { client } = await signedUp(server, email)
    const s: Sender = await sender(server, client)
    const recipient = 'reader.private@example.com'
    const sent = await s.send(basic({ to: `Reader <${recipient}>`, html: '<p><a href="https://shop.example.com/item?id=7">Item</a></p>' }))
    assert.equal(sent.status, 202, sent.text)
    await s.settled(sent.body.data.id)
    const copy = transport.sent().find((m) => m.messageId === sent.body.data.id)!
    const pixel = new URL(/<img src="([^"]+)"/.exec(copy.html!)![1]!).pathname
    const click = new URL(/<a href="([^"]+)"/.exec(copy.html!)![1]!.replace(/&amp;/g, '&')).pathname
    const unsubscribe = new URL(/^<(.+)>$/.exec(copy.headers['List-Unsubscribe']!)![1]!).pathname
    const tokens = [pixel, click, unsubscribe].map((p) => p.split('/').at(-1)!)
    assert.equal((await server.client().get(pixel)).status, 200)
    assert.equal((await server.client().get(click)).status, 302)
    assert.equal((await server.client().get(unsubscribe)).status, 200)
    assert.equal((await server.client().get(`${pixel}/extra`)).status, 404)
    assert.equal((await server.client().get(`/t/${tokens[0]}`)).status, 404)
    assert.equal((await server.client().request('POST', unsubscribe)).status, 200)
    assert.equal((await client.delete(`/api/suppressions/${encodeURIComponent(recipient)}`)).status, 200)
    assert.equal((await client.get(`/api/suppressions/${recipient}/x`)).status, 404)
    await client.post('/api/auth/login', { email, password: PASSWORD })
    await rawExchange(server, Buffer.from(`GET /\u00e9 HTTP/1.1\r\nHost: x\r\nx-api-key: ${s.key}\r\ncookie: ${client.cookie}\r\n\r\n`, 'latin1'))

    const all = lines.join('\n')
    const requests = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request')
    assert.ok(requests.some((l) => l.path === '/t/o/:token' && l.route === '/t/o/:token'), 'tracking requests are logged, by pattern')
    assert.ok(requests.some((l) => l.path === '/api/suppressions/:email'))
    assert.ok(requests.some((l) => l.path === `/api/emails/${sent.body.data.id}`), 'ids are kept')
    const secrets: Array<[string, string]> = [
      ['password', PASSWORD], ['API key', s.key], ['session cookie', client.cookie!.split('=')[1]!],
      ['recipient', recipient], ['recipient (encoded)', encodeURIComponent(recipient)], ['account email', email],
      ...tokens.map((tok, i): [string, string] => [`token ${i}`, tok.slice(0, 40)]),
    ]
    for (const [what, secret] of secrets) assert.equal(all.includes(secret), false, `the ${what} reached the log`)
  })

  test('an unrouted path is cut to its first segments, with no address', () => {
    assert.equal(unroutedPath('/api/nothing-here?x=1'), '/api/nothing-here')
    assert.equal(unroutedPath('/t/o/eyJhbGciOi.sig/extra'), '/t/…')
    assert.equal(unroutedPath('/api/suppressions/a@b.example/x'), '/api/suppressions/…')
    assert.equal(unroutedPath('/a%40b.example'), '/…')
    assert.equal(unroutedPath(`/${'x'.repeat(100)}`), `/${'x'.repeat(32)}…`)
  })
})
