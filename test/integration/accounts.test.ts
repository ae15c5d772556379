import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { PASSWORD, errorOf, signedUp, startServer, uniqueEmail, type TestServer } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

function cookieLine (headers: Record<string, string | string[] | undefined>): string {
  const raw = headers['set-cookie']
  const line = (Array.isArray(raw) ? raw : [raw ?? '']).find((l) => l.startsWith('svc_session='))
  assert.ok(line, 'a svc_session cookie is set')
  return line
}

describe('signup', () => {
  test('creates a Free account, answers 201 and sets an HttpOnly, SameSite=Lax session cookie', async (t) => {
    const server = await startServer(t)
    const client = server.client()
    const email = uniqueEmail('Signup')
    const res = await client.post('/api/auth/signup', { email: `  ${email.toUpperCase()} `.trim(), password: PASSWORD })
    assert.equal(res.status, 201)
    assert.equal(res.body.success, true)
    assert.deepEqual(Object.keys(res.body.data).sort(), ['createdAt', 'email', 'id', 'plan'])
    assert.equal(res.body.data.email, email.toLowerCase(), 'email is stored in lower case')
    assert.equal(res.body.data.plan, 'free')
    assert.match(res.body.data.id, /^acct_/)
    assert.match(res.body.data.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    const cookie = cookieLine(res.headers)
    assert.match(cookie, /HttpOnly/i)
    assert.match(cookie, /SameSite=Lax/i)
    assert.match(cookie, /Path=\//)
    assert.doesNotMatch(cookie, /Secure/i, 'no Secure flag in development (plain http on localhost)')
    const token = cookie.split(';')[0]!.slice('svc_session='.length)
    assert.ok(Buffer.from(token, 'base64url').length >= 32, 'session token carries at least 32 random bytes')
    assert.equal(res.text.includes(PASSWORD), false)

    const me = await client.get('/api/account')
    assert.equal(me.status, 200)
    assert.equal(me.body.data.email, email.toLowerCase())
  })

  test('the session token is stored only as a hash', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const token = client.cookie!.slice('svc_session='.length)
    const db = (server.store as import('../../src/store/sqlite/index.js').SqliteStore).db
    const rows = db.prepare('SELECT * FROM sessions').all()
    assert.equal(rows.length, 1)
    assert.equal(JSON.stringify(rows).includes(token), false)
  })

  test('production cookies carry Secure', async (t) => {
    const server = await startServer(t, { env: { NODE_ENV: 'production' } })
    const res = await server.client().post('/api/auth/signup', { email: uniqueEmail(), password: PASSWORD })
    assert.equal(res.status, 201)
    assert.match(cookieLine(res.headers), /Secure/i)
  })

  test('an email already registered, in any case, is 409 email_taken', async (t) => {
    const server = await startServer(t)
    const email = uniqueEmail()
    await signedUp(server, email)
    const res = await server.client().post('/api/auth/signup', { email: email.toUpperCase(), password: PASSWORD })
    assert.equal(res.status, 409)
    assert.equal(errorOf(res).code, 'email_taken')
    assert.equal(res.headers['set-cookie'], undefined)
  })

  test('bad input is 400 validation_error naming the field, and creates nothing', async (t) => {
    const server = await startServer(t)
    const cases: Array<[unknown, string]> = [
      [{ email: uniqueEmail(), password: 'short' }, 'body.password'],
      [{ email: uniqueEmail(), password: 'x'.repeat(201) }, 'body.password'],
      [{ email: 'not-an-email', password: PASSWORD }, 'body.email'],
      [{ email: { $ne: null }, password: PASSWORD }, 'body.email'],
      [{ email: uniqueEmail(), password: { $gt: '' } }, 'body.password'],
      [{ email: uniqueEmail() }, 'body.password'],
      [{ password: PASSWORD }, 'body.email'],
      [{ email: uniqueEmail(), password: PASSWORD, plan: 'pro' }, 'body.plan'],
    ]
    for (const [body, path] of cases) {
      const res = await server.client().post('/api/auth/signup', body)
      assert.equal(res.status, 400, JSON.stringify(body))
      const err = errorOf(res)
      assert.equal(err.code, 'validation_error')
      assert.ok(err.details?.some((d) => d.path === path), `${JSON.stringify(body)} → ${JSON.stringify(err.details)}`)
    }
    const bodies = cases.map(([b]) => b as { email?: unknown })
    for (const b of bodies) {
      if (typeof b.email === 'string') assert.equal(await server.store.findAccountByEmail(b.email), null)
    }
  })
})

describe('login and logout', () => {
  test('login with the right password opens a new session', async (t) => {
    const server = await startServer(t)
    const { email } = await signedUp(server)
    const client = server.client()
    const res = await client.post('/api/auth/login', { email: email.toUpperCase(), password: PASSWORD })
    assert.equal(res.status, 200)
    assert.equal(res.body.data.email, email)
    assert.ok(client.cookie)
    assert.equal((await client.get('/api/account')).status, 200)
  })

  test('a wrong password and an unknown email get the same 401 invalid_credentials', async (t) => {
    const server = await startServer(t)
    const { email } = await signedUp(server)
    const wrong = await server.client().post('/api/auth/login', { email, password: 'wrong password!' })
    const unknown = await server.client().post('/api/auth/login', { email: uniqueEmail('nobody'), password: PASSWORD })
    for (const res of [wrong, unknown]) {
      assert.equal(res.status, 401)
      assert.equal(res.headers['set-cookie'], undefined)
    }
    assert.deepEqual(wrong.body, unknown.body)
    assert.equal(errorOf(wrong).code, 'invalid_credentials')
  })

  test('logout deletes the session server-side: the old cookie is refused afterwards', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const stolen = client.cookie!
    const res = await client.post('/api/auth/logout')
    assert.equal(res.status, 200)
    assert.match(cookieLine(res.headers), /svc_session=;|Expires=Thu, 01 Jan 1970/)
    const replay = await server.client().get('/api/account', { cookie: stolen })
    assert.equal(replay.status, 401)
    assert.equal(errorOf(replay).code, 'invalid_session')
  })

  test('no cookie is 401 authentication_required; a forged one is 401 invalid_session', async (t) => {
    const server = await startServer(t)
    const none = await server.client().get('/api/account')
    assert.equal(none.status, 401)
    assert.equal(errorOf(none).code, 'authentication_required')
    const forged = await server.client().get('/api/account', { cookie: 'svc_session=' + 'A'.repeat(43) })
    assert.equal(forged.status, 401)
    assert.equal(errorOf(forged).code, 'invalid_session')
  })

  test('an x-api-key is not a credential on the management routes', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const created = await client.post('/api/keys', { name: 'k' })
    const res = await server.client().get('/api/account', { 'x-api-key': created.body.data.key })
    assert.equal(res.status, 401)
    assert.equal(errorOf(res).code, 'authentication_required')
  })
})

