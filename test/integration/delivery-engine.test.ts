// The delivery engine end to end: real worker threads, real sockets, a real SQLite file, and receivers
// that verify every signature with the seed's algorithm.
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { describe, test } from 'node:test'
import { EVENT_TYPES, eventPayload, type EventRecord, type EventType } from '../../src/domain/events.js'
import { newId } from '../../src/domain/ids.js'
import { killProcess, startServerProcess } from '../helpers/process.js'
import { Client, PASSWORD, errorOf, signedUp, startServer, tempDir, uniqueEmail, type TestServer } from '../helpers/server.js'
import { eventually, standardVerify, startReceiver, type Receiver } from '../helpers/receiver.js'

const FAST = { DELIVERY_RETRY_SCHEDULE: '50ms,50ms,50ms', DELIVERY_THREADS: '2' }

async function webhook (client: Client, receiver: Receiver, path: string, events: EventType[] = ['email.delivered']) {
  const res = await client.post('/api/webhooks', { url: receiver.url(path), events })
  assert.equal(res.status, 201, res.text)
  receiver.secrets.push(res.body.data.secret)
  return res.body.data as { id: string; secret: string }
}

/** Stores events the way the sending side does: the engine sees only the outbox. */
async function emit (server: TestServer, accountId: string, type: EventType, count = 1, to = 'someone@example.test'): Promise<EventRecord[]> {
  const events = Array.from({ length: count }, () => {
    const base = { id: newId('evt'), emailId: newId('em'), type, recipient: to, occurredAt: new Date().toISOString() }
    return { ...base, accountId, payload: eventPayload(base) }
  })
  await server.store.insertEvents(events)
  return events
}

async function log (client: Client, webhookId: string, query = ''): Promise<any[]> {
  const res = await client.get(`/api/webhooks/${webhookId}/deliveries${query}`)
  assert.equal(res.status, 200, res.text)
  return res.body.data
}

