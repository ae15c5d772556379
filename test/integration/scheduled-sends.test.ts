// Scheduled sends, tracking by choice and the sender's metadata, on real parts: svc as a real process (and
// two of them on one store) mailing a real SMTP sink, the in-process app over real sockets, a real webhook
// receiver that verifies with the standardwebhooks package. Times are a few seconds ahead; what is checked
// about them is order (never before its time), never speed.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { simpleParser } from 'mailparser'
import { EVENT_TYPES } from '../../src/domain/events.js'
import { createSandboxTransport } from '../../src/mail/sandbox-transport.js'
import { killProcess, startServerProcess } from '../helpers/process.js'
import { startReceiver } from '../helpers/receiver.js'
import { Client, PASSWORD, errorOf, startServer, tempDir, uniqueEmail } from '../helpers/server.js'
import { sender, timeline } from '../helpers/sending.js'
import { SHARED_STORE_KIND, sharedStore } from '../helpers/shared-store.js'
import { header, startSmtpSink, type Received, type SmtpSink } from '../helpers/smtp-sink.js'
import { waitFor } from '../helpers/wait.js'

/** An account and a key on a svc process. */
async function account (url: string) {
  const client = new Client(url)
  const signup = await client.post('/api/auth/signup', { email: uniqueEmail('sched'), password: PASSWORD })
  assert.equal(signup.status, 201, signup.text)
  const created = await client.post('/api/keys', { name: 'sending' })
  assert.equal(created.status, 201, created.text)
  const key: string = created.body.data.key
  const api = (url: string) => {
    const c = new Client(url)
    const h = { 'x-api-key': key }
    return {
      send: (body: unknown) => c.post('/api/send', body, h),
      batch: (body: unknown) => c.post('/api/send/batch', body, h),
      get: (id: string) => c.get(`/api/emails/${id}`, h),
      list: (query: string) => c.get(`/api/emails${query}`, h),
      move: (id: string, scheduledAt: string) => c.patch(`/api/emails/${id}`, { scheduledAt }, h),
      cancel: (id: string) => c.request('POST', `/api/emails/${id}/cancel`, { headers: h }),
    }
  }
  return { client, key, api }
}

/** The copies of an email the sink got (our Message-ID names the email). */
function copiesOf (sink: SmtpSink, id: string): Received[] {
  return sink.received.filter((m) => (header(m.raw, 'Message-ID') ?? '').startsWith(`<${id}@`))
}

const inMs = (ms: number) => new Date(Date.now() + ms).toISOString()

