// Mail leases, as a node sees them: the mailer renews the lease of an email it is still sending (so a
// slow send is not sent a second time when the lease's first term runs out), and an outcome written
// after another node took the email over changes nothing (fencing), and two processes that share a
// NODE_ID hold their leases apart. Real app, real SQLite file, real processes and relay.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { openSqliteStore } from '../../src/store/sqlite/index.js'
import { sender } from '../helpers/sending.js'
import { startServerProcess } from '../helpers/process.js'
import { Client, PASSWORD, startServer, tempDir, uniqueEmail } from '../helpers/server.js'
import { header, startSmtpSink } from '../helpers/smtp-sink.js'
import { waitFor } from '../helpers/wait.js'
import { heldTransport } from '../helpers/held-transport.js'
import { watchStore } from '../helpers/watch-store.js'

const LEASE_MS = 1500

test('a send that outlasts its lease keeps its lease (renewed) and goes out once', async (t) => {
  const held = heldTransport()
  // Registered before startServer's hook (they run in order): the send is let go before the service stops.
  t.after(() => held.release())
  const server = await startServer(t, { deps: { transport: held.transport, mailer: { leaseMs: LEASE_MS, pollMs: 50 } } })
  const s = await sender(server)
  const res = await s.send({ from: 'me@example.com', to: 'reader@example.net', subject: 'Slow', text: 'hi' })
  assert.equal(res.status, 202)
  const id: string = res.body.data.id

  await waitFor('the send to start', () => held.sent.length === 1)
  const first = (await server.store.findEmail(s.accountId, id))!
  assert.ok(first.leaseOwner !== null && first.leaseExpiresAt !== null)
  // Wait until the lease was extended well past its first term: the mailer, polling every 50 ms, would
  // have claimed the email again (and sent it twice) had the lease run out.
  await waitFor('the lease to be renewed past its first term', async () => {
    const now = await server.store.findEmail(s.accountId, id)
    return now !== null && now.leaseExpiresAt !== null && now.leaseExpiresAt >= first.leaseExpiresAt! + LEASE_MS
  })
  const renewed = (await server.store.findEmail(s.accountId, id))!
  assert.equal(renewed.leaseOwner, first.leaseOwner)
  assert.equal(renewed.leaseToken, first.leaseToken, 'renewed, not claimed again')
  assert.equal(held.sent.length, 1, 'not sent a second time while the first send is in flight')

  held.release()
  await s.settled(id, 'delivered')
  assert.equal(held.sent.length, 1)
  const done = (await server.store.findEmail(s.accountId, id))!
  assert.equal(done.leaseOwner, null)
})

test('a stalled node whose email was taken over cannot overwrite it: its outcome is refused as stale', async (t) => {
  const held = heldTransport()
  // Registered before startServer's hook (they run in order): the send is let go before the service stops.
  t.after(() => held.release())
  // The real store, with the answers of recordEmailAttempt written down.
  const dataDir = tempDir(t)
  const recorded: boolean[] = []
  const store = watchStore<boolean>(openSqliteStore({ dataDir }), 'recordEmailAttempt', (applied) => recorded.push(applied))
  const server = await startServer(t, { dataDir, deps: { store, transport: held.transport, mailer: { leaseMs: LEASE_MS, pollMs: 50 } } })
  const s = await sender(server)
  const res = await s.send({ from: 'me@example.com', to: 'reader@example.net', subject: 'Stalled', text: 'hi' })
  assert.equal(res.status, 202)
  const id: string = res.body.data.id
  await waitFor('the send to start', () => held.sent.length === 1)

  // Another node, whose clock is past this lease, takes the email over (as it does once a stalled
  // node's lease has run out) and holds it for an hour.
  const far = Date.now() + 3_600_000
  const taken = await store.claimDueEmails({ owner: 'node-b', dueBy: new Date(far).toISOString(), now: far, leaseUntil: far + 3_600_000, limit: 10 })
  const theirs = taken.find((e) => e.id === id)
  assert.ok(theirs, 'node-b took the email over')

  // The stalled send finishes: its outcome is refused, and node-b's claim stands as it was.
  held.release()
  await waitFor('the stalled attempt to write its outcome', () => recorded.length === 1)
  assert.deepEqual(recorded, [false], 'refused as stale')
  const after = (await store.findEmail(s.accountId, id))!
  assert.equal(after.leaseOwner, 'node-b')
  assert.equal(after.leaseToken, theirs.leaseToken)
  assert.equal(after.status, 'queued')
  assert.equal(after.attempts, 0)
  assert.deepEqual((await store.listEmailEvents(s.accountId, id)).map((e) => e.type), ['email.sent'], 'no email.delivered from the stale attempt')
  assert.equal(held.sent.length, 1)
})

test('two processes started with the same NODE_ID: the second does not take the first one\'s mail, and each email goes out once', async (t) => {
  // A relay that holds every message: the first process's emails are in flight (leased, in DATA) when
  // the second one starts on the same data with the same NODE_ID.
  const relay = await startSmtpSink()
  t.after(() => relay.close())
  relay.hold()
  const env = { DATA_DIR: tempDir(t), SMTP_URL: relay.url, NODE_ID: 'same-name', RATE_LIMIT_API_PER_SECOND: '100000' }
  const first = await startServerProcess(t, env)
  const client = new Client(first.url)
  assert.equal((await client.post('/api/auth/signup', { email: uniqueEmail('same-node'), password: PASSWORD })).status, 201)
  const key = (await client.post('/api/keys', { name: 'k' })).body.data.key as string
  const ids: string[] = []
  for (let i = 0; i < 10; i++) {
    const res = await client.post('/api/send', { to: `reader${i}@example.net`, subject: `Held ${i}`, text: 'hi' }, { 'x-api-key': key })
    assert.equal(res.status, 202, res.text)
    ids.push(res.body.data.id as string)
  }
  await waitFor('the first process to have mail in flight at the relay', () => relay.held() > 0)
  const second = await startServerProcess(t, env)
  // The second process is up and its mailer is running: had it released the leases of the name it
  // shares, it would have claimed the emails in flight and sent them too (the relay holds every copy).
  const other = new Client(second.url)
  assert.equal((await other.get('/readyz')).status, 200)
  relay.release()
  const status = async (id: string) => (await other.get(`/api/emails/${id}`, { 'x-api-key': key })).body?.data?.status
  for (const id of ids) await waitFor(`email ${id} delivered`, async () => (await status(id)) === 'delivered')
  const sent = relay.received.map((m) => /^<(em_[0-9a-f]+)@/.exec(header(m.raw, 'Message-ID') ?? '')?.[1])
  assert.deepEqual(sent.slice().sort(), ids.slice().sort(), 'each email reached the relay once')
})
