// Two real svc processes on one SQLite data directory (different NODE_IDs), as issue 12 item 6 asks:
// one is SIGKILLed in the middle of a burst, or SIGSTOPped past its lease and then resumed. A real
// receiver verifies every signature and records when each copy of each delivery arrived.
//
// The bounds are generous on purpose ("eventually, within this long"), never a speed assertion. The
// default lease times are what the issue demands (a dead node's work taken over within a minute); the
// leases are shortened here with DELIVERY_LEASE_SECONDS and MAIL_LEASE_SECONDS so that the test does not
// wait for them.
import assert from 'node:assert/strict'
import type http from 'node:http'
import { describe, test } from 'node:test'
import { killProcess, startServerProcess, type ServerProcess } from '../helpers/process.js'
import { eventually, startReceiver, type Received } from '../helpers/receiver.js'
import { Client, PASSWORD, uniqueEmail } from '../helpers/server.js'
import { SHARED_STORE_KIND, sharedStore } from '../helpers/shared-store.js'
import { startSmtpSink } from '../helpers/smtp-sink.js'

const LEASE_SECONDS = 4
const WINDOW = 16
const NODE_ENV = {
  DELIVERY_LEASE_SECONDS: String(LEASE_SECONDS),
  MAIL_LEASE_SECONDS: String(LEASE_SECONDS),
  DELIVERY_THREADS: '1',
  DELIVERY_WINDOW: String(WINDOW),
  DELIVERY_RETRY_SCHEDULE: '500ms,1s,2s,5s,10s',
  RATE_LIMIT_API_PER_SECOND: '100000',
}
/** "Within a minute by default", with room for a loaded machine. */
const TAKEOVER_BOUND_MS = 90_000

async function account (url: string) {
  const client = new Client(url)
  const signup = await client.post('/api/auth/signup', { email: uniqueEmail('nodes'), password: PASSWORD })
  assert.equal(signup.status, 201, signup.text)
  const created = await client.post('/api/keys', { name: 'sending' })
  assert.equal(created.status, 201, created.text)
  return { client, key: created.body.data.key as string }
}

/** `store`: the shared store's environment (sharedStore: a SQLite directory, or a MongoDB database when MONGODB_URI is set). */
function startNode (t: Parameters<typeof startServerProcess>[0], store: Record<string, string>, nodeId: string, env: Record<string, string> = {}): Promise<ServerProcess> {
  return startServerProcess(t, { ...store, NODE_ID: nodeId, ...NODE_ENV, ...env })
}

