// "Trustworthy by default" (issue 23), tried as an attacker would, on real parts: the server in a child
// process or on loopback sockets, a real SQLite file, a real receiver and real SMTP connections.
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { describe, test } from 'node:test'
import pino from 'pino'
import type { InboundMail } from '../../src/mail/inbound/listener.js'
import { parseSmtpUrl } from '../../src/mail/smtp-transport.js'
import { openSqliteStore } from '../../src/store/sqlite/index.js'
import { SERVER_FILE } from '../helpers/process.js'
import { startReceiver } from '../helpers/receiver.js'
import { sender } from '../helpers/sending.js'
import { PASSWORD, errorOf, signedUp, startServer, tempDir, uniqueEmail, type TestServer } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

/** Every security line the server logged, parsed. */
function logSink () {
  const lines: Array<Record<string, unknown>> = []
  const raw: string[] = []
  const sink = new Writable({
    write (chunk, _enc, done) {
      for (const l of String(chunk).split('\n').filter(Boolean)) {
        raw.push(l)
        lines.push(JSON.parse(l) as Record<string, unknown>)
      }
      done()
    },
  })
  return { logger: pino({ level: 'info' }, sink), lines, raw, security: (kind: string) => lines.filter((l) => l.security === kind) }
}

describe('safe defaults (item 4)', () => {
  test('an exposed HOST without NODE_ENV does not start in development: it refuses, naming NODE_ENV', (t) => {
    const r = spawnSync(process.execPath, [SERVER_FILE], {
      env: { PATH: process.env.PATH ?? '', HOST: '0.0.0.0', PORT: '0', DATA_DIR: tempDir(t), LOG_LEVEL: 'info' },
      encoding: 'utf8',
      timeout: 20_000,
    })
    assert.equal(r.status, 1, `it exited on its own (stdout: ${r.stdout.slice(0, 300)})`)
    assert.match(r.stderr, /^svc: configuration: NODE_ENV must be set when HOST is not a loopback address/)
    assert.doesNotMatch(r.stdout, /Server listening/)
  })
})

describe('signup and quotas (item 5)', () => {
  test('production: the first signup is admitted, the next ones are 403 signup_closed (logged), unless SIGNUP=open', async (t) => {
    const log = logSink()
    const server = await startServer(t, { env: { NODE_ENV: 'production' }, deps: { logger: log.logger } })
    const first = await server.client().post('/api/auth/signup', { email: uniqueEmail('owner'), password: PASSWORD })
    assert.equal(first.status, 201)
    for (let i = 0; i < 2; i++) {
      const next = await server.client().post('/api/auth/signup', { email: uniqueEmail('stranger'), password: PASSWORD })
      assert.equal(next.status, 403)
      assert.equal(errorOf(next).code, 'signup_closed')
    }
    assert.equal(log.security('signup_refused').length, 2, 'each refusal logged once')

    const open = await startServer(t, { env: { NODE_ENV: 'production', SIGNUP: 'open' } })
    for (let i = 0; i < 3; i++) assert.equal((await open.client().post('/api/auth/signup', { email: uniqueEmail(), password: PASSWORD })).status, 201)
  })

  test('a send or batch that would pass the daily quota is refused whole (429 quota_exceeded, Retry-After); GET /api/account shows the usage', async (t) => {
    const server = await startServer(t, { env: { QUOTAS: 'on', QUOTA_FREE_PER_DAY: '5', QUOTA_FREE_PER_MONTH: '7' } })
    const s = await sender(server)
    assert.equal((await s.send({ to: ['a@example.com', 'b@example.com', 'c@example.com'], subject: 's', text: 't' })).status, 202)
    // 3 + (1 + 2) = 6 > 5: the whole batch goes, none of it is sent.
    const batch = await s.batch([
      { to: 'd@example.com', subject: 's', text: 't' },
      { to: 'e@example.com', cc: 'f@example.com', subject: 's', text: 't' },
    ])
    assert.equal(batch.status, 429)
    assert.equal(errorOf(batch).code, 'quota_exceeded')
    assert.match(errorOf(batch).message, /daily quota of 5 recipients/)
    const retryAfter = Number(batch.headers['retry-after'])
    assert.ok(retryAfter >= 1 && retryAfter <= 86_400, `Retry-After until the UTC day ends: ${retryAfter}`)
    const listed = await s.client.get('/api/emails?limit=100')
    assert.equal(listed.body.data.length, 1, 'nothing of the refused batch was accepted')
    assert.equal((await s.send({ to: ['d@example.com', 'e@example.com'], subject: 's', text: 't' })).status, 202, 'exactly up to the quota')
    const over = await s.send({ to: 'g@example.com', subject: 's', text: 't' })
    assert.equal(over.status, 429)
    assert.equal(errorOf(over).code, 'quota_exceeded')
    const account = (await s.client.get('/api/account')).body.data
    assert.equal(account.sending.day.used, 5)
    assert.equal(account.sending.day.limit, 5)
    assert.equal(account.sending.month.used, 5)
    assert.equal(account.sending.month.limit, 7)
    assert.ok(Date.parse(account.sending.day.resetsAt) > Date.now())
  })
})