describe('sessions expire', () => {
  test('a session dies after its lifetime and slides forward when used', async (t) => {
    let now = Date.parse('2026-01-01T00:00:00.000Z')
    const clock = { now: () => now }
    const server = await startServer(t, { env: { SESSION_TTL_HOURS: '24' }, deps: { clock } })
    const { client } = await signedUp(server)
    now += 20 * 3_600_000
    const used = await client.get('/api/account')
    assert.equal(used.status, 200)
    assert.ok(used.headers['set-cookie'], 'the cookie is sent again with the new lifetime')
    now += 20 * 3_600_000 // 40 h after login, 20 h after last use: still alive thanks to the slide
    assert.equal((await client.get('/api/account')).status, 200)
    now += 25 * 3_600_000 // 25 h idle: expired
    const expired = await client.get('/api/account')
    assert.equal(expired.status, 401)
    assert.equal(errorOf(expired).code, 'invalid_session')
    assert.equal(await server.store.deleteExpiredSessions(new Date(now).toISOString()), 1)
  })
})

describe('cross-site requests', () => {
  test('a foreign Origin is 403 forbidden_origin and changes nothing; our own origin is fine', async (t) => {
    const server = await startServer(t)
    const { client, id } = await signedUp(server)
    const evil = await client.post('/api/keys', { name: 'csrf' }, { origin: 'https://evil.example' })
    assert.equal(evil.status, 403)
    assert.equal(errorOf(evil).code, 'forbidden_origin')
    assert.equal(await server.store.countActiveApiKeys(id), 0)
    const loginCsrf = await server.client().post('/api/auth/login', { email: 'x@example.test', password: PASSWORD }, { origin: 'null' })
    assert.equal(loginCsrf.status, 403)
    const own = await client.post('/api/keys', { name: 'ok' }, { origin: server.config.publicUrl })
    assert.equal(own.status, 201)
  })
})