describe(`two svc processes on one ${SHARED_STORE_KIND === 'mongo' ? 'MongoDB database' : 'SQLite file'}`, () => {
  test('one node SIGKILLed mid-burst: every accepted send is delivered, signed; the survivor takes over; duplicates only around the kill', async (t) => {
    const store = sharedStore(t)
    // When each copy arrived: the receiver answers after a few ms, so that deliveries are in flight at the kill.
    const arrivals: Array<{ at: number; got: Received }> = []
    const receiver = await startReceiver(t, {
      '/hook': (got, _n, res: http.ServerResponse) => {
        arrivals.push({ at: Date.now(), got })
        setTimeout(() => { res.statusCode = 204; res.end() }, 5)
      },
    })
    // A real relay that holds every message until released: each node's mailer has emails in flight
    // (claimed, leased) when node A dies, and node B must take node A's over.
    const relay = await startSmtpSink()
    t.after(() => relay.close())
    const a = await startNode(t, store, 'node-a', { SMTP_URL: relay.url })
    const b = await startNode(t, store, 'node-b', { SMTP_URL: relay.url })
    relay.hold()
    const { client, key } = await account(a.url)
    const hook = await client.post('/api/webhooks', { url: receiver.url('/hook'), events: ['email.sent', 'email.delivered'] })
    assert.equal(hook.status, 201, hook.text)
    const secret = hook.body.data.secret as string
    receiver.secrets.push(secret)

    // The burst: 8 senders per node; node A is killed once half the sends are accepted.
    const TOTAL = 600
    const accepted = new Set<string>()
    let attempted = 0
    let killedAt = 0
    const senders = [new Client(a.url), new Client(b.url)]
    const sendLoop = async (node: number) => {
      while (attempted < TOTAL) {
        attempted++
        if (node === 0 && killedAt !== 0) return
        try {
          const res = await senders[node]!.post('/api/send', { to: 'someone@example.com', subject: `burst ${attempted}`, text: 'hi' }, { 'x-api-key': key })
          if (res.status === 202) accepted.add(res.body.data.id as string)
        } catch {
          // Node A died with this request in flight: not accepted as far as the client knows.
        }
        if (killedAt === 0 && accepted.size >= TOTAL / 2) {
          killedAt = Date.now()
          await killProcess(a.process)
        }
      }
    }
    await Promise.all(Array.from({ length: 16 }, (_, i) => sendLoop(i % 2)))
    // Node A's messages died with its connections; node B's go through from now on.
    relay.release()
    assert.ok(killedAt > 0, 'node A was killed during the burst')
    assert.ok(accepted.size >= TOTAL / 2, `sends were accepted (${accepted.size})`)
    t.diagnostic(`${accepted.size} of ${attempted} sends accepted; node A killed after ${TOTAL / 2}`)

    const arrived = (type: string) => new Set(receiver.on('/hook').filter((r) => r.event === type).map((r) => r.body?.emailId as string))

    await t.test('every accepted send\'s email.sent event reaches the receiver, signed with the webhook secret', async () => {
      await receiver.until(() => { const got = arrived('email.sent'); return [...accepted].every((id) => got.has(id)) },
        'email.sent for every accepted send', TAKEOVER_BOUND_MS)
      for (const r of receiver.on('/hook')) assert.deepEqual(r.validFor, [secret])
      t.diagnostic(`all email.sent deliveries in ${((Date.now() - killedAt) / 1000).toFixed(1)} s after the kill`)
    })

    await t.test('duplicates (by X-Svc-Delivery) only of deliveries node A had sent just before it died', async () => {
      const byDelivery = new Map<string, number[]>()
      for (const { at, got } of arrivals) byDelivery.set(got.deliveryId, [...(byDelivery.get(got.deliveryId) ?? []), at])
      const duplicated = [...byDelivery.entries()].filter(([, times]) => times.length > 1)
      // What node A had in flight when it died: the copies that arrived in the two seconds before the
      // kill (outcomes are written within milliseconds of the answer) and just after it (on the wire).
      const inFlight = arrivals.filter(({ at }) => at > killedAt - 2000 && at <= killedAt + 200).length
      t.diagnostic(`${duplicated.length} deliveries duplicated of ${byDelivery.size}; ${inFlight} copies arrived around the kill`)
      assert.ok(duplicated.length <= Math.min(inFlight, WINDOW + 512), `${duplicated.length} duplicates, at most ${inFlight} in flight`)
      for (const [id, times] of duplicated) {
        assert.ok(times[0]! <= killedAt + 200 && times[0]! > killedAt - 2000, `delivery ${id}: its first copy arrived around the kill`)
        assert.equal(times.length, 2, `delivery ${id}: one extra copy at most`)
      }
    })

    // Needs mail leases that are renewed and short (issue 12 item 1): with a 5-minute mail lease, the
    // emails node A's mailer had claimed (held by the relay when it died) wait 5 minutes for node B, and
    // this fails at the bound.
    await t.test('every accepted email is mailed (email.delivered) within a minute of the kill', async () => {
      await receiver.until(() => { const got = arrived('email.delivered'); return [...accepted].every((id) => got.has(id)) },
        'email.delivered for every accepted send', TAKEOVER_BOUND_MS)
      t.diagnostic(`all emails mailed ${((Date.now() - killedAt) / 1000).toFixed(1)} s after the kill`)
    })

    assert.equal(b.process.exitCode, null, 'node B kept running')
  })

  // Needs fenced delivery outcomes (issue 12 item 1): on code where an outcome is written whatever lease
  // it was claimed under, node A's stale retry overwrites node B's lease and this fails.
  test('a node stalled past its lease (SIGSTOP) and resumed: none of its outcomes overwrites the new holder\'s', async (t) => {
    const store = sharedStore(t)
    const held = new Map<number, http.ServerResponse>()
    const receiver = await startReceiver(t, {
      // Every copy is held open until the test answers it: copy 1 from node A, copy 2 from node B.
      '/hook': (_got, n, res) => { held.set(n, res) },
    })
    // A long request timeout: node A must come back to an answer, not to its own timer.
    const env = { DELIVERY_TIMEOUT_MS: '60000', DELIVERY_LEASE_SECONDS: '3' }
    const a = await startNode(t, store, 'node-a', env)
    const { client, key } = await account(a.url)
    const hook = await client.post('/api/webhooks', { url: receiver.url('/hook'), events: ['email.sent'] })
    assert.equal(hook.status, 201, hook.text)
    receiver.secrets.push(hook.body.data.secret)
    const sent = await new Client(a.url).post('/api/send', { to: 'someone@example.com', subject: 'once', text: 'hi' }, { 'x-api-key': key })
    assert.equal(sent.status, 202, sent.text)

    // Node A holds the delivery and is sending it; then it stalls.
    await receiver.until(() => held.has(1), 'node A\'s copy')
    const b = await startNode(t, store, 'node-b', env)
    a.process.kill('SIGSTOP')
    let resumed = false
    t.after(() => { if (!resumed) a.process.kill('SIGCONT') })

    // Node A's lease runs out; node B takes the delivery over and is sending it (its copy is held).
    await receiver.until(() => held.has(2), 'node B\'s copy after node A\'s lease ran out', TAKEOVER_BOUND_MS)
    const deliveryId = receiver.on('/hook')[0]!.deliveryId
    assert.equal(receiver.on('/hook')[1]!.deliveryId, deliveryId, 'the same delivery')

    // Node A's request now fails; it resumes and writes a retry for a delivery it no longer holds. It is
    // then stopped cleanly (SIGTERM), which writes whatever outcome it still had: after its exit, node A
    // has written everything it ever will.
    held.get(1)!.writeHead(500).end()
    a.process.kill('SIGCONT')
    resumed = true
    const exited = new Promise((resolve) => a.process.once('exit', resolve))
    a.process.kill('SIGTERM')
    await exited

    const bClient = new Client(b.url)
    bClient.cookie = client.cookie
    const entry = async () => {
      const res = await bClient.get(`/api/webhooks/${hook.body.data.id}/deliveries`)
      assert.equal(res.status, 200, res.text)
      return (res.body.data as Array<{ id: string; status: string; attempts: number; lastStatusCode: number | null }>).find((d) => d.id === deliveryId)
    }
    // A first attempt is written once, with its outcome (issue 16): while node B's attempt is in flight
    // the delivery has no row until that attempt has been in flight for 2 s (firstAttemptHoldMs); then its
    // row is stored as leased: pending, no attempt counted, no answer. The receiver holds node B's request,
    // so that row comes; node A's stale 500, refused by the routing token, must not be in it.
    const during = await eventually(entry, 'node B\'s attempt in flight, stored as leased after firstAttemptHoldMs')
    assert.deepEqual({ status: during.status, attempts: during.attempts, lastStatusCode: during.lastStatusCode },
      { status: 'pending', attempts: 0, lastStatusCode: null },
      'node A\'s stale 500 is not recorded while node B holds the delivery')
    assert.equal(receiver.on('/hook').length, 2, 'nobody sent it a third time while node B was sending it')

    // Node B's answer is the delivery's outcome.
    held.get(2)!.writeHead(200).end()
    const final = await eventually(async () => { const e = await entry(); return e === undefined || e.status === 'pending' ? undefined : e }, 'node B\'s outcome')
    assert.deepEqual({ status: final.status, attempts: final.attempts, lastStatusCode: final.lastStatusCode },
      { status: 'succeeded', attempts: 1, lastStatusCode: 200 })
    assert.equal(receiver.on('/hook').length, 2, 'two copies in all: node A\'s unanswered one and node B\'s')
    for (const r of receiver.on('/hook')) assert.deepEqual(r.validFor, [hook.body.data.secret])
  })
})