describe('scheduled sends', () => {
  test('three scheduled emails, one canceled and one moved, svc SIGKILLed and restarted between: each goes out once, never early; the canceled one never', async (t) => {
    const sink = await startSmtpSink()
    t.after(() => sink.close())
    const env = { DATA_DIR: tempDir(t), SMTP_URL: sink.url, MAIL_LEASE_SECONDS: '2' }
    const first = await startServerProcess(t, env)
    const { api: on } = await account(first.url)
    const api = on(first.url)

    const at = inMs(3000)
    const ids: string[] = []
    for (const name of ['kept', 'canceled', 'moved']) {
      const res = await api.send({ to: `${name}@example.net`, subject: name, text: `the ${name} one`, scheduledAt: at })
      assert.equal(res.status, 202, res.text)
      assert.equal(res.body.data.scheduledAt, at)
      ids.push(res.body.data.id)
    }
    const [kept, canceled, moved] = ids as [string, string, string]
    const shown = await api.get(kept)
    assert.equal(shown.body.data.status, 'scheduled')
    assert.equal(shown.body.data.scheduledAt, at)

    const cancel = await api.cancel(canceled)
    assert.equal(cancel.status, 200, cancel.text)
    assert.equal(cancel.body.data.status, 'canceled')
    const later = inMs(4500)
    const move = await api.move(moved, later)
    assert.equal(move.status, 200, move.text)
    assert.equal(move.body.data.scheduledAt, later)

    // Dies with everything still scheduled; a new process on the same store takes over.
    await killProcess(first.process)
    const second = await startServerProcess(t, env)
    const after = on(second.url)
    await waitFor('the kept and the moved email at the sink', () => copiesOf(sink, kept).length > 0 && copiesOf(sink, moved).length > 0)
    for (const id of [kept, moved]) await waitFor(`${id} delivered`, async () => (await after.get(id)).body.data.status === 'delivered')

    assert.equal(copiesOf(sink, kept).length, 1, 'the kept email went out once')
    assert.equal(copiesOf(sink, moved).length, 1, 'the moved email went out once')
    assert.ok(copiesOf(sink, kept)[0]!.at >= Date.parse(at), 'not before its time')
    assert.ok(copiesOf(sink, moved)[0]!.at >= Date.parse(later), 'not before its new time')
    assert.deepEqual(copiesOf(sink, canceled), [], 'the canceled email never went out')
    const gone = (await after.get(canceled)).body.data
    assert.equal(gone.status, 'canceled')
    assert.deepEqual(timeline(gone), ['email.sent canceled@example.net'], 'no event after the cancel')
    console.log(`# lateness: kept ${copiesOf(sink, kept)[0]!.at - Date.parse(at)} ms, moved ${copiesOf(sink, moved)[0]!.at - Date.parse(later)} ms`)

    // Once it went out, it can be neither moved nor canceled.
    for (const res of [await after.move(kept, inMs(60_000)), await after.cancel(moved)]) {
      assert.equal(res.status, 409, res.text)
      assert.equal(errorOf(res).code, 'email_not_scheduled')
    }
    assert.equal((await after.cancel(canceled)).status, 200, 'a second cancel answers the same')
  })

  test(`two processes on one ${SHARED_STORE_KIND === 'mongo' ? 'MongoDB database' : 'SQLite file'} send each scheduled email once`, async (t) => {
    const sink = await startSmtpSink()
    t.after(() => sink.close())
    const store = sharedStore(t)
    const env = { ...store, SMTP_URL: sink.url, MAIL_LEASE_SECONDS: '4', RATE_LIMIT_API_PER_SECOND: '1000' }
    const a = await startServerProcess(t, { ...env, NODE_ID: 'node-a' })
    const b = await startServerProcess(t, { ...env, NODE_ID: 'node-b' })
    const { api: on } = await account(a.url)
    const at = inMs(3000)
    const ids: string[] = []
    // Half accepted by each node, all due in the same millisecond: both mailers wake for them.
    for (const node of [on(a.url), on(b.url)]) {
      const res = await node.batch(Array.from({ length: 10 }, (_, i) => ({ to: `r${i}@example.net`, subject: `s${i}`, text: 'x', scheduledAt: at })))
      assert.equal(res.status, 202, res.text)
      ids.push(...res.body.data.map((d: { id: string }) => d.id))
    }
    const api = on(b.url)
    await waitFor('every scheduled email delivered', async () => {
      for (const id of ids) if ((await api.get(id)).body.data.status !== 'delivered') return false
      return true
    })
    for (const id of ids) {
      const copies = copiesOf(sink, id)
      assert.equal(copies.length, 1, `${id} went out once`)
      assert.ok(copies[0]!.at >= Date.parse(at), `${id} not before its time`)
    }
  })

  test('the mailer sleeps until the earliest scheduled email, not until its next poll: one scheduled here, and one found in the store at start', async (t) => {
    const transport = createSandboxTransport()
    const dataDir = tempDir(t)
    // A poll so slow that only the wake-up at the due time can send these within the test.
    const slow = { mailer: { pollMs: 600_000 } }
    const first = await startServer(t, { dataDir, deps: { transport, ...slow } })
    const s = await sender(first)
    const here = await s.send({ to: 'here@example.net', subject: 'here', text: 'x', scheduledAt: inMs(1500) })
    assert.equal(here.status, 202, here.text)
    const delivered = await s.settled(here.body.data.id)
    assert.equal(delivered.status, 'delivered')
    const stored = await s.send({ to: 'stored@example.net', subject: 'stored', text: 'x', scheduledAt: inMs(3000) })
    await first.service.stop()
    const second = await startServer(t, { dataDir, deps: { transport, ...slow } })
    const api = second.client()
    await waitFor('the stored email delivered', async () =>
      (await api.get(`/api/emails/${stored.body.data.id}`, { 'x-api-key': s.key })).body.data.status === 'delivered')
    const sentAt = transport.sent().filter((m) => m.messageId === stored.body.data.id)
    assert.equal(sentAt.length, 1)
  })

  test('moving and canceling: the rules, the list filters, the quota given back', async (t) => {
    const server = await startServer(t, { env: { QUOTAS: 'on', QUOTA_FREE_PER_DAY: '10' }, deps: { transport: createSandboxTransport() } })
    const s = await sender(server)
    const api = server.client()
    const h = { 'x-api-key': s.key }
    const sent = await s.send({
      to: ['a@example.net', 'b@example.net'], subject: 'Later', text: 'x', scheduledAt: inMs(3_600_000),
      tags: [{ name: 'campaign', value: 'winter' }], metadata: { orderId: 'ord_1' },
    })
    assert.equal(sent.status, 202, sent.text)
    const id: string = sent.body.data.id
    const usage = async () => (await s.client.get('/api/account')).body.data.sending.day.used as number
    assert.equal(await usage(), 2, 'counted at acceptance, like any send')

    const byStatus = await api.get('/api/emails?status=scheduled', h)
    assert.deepEqual(byStatus.body.data.map((e: { id: string }) => e.id), [id])
    assert.equal(byStatus.body.data[0].scheduledAt, sent.body.data.scheduledAt)
    assert.deepEqual((await api.get('/api/emails?tag=campaign:winter', h)).body.data.map((e: { id: string }) => e.id), [id])
    assert.deepEqual((await api.get('/api/emails?tag=campaign', h)).body.data.map((e: { id: string }) => e.id), [id])
    assert.deepEqual((await api.get('/api/emails?tag=campaign:summer', h)).body.data, [])
    assert.equal((await api.get('/api/emails?tag=a:b:c', h)).status, 400)

    const view = (await s.email(id)).body.data
    assert.deepEqual(view.metadata, { orderId: 'ord_1' })
    assert.deepEqual(view.tags, [{ name: 'campaign', value: 'winter' }])
    assert.deepEqual(view.tracking, { opens: true, clicks: true })
    assert.equal(view.unsubscribe, true)

    for (const [bad, why] of [[inMs(-60_000), /in the past/], ['tomorrow', /not a date-time/], [inMs(31 * 86_400_000), /more than 30 days/]] as const) {
      const res = await api.patch(`/api/emails/${id}`, { scheduledAt: bad }, h)
      assert.equal(res.status, 422, res.text)
      assert.equal(errorOf(res).code, 'invalid_schedule')
      assert.equal(errorOf(res).details![0]!.path, 'body.scheduledAt')
      assert.match(errorOf(res).details![0]!.message, why)
    }
    // A key that may only send may move its emails too.
    const sendingKey = await s.client.post('/api/keys', { name: 'app', permission: 'sending_access' }, { origin: 'http://127.0.0.1:3000' })
    assert.equal(sendingKey.status, 201, sendingKey.text)
    const moved = await api.patch(`/api/emails/${id}`, { scheduledAt: inMs(7_200_000) }, { 'x-api-key': sendingKey.body.data.key })
    assert.equal(moved.status, 200, moved.text)
    assert.equal((await api.patch('/api/emails/em_nope', { scheduledAt: inMs(60_000) }, h)).status, 404)
    assert.equal((await api.request('POST', '/api/emails/em_nope/cancel', { headers: h })).status, 404)
    // The dashboard cancels with its session.
    const canceled = await s.client.request('POST', `/api/emails/${id}/cancel`, { headers: { origin: 'http://127.0.0.1:3000' } })
    assert.equal(canceled.status, 200, canceled.text)
    assert.equal(canceled.body.data.status, 'canceled')
    assert.equal(await usage(), 0, 'a cancel gives the recipients back to the day (and month) it was counted in')
    assert.equal((await api.patch(`/api/emails/${id}`, { scheduledAt: inMs(60_000) }, h)).status, 409, 'a canceled email is not moved')
    assert.deepEqual((await api.get('/api/emails?status=canceled', h)).body.data.map((e: { id: string }) => e.id), [id])
  })

  test('a scheduledAt in the past, malformed, without an offset or too far ahead is refused naming it, and nothing is stored', async (t) => {
    const server = await startServer(t, { env: { SCHEDULE_HORIZON_DAYS: '7' }, deps: { transport: createSandboxTransport() } })
    const s = await sender(server)
    const ok = { to: 'x@example.net', subject: 'S', text: 'x' }
    for (const [scheduledAt, why] of [
      [inMs(-1000), /in the past/], ['2026-13-01T00:00:00Z', /not a date-time/], ['2030-01-01T09:00:00', /not a date-time with an offset/],
      [inMs(8 * 86_400_000), /more than 7 days ahead/],
    ] as const) {
      const res = await s.send({ ...ok, scheduledAt })
      assert.equal(res.status, 422, res.text)
      const e = errorOf(res)
      assert.equal(e.code, 'invalid_schedule')
      assert.deepEqual(e.details!.map((d) => d.path), ['body.scheduledAt'])
      assert.match(e.details![0]!.message, why)
    }
    const batch = await s.batch([{ ...ok, scheduledAt: inMs(60_000) }, { ...ok, scheduledAt: 'soon' }])
    assert.equal(batch.status, 422)
    assert.deepEqual(errorOf(batch).details!.map((d) => d.path), ['body[1].scheduledAt'])
    assert.equal((await s.send({ ...ok, scheduledAt: 12 })).status, 400, 'not a string: the schema refuses it')
    const list = await server.client().get('/api/emails', { 'x-api-key': s.key })
    assert.deepEqual(list.body.data, [], 'nothing was stored')
  })

  test('metadata out of bounds is refused naming it, and nothing is stored', async (t) => {
    const server = await startServer(t, { deps: { transport: createSandboxTransport() } })
    const s = await sender(server)
    const ok = { to: 'x@example.net', subject: 'S', text: 'x' }
    const many = Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`k${i}`, 'v']))
    const big = Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`k${i}`, 'x'.repeat(450)]))
    for (const [metadata, path] of [[many, 'body.metadata'], [big, 'body.metadata'], [{ 'a b': 'x' }, 'body.metadata'], [{ a: 'x'.repeat(501) }, 'body.metadata.a'], [{ a: 1 }, 'body.metadata.a']] as const) {
      const res = await s.send({ ...ok, metadata })
      assert.equal(res.status, 400, res.text)
      assert.ok(errorOf(res).details!.some((d) => d.path.startsWith(path)), `${JSON.stringify(errorOf(res).details)} names ${path}`)
    }
    // A hostile megabyte, in a value and in a key: refused at the schema, nothing stored.
    for (const metadata of [{ a: 'x'.repeat(1 << 20) }, { ['k'.repeat(1 << 20)]: 'x' }]) {
      const res = await s.send({ ...ok, metadata })
      assert.ok(res.status === 400 || res.status === 413, `${res.status} ${res.text.slice(0, 200)}`)
      assert.ok(res.text.length < 4096, 'the answer does not echo the megabyte')
    }
    const list = await server.client().get('/api/emails', { 'x-api-key': s.key })
    assert.deepEqual(list.body.data, [])
  })
})