describe('logins (items 6, 7)', () => {
  test('a guesser at one address is slowed, and the owner at another address still logs in', async (t) => {
    const log = logSink()
    const server = await startServer(t, { deps: { logger: log.logger } })
    const { email, id } = await signedUp(server)
    const guesser = server.client({ localAddress: '127.0.0.2' })
    const statuses: number[] = []
    for (let i = 0; i < 40; i++) statuses.push((await guesser.post('/api/auth/login', { email, password: `wrong guess ${i}` })).status)
    assert.deepEqual(statuses.slice(0, 5), [401, 401, 401, 401, 401], 'five tries before any wait')
    assert.ok(statuses.slice(5).every((s) => s === 429 || s === 401))
    assert.ok(statuses.filter((s) => s === 429).length >= 30, `most guesses held back: ${statuses.join(',')}`)
    const owner = server.client({ localAddress: '127.0.0.3' })
    const res = await owner.post('/api/auth/login', { email, password: PASSWORD })
    assert.equal(res.status, 200, res.text)
    // Each failed login is logged once, with the account and no password.
    const failed = log.security('login_failed')
    assert.equal(failed.length, statuses.filter((s) => s === 401).length)
    assert.ok(failed.every((l) => l.accountId === id))
    assert.ok(!log.raw.some((l) => l.includes('wrong guess') || l.includes(PASSWORD)))
  })

  test('TRUST_PROXY=1 believes only the hop its proxy appended: a client cannot pick its own address', async (t) => {
    const server = await startServer(t, { env: { TRUST_PROXY: '1', RATE_LIMIT_AUTH_PER_MINUTE: '3' } })
    const client = server.client()
    const statuses: number[] = []
    for (let i = 0; i < 5; i++) {
      // The client writes any address it likes on the left; the proxy appends the one it saw.
      const res = await client.post('/api/auth/login', { email: uniqueEmail(), password: PASSWORD }, { 'x-forwarded-for': `203.0.113.${i + 1}, 198.51.100.7` })
      statuses.push(res.status)
    }
    assert.deepEqual(statuses, [401, 401, 401, 429, 429])
    // Another client behind the same proxy is not held back.
    const other = await client.post('/api/auth/login', { email: uniqueEmail(), password: PASSWORD }, { 'x-forwarded-for': '198.51.100.8' })
    assert.equal(other.status, 401)
  })
})

