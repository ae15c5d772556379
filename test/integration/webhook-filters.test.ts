// Webhook filters and replay on real parts: a real server on a real SQLite file, mail sent through the
// API (sandbox transport), and a real receiver that checks every signature the way a customer would.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { errorOf, signedUp, startServer, type Client, type TestServer } from '../helpers/server.js'
import { eventually, startReceiver, type Receiver } from '../helpers/receiver.js'
import { sender, type Sender } from '../helpers/sending.js'

const DAY = 86_400_000

async function hook (client: Client, receiver: Receiver, path: string, events: string[], filter?: unknown): Promise<{ id: string; secret: string; filter: unknown }> {
  const res = await client.post('/api/webhooks', { url: receiver.url(path), events, ...(filter !== undefined ? { filter } : {}) })
  assert.equal(res.status, 201, res.text)
  receiver.secrets.push(res.body.data.secret)
  return res.body.data
}

async function sent (s: Sender, from: string, tags?: Array<{ name: string; value: string }>): Promise<string> {
  const res = await s.send({ from, to: 'reader@example.net', subject: 'Hello', text: 'Hello', ...(tags ? { tags } : {}) })
  assert.equal(res.status, 202, res.text)
  return res.body.data.id
}

/** The email ids a path was sent events of, each once, sorted. */
function emailsAt (receiver: Receiver, path: string): string[] {
  return [...new Set(receiver.on(path).map((r) => String(r.body.emailId)))].sort()
}

async function deliveries (client: Client, webhookId: string): Promise<any[]> {
  const res = await client.get(`/api/webhooks/${webhookId}/deliveries?limit=100`)
  assert.equal(res.status, 200, res.text)
  return res.body.data
}

/** The webhook's delivery log once every delivery in it succeeded; it must hold exactly `n`. */
async function settledLog (client: Client, webhookId: string, n: number): Promise<any[]> {
  const log = await eventually(async () => {
    const l = await deliveries(client, webhookId)
    return l.length >= n && l.every((d) => d.status === 'succeeded') ? l : undefined
  }, `${n} deliveries succeeded`)
  assert.equal(log.length, n)
  return log
}

async function started (t: Parameters<typeof startServer>[0]): Promise<{ server: TestServer; client: Client; s: Sender; receiver: Receiver }> {
  const receiver = await startReceiver(t)
  const server = await startServer(t, { env: { DELIVERY_THREADS: '1' } })
  const { client } = await signedUp(server)
  return { server, client, s: await sender(server, client), receiver }
}

test('a webhook filtered to one domain gets none of another domain\'s mail', async (t) => {
  const { client, s, receiver } = await started(t)
  const events = ['email.sent', 'email.delivered']
  const alpha = await hook(client, receiver, '/alpha', events, { domains: ['Alpha.example'] })
  const beta = await hook(client, receiver, '/beta', events, { domains: ['beta.example'] })
  await hook(client, receiver, '/all', events)
  assert.deepEqual(alpha.filter, { domains: ['alpha.example'], tags: [] })

  const fromAlpha = [await sent(s, 'Shop <orders@alpha.example>'), await sent(s, 'news@ALPHA.example')]
  const fromBeta = [await sent(s, 'orders@beta.example')]
  const fromSub = [await sent(s, 'orders@mail.alpha.example')]
  // The unfiltered webhook gets every event; routing decided for all three webhooks at once.
  await receiver.until(() => receiver.on('/all').length === 8, 'every event at the unfiltered webhook')
  await receiver.until(() => receiver.on('/alpha').length === 4 && receiver.on('/beta').length === 2, 'the filtered webhooks\' events')
  assert.deepEqual(emailsAt(receiver, '/alpha'), [...fromAlpha].sort())
  assert.deepEqual(emailsAt(receiver, '/beta'), fromBeta)
  assert.ok(!emailsAt(receiver, '/alpha').includes(fromSub[0]!), 'a subdomain is another domain')
  for (const r of receiver.received) assert.equal(r.validFor.length, 1, 'every delivery is signed')
  // Nothing else was made for them: their delivery logs hold exactly what they got (once written).
  await settledLog(client, alpha.id, 4)
  await settledLog(client, beta.id, 2)
})