describe('delivery', () => {
  test('a stored event reaches each subscribed webhook, signed as the seed says, and nowhere else', async (t) => {
    const receiver = await startReceiver(t)
    const server = await startServer(t, { env: FAST })
    const alice = await signedUp(server)
    const bob = await signedUp(server)
    const subscribed = await webhook(alice.client, receiver, '/alice', ['email.delivered', 'email.bounced'])
    await webhook(alice.client, receiver, '/alice-opens', ['email.opened'])
    const disabled = await webhook(alice.client, receiver, '/alice-disabled', ['email.delivered'])
    await alice.client.patch(`/api/webhooks/${disabled.id}`, { status: 'disabled' })
    await webhook(bob.client, receiver, '/bob', ['email.delivered'])

    const [event] = await emit(server, alice.id, 'email.delivered')
    await receiver.until(() => receiver.on('/alice').length === 1, 'the delivery')
    await server.service.engine.drained()

    const got = receiver.on('/alice')[0]!
    assert.deepEqual(got.validFor, [subscribed.secret], 'the v1 signature verifies with the webhook secret')
    assert.match(String(got.headers['x-svc-signature']), /^t=\d+,v1=[0-9a-f]{64}$/)
    const t0 = Number(/^t=(\d+)/.exec(String(got.headers['x-svc-signature']))![1])
    assert.ok(Math.abs(t0 - Date.now() / 1000) < 300, 'the timestamp is unix seconds, now')
    assert.equal(got.headers['content-type'], 'application/json')
    assert.equal(got.event, 'email.delivered')
    assert.match(got.deliveryId, /^dlv_[0-9a-f]{28}$/)
    assert.deepEqual(got.body, {
      emailId: event!.emailId, to: 'someone@example.test', timestamp: event!.occurredAt, type: 'email.delivered', eventId: event!.id,
    })
    assert.match(got.body.timestamp, /\.\d{3}Z$/, 'timestamp with milliseconds')
    assert.equal(receiver.received.length, 1, 'no delivery to unsubscribed, disabled or other accounts\' webhooks')

    const [entry] = await log(alice.client, subscribed.id)
    assert.equal(entry.id, got.deliveryId)
    assert.equal(entry.status, 'succeeded')
    assert.equal(entry.attempts, 1)
    assert.equal(entry.lastStatusCode, 200)
    assert.equal(entry.eventId, event!.id)
    assert.equal(entry.event, 'email.delivered')
    assert.equal(entry.nextAttemptAt, null)
  })

  test('written once: a first attempt is stored with its answer; a slow one gets its row (leased) while in flight, and its answer completes it', async (t) => {
    const held: Array<import('node:http').ServerResponse> = []
    const receiver = await startReceiver(t, {
      '/quick': (_r, _n, res) => { res.statusCode = 204; res.end() },
      '/slow': (_r, _n, res) => { held.push(res) },
    })
    const server = await startServer(t, { env: { ...FAST, DELIVERY_TIMEOUT_MS: '60000' }, deps: { engine: { firstAttemptHoldMs: 1000 } } })
    const { client, id } = await signedUp(server)
    const quick = await webhook(client, receiver, '/quick')
    const slow = await webhook(client, receiver, '/slow')
    await emit(server, id, 'email.delivered')
    await receiver.until(() => held.length === 1 && receiver.on('/quick').length === 1, 'both attempts')
    // The quick one is stored with its outcome, in one write; the slow one is still in flight.
    const done = await eventually(async () => { const d = (await log(client, quick.id))[0]; return d?.status === 'succeeded' ? d : undefined }, 'the quick delivery\'s row')
    assert.deepEqual({ status: done.status, attempts: done.attempts, code: done.lastStatusCode }, { status: 'succeeded', attempts: 1, code: 204 })
    // Held past firstAttemptHoldMs, the slow one gets its row: pending, no attempt yet, leased (no next attempt shown).
    const waiting = await eventually(async () => (await log(client, slow.id))[0], 'the slow delivery\'s row while in flight')
    assert.deepEqual({ status: waiting.status, attempts: waiting.attempts, next: waiting.nextAttemptAt }, { status: 'pending', attempts: 0, next: null })
    // So the durable cursor has moved past the event: nothing is left to read again after a crash.
    await eventually(async () => (await server.store.deliveryStats(Date.now())).unroutedEvents === 0 || undefined, 'the cursor past the event')
    held[0]!.statusCode = 200
    held[0]!.end()
    const final = await eventually(async () => { const d = (await log(client, slow.id))[0]; return d.status === 'succeeded' ? d : undefined }, 'the slow answer recorded')
    assert.equal(final.attempts, 1)
    assert.equal(final.lastStatusCode, 200)
    assert.equal(receiver.on('/slow').length, 1, 'sent once')
  })

  test('a 500 is retried with the same X-Svc-Delivery until the receiver answers 2xx', async (t) => {
    const receiver = await startReceiver(t, {
      '/flaky': (_r, n, res) => { res.statusCode = n < 3 ? 500 : 204; res.end() },
    })
    const server = await startServer(t, { env: FAST })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/flaky')
    await emit(server, id, 'email.delivered')
    await receiver.until(() => receiver.on('/flaky').length === 3, 'three attempts')
    await server.service.engine.drained()
    const ids = new Set(receiver.on('/flaky').map((r) => r.deliveryId))
    assert.equal(ids.size, 1, 'the delivery id is stable across retries')
    assert.ok(receiver.on('/flaky').every((r) => r.validFor.length === 1), 'every attempt is signed')
    const entry = await eventually(async () => (await log(client, hook.id)).find((d) => d.status === 'succeeded'), 'success in the log')
    assert.equal(entry.attempts, 3)
    assert.equal(entry.lastStatusCode, 204)
  })

  test('a redirect is a failure and is never followed; a silent receiver times out', async (t) => {
    const receiver = await startReceiver(t, {
      '/moved': (_r, _n, res) => { res.statusCode = 302; res.setHeader('location', '/target'); res.end() },
      '/silent': (_r, _n, res) => receiver.hang(res),
    })
    const server = await startServer(t, { env: { ...FAST, DELIVERY_RETRY_SCHEDULE: '1h', DELIVERY_TIMEOUT_MS: '300' } })
    const { client, id } = await signedUp(server)
    const moved = await webhook(client, receiver, '/moved')
    const silent = await webhook(client, receiver, '/silent')
    await emit(server, id, 'email.delivered')
    const redirect = await eventually(async () => (await log(client, moved.id)).find((d) => d.status === 'retrying'), 'the redirect to be recorded')
    assert.equal(redirect.lastStatusCode, 302)
    assert.match(redirect.lastError, /redirect/)
    assert.equal(receiver.on('/target').length, 0)
    const timeout = await eventually(async () => (await log(client, silent.id)).find((d) => d.status === 'retrying'), 'the timeout to be recorded')
    assert.match(timeout.lastError, /timeout after 300 ms/)
    assert.ok(Date.parse(timeout.nextAttemptAt) - Date.parse(timeout.lastAttemptAt) >= 0.8 * 3_600_000, 'next attempt per the schedule')
  })

  test('410 Gone disables the webhook and cancels what it still had pending', async (t) => {
    const receiver = await startReceiver(t, { '/gone': (_r, _n, res) => { res.statusCode = 410; res.end() } })
    const server = await startServer(t, { env: { ...FAST, DELIVERY_WINDOW: '1' } })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/gone')
    await emit(server, id, 'email.delivered', 5)
    await eventually(async () => {
      const w = await client.get(`/api/webhooks/${hook.id}`)
      return w.body.data.status === 'auto_disabled' ? true : undefined
    }, 'the webhook to be disabled')
    await server.service.engine.drained()
    const entries = await log(client, hook.id)
    assert.equal(entries.length, 5)
    assert.ok(entries.some((d) => d.status === 'failed' && d.lastStatusCode === 410))
    assert.ok(entries.every((d) => d.status === 'failed' || d.status === 'cancelled'), JSON.stringify(entries.map((d) => d.status)))
    const before = receiver.received.length
    await emit(server, id, 'email.delivered')
    await server.service.engine.drained()
    assert.equal(receiver.received.length, before, 'a disabled webhook gets no new deliveries')
  })

  test('during a secret rotation every delivery carries a valid v1 for the old and the new secret', async (t) => {
    const receiver = await startReceiver(t)
    const server = await startServer(t, { env: FAST })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/rotating')
    const rotated = await client.post(`/api/webhooks/${hook.id}/rotate-secret`)
    receiver.secrets.push(rotated.body.data.secret)
    await emit(server, id, 'email.delivered')
    await receiver.until(() => receiver.received.length === 1, 'the delivery')
    const got = receiver.received[0]!
    assert.match(String(got.headers['x-svc-signature']), /^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/)
    assert.deepEqual(got.validFor.sort(), [hook.secret, rotated.body.data.secret].sort())
  })

  test('every event type also carries Standard Webhooks headers that the standardwebhooks package verifies', async (t) => {
    const receiver = await startReceiver(t)
    const server = await startServer(t, { env: FAST })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/standard', [...EVENT_TYPES])
    for (const type of EVENT_TYPES) await emit(server, id, type)
    await receiver.until(() => receiver.received.length === EVENT_TYPES.length, 'one delivery per event type')
    assert.deepEqual(receiver.received.map((r) => r.event).sort(), [...EVENT_TYPES].sort())
    for (const got of receiver.received) {
      assert.deepEqual(got.standardValidFor, [hook.secret], `${got.event}: Webhook.verify accepts it`)
      assert.deepEqual(got.validFor, [hook.secret], `${got.event}: the seed's signature is still there`)
      assert.equal(got.headers['webhook-id'], got.deliveryId)
      const t0 = /^t=(\d+),/.exec(String(got.headers['x-svc-signature']))![1]
      assert.equal(got.headers['webhook-timestamp'], t0, 'the same timestamp as X-Svc-Signature')
      assert.match(String(got.headers['webhook-signature']), /^v1,[A-Za-z0-9+/]{43}=$/)
      assert.deepEqual(standardVerify(got.headers, got.raw.replace('someone', 'someone-else'), [hook.secret]), [], 'an altered body fails')
    }
  })

  test('during a rotation each attempt verifies with standardwebhooks under both secrets, and retries keep their webhook-id', async (t) => {
    const receiver = await startReceiver(t, { '/rotating': (_r, n, res) => { res.statusCode = n < 2 ? 500 : 200; res.end() } })
    const server = await startServer(t, { env: FAST })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/rotating', ['email.bounced'])
    const rotated = await client.post(`/api/webhooks/${hook.id}/rotate-secret`)
    const secret = rotated.body.data.secret as string
    receiver.secrets.push(secret)
    await emit(server, id, 'email.bounced')
    await receiver.until(() => receiver.received.length === 2, 'a failed attempt and its retry')
    const [first, second] = receiver.received
    assert.equal(first!.headers['webhook-id'], second!.headers['webhook-id'], 'webhook-id is stable across retries')
    assert.equal(first!.headers['webhook-id'], first!.deliveryId)
    for (const got of [first!, second!]) {
      assert.match(String(got.headers['webhook-signature']), /^v1,[A-Za-z0-9+/]{43}= v1,[A-Za-z0-9+/]{43}=$/)
      assert.deepEqual(got.standardValidFor.sort(), [hook.secret, secret].sort())
      // A receiver that knows only one of the two secrets verifies too.
      assert.deepEqual(standardVerify(got.headers, got.raw, [secret]), [secret])
    }
  })

  test('a receiver that never answers holds up no one: the fast one gets every delivery meanwhile', async (t) => {
    const receiver = await startReceiver(t, { '/stuck': (_r, _n, res) => receiver.hang(res) })
    const server = await startServer(t, { env: { ...FAST, DELIVERY_THREADS: '1', DELIVERY_TIMEOUT_MS: '60000', DELIVERY_WINDOW: '4' } })
    const { client, id } = await signedUp(server)
    const stuck = await webhook(client, receiver, '/stuck')
    await webhook(client, receiver, '/fast')
    await emit(server, id, 'email.delivered', 60)
    await receiver.until(() => receiver.on('/fast').length === 60, 'all 60 deliveries at the fast receiver')
    assert.equal(new Set(receiver.on('/fast').map((r) => r.deliveryId)).size, 60)
    assert.equal(receiver.on('/stuck').length, 4, 'the stuck one has exactly its window in flight, and waits')
    const stuckLog = await log(client, stuck.id, '?limit=100')
    assert.equal(stuckLog.filter((d) => d.status === 'succeeded').length, 0)
  })

  test('in production, a host whose DNS answer turns into 127.0.0.1 is refused at delivery', async (t) => {
    const receiver = await startReceiver(t)
    const server = await startServer(t, {
      env: { ...FAST, NODE_ENV: 'production', DELIVERY_RETRY_SCHEDULE: '1h' },
      // At creation the name resolved to a public address; by delivery time it points at loopback.
      deps: {
        resolver: async () => [{ address: '93.184.216.34', family: 4 }],
        deliveryHosts: { 'hooks.example.test': [{ address: '127.0.0.1', family: 4 }] },
      },
    })
    const { client, id } = await signedUp(server)
    const res = await client.post('/api/webhooks', { url: `https://hooks.example.test:${receiver.port}/hook`, events: ['email.delivered'] })
    assert.equal(res.status, 201)
    await emit(server, id, 'email.delivered')
    const entry = await eventually(async () => (await log(client, res.body.data.id)).find((d) => d.status === 'retrying'), 'the refused attempt')
    assert.match(entry.lastError, /^blocked: .*loopback/)
    assert.equal(entry.lastStatusCode, null)
    assert.equal(receiver.received.length, 0, 'nothing reached the loopback receiver')
  })

  test('a 429 with Retry-After holds that delivery for as long as asked (clamped), and counts as an attempt', async (t) => {
    const receiver = await startReceiver(t, {
      '/busy': (_r, _n, res) => { res.statusCode = 429; res.setHeader('retry-after', '120'); res.end() },
      '/busier': (_r, _n, res) => { res.statusCode = 503; res.setHeader('retry-after', '999999'); res.end() },
    })
    const server = await startServer(t, { env: FAST })
    const { client, id } = await signedUp(server)
    const busy = await webhook(client, receiver, '/busy')
    const busier = await webhook(client, receiver, '/busier')
    await emit(server, id, 'email.delivered')
    const a = await eventually(async () => (await log(client, busy.id)).find((d) => d.status === 'retrying'), 'the 429')
    const b = await eventually(async () => (await log(client, busier.id)).find((d) => d.status === 'retrying'), 'the 503')
    assert.equal(a.attempts, 1)
    assert.equal(Date.parse(a.nextAttemptAt) - Date.parse(a.lastAttemptAt), 120_000)
    assert.equal(Date.parse(b.nextAttemptAt) - Date.parse(b.lastAttemptAt), 3_600_000, 'clamped to one hour')
  })

  test('Retry-After wins: a busy receiver\'s 429/503 with Retry-After holds each delivery that got it that long, and fails none', async (t) => {
    const receiver = await startReceiver(t, {
      '/pause': (_r, _n, res) => { res.statusCode = 503; res.setHeader('retry-after', '300'); res.end() },
    })
    const server = await startServer(t, { env: { ...FAST, DELIVERY_WINDOW: '2', DELIVERY_THREADS: '1' } })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/pause')
    await emit(server, id, 'email.delivered', 10)
    const all = await eventually(async () => {
      const list = await log(client, hook.id)
      return list.length === 10 && list.every((d) => d.nextAttemptAt !== null && Date.parse(d.nextAttemptAt) - Date.now() > 200_000) ? list : undefined
    }, 'every delivery waiting for the Retry-After')
    assert.ok(receiver.received.length <= 10, 'no delivery was sent again before its Retry-After')
    for (const d of all) {
      assert.notEqual(d.status, 'failed')
      if (d.attempts === 1) {
        assert.equal(d.lastStatusCode, 503)
        assert.ok(Date.parse(d.nextAttemptAt) >= Date.parse(d.lastAttemptAt) + 299_000, 'due when its Retry-After ends')
      }
    }
  })

  test('after the last retry the delivery fails; recover queues it again and a healthy receiver gets it', async (t) => {
    let healthy = false
    // A 500, not a 503: a 503 from an endpoint that was not down yet is a pushback, which is no retry step.
    const receiver = await startReceiver(t, { '/outage': (_r, _n, res) => { res.statusCode = healthy ? 200 : 500; res.end() } })
    const server = await startServer(t, { env: { ...FAST, DELIVERY_RETRY_SCHEDULE: '20ms,20ms' } })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/outage')
    const since = new Date(Date.now() - 1000).toISOString()
    await emit(server, id, 'email.delivered', 3)
    await eventually(async () => {
      const entries = await log(client, hook.id, '?status=failed')
      return entries.length === 3 ? entries : undefined
    }, 'three failed deliveries')
    assert.equal(receiver.on('/outage').length, 9, 'three attempts each: the first and two retries')

    healthy = true
    const recover = await client.post(`/api/webhooks/${hook.id}/recover`, { since })
    assert.equal(recover.status, 202)
    assert.deepEqual(recover.body.data, { queued: 3 })
    await eventually(async () => ((await log(client, hook.id, '?status=succeeded')).length === 3 ? true : undefined), 'the recovered deliveries')
    const badWindow = await client.post(`/api/webhooks/${hook.id}/recover`, { since: new Date().toISOString(), until: since })
    assert.equal(badWindow.status, 400)
  })

  test('a test delivery that failed is sent again by recover, like any other', async (t) => {
    let healthy = false
    const receiver = await startReceiver(t, { '/outage': (_r, _n, res) => { res.statusCode = healthy ? 200 : 500; res.end() } })
    const server = await startServer(t, { env: { ...FAST, DELIVERY_RETRY_SCHEDULE: '20ms,20ms' } })
    const { client } = await signedUp(server)
    const hook = await webhook(client, receiver, '/outage')
    const since = new Date(Date.now() - 1000).toISOString()
    const sent = await client.post(`/api/webhooks/${hook.id}/test`, { event: 'email.delivered' })
    assert.equal(sent.status, 202)
    await eventually(async () => ((await log(client, hook.id, '?status=failed')).length === 1 ? true : undefined), 'the failed test delivery')
    healthy = true
    const recover = await client.post(`/api/webhooks/${hook.id}/recover`, { since })
    assert.equal(recover.status, 202)
    assert.deepEqual(recover.body.data, { queued: 1 })
    await eventually(async () => ((await log(client, hook.id, '?status=succeeded')).length === 1 ? true : undefined), 'the recovered test delivery')
    assert.equal(receiver.on('/outage').length, 4, 'three attempts, then the recovered one')
  })

  test('a failed delivery can be retried by hand; test events are signed and go to that webhook only', async (t) => {
    let healthy = false
    const receiver = await startReceiver(t, { '/manual': (_r, _n, res) => { res.statusCode = healthy ? 200 : 500; res.end() } })
    const server = await startServer(t, { env: { ...FAST, DELIVERY_RETRY_SCHEDULE: '10ms' } })
    const { client } = await signedUp(server)
    const hook = await webhook(client, receiver, '/manual')
    const other = await webhook(client, receiver, '/other', ['email.bounced'])
    const test1 = await client.post(`/api/webhooks/${hook.id}/test`, { event: 'email.bounced' })
    assert.equal(test1.status, 202)
    assert.equal(test1.body.data.event, 'email.bounced')
    const failed = await eventually(async () => (await log(client, hook.id)).find((d) => d.status === 'failed'), 'the failed test delivery')
    assert.equal(failed.attempts, 2)
    healthy = true
    const retried = await client.post(`/api/webhooks/${hook.id}/deliveries/${failed.id}/retry`)
    assert.equal(retried.status, 202)
    await eventually(async () => ((await log(client, hook.id))[0].status === 'succeeded' ? true : undefined), 'the hand retry')
    const last = receiver.on('/manual').at(-1)!
    assert.equal(last.event, 'email.bounced')
    assert.equal(last.deliveryId, failed.id)
    assert.equal(last.validFor.length, 1)
    assert.equal(receiver.on('/other').length, 0, 'a test event is not routed to other webhooks')
    assert.equal((await log(client, other.id)).length, 0)

    const missing = await client.post(`/api/webhooks/${hook.id}/deliveries/dlv_0000000000000000000000000000/retry`)
    assert.equal(errorOf(missing).code, 'not_found')
  })

  test('deleting a webhook cancels its pending deliveries; another account cannot see its log', async (t) => {
    const receiver = await startReceiver(t, { '/down': (_r, _n, res) => { res.statusCode = 500; res.end() } })
    const server = await startServer(t, { env: { ...FAST, DELIVERY_RETRY_SCHEDULE: '1h' } })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/down')
    await emit(server, id, 'email.delivered', 2)
    await eventually(async () => ((await log(client, hook.id, '?status=retrying')).length === 2 ? true : undefined), 'two retrying deliveries')
    const stranger = await signedUp(server)
    assert.equal((await stranger.client.get(`/api/webhooks/${hook.id}/deliveries`)).status, 404)
    assert.equal((await stranger.client.post(`/api/webhooks/${hook.id}/test`)).status, 404)
    assert.equal((await client.delete(`/api/webhooks/${hook.id}`)).status, 200)
    const stats = await server.store.deliveryStats(Date.now())
    assert.equal(stats.retrying, 0, 'nothing left to retry')
  })

  test('the delivery log pages with a cursor and filters by status', async (t) => {
    const receiver = await startReceiver(t)
    const server = await startServer(t, { env: FAST })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/paged')
    await emit(server, id, 'email.delivered', 7)
    await receiver.until(() => receiver.received.length === 7, 'seven deliveries')
    await server.service.engine.drained()
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const res: any = await client.get(`/api/webhooks/${hook.id}/deliveries?limit=3${cursor ? `&cursor=${cursor}` : ''}`)
      assert.ok(res.body.data.length <= 3)
      seen.push(...res.body.data.map((d: any) => d.id))
      cursor = res.body.nextCursor
    } while (cursor)
    assert.equal(seen.length, 7)
    assert.deepEqual(seen, [...seen].sort().reverse(), 'newest first')
    assert.equal((await log(client, hook.id, '?status=failed')).length, 0)
    assert.equal((await client.get(`/api/webhooks/${hook.id}/deliveries?limit=0`)).status, 400)
  })

  test('the README\'s verification code, as printed, accepts real deliveries and rejects altered ones', async (t) => {
    const { readFileSync } = await import('node:fs')
    const crypto = await import('node:crypto')
    const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8')
    const section = readme.slice(readme.indexOf('## Verifying webhook signatures'))
    const code = /```js\n([\s\S]*?)```/.exec(section)![1]!.replace(/^import .*$/m, '')
    // eslint-disable-next-line @typescript-eslint/no-implied-eval -- the README's code runs as printed
    const verify = new Function('createHmac', 'timingSafeEqual', `${code}; return verify`)(crypto.createHmac, crypto.timingSafeEqual) as
      (header: string, raw: string, secret: string) => boolean
    const receiver = await startReceiver(t)
    const server = await startServer(t, { env: FAST })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/readme')
    await emit(server, id, 'email.delivered')
    await receiver.until(() => receiver.received.length === 1, 'the delivery')
    const got = receiver.received[0]!
    const header = String(got.headers['x-svc-signature'])
    assert.equal(verify(header, got.raw, hook.secret), true)
    assert.equal(verify(header, got.raw.replace('someone', 'someone-else'), hook.secret), false)
    assert.equal(verify(header, got.raw, 'whsec_not-the-secret'), false)
  })

  test('the README\'s Standard Webhooks receiver, as printed, accepts a real delivery and rejects an altered one', async (t) => {
    const { readFileSync } = await import('node:fs')
    const { Webhook } = await import('standardwebhooks')
    const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8')
    const section = readme.slice(readme.indexOf('## Verifying webhook signatures'), readme.indexOf('## Webhook deliveries'))
    const code = [...section.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]!).find((c) => c.includes('standardwebhooks'))!
    // eslint-disable-next-line @typescript-eslint/no-implied-eval -- the README's code runs as printed
    const receive = new Function('Webhook', 'process', 'rawBody', 'headers', `${code.replace(/^import .*$/m, '')}; return event`) as
      (W: typeof Webhook, p: { env: Record<string, string> }, raw: string, h: unknown) => unknown
    const receiver = await startReceiver(t)
    const server = await startServer(t, { env: FAST })
    const { client, id } = await signedUp(server)
    const hook = await webhook(client, receiver, '/readme-standard')
    const [event] = await emit(server, id, 'email.delivered')
    await receiver.until(() => receiver.received.length === 1, 'the delivery')
    const got = receiver.received[0]!
    const env = { env: { SVC_WEBHOOK_SECRET: hook.secret } }
    assert.deepEqual((receive(Webhook, env, got.raw, got.headers) as any).eventId, event!.id)
    assert.throws(() => receive(Webhook, env, got.raw.replace('someone', 'someone-else'), got.headers))
  })

  test('/readyz reports the store, the delivery engine and the mail queue: 503 once the engine has stopped', async (t) => {
    const server = await startServer(t, { env: FAST })
    const ready = await server.client().get('/readyz')
    assert.equal(ready.status, 200)
    assert.deepEqual(ready.body.checks, { store: 'ok', delivery: 'ok', mail: 'ok' })
    await server.service.engine.stop()
    const res = await server.client().get('/readyz')
    assert.equal(res.status, 503)
    assert.equal(errorOf(res).code, 'unavailable')
  })

  test('/metrics counts outcomes and the event-to-delivery latency', async (t) => {
    const receiver = await startReceiver(t)
    const server = await startServer(t, { env: FAST })
    const { client, id } = await signedUp(server)
    await webhook(client, receiver, '/measured')
    await emit(server, id, 'email.delivered', 4)
    await receiver.until(() => receiver.received.length === 4, 'four deliveries')
    await server.service.engine.drained()
    const text = (await client.get('/metrics')).text
    assert.match(text, /svc_deliveries_total\{outcome="succeeded"\} 4/)
    assert.match(text, /svc_delivery_latency_seconds_count 4/)
    assert.match(text, /svc_delivery_queue_depth\{state="pending"\} 0/)
  })
})