describe('per-account limits (item 8)', () => {
  test('webhook test is tightly limited per account; reads and writes are limited apart', async (t) => {
    const server = await startServer(t, { env: { RATE_LIMIT_COSTLY_PER_MINUTE: '5', RATE_LIMIT_READS_PER_MINUTE: '40', RATE_LIMIT_WRITES_PER_MINUTE: '30' } })
    const { client } = await signedUp(server)
    const hook = await client.post('/api/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['email.sent'] })
    assert.equal(hook.status, 201)
    const tests = await Promise.all(Array.from({ length: 20 }, () => client.post(`/api/webhooks/${hook.body.data.id}/test`)))
    assert.equal(tests.filter((r) => r.status === 202).length, 5)
    const limited = tests.filter((r) => r.status === 429)
    assert.equal(limited.length, 15)
    assert.equal(errorOf(limited[0]!).code, 'rate_limited')
    assert.ok(Number(limited[0]!.headers['retry-after']) >= 1)
    // Reads have their own count: 40 a minute, and the 41st is refused while writes still pass.
    let reads = 0
    for (let i = 0; i < 45; i++) if ((await client.get('/api/webhooks')).status === 200) reads++
    assert.ok(reads <= 40 && reads >= 38, `reads allowed: ${reads}`)
    assert.equal((await client.get('/api/keys')).status, 429)
    assert.equal((await client.patch(`/api/webhooks/${hook.body.data.id}`, { events: ['email.delivered'] })).status, 200)
    // Another account is not touched by the first one's count.
    const other = await signedUp(server)
    assert.equal((await other.client.get('/api/webhooks')).status, 200)
  })

  test('one recover per webhook at a time: 409 operation_in_progress while one runs', async (t) => {
    let release!: () => void
    const gate = new Promise<void>((resolve) => { release = resolve })
    let gated = false
    const dataDir = tempDir(t)
    const store = openSqliteStore({ dataDir })
    // The real store, with the background requeue held until the test lets it go.
    const requeue = store.requeueFailed.bind(store)
    store.requeueFailed = async (...args: Parameters<typeof requeue>) => {
      if (gated) await gate
      return await requeue(...args)
    }
    const receiver = await startReceiver(t, { '/down': (_r, _n, res) => { res.statusCode = 503; res.end() } })
    const server = await startServer(t, { dataDir, deps: { store }, env: { DELIVERY_RETRY_SCHEDULE: '20ms', DELIVERY_THREADS: '2' } })
    const { client } = await signedUp(server)
    // The receiver is down: the test delivery fails for good after its one retry.
    const hook = (await client.post('/api/webhooks', { url: receiver.url('/down'), events: ['email.sent'] })).body.data
    assert.equal((await client.post(`/api/webhooks/${hook.id}/test`)).status, 202)
    await waitFor('the test delivery to fail', async () => {
      const log = await client.get(`/api/webhooks/${hook.id}/deliveries`)
      return log.body.data.some((d: { status: string }) => d.status === 'failed')
    })
    gated = true
    const first = await client.post(`/api/webhooks/${hook.id}/recover`, {})
    assert.equal(first.status, 202)
    assert.equal(first.body.data.queued, 1)
    const second = await client.post(`/api/webhooks/${hook.id}/recover`, {})
    assert.equal(second.status, 409)
    assert.equal(errorOf(second).code, 'operation_in_progress')
    // Another webhook's recovery is not held up by this one.
    const other = (await client.post('/api/webhooks', { url: receiver.url('/other'), events: ['email.sent'] })).body.data
    assert.equal((await client.post(`/api/webhooks/${other.id}/recover`, {})).status, 202)
    // (The gate stays shut: the held recovery ends with the server.)
    t.after(release)
  })
})

/** Every byte of DATA_DIR's files, as text (latin1, so any bytes compare). */
function dataFiles (dir: string): string {
  return readdirSync(dir).filter((f) => f.startsWith('svc.db')).map((f) => readFileSync(join(dir, f)).toString('latin1')).join('\n')
}

describe('at rest (item 9)', () => {
  test('a webhook secret never reaches the data files in the clear; DATA_DIR is 0700 and its files 0600', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const hook = await client.post('/api/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['email.sent'] })
    const rotated = await client.post(`/api/webhooks/${hook.body.data.id}/rotate-secret`)
    assert.equal(rotated.status, 200)
    const files = dataFiles(server.dataDir)
    for (const secret of [hook.body.data.secret as string, rotated.body.data.secret as string]) {
      assert.equal(files.includes(secret), false, 'the secret is not in svc.db, svc.db-wal or svc.db-shm')
      assert.equal(files.includes(secret.slice('whsec_'.length, 'whsec_'.length + 24)), false, 'not even its base64 part')
    }
    assert.equal(statSync(server.dataDir).mode & 0o777, 0o700)
    for (const f of readdirSync(server.dataDir).filter((f) => f.startsWith('svc.db'))) {
      assert.equal(statSync(join(server.dataDir, f)).mode & 0o777, 0o600, f)
    }
  })
})

describe('headers (item 10)', () => {
  test('/docs has a Content-Security-Policy; HSTS only when PUBLIC_URL is https', async (t) => {
    const plain = await startServer(t)
    const docs = await plain.client().get('/docs/')
    assert.equal(docs.status, 200)
    const csp = String(docs.headers['content-security-policy'] ?? '')
    assert.match(csp, /default-src 'self'/)
    assert.match(csp, /object-src 'none'/)
    assert.equal(docs.headers['strict-transport-security'], undefined)
    const secure = await startServer(t, { env: { PUBLIC_URL: 'https://mail.example.com' } })
    for (const path of ['/healthz', '/docs/', '/api/account']) {
      assert.match(String((await secure.client().get(path)).headers['strict-transport-security']), /^max-age=\d{7,}/, path)
    }
  })
})

describe('sessions (item 11)', () => {
  test('a password change ends every other session; the old password stops working; a wrong current password changes nothing', async (t) => {
    const log = logSink()
    const server = await startServer(t, { deps: { logger: log.logger } })
    const { client: a, email, id } = await signedUp(server)
    const b = server.client({ localAddress: '127.0.0.2' })
    assert.equal((await b.post('/api/auth/login', { email, password: PASSWORD })).status, 200)
    const wrong = await a.post('/api/account/password', { currentPassword: 'not the password', newPassword: 'a new password 123' })
    assert.equal(wrong.status, 401)
    assert.equal((await b.get('/api/account')).status, 200, 'nothing changed')
    const changed = await a.post('/api/account/password', { currentPassword: PASSWORD, newPassword: 'a new password 123' })
    assert.equal(changed.status, 200, changed.text)
    assert.equal(changed.body.data.sessionsEnded, 1)
    assert.equal((await b.get('/api/account')).status, 401, 'the other session ended')
    assert.equal((await a.get('/api/account')).status, 200, 'this one stays')
    assert.equal((await server.client().post('/api/auth/login', { email, password: PASSWORD })).status, 401)
    assert.equal((await server.client().post('/api/auth/login', { email, password: 'a new password 123' })).status, 200)
    const lines = log.security('password_changed')
    assert.equal(lines.length, 1)
    assert.equal(lines[0]!.accountId, id)
    assert.ok(!log.raw.some((l) => l.includes('a new password 123')))
  })

  test('DELETE /api/account/sessions ends every other session', async (t) => {
    const server = await startServer(t)
    const { client: a, email } = await signedUp(server)
    const others = [server.client(), server.client()]
    for (const c of others) assert.equal((await c.post('/api/auth/login', { email, password: PASSWORD })).status, 200)
    const res = await a.delete('/api/account/sessions')
    assert.equal(res.status, 200)
    assert.equal(res.body.data.sessionsEnded, 2)
    for (const c of others) assert.equal((await c.get('/api/account')).status, 401)
    assert.equal((await a.get('/api/account')).status, 200)
  })

  test('a session ends at its absolute lifetime however often it is used', async (t) => {
    let offset = 0
    const clock = { now: () => Date.now() + offset }
    const server = await startServer(t, { env: { SESSION_MAX_HOURS: '5', SESSION_TTL_HOURS: '2' }, deps: { clock } })
    const { client } = await signedUp(server)
    // Used often enough that the sliding two hours never run out; the five hours do.
    for (const minutes of [100, 200, 290]) {
      offset = minutes * 60_000
      assert.equal((await client.get('/api/account')).status, 200, `after ${minutes} minutes`)
    }
    offset = 301 * 60_000
    assert.equal((await client.get('/api/account')).status, 401)
  })
})

/** Opens a raw TCP connection to the SMTP port from `localAddress` and resolves with its first line. */
function greeting (port: number, localAddress: string): Promise<{ socket: net.Socket; line: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1', localAddress })
    let text = ''
    socket.on('data', (chunk) => {
      text += String(chunk)
      const end = text.indexOf('\n')
      if (end >= 0) resolve({ socket, line: text.slice(0, end).trim() })
    })
    socket.on('error', reject)
    socket.on('close', () => resolve({ socket, line: text.trim() }))
  })
}