test('a tag filter takes only emails carrying a listed tag; PATCH changes it and null removes it', async (t) => {
  const { client, s, receiver } = await started(t)
  const receipts = await hook(client, receiver, '/receipts', ['email.delivered'], { tags: [{ name: 'kind', value: 'receipt' }, { name: 'urgent' }] })
  await hook(client, receiver, '/all', ['email.delivered'])

  const receipt = await sent(s, 'a@shop.example', [{ name: 'kind', value: 'receipt' }])
  const urgent = await sent(s, 'a@shop.example', [{ name: 'urgent', value: 'yes' }, { name: 'kind', value: 'notice' }])
  await sent(s, 'a@shop.example', [{ name: 'kind', value: 'newsletter' }])
  await sent(s, 'a@shop.example')
  await receiver.until(() => receiver.on('/all').length === 4 && receiver.on('/receipts').length === 2, 'the deliveries')
  assert.deepEqual(emailsAt(receiver, '/receipts'), [receipt, urgent].sort())
  await settledLog(client, receipts.id, 2)

  // Shown on GET; changed by PATCH (domains and tags together: both must match); removed with null.
  const got = await client.get(`/api/webhooks/${receipts.id}`)
  assert.deepEqual(got.body.data.filter, { domains: [], tags: [{ name: 'kind', value: 'receipt' }, { name: 'urgent' }] })
  const both = await client.patch(`/api/webhooks/${receipts.id}`, { filter: { domains: ['other.example'], tags: [{ name: 'kind' }] } })
  assert.equal(both.status, 200, both.text)
  assert.deepEqual(both.body.data.filter, { domains: ['other.example'], tags: [{ name: 'kind' }] })
  const other = await sent(s, 'b@other.example', [{ name: 'kind', value: 'x' }])
  await sent(s, 'b@other.example')
  await sent(s, 'b@shop.example', [{ name: 'kind', value: 'x' }])
  await receiver.until(() => receiver.on('/all').length === 7 && receiver.on('/receipts').length === 3, 'the deliveries after the change')
  assert.deepEqual(emailsAt(receiver, '/receipts'), [receipt, urgent, other].sort())
  const cleared = await client.patch(`/api/webhooks/${receipts.id}`, { filter: null })
  assert.equal(cleared.body.data.filter, null)

  // A bad filter is refused naming each field, and changes nothing.
  const bad = await client.patch(`/api/webhooks/${receipts.id}`, { filter: { domains: ['ok.example', 'not a domain'], tags: [{ name: 'bad tag' }] } })
  assert.equal(bad.status, 400, bad.text)
  assert.deepEqual(errorOf(bad).details?.map((d) => d.path).sort(), ['body.filter.domains[1]', 'body.filter.tags[0]'])
  const tooMany = await client.post('/api/webhooks', { url: receiver.url('/x'), events: ['email.sent'], filter: { domains: Array.from({ length: 21 }, (_, i) => `d${i}.example`) } })
  assert.equal(tooMany.status, 400, tooMany.text)
  assert.deepEqual(errorOf(tooMany).details?.map((d) => d.path), ['body.filter.domains'])
  assert.equal((await client.get(`/api/webhooks/${receipts.id}`)).body.data.filter, null)
})