describe('account', () => {
  test('names the transport: smtp when SMTP_URL is set', async (t) => {
    const server = await startServer(t, { env: { SMTP_URL: 'smtp://127.0.0.1:9' } })
    const { client } = await signedUp(server)
    assert.equal((await client.get('/api/account')).body.data.transport, 'smtp')
  })

  test('shows plan, limits and usage, and follows plan changes', async (t) => {
    const server = await startServer(t)
    const { client, id } = await signedUp(server)
    await client.post('/api/keys', { name: 'a' })
    await client.post('/api/webhooks', { url: 'http://127.0.0.1:9/h', events: ['email.sent'] })
    await client.post('/api/domains', { name: 'mine.example.test' })
    const free = await client.get('/api/account')
    assert.deepEqual(free.body.data.limits, { apiKeys: 3, webhooks: 5, domains: 1 })
    assert.deepEqual(free.body.data.usage, { apiKeys: 1, webhooks: 1, domains: 1 })
    // SMTP_URL unset: the sandbox, said so (the dashboard's banner reads it).
    assert.equal(free.body.data.transport, 'sandbox')
    await server.store.setAccountPlan(id, 'pro')
    const pro = await client.get('/api/account')
    assert.equal(pro.body.data.plan, 'pro')
    assert.deepEqual(pro.body.data.limits, { apiKeys: 10, webhooks: 10, domains: 10 })
  })
})