describe('tracking by choice', () => {
  const HTML = '<html><body><p>Reset: <a href="https://example.com/reset?token=abc&amp;u=1">here</a> or <a href=\'http://example.org/x\'>there</a></p></body></html>'

  test('tracking off: no pixel and the links byte for byte; unsubscribe: false: no List-Unsubscribe; the default keeps both', async (t) => {
    const sink = await startSmtpSink()
    t.after(() => sink.close())
    const server = await startServer(t, { env: { SMTP_URL: sink.url } })
    const s = await sender(server)
    const plain = await s.send({ to: 'reset@example.net', subject: 'Reset', html: HTML, tracking: { opens: false, clicks: false }, unsubscribe: false })
    const usual = await s.send({ to: 'news@example.net', subject: 'News', html: HTML })
    const pixelOnly = await s.send({ to: 'pixel@example.net', subject: 'Pixel', html: HTML, tracking: { clicks: false } })
    for (const r of [plain, usual, pixelOnly]) assert.equal(r.status, 202, r.text)
    for (const r of [plain, usual, pixelOnly]) await s.settled(r.body.data.id)
    const parsed = async (id: string) => simpleParser(copiesOf(sink, id)[0]!.raw)

    const p = await parsed(plain.body.data.id)
    assert.equal(p.html, HTML, 'the html exactly as written')
    const raw = copiesOf(sink, plain.body.data.id)[0]!.raw
    assert.equal(header(raw, 'List-Unsubscribe'), undefined)
    assert.equal(header(raw, 'List-Unsubscribe-Post'), undefined)
    assert.deepEqual((await s.email(plain.body.data.id)).body.data.tracking, { opens: false, clicks: false })

    const u = await parsed(usual.body.data.id)
    assert.match(String(u.html), /\/t\/o\//, 'the default: a pixel')
    assert.match(String(u.html), /\/t\/c\//, 'the default: tracked links')
    assert.match(header(copiesOf(sink, usual.body.data.id)[0]!.raw, 'List-Unsubscribe') ?? '', /^<http.*\/t\/u\//, 'the default: List-Unsubscribe')

    const o = await parsed(pixelOnly.body.data.id)
    assert.match(String(o.html), /\/t\/o\//)
    assert.ok(String(o.html).includes('<a href="https://example.com/reset?token=abc&amp;u=1">here</a> or <a href=\'http://example.org/x\'>there</a>'), 'links as written')
  })

  test('a domain\'s defaults apply to sends from it that do not choose; a choice in the send wins', async (t) => {
    const transport = createSandboxTransport()
    const server = await startServer(t, { deps: { transport } })
    const s = await sender(server)
    const origin = { origin: 'http://127.0.0.1:3000' }
    const created = await s.client.post('/api/domains', { name: 'quiet.example' }, origin)
    assert.equal(created.status, 201, created.text)
    assert.deepEqual(created.body.data.tracking, { opens: true, clicks: true }, 'never set: the account\'s default, on')
    const patched = await s.client.patch(`/api/domains/${created.body.data.id}`, { tracking: { opens: false, clicks: false } }, origin)
    assert.equal(patched.status, 200, patched.text)
    assert.deepEqual(patched.body.data.tracking, { opens: false, clicks: false })
    assert.equal(patched.body.data.receiving, false, 'receiving untouched')
    assert.equal((await s.client.patch(`/api/domains/${created.body.data.id}`, {}, origin)).status, 400, 'an empty PATCH is refused')

    const quiet = await s.send({ from: 'hello@quiet.example', to: 'x@example.net', subject: 'Q', html: HTML })
    const chosen = await s.send({ from: 'hello@quiet.example', to: 'x@example.net', subject: 'C', html: HTML, tracking: { opens: true } })
    const elsewhere = await s.send({ from: 'hello@loud.example', to: 'x@example.net', subject: 'L', html: HTML })
    const html = async (id: string) => { await s.settled(id); return transport.sent().find((m) => m.messageId === id)!.html ?? '' }
    assert.equal(await html(quiet.body.data.id), HTML)
    const c = await html(chosen.body.data.id)
    assert.match(c, /\/t\/o\//, 'opens chosen in the send')
    assert.doesNotMatch(c, /\/t\/c\//, 'clicks from the domain: off')
    assert.match(await html(elsewhere.body.data.id), /\/t\/c\//, 'another domain: the account\'s default')
  })
})

describe('the sender\'s data in every event', () => {
  test('every event of an email with tags and metadata carries them beside emailId, to and timestamp, verified by standardwebhooks', async (t) => {
    const receiver = await startReceiver(t)
    const transport = createSandboxTransport()
    const server = await startServer(t, { env: { DELIVERY_RETRY_SCHEDULE: '50ms,50ms' }, deps: { transport } })
    const s = await sender(server)
    const hook = await s.client.post('/api/webhooks', { url: receiver.url('/all'), events: EVENT_TYPES.filter((e) => e !== 'email.received') },
      { origin: 'http://127.0.0.1:3000' })
    assert.equal(hook.status, 201, hook.text)
    receiver.secrets.push(hook.body.data.secret)

    const tags = [{ name: 'kind', value: 'order' }]
    const metadata = { orderId: 'ord_42', customer: 'Zoë' }
    const res = await s.send({
      to: ['reader@example.net', 'bounced@simulator.test', 'complained@simulator.test'], subject: 'Order', tags, metadata,
      html: '<p><a href="https://shop.example.com/o/42">Your order</a></p>',
    })
    assert.equal(res.status, 202, res.text)
    const id: string = res.body.data.id
    await s.settled(id)
    const copy = transport.sent().find((m) => m.messageId === id)!
    const path = (url: string) => new URL(url).pathname
    const pub = server.client()
    assert.equal((await pub.get(path(/<img src="([^"]+)"/.exec(copy.html!)![1]!))).status, 200)
    assert.equal((await pub.get(path(/<a href="([^"]+)"/.exec(copy.html!)![1]!))).status, 302)
    const unsubscribe = path(/^<(.+)>$/.exec(copy.headers['List-Unsubscribe']!)![1]!)
    assert.equal((await pub.request('POST', unsubscribe, { body: 'List-Unsubscribe=One-Click', headers: { 'content-type': 'application/x-www-form-urlencoded' } })).status, 200)

    const expected = ['email.sent', 'email.delivered', 'email.bounced', 'email.complained', 'email.opened', 'email.clicked', 'email.unsubscribed']
    await receiver.until(() => expected.every((e) => receiver.received.some((r) => r.event === e)), 'every kind of event')
    await receiver.until(() => receiver.received.filter((r) => r.event === 'email.sent').length === 3, 'one email.sent per recipient')
    for (const got of receiver.received) {
      assert.deepEqual(got.standardValidFor, [hook.body.data.secret], `${got.event}: standardwebhooks verifies it`)
      assert.equal(got.body.emailId, id)
      assert.equal(typeof got.body.to, 'string')
      assert.match(got.body.timestamp, /^\d{4}-\d\d-\d\dT/)
      assert.deepEqual(got.body.tags, tags, `${got.event} carries the tags`)
      assert.deepEqual(got.body.metadata, metadata, `${got.event} carries the metadata`)
      assert.deepEqual(Object.keys(got.body).slice(0, 3), ['emailId', 'to', 'timestamp'], 'the seed\'s fields first, as before')
    }
  })
})
