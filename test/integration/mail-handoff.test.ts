// Accepted emails handed to this node's mailer in the accept's own write (LocalIntake in src/mail/hand-off.ts,
// offer/take in src/mail/mailer.ts): leased to it as they are stored, sent without a claim. And the rule
// that keeps it fair: while older due emails wait in the store, a new send goes behind them, and is not
// sent before them. Real app, real SQLite file; the transport holds every send until released.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { EmailRecord } from '../../src/store/emails.js'
import { openSqliteStore } from '../../src/store/sqlite/index.js'
import { sender } from '../helpers/sending.js'
import { startServer, tempDir } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'
import { heldTransport } from '../helpers/held-transport.js'
import { watchStore } from '../helpers/watch-store.js'

/** The real store, with every claim the mailer makes written down (what it found, in order). */
function watchedStore (dataDir: string) {
  const claims: EmailRecord[][] = []
  const store = watchStore<EmailRecord[]>(openSqliteStore({ dataDir }), 'claimDueEmails', (got) => claims.push(got))
  return { store, claims, claimed: () => claims.flat().map((e) => e.subject) }
}

test('an email sent to an idle mailer is leased to it as it is stored, and sent without a claim', async (t) => {
  const held = heldTransport()
  t.after(() => held.release())
  const dataDir = tempDir(t)
  const watched = watchedStore(dataDir)
  const server = await startServer(t, { dataDir, deps: { store: watched.store, transport: held.transport } })
  await waitFor('the mailer to have looked at the queue once', () => watched.claims.length > 0)
  const s = await sender(server)
  const res = await s.send({ from: 'me@example.com', to: 'reader@example.net', subject: 'Straight in', text: 'hi' })
  assert.equal(res.status, 202)
  const id: string = res.body.data.id
  const stored = (await watched.store.findEmail(s.accountId, id))!
  assert.equal(stored.leaseOwner, server.service.mailer!.owner, 'leased to this node in the write that accepted it')
  assert.equal(stored.leaseToken, 1)
  assert.ok(stored.leaseExpiresAt! > Date.now())
  await waitFor('the send to start', () => held.sent.length === 1)
  held.release()
  await s.settled(id, 'delivered')
  assert.deepEqual(watched.claimed(), [], 'no claim took it')
  assert.equal((await watched.store.findEmail(s.accountId, id))!.leaseOwner, null, 'the lease ends with the attempt')
})

test('while older emails wait in the store, new sends go behind them and are sent after them', async (t) => {
  const held = heldTransport()
  t.after(() => held.release())
  const dataDir = tempDir(t)
  const watched = watchedStore(dataDir)
  // One email in flight at a time, so the order of sending is the order of the queue.
  const server = await startServer(t, { dataDir, deps: { store: watched.store, transport: held.transport, mailer: { concurrency: 1 } } })
  await waitFor('the mailer to have looked at the queue once', () => watched.claims.length > 0)
  const s = await sender(server)
  const ids: string[] = []
  // The mailer takes two at once (one sending, one ahead); the third and the fourth find no room and are
  // left to the store, for claims to take in order. (The rule that nothing is taken at once while older
  // emails wait there is held by test/unit/hand-off.test.ts.)
  for (const n of [1, 2, 3, 4]) {
    const res = await s.send({ from: 'me@example.com', to: `reader${n}@example.net`, subject: `email ${n}`, text: 'hi' })
    assert.equal(res.status, 202)
    ids.push(res.body.data.id)
  }
  const rows = await Promise.all(ids.map(async (id) => (await watched.store.findEmail(s.accountId, id))!))
  assert.deepEqual(rows.map((e) => e.leaseOwner !== null), [true, true, false, false], 'two taken at once, two left to the store')
  held.release()
  for (const id of ids) await s.settled(id, 'delivered')
  assert.deepEqual(held.sent.map((m) => m.subject), ['email 1', 'email 2', 'email 3', 'email 4'], 'sent in the order accepted')
  assert.deepEqual(watched.claimed(), ['email 3', 'email 4'], 'the two left to the store were claimed')

  // The store is empty again: the next send is taken at once.
  await waitFor('a claim to find the store empty', () => watched.claims.at(-1)?.length === 0)
  const res = await s.send({ from: 'me@example.com', to: 'reader5@example.net', subject: 'email 5', text: 'hi' })
  await s.settled(res.body.data.id, 'delivered')
  assert.deepEqual(watched.claimed(), ['email 3', 'email 4'], 'email 5 needed no claim')
  assert.equal(held.sent.at(-1)?.subject, 'email 5')
})