describe('logins under a password-guessing attack', () => {
  // Small limits, so the attack is over in moments: 3 failed logins from one address before it waits, a
  // ceiling of 8 failed logins per email from every address together, and the per-address request
  // limit out of the way (the guesser goes as fast as the server answers).
  const LIMITS = { RATE_LIMIT_LOGIN_FAILURES: '3', RATE_LIMIT_LOGIN_PER_EMAIL: '8', RATE_LIMIT_AUTH_PER_MINUTE: '1000000' }

  /** Wrong guesses from `address` in `lanes` concurrent loops until stopped; the answers by status. */
  function guesser (server: TestServer, email: string, address: string, lanes = 4) {
    const statuses = new Map<number, number>()
    let stopped = false
    const lane = async (n: number) => {
      const client = server.client({ localAddress: address })
      for (let i = 0; !stopped; i++) {
        const res = await client.post('/api/auth/login', { email, password: `wrong guess ${n}-${i}` })
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
      }
    }
    const running = Promise.all(Array.from({ length: lanes }, (_, n) => lane(n)))
    return {
      count: (status: number) => statuses.get(status) ?? 0,
      total: () => [...statuses.values()].reduce((a, b) => a + b, 0),
      statuses,
      stop: async () => { stopped = true; await running },
    }
  }

  test('addresses of one IPv6 /64 share one wait and one request limit; another /64 is not held back (TRUST_PROXY=1)', async (t) => {
    const server = await startServer(t, { env: { ...LIMITS, RATE_LIMIT_AUTH_PER_MINUTE: '12', TRUST_PROXY: '1' } })
    const { email } = await signedUp(server)
    const client = server.client()
    const from = (address: string, body: { email: string; password: string }) => client.post('/api/auth/login', body, { 'x-forwarded-for': address })
    // A fresh address of the /64 for every guess: the 4th is held back by the wait of the three before.
    const statuses: number[] = []
    for (let i = 1; i <= 6; i++) statuses.push((await from(`2001:db8::${i.toString(16)}`, { email, password: `wrong guess ${i}` })).status)
    assert.deepEqual(statuses, [401, 401, 401, 429, 429, 429])
    const held = await from('2001:db8::abcd:1', { email, password: PASSWORD })
    assert.equal(held.status, 429)
    assert.match(errorOf(held).message, /^Too many failed logins from this address for this email/)
    // The owner in another /64 logs in, and so does the owner at an IPv4 address.
    assert.equal((await from('2001:db8:0:1::1', { email, password: PASSWORD })).status, 200)
    assert.equal((await from('198.51.100.20', { email, password: PASSWORD })).status, 200)
    // The per-address request limit counts the /64 too: 12 a minute from all its addresses together.
    const more: number[] = []
    for (let i = 0; i < 6; i++) more.push((await from(`2001:db8::1:${i}`, { email: uniqueEmail(), password: PASSWORD })).status)
    assert.deepEqual(more, [401, 401, 401, 401, 401, 429], 'the 13th request from the /64 in the minute')
    assert.equal((await from('2001:db8:0:1::2', { email: uniqueEmail(), password: PASSWORD })).status, 401)
  })

  for (const store of ['memory', 'store'] as const) {
    test(`the owner logs in from another address while one address guesses at full speed (RATE_LIMIT_STORE=${store})`, async (t) => {
      const server = await startServer(t, { env: { ...LIMITS, RATE_LIMIT_STORE: store } })
      const { email } = await signedUp(server)
      const attack = guesser(server, email, '127.0.0.2')
      try {
        // The attack is on, and its address is being answered by its own throttle.
        await waitFor('the guesser held back many times', () => attack.count(429) >= 50)
        const owner = server.client({ localAddress: '127.0.0.3' })
        const res = await owner.post('/api/auth/login', { email, password: PASSWORD })
        assert.equal(res.status, 200, res.text)
        const seen = attack.total()
        await waitFor('more guesses after the owner logged in', () => attack.total() >= seen + 50)
        const again = await server.client({ localAddress: '127.0.0.3' }).post('/api/auth/login', { email, password: PASSWORD })
        assert.equal(again.status, 200, again.text)
      } finally {
        await attack.stop()
      }
      // Only the guesses that were tried count: the free three, and one more each time its wait ran out.
      assert.ok(attack.count(401) >= 3 && attack.count(401) < 8, JSON.stringify([...attack.statuses]))
      assert.deepEqual([...attack.statuses.keys()].sort(), [401, 429])
    })

    test(`guessing spread over many addresses meets the account-wide ceiling, which counts failures only (RATE_LIMIT_STORE=${store})`, async (t) => {
      // The store's windows are aligned on the epoch: a clock just past a window's start keeps the test in one.
      const window = 15 * 60_000
      const offset = Math.ceil(Date.now() / window) * window + 1000 - Date.now()
      const server = await startServer(t, { env: { ...LIMITS, RATE_LIMIT_STORE: store }, deps: { clock: { now: () => Date.now() + offset } } })
      const { email } = await signedUp(server)
      const login = (address: string, password: string) => server.client({ localAddress: address }).post('/api/auth/login', { email, password })
      // Right passwords do not count toward the ceiling.
      for (let i = 0; i < 10; i++) assert.equal((await login('127.0.0.3', PASSWORD)).status, 200)
      // Three addresses, three failures each: the ceiling of 8 is reached on the 8th.
      const statuses: number[] = []
      for (const address of ['127.0.0.10', '127.0.0.11', '127.0.0.12']) {
        for (let i = 0; i < 3; i++) statuses.push((await login(address, `wrong guess ${i}`)).status)
      }
      assert.deepEqual(statuses, [401, 401, 401, 401, 401, 401, 401, 401, 429])
      // Now every address waits for the rest of the window, the owner's too, with the right password.
      for (const address of ['127.0.0.13', '127.0.0.3']) {
        const res = await login(address, PASSWORD)
        assert.equal(res.status, 429)
        assert.equal(errorOf(res).code, 'rate_limited')
        assert.match(errorOf(res).message, /^Too many failed logins for this email; retry in \d+ s$/)
        const retryAfter = Number(res.headers['retry-after'])
        assert.ok(retryAfter >= 1 && retryAfter <= 15 * 60, `Retry-After: ${retryAfter}`)
      }
      // Another account is not held back.
      const other = await signedUp(server)
      assert.equal((await server.client({ localAddress: '127.0.0.10' }).post('/api/auth/login', { email: other.email, password: PASSWORD })).status, 200)
    })
  }
})