test('a replay sends a delivered day again as the same deliveries, signed; a second one while it goes out is 409', async (t) => {
  const { client, s, receiver } = await started(t)
  const w = await hook(client, receiver, '/h', ['email.sent', 'email.delivered'])
  const emails = [await sent(s, 'a@shop.example'), await sent(s, 'b@shop.example')]
  await receiver.until(() => receiver.on('/h').length === 4, 'the first deliveries')
  const first = await settledLog(client, w.id, 4)
  const firstIds = receiver.on('/h').map((r) => r.deliveryId).sort()

  // The day replayed: each delivery again, under its own id, signed both ways; the log appends the attempt.
  const now = Date.now()
  const replay = await client.post(`/api/webhooks/${w.id}/replay`, { since: new Date(now - DAY).toISOString() })
  assert.equal(replay.status, 202, replay.text)
  assert.equal(replay.body.data.queued, 4)
  assert.ok(Date.parse(replay.body.data.until) >= now)
  await receiver.until(() => receiver.on('/h').length === 8, 'the replayed deliveries')
  const again = receiver.on('/h').slice(4)
  assert.deepEqual(again.map((r) => r.deliveryId).sort(), firstIds)
  for (const r of again) {
    assert.equal(r.headers['webhook-id'], r.deliveryId)
    assert.deepEqual(r.validFor, [w.secret])
    assert.deepEqual(r.standardValidFor, [w.secret])
    assert.ok(emails.includes(r.body.emailId))
  }
  const log = await eventually(async () => {
    const l = await deliveries(client, w.id)
    return l.every((d) => d.status === 'succeeded' && d.attempts === 2) ? l : undefined
  }, 'every replayed delivery succeeded, its attempt appended')
  assert.deepEqual(log.map((d) => d.id).sort(), first.map((d) => d.id).sort())

  // Only the types asked for; and while those still go out (a receiver that fails them: they wait for a
  // retry), another replay of the webhook is refused.
  const scripted = await startReceiver(t, { '/h': (_req, _n, res) => { res.statusCode = 500; res.end() } })
  const patched = await client.patch(`/api/webhooks/${w.id}`, { url: scripted.url('/h') })
  assert.equal(patched.status, 200, patched.text)
  const delivered = await client.post(`/api/webhooks/${w.id}/replay`, { since: new Date(now - DAY).toISOString(), events: ['email.delivered'] })
  assert.equal(delivered.status, 202, delivered.text)
  assert.equal(delivered.body.data.queued, 2)
  await scripted.until(() => scripted.on('/h').length >= 2, 'the replayed email.delivered deliveries')
  assert.deepEqual(scripted.on('/h').map((r) => r.event), ['email.delivered', 'email.delivered'])
  const busy = await client.post(`/api/webhooks/${w.id}/replay`, { since: new Date(now - DAY).toISOString() })
  assert.equal(busy.status, 409, busy.text)
  assert.equal(errorOf(busy).code, 'operation_in_progress')
})

test('a replay with a bad window is refused naming the field; an unknown or disabled webhook is refused too', async (t) => {
  const { client, receiver } = await started(t)
  const w = await hook(client, receiver, '/h', ['email.sent'])
  const now = Date.now()
  const at = (ms: number) => new Date(ms).toISOString()
  const cases: Array<[unknown, string]> = [
    [{ since: at(now - DAY), until: at(now - 2 * DAY) }, 'body.since'],
    [{ since: at(now - 8 * DAY), until: at(now) }, 'body.since'],
    [{ since: at(now - DAY), until: at(now + DAY) }, 'body.until'],
    [{ since: 'yesterday' }, 'body.since'],
    [{ since: at(now - DAY), events: ['email.nope'] }, 'body.events[0]'],
    [{}, 'body.since'],
    [{ since: at(now - DAY), extra: 1 }, 'body.extra'],
  ]
  for (const [body, path] of cases) {
    const res = await client.post(`/api/webhooks/${w.id}/replay`, body)
    assert.equal(res.status, 400, `${JSON.stringify(body)}: ${res.text}`)
    assert.equal(errorOf(res).code, 'validation_error')
    assert.ok(errorOf(res).details?.some((d) => d.path === path), `${JSON.stringify(body)} names ${path}: ${res.text}`)
  }
  assert.equal((await client.post('/api/webhooks/wh_000000000000aaaaaaaaaaaaaaaa/replay', { since: at(now - DAY) })).status, 404)
  await client.patch(`/api/webhooks/${w.id}`, { status: 'disabled' })
  const off = await client.post(`/api/webhooks/${w.id}/replay`, { since: at(now - DAY) })
  assert.equal(off.status, 409, off.text)
  assert.equal(errorOf(off).code, 'webhook_not_enabled')
})