describe('inbound SMTP (item 12)', () => {
  async function inbound (t: Parameters<typeof startServer>[0], opts: Record<string, number> = {}): Promise<{ server: TestServer; port: number; listener: InboundMail }> {
    const server = await startServer(t, { env: { INBOUND_SMTP_PORT: '0', INBOUND_SMTP_HOST: '127.0.0.1' }, deps: { inbound: opts } })
    const listener = server.service.components.find((c) => c.name === 'inbound-smtp') as unknown as InboundMail
    return { server, port: listener.port, listener }
  }

  test('30 idle connections from one address do not lock every other address out', async (t) => {
    const { port } = await inbound(t)
    const idle = await Promise.all(Array.from({ length: 30 }, () => greeting(port, '127.0.0.2')))
    t.after(() => { for (const c of idle) c.socket.destroy() })
    assert.ok(idle.filter((c) => c.line.startsWith('220')).length <= 5, 'one address holds a share of the slots')
    const other = await greeting(port, '127.0.0.3')
    t.after(() => other.socket.destroy())
    assert.match(other.line, /^220 /)
  })

  test('the per-address counts are bounded: the address heard from least recently is forgotten, not all of them', async (t) => {
    const { port, listener } = await inbound(t, { connectionsPerMinute: 1, trackedAddresses: 2 })
    const once = async (address: string) => {
      const c = await greeting(port, address)
      c.socket.destroy()
      return c.line.slice(0, 3)
    }
    assert.equal(await once('127.0.0.4'), '220')
    assert.equal(await once('127.0.0.5'), '220')
    assert.equal(await once('127.0.0.6'), '220')
    assert.equal(listener.trackedCount, 2)
    assert.equal(await once('127.0.0.6'), '421', 'the newest count is still there')
    assert.equal(await once('127.0.0.4'), '220', 'the oldest was forgotten')
  })
})