describe('durability', () => {
  test('SIGKILL mid-burst, then a restart on the same data: every delivery arrives', async (t) => {
    // The first 20 deliveries are answered; after that the receiver holds every answer until the kill,
    // so the kill always lands with deliveries done, in flight and queued, however fast the machine.
    const answered = new Set<string>()
    let killed = false
    const receiver = await startReceiver(t, {
      '/durable': (got, _n, res) => {
        if (!killed && answered.size >= 20) return receiver.hang(res)
        setTimeout(() => { answered.add(got.deliveryId); res.statusCode = 200; res.end() }, 15)
      },
    })
    const dataDir = tempDir(t)
    const start = () => startServerProcess(t, {
      DATA_DIR: dataDir, DELIVERY_LEASE_SECONDS: '2', DELIVERY_WINDOW: '4', DELIVERY_THREADS: '1', DELIVERY_RETRY_SCHEDULE: '100ms,100ms,100ms',
    })

    const first = await start()
    const client = new Client(first.url)
    await client.post('/api/auth/signup', { email: uniqueEmail('durable'), password: PASSWORD })
    const hook = await client.post('/api/webhooks', { url: receiver.url('/durable'), events: ['email.sent'] })
    receiver.secrets.push(hook.body.data.secret)
    const created = new Set<string>()
    for (let i = 0; i < 120; i++) {
      const res = await client.post(`/api/webhooks/${hook.body.data.id}/test`)
      assert.equal(res.status, 202)
      created.add(res.body.data.id)
    }
    await receiver.until(() => answered.size >= 20 && receiver.received.length > 20, 'some deliveries answered and more held before the kill')
    await killProcess(first.process)
    killed = true
    const beforeRestart = new Set(receiver.received.map((r) => r.deliveryId))
    assert.ok(beforeRestart.size < created.size, 'the kill landed mid-burst')

    const second = await start()
    await receiver.until(() => [...created].every((id) => answered.has(id)), 'every delivery answered after the restart', 60_000)
    assert.ok(receiver.received.every((r) => r.validFor.length === 1), 'all signed')
    second.process.kill('SIGTERM')
    const [code] = await once(second.process, 'exit')
    assert.equal(code, 0, 'SIGTERM stops cleanly')
  })
})
