// POST /api/send, /api/send/batch and GET /api/emails/:id against the real app, with the sandbox
// transport injected so that what "went out" can be read back.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createSandboxTransport, type SandboxTransport } from '../../src/mail/sandbox-transport.js'
import { SIMULATOR } from '../../src/mail/transport.js'
import { errorOf, startServer, type Response } from '../helpers/server.js'
import { startReceiver } from '../helpers/receiver.js'
import { sender, timeline, type Sender } from '../helpers/sending.js'

async function setup (t: Parameters<typeof startServer>[0], env: Record<string, string> = {}) {
  const transport = createSandboxTransport()
  const server = await startServer(t, { env, deps: { transport } })
  return { server, transport, s: await sender(server) }
}

const basic = (over: Record<string, unknown> = {}) => ({ to: 'someone@example.com', subject: 'Hello', html: '<p>Hi</p>', ...over })

/** The sandbox's copy of an email (the last one sent with that id). */
function sentCopy (transport: SandboxTransport, id: string) {
  return transport.sent().filter((m) => m.messageId === id).at(-1)
}

describe('POST /api/send', () => {
  test('answers 202 with an id at once; the email goes out and its timeline reads sent, then delivered', async (t) => {
    const { server, transport, s } = await setup(t)
    const res = await s.send(basic({ text: 'Hi', tags: [{ name: 'kind', value: 'welcome' }] }))
    assert.equal(res.status, 202)
    assert.equal(res.body.success, true)
    assert.match(res.body.data.id, /^em_[0-9a-f]{28}$/)
    assert.deepEqual(Object.keys(res.body.data), ['id'], 'no suppressed field when nothing was dropped')

    const email = await s.settled(res.body.data.id)
    assert.equal(email.status, 'delivered')
    assert.deepEqual(timeline(email), ['email.sent someone@example.com', 'email.delivered someone@example.com'])
    assert.equal(email.from, 'svc <no-reply@localhost>', 'MAIL_FROM by default')
    assert.deepEqual(email.to, ['someone@example.com'])
    assert.deepEqual(email.tags, [{ name: 'kind', value: 'welcome' }])
    for (const e of email.events) {
      assert.match(e.id, /^evt_/)
      assert.match(e.occurredAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    }

    const copy = sentCopy(transport, res.body.data.id)
    assert.ok(copy, 'the transport got the email')
    assert.equal(copy.subject, 'Hello')
    assert.equal(copy.text, 'Hi')
    assert.match(copy.headers['List-Unsubscribe'] ?? '', /^<http:\/\/127\.0\.0\.1:3000\/t\/u\/[\w-]+>$/)
    assert.equal(copy.headers['List-Unsubscribe-Post'], 'List-Unsubscribe=One-Click')
    assert.match(copy.html ?? '', /<img src="http:\/\/127\.0\.0\.1:3000\/t\/o\/[\w.-]+" width="1" height="1"/)

    const metrics = await server.client().get('/metrics')
    assert.match(metrics.text, /svc_emails_accepted_total 1\b/)
    assert.match(metrics.text, /svc_mail_recipient_outcomes_total\{outcome="delivered"\} 1\b/)
  })

  test('addresses are normalised: display names kept, the address lower-cased, duplicates sent once', async (t) => {
    const { transport, s } = await setup(t)
    const res = await s.send(basic({
      from: 'Billing Team <Billing@Example.COM>',
      to: ['Jane Doe <Jane.Doe@Example.com>', '"Doe, John" <john@EXAMPLE.com>'],
      cc: ['jane.doe@example.com', 'Carol <carol@example.com>'],
      bcc: 'dave@example.com',
      replyTo: 'support@example.com',
    }))
    assert.equal(res.status, 202)
    const email = await s.settled(res.body.data.id)
    assert.equal(email.from, 'Billing Team <billing@example.com>')
    assert.deepEqual(email.to, ['Jane Doe <jane.doe@example.com>', '"Doe, John" <john@example.com>'])
    assert.deepEqual(email.cc, ['Carol <carol@example.com>'], 'jane is already a recipient')
    assert.deepEqual(email.bcc, ['dave@example.com'])
    assert.deepEqual(email.replyTo, ['support@example.com'])
    assert.deepEqual(timeline(email).filter((e) => e.startsWith('email.delivered')).sort(), [
      'email.delivered carol@example.com', 'email.delivered dave@example.com',
      'email.delivered jane.doe@example.com', 'email.delivered john@example.com',
    ])
    assert.deepEqual(sentCopy(transport, email.id)?.to, email.to)
  })

  // One case per rule: the field that is wrong is named in details, and nothing is sent.
  const invalid: Array<[string, Record<string, unknown>, string]> = [
    ['no recipient', { to: undefined }, 'body.to'],
    ['an empty to list', { to: [] }, 'body.to'],
    ['a to that is not an address', { to: 'not-an-address' }, 'body.to'],
    ['one bad address in a list', { to: ['ok@example.com', 'bad@@example.com'] }, 'body.to[1]'],
    ['more than 50 recipients in to', { to: Array.from({ length: 51 }, (_, i) => `r${i}@example.com`) }, 'body.to'],
    ['a to of the wrong type', { to: 42 }, 'body.to'],
    ['an address with CR/LF (header injection)', { to: 'a@example.com\r\nBcc: victim@example.net' }, 'body.to'],
    ['a display name with CR/LF', { to: '"Eve\r\nBcc: victim@example.net" <eve@example.com>' }, 'body.to'],
    ['a non-ASCII address', { to: 'jöe@example.com' }, 'body.to'],
    ['an IP-literal domain', { to: 'joe@127.0.0.1' }, 'body.to'],
    ['two addresses in one string', { to: 'a@example.com, b@example.com' }, 'body.to'],
    ['a bad cc', { cc: ['fine@example.com', 'nope'] }, 'body.cc[1]'],
    ['a bad bcc', { bcc: 'nope' }, 'body.bcc'],
    ['a bad replyTo', { replyTo: ['x@'] }, 'body.replyTo[0]'],
    ['more than 10 replyTo', { replyTo: Array.from({ length: 11 }, (_, i) => `r${i}@example.com`) }, 'body.replyTo'],
    ['a bad from', { from: 'Someone' }, 'body.from'],
    ['a from with CR/LF', { from: 'me@example.com\nBcc: victim@example.net' }, 'body.from'],
    ['no subject', { subject: undefined }, 'body.subject'],
    ['an empty subject', { subject: '' }, 'body.subject'],
    ['a subject over 998 characters', { subject: 'x'.repeat(999) }, 'body.subject'],
    ['a subject with CR/LF', { subject: 'Hi\r\nBcc: victim@example.net' }, 'body.subject'],
    ['neither html nor text', { html: undefined }, 'body.html'],
    ['an html that is not a string', { html: 5 }, 'body.html'],
    ['an empty text', { text: '' }, 'body.text'],
    ['a header name with a colon', { headers: { 'X-A:B': 'v' } }, 'body.headers.X-A:B'],
    ['a header name with a space', { headers: { 'X A': 'v' } }, 'body.headers.X A'],
    ['a Bcc header', { headers: { Bcc: 'victim@example.net' } }, 'body.headers.Bcc'],
    ['a List-Unsubscribe header', { headers: { 'list-unsubscribe': '<https://evil.example/>' } }, 'body.headers.list-unsubscribe'],
    ['a header value with CR/LF', { headers: { 'X-Note': 'ok\r\nBcc: victim@example.net' } }, 'body.headers.X-Note'],
    ['a header value that is not a string', { headers: { 'X-Count': 3 } }, 'body.headers.X-Count'],
    ['one header twice in two cases', { headers: { 'X-A': '1', 'x-a': '2' } }, 'body.headers.x-a'],
    ['a tag name with a space', { tags: [{ name: 'a b', value: 'c' }] }, 'body.tags[0].name'],
    ['a tag without a value', { tags: [{ name: 'a' }] }, 'body.tags[0].value'],
    ['an unknown field', { attachment: [] }, 'body.attachment'],
  ]

  test('bad input on every field is a 400 naming the field; nothing is sent', async (t) => {
    const { transport, s } = await setup(t)
    for (const [what, over, path] of invalid) {
      const res = await s.send(basic(over))
      assert.equal(res.status, 400, `${what}: ${res.text}`)
      const err = errorOf(res)
      assert.equal(err.code, 'validation_error', what)
      assert.ok(err.details?.some((d) => d.path === path), `${what}: expected ${path} in ${JSON.stringify(err.details)}`)
    }
    const tooLong = await s.send(basic(), { 'idempotency-key': 'k'.repeat(257) })
    assert.equal(tooLong.status, 400)
    assert.ok(errorOf(tooLong).details?.some((d) => d.path === 'headers.idempotency-key'))

    // A good send afterwards goes out alone: none of the refused ones was queued.
    const ok = await s.send(basic({ to: 'last@example.com' }))
    await s.settled(ok.body.data.id)
    assert.deepEqual(transport.sent().map((m) => m.to), [['last@example.com']])
  })

  test('custom headers reach the transport as given', async (t) => {
    const { transport, s } = await setup(t)
    const res = await s.send(basic({ headers: { 'X-Campaign': 'spring-2026', 'X-Entity-Ref-ID': 'abc 123' } }))
    await s.settled(res.body.data.id)
    const copy = sentCopy(transport, res.body.data.id)
    assert.equal(copy?.headers['X-Campaign'], 'spring-2026')
    assert.equal(copy?.headers['X-Entity-Ref-ID'], 'abc 123')
  })

  test('the API key is required and checked on every request; a revoked key is refused at once', async (t) => {
    const { server, s } = await setup(t)
    const anonymous = await server.client().post('/api/send', basic())
    assert.equal(anonymous.status, 401)
    assert.equal(errorOf(anonymous).code, 'authentication_required')
    const unknown = await server.client().post('/api/send', basic(), { 'x-api-key': 'svc_sk_' + 'x'.repeat(43) })
    assert.equal(errorOf(unknown).code, 'invalid_api_key')
    // A session cookie is not a sending credential.
    assert.equal((await s.client.post('/api/send', basic())).status, 401)

    assert.equal((await s.send(basic())).status, 202)
    const keys = await s.client.get('/api/keys')
    assert.equal((await s.client.delete(`/api/keys/${keys.body.data[0].id}`)).status, 200)
    const after = await s.send(basic())
    assert.equal(after.status, 401)
    assert.equal(errorOf(after).code, 'invalid_api_key')
    assert.equal((await s.batch([basic()])).status, 401)
  })

  test("GET /api/emails/:id: another account's email and an unknown id are both 404", async (t) => {
    const { server, s } = await setup(t)
    const mine = await s.send(basic())
    const other = await sender(server)
    const theirs = await other.email(mine.body.data.id)
    assert.equal(theirs.status, 404)
    assert.equal(errorOf(theirs).code, 'not_found')
    assert.equal((await s.email('em_0000000000000000000000000000')).status, 404)
    assert.equal((await s.email(mine.body.data.id)).status, 200)
  })

  test('the rate limit is per API key, counted after authentication and before the body is read', async (t) => {
    const { server, s } = await setup(t, { RATE_LIMIT_API_PER_SECOND: '2' })
    const other = await sender(server, s.client) // another key of the same account
    // Twenty at once against a limit of two per second: the limiter, not the (invalid) body, answers most.
    const burst = await Promise.all(Array.from({ length: 20 }, () => s.send({ subject: 'no recipient' })))
    const limited = burst.filter((r) => r.status === 429)
    assert.ok(limited.length >= 10, `expected most of the burst limited, got ${burst.map((r) => r.status).join(',')}`)
    assert.ok(burst.every((r) => r.status === 429 || r.status === 400))
    const one = limited[0]!
    assert.equal(errorOf(one).code, 'rate_limited')
    assert.ok(Number(one.headers['retry-after']) >= 1)
    assert.equal(one.headers['ratelimit-limit'], '2')

    assert.equal((await other.send(basic())).status, 202, 'another key is not held back')
    const strangers = await Promise.all(Array.from({ length: 5 }, () => server.client().post('/api/send', basic(), { 'x-api-key': 'svc_sk_nope' })))
    assert.deepEqual([...new Set(strangers.map((r) => r.status))], [401], 'no key, no count: 401, never 429')
  })
})

describe('POST /api/send/batch', () => {
  test('up to 100 emails, one id each, in order', async (t) => {
    const { s } = await setup(t)
    const res = await s.batch([basic({ to: 'a@example.com' }), basic({ to: 'b@example.com', text: 'b' }), basic({ to: 'c@example.com' })])
    assert.equal(res.status, 202)
    assert.equal(res.body.data.length, 3)
    const emails = await Promise.all(res.body.data.map((d: { id: string }) => s.settled(d.id)))
    assert.deepEqual(emails.map((e) => e.to[0]), ['a@example.com', 'b@example.com', 'c@example.com'])
    assert.ok(emails.every((e) => e.status === 'delivered'))
  })

  test('validated as a whole: one bad item is a 400 naming its index, and nothing of the batch is sent', async (t) => {
    const { transport, s } = await setup(t)
    const items = [basic({ to: 'a@example.com' }), basic({ to: 'b@example.com' }), basic({ to: 'c@example.com' }), basic({ subject: '' }), basic({ to: 'bad' })]
    const res = await s.batch(items)
    assert.equal(res.status, 400)
    const paths = errorOf(res).details!.map((d) => d.path)
    assert.ok(paths.includes('body[3].subject'), JSON.stringify(paths))
    assert.equal((await s.batch(Array.from({ length: 101 }, () => basic()))).status, 400)
    assert.equal((await s.batch([])).status, 400)
    assert.equal((await s.batch(basic())).status, 400, 'a batch is an array')

    // Same batch, fixed: every item goes out, and nothing from the refused one ever did.
    const ok = await s.batch(items.slice(0, 3))
    await Promise.all(ok.body.data.map((d: { id: string }) => s.settled(d.id)))
    assert.equal(transport.sent().length, 3)
  })
})

describe('idempotency', () => {
  test('the same key and body answer the first response and send nothing new; another body is 409', async (t) => {
    const { transport, s } = await setup(t)
    const key = { 'idempotency-key': 'order-1234' }
    const first = await s.send(basic({ to: 'once@example.com' }), key)
    assert.equal(first.status, 202)
    await s.settled(first.body.data.id)
    // The same body with its keys in another order is the same body.
    const again = await s.send({ html: '<p>Hi</p>', subject: 'Hello', to: 'once@example.com' }, key)
    assert.equal(again.status, 202)
    assert.equal(again.text, first.text)
    assert.equal(again.headers['idempotent-replayed'], 'true')

    const conflict = await s.send(basic({ to: 'other@example.com' }), key)
    assert.equal(conflict.status, 409)
    assert.equal(errorOf(conflict).code, 'idempotency_conflict')
    const onBatch = await s.batch([basic({ to: 'once@example.com' })], key)
    assert.equal(onBatch.status, 409, 'a key belongs to one route and one body')

    assert.equal(transport.sent().filter((m) => m.to[0] === 'once@example.com').length, 1)
  })

  test('twenty concurrent requests with one key make one email; each answers with its id', async (t) => {
    const { transport, s } = await setup(t)
    const answers = await Promise.all(Array.from({ length: 20 }, () => s.send(basic({ to: 'race@example.com' }), { 'idempotency-key': 'race' })))
    assert.deepEqual([...new Set(answers.map((a) => a.status))], [202])
    const ids = new Set(answers.map((a) => a.body.data.id))
    assert.equal(ids.size, 1)
    const [id] = [...ids]
    await s.settled(id)
    assert.equal(transport.sent().filter((m) => m.to[0] === 'race@example.com').length, 1)
  })

  test('keys are per account, and a batch replays its whole answer', async (t) => {
    const { server, s } = await setup(t)
    const other = await sender(server)
    const key = { 'idempotency-key': 'shared-name' }
    const a = await s.send(basic(), key)
    const b = await other.send(basic(), key)
    assert.equal(b.status, 202)
    assert.notEqual(a.body.data.id, b.body.data.id)

    const batch = [basic({ to: 'x@example.com' }), basic({ to: 'y@example.com' })]
    const first = await s.batch(batch, { 'idempotency-key': 'batch-1' })
    const again = await s.batch(batch, { 'idempotency-key': 'batch-1' })
    assert.equal(again.status, 202)
    assert.deepEqual(again.body, first.body)
  })
})

describe('suppression', () => {
  async function suppressedOf (s: Sender) {
    const list = await s.client.get('/api/suppressions')
    return Object.fromEntries(list.body.data.map((e: { email: string; reason: string }) => [e.email, e.reason]))
  }

  test('a bounce suppresses that address only; the next send to it is 422, a mixed send drops it', async (t) => {
    const { s } = await setup(t)
    const res = await s.send(basic({ to: [SIMULATOR.bounced, 'fine@example.com'] }))
    const email = await s.settled(res.body.data.id)
    assert.equal(email.status, 'partially_delivered')
    assert.deepEqual(timeline(email).slice(2).sort(), [`email.bounced ${SIMULATOR.bounced}`, 'email.delivered fine@example.com'])
    assert.deepEqual(await suppressedOf(s), { [SIMULATOR.bounced]: 'bounced' })

    const refused = await s.send(basic({ to: 'Bounced@Simulator.test' }))
    assert.equal(refused.status, 422)
    const err = errorOf(refused)
    assert.equal(err.code, 'recipient_suppressed')
    assert.deepEqual(err.details, [{ path: 'body.to', message: `${SIMULATOR.bounced} is on the suppression list (bounced)` }])

    const mixed = await s.send(basic({ to: ['fine@example.com'], cc: [SIMULATOR.bounced] }))
    assert.equal(mixed.status, 202)
    assert.deepEqual(mixed.body.data.suppressed, [SIMULATOR.bounced])
    const sent = await s.settled(mixed.body.data.id)
    assert.deepEqual(sent.cc, [])
    assert.deepEqual(sent.suppressed, [SIMULATOR.bounced])
    assert.deepEqual(timeline(sent), ['email.sent fine@example.com', 'email.delivered fine@example.com'])
  })

  test('a complaint is delivered, then complained, and suppresses the address', async (t) => {
    const { s } = await setup(t)
    const res = await s.send(basic({ to: SIMULATOR.complained }))
    const email = await s.settled(res.body.data.id)
    assert.equal(email.status, 'delivered')
    assert.deepEqual(timeline(email), [`email.sent ${SIMULATOR.complained}`, `email.delivered ${SIMULATOR.complained}`, `email.complained ${SIMULATOR.complained}`])
    assert.deepEqual(await suppressedOf(s), { [SIMULATOR.complained]: 'complained' })
    assert.equal((await s.send(basic({ to: SIMULATOR.complained }))).status, 422)
  })

  test('a batch with an item whose every recipient is suppressed is refused whole', async (t) => {
    const { s } = await setup(t)
    assert.equal((await s.client.post('/api/suppressions', { email: 'gone@example.com' })).status, 201)
    const res = await s.batch([basic({ to: 'ok@example.com' }), basic({ to: ['gone@example.com'] })])
    assert.equal(res.status, 422)
    assert.deepEqual(errorOf(res).details, [{ path: 'body[1].to[0]', message: 'gone@example.com is on the suppression list (manual)' }])
  })

  test('suppressions are per account', async (t) => {
    const { server, s } = await setup(t)
    await s.client.post('/api/suppressions', { email: 'someone@example.com' })
    assert.equal((await s.send(basic())).status, 422)
    assert.equal((await (await sender(server)).send(basic())).status, 202)
  })
})

describe('suppression list routes', () => {
  test('add, list in pages, remove; a removed address is sent to again', async (t) => {
    const { s } = await setup(t)
    const c = s.client
    const added = await c.post('/api/suppressions', { email: 'Someone <Someone@Example.com>' })
    assert.equal(added.status, 201)
    assert.deepEqual(Object.keys(added.body.data), ['email', 'reason', 'createdAt'])
    assert.equal(added.body.data.email, 'someone@example.com')
    assert.equal(added.body.data.reason, 'manual')
    const again = await c.post('/api/suppressions', { email: 'someone@example.com', reason: 'unsubscribed' })
    assert.equal(again.status, 200)
    assert.equal(again.body.data.reason, 'manual', 'the first entry stays')
    for (const n of [1, 2, 3, 4]) assert.equal((await c.post('/api/suppressions', { email: `n${n}@example.com`, reason: 'bounced' })).status, 201)

    const seen: string[] = []
    let cursor: string | null = null
    let pages = 0
    do {
      const res: Response = await c.get(`/api/suppressions?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
      assert.equal(res.status, 200)
      assert.ok(res.body.data.length <= 2)
      seen.push(...res.body.data.map((e: { email: string }) => e.email))
      cursor = res.body.nextCursor
      pages++
    } while (cursor !== null)
    assert.equal(pages, 3)
    assert.deepEqual(seen.slice().sort(), ['n1@example.com', 'n2@example.com', 'n3@example.com', 'n4@example.com', 'someone@example.com'])
    assert.equal(seen.at(-1), 'someone@example.com', 'newest first')

    assert.equal((await s.send(basic())).status, 422)
    const removed = await c.delete('/api/suppressions/SOMEONE%40example.com')
    assert.equal(removed.status, 200)
    assert.deepEqual(removed.body.data, { email: 'someone@example.com', deleted: true })
    assert.equal((await c.delete('/api/suppressions/someone%40example.com')).status, 404)
    assert.equal((await s.send(basic())).status, 202)
  })

  test('cookie (same origin only) or a full_access key; bad input is 400', async (t) => {
    const { server, s } = await setup(t)
    assert.equal((await server.client().get('/api/suppressions')).status, 401)
    assert.equal((await server.client().get('/api/suppressions', { 'x-api-key': s.key })).status, 200, 'a full_access key acts as the session')
    const sending = await s.client.post('/api/keys', { name: 'sending', permission: 'sending_access' })
    const refused = await server.client().get('/api/suppressions', { 'x-api-key': sending.body.data.key })
    assert.equal(errorOf(refused).code, 'insufficient_permission', 'a sending_access key only sends')
    const foreign = await s.client.get('/api/suppressions', { origin: 'https://evil.example' })
    assert.equal(foreign.status, 403)
    assert.equal(errorOf(foreign).code, 'forbidden_origin')
    for (const [body, path] of [[{ email: 'nope' }, 'body.email'], [{ email: 'a@example.com', reason: 'spam' }, 'body.reason'], [{}, 'body.email']] as const) {
      const res = await s.client.post('/api/suppressions', body)
      assert.equal(res.status, 400)
      assert.ok(errorOf(res).details?.some((d) => d.path === path), JSON.stringify(res.body))
    }
    const badCursor = await s.client.get('/api/suppressions?cursor=garbage')
    assert.equal(badCursor.status, 400)
    assert.equal(errorOf(badCursor).details?.[0]?.path, 'query.cursor')
    assert.equal((await s.client.get('/api/suppressions?limit=0')).status, 400)
  })
})

describe('events reach webhooks', () => {
  test('a send raises email.sent and email.delivered or email.bounced, signed, with the email id and the recipient', async (t) => {
    const receiver = await startReceiver(t)
    const { s } = await setup(t)
    const hook = await s.client.post('/api/webhooks', { url: receiver.url('/hooks'), events: ['email.sent', 'email.delivered', 'email.bounced'] })
    assert.equal(hook.status, 201, hook.text)
    receiver.secrets.push(hook.body.data.secret)

    const res = await s.send(basic({ to: ['reader@example.com', SIMULATOR.bounced] }))
    const id: string = res.body.data.id
    await receiver.until(() => receiver.received.length >= 4, 'four webhooks')
    const got = receiver.received.map((r) => `${r.event} ${r.body.to}`).sort()
    assert.deepEqual(got, [
      `email.bounced ${SIMULATOR.bounced}`, `email.sent ${SIMULATOR.bounced}`, 'email.delivered reader@example.com', 'email.sent reader@example.com',
    ].sort())
    for (const r of receiver.received) {
      assert.deepEqual(r.validFor, [hook.body.data.secret])
      assert.equal(r.body.emailId, id)
      assert.equal(r.body.type, r.event)
    }
    const bounce = receiver.received.find((r) => r.event === 'email.bounced')!
    assert.match(bounce.body.data.reason, /550/)
  })
})