/** POSTs `size` bytes the way most clients do (the whole body, then the answer). */
function bigPost (url: string, size: number, headers: Record<string, string>): Promise<{ status: number; body: string } | { error: string }> {
  return new Promise((resolve) => {
    const body = Buffer.alloc(size, 0x20)
    body.write('{"to":"a@example.com","subject":"s","text":"')
    body.write('"}', size - 2)
    const req = http.request(url, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': String(size), ...headers } }, (res) => {
      let text = ''
      res.on('data', (c) => { text += String(c) })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }))
      res.on('error', (err) => resolve({ error: String(err) }))
    })
    req.on('error', (err) => resolve({ error: (err as NodeJS.ErrnoException).code ?? String(err) }))
    req.end(body)
  })
}

describe('a 413 the client can read (item 13)', () => {
  test('a 5 MB send is answered 413 every time, never a closed connection', async (t) => {
    // Sends take 15 MiB by default (attachments): the limit here is the 1 MiB sends had before them.
    const server = await startServer(t, { env: { SEND_BODY_LIMIT_BYTES: String(1024 * 1024) } })
    const s = await sender(server)
    const results = []
    for (let i = 0; i < 10; i++) results.push(await bigPost(`${server.url}/api/send`, 5 * 1024 * 1024, { 'x-api-key': s.key }))
    for (const r of results) {
      assert.ok('status' in r, `an answer, not ${JSON.stringify(r)}`)
      assert.equal(r.status, 413)
      assert.equal(JSON.parse(r.body).error.code, 'payload_too_large')
    }
    // Without a key, the 401 comes before the body too, and is read the same way.
    const stranger = await bigPost(`${server.url}/api/send`, 3 * 1024 * 1024, {})
    assert.ok('status' in stranger && stranger.status === 401, JSON.stringify(stranger))
  })
})

describe('SMTP credentials (item 14)', () => {
  test('requireTLS is on by default when SMTP_URL carries credentials to a host that is not loopback', () => {
    assert.equal(parseSmtpUrl('smtp://user:pass@relay.example.com:587').requireTLS, true)
    assert.equal(parseSmtpUrl('smtp://user:pass@192.0.2.10').requireTLS, true)
    assert.equal(parseSmtpUrl('smtp://user:pass@relay.example.com?requireTLS=false').requireTLS, false, 'the operator may say otherwise')
    assert.equal(parseSmtpUrl('smtp://user:pass@127.0.0.1:2525').requireTLS, false, 'loopback')
    assert.equal(parseSmtpUrl('smtp://user:pass@localhost:2525').requireTLS, false, 'loopback')
    assert.equal(parseSmtpUrl('smtp://relay.example.com:25').requireTLS, false, 'no credentials to protect')
    assert.equal(parseSmtpUrl('smtps://user:pass@relay.example.com').requireTLS, false, 'TLS from the first byte')
  })
})

describe('ids (item 3)', () => {
  test('the ids of one batch share no counter: each carries 64 fresh random bits', async (t) => {
    const server = await startServer(t)
    const s = await sender(server)
    const res = await s.batch(Array.from({ length: 20 }, (_, i) => ({ to: `r${i}@example.com`, subject: 's', text: 't' })))
    assert.equal(res.status, 202)
    const ids: string[] = res.body.data.map((d: { id: string }) => d.id)
    const randomPart = (id: string) => BigInt('0x' + id.slice(-16))
    for (let i = 0; i < ids.length; i++) {
      for (let j = i + 1; j < ids.length; j++) {
        const gap = randomPart(ids[i]!) - randomPart(ids[j]!)
        assert.ok(gap > (1n << 32n) || gap < -(1n << 32n), `${ids[i]} and ${ids[j]} are neighbours`)
      }
    }
    // Pages still walk every email once, newest first.
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const page: { body: { data: Array<{ id: string }>; nextCursor: string | null } } = await s.client.get(`/api/emails?limit=7${cursor ? `&cursor=${cursor}` : ''}`)
      seen.push(...page.body.data.map((e) => e.id))
      cursor = page.body.nextCursor
    } while (cursor !== null)
    assert.deepEqual([...seen].sort(), [...ids].sort())
  })
})

describe('security events (logged once, with the account, never a secret)', () => {
  test('API key created and revoked', async (t) => {
    const log = logSink()
    const server = await startServer(t, { deps: { logger: log.logger } })
    const { client, id } = await signedUp(server)
    const key = await client.post('/api/keys', { name: 'k' })
    assert.equal((await client.delete(`/api/keys/${key.body.data.id}`)).status, 200)
    const created = log.security('api_key_created')
    const revoked = log.security('api_key_revoked')
    assert.equal(created.length, 1)
    assert.equal(revoked.length, 1)
    assert.equal(created[0]!.accountId, id)
    assert.equal(revoked[0]!.keyId, key.body.data.id)
    assert.ok(!log.raw.some((l) => l.includes(key.body.data.key)))
  })
})
