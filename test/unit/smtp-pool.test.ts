import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { Envelope, TransactionReplies } from '../../src/mail/smtp-connection.js'
import { SmtpPool, type PoolConnection } from '../../src/mail/smtp-pool.js'

const OK: TransactionReplies = { mail: { code: 250, text: '250 ok' }, rcpt: [{ code: 250, text: '250 ok' }], data: { code: 354, text: '354 go' }, final: { code: 250, text: '250 queued' } }

/** A connection whose transactions the test answers by hand. */
class FakeConnection implements PoolConnection {
  sent = 0
  quitted = false
  pending: Array<{ envelope: Envelope; resolve: (r: TransactionReplies) => void; reject: (e: unknown) => void }> = []
  private listeners: Array<() => void> = []
  constructor (readonly id: number, readonly depth = 1) {}
  send (envelope: Envelope): Promise<TransactionReplies> {
    return new Promise((resolve, reject) => this.pending.push({ envelope, resolve: (r) => { this.sent++; resolve(r) }, reject }))
  }
  quit (): void { this.quitted = true; this.close() }
  onClose (l: () => void): void { this.listeners.push(l) }
  close (): void { for (const l of this.listeners.splice(0)) l() }
  /** The relay hangs up mid-transaction, before the message went out (or after it). */
  die (bodySent: boolean): void {
    const p = this.pending.shift()!
    this.close()
    p.reject(Object.assign(new Error('the relay closed the connection'), { code: 'ECLOSED', bodySent }))
  }
  answer (r: TransactionReplies = OK): void { this.pending.shift()!.resolve(r) }
  /** The relay answers MAIL with 421 and hangs up (a relay that takes only so many messages a connection). */
  closing (hangUp = true): void {
    const p = this.pending.shift()!
    const closing = { code: 421, text: '421 4.7.0 too many messages on this connection' }
    p.resolve({ mail: closing, rcpt: p.envelope.to.map(() => closing) })
    if (hangUp) this.close()
  }
}

function harness (max: number, idleMs = 30_000, limits: { maxMessages?: number; maxAgeMs?: number } = {}) {
  const conns: FakeConnection[] = []
  const opens: Array<{ resolve: (c: FakeConnection) => void; reject: (e: unknown) => void }> = []
  let now = 0
  const pool = new SmtpPool({
    max, idleMs, now: () => now, ...limits,
    open: () => new Promise<PoolConnection>((resolve, reject) => opens.push({ resolve: (c) => { conns.push(c); resolve(c) }, reject })),
  })
  return { pool, conns, opens, advance: (ms: number) => { now += ms } }
}

const env = (to: string): Envelope => ({ from: 'a@example.com', to: [to] })
const raw = Buffer.from('x')
const turn = () => new Promise((resolve) => setImmediate(resolve))

/** One connection opened and used once (so it is a reused one), then a second transaction on it, returned. */
async function onReusedConnection (h: ReturnType<typeof harness>, depth = 1): Promise<{ second: Promise<TransactionReplies> }> {
  const first = h.pool.send(env('a@x.test'), raw)
  h.opens[0]!.resolve(new FakeConnection(0, depth))
  await turn()
  h.conns[0]!.answer()
  await first
  const second = h.pool.send(env('b@x.test'), raw)
  await turn()
  return { second }
}

test('no more connections than the cap, however many transactions wait; each waits its turn and is answered once', async () => {
  const h = harness(3)
  const sends = Array.from({ length: 10 }, (_, i) => h.pool.send(env(`r${i}@x.test`), raw))
  assert.equal(h.opens.length, 3, 'three connections opened for ten transactions')
  h.opens.forEach((o, i) => o.resolve(new FakeConnection(i)))
  await turn()
  let answered = 0
  while (answered < 10) {
    for (const c of h.conns) if (c.pending.length > 0) { c.answer(); answered++ }
    assert.ok(h.conns.every((c) => c.pending.length <= 1), 'one transaction at a time per connection')
    await turn()
  }
  const results = await Promise.all(sends)
  assert.equal(results.length, 10)
  assert.equal(h.opens.length, 3, 'the connections were reused, none opened after')
  assert.equal(h.conns.reduce((n, c) => n + c.sent, 0), 10)
  h.pool.close()
})

test('a reused connection that dies silently before the message went out: the transaction is tried once more on another', async () => {
  const h = harness(1)
  const { second } = await onReusedConnection(h)
  h.conns[0]!.die(false)
  await turn()
  assert.equal(h.opens.length, 2, 'a new connection is opened for it')
  h.opens[1]!.resolve(new FakeConnection(1))
  await turn()
  assert.deepEqual(h.conns[1]!.pending.map((p) => p.envelope.to), [['b@x.test']])
  h.conns[1]!.answer()
  assert.equal((await second).final?.code, 250)
  h.pool.close()
})

test('no second try when the message may have gone out, or on a fresh connection, or twice', async () => {
  const h = harness(1)
  const a = h.pool.send(env('a@x.test'), raw)
  h.opens[0]!.resolve(new FakeConnection(0))
  await turn()
  h.conns[0]!.die(false)
  await assert.rejects(a, /closed the connection/, 'a fresh connection that dies: no retry')
  const b = h.pool.send(env('b@x.test'), raw)
  h.opens[1]!.resolve(new FakeConnection(1))
  await turn()
  h.conns[1]!.answer()
  await b
  const c = h.pool.send(env('c@x.test'), raw)
  await turn()
  h.conns[1]!.die(true)
  await assert.rejects(c, /closed the connection/, 'the end of the message went out: it may have been taken')
  h.pool.close()
})

test('when no connection can be opened, everything waiting fails at once; with others open, a failed open only pauses growth', async () => {
  const h = harness(2)
  const sends = [h.pool.send(env('a@x.test'), raw), h.pool.send(env('b@x.test'), raw)]
  h.opens[0]!.reject(new Error('connect ECONNREFUSED'))
  h.opens[1]!.reject(new Error('connect ECONNREFUSED'))
  for (const s of sends) await assert.rejects(s, /ECONNREFUSED/)

  const g = harness(2)
  const x = g.pool.send(env('x@x.test'), raw)
  g.opens[0]!.resolve(new FakeConnection(0))
  await turn()
  const y = g.pool.send(env('y@x.test'), raw)
  assert.equal(g.opens.length, 2, 'a second connection for the second transaction')
  g.opens[1]!.reject(Object.assign(new Error('421 too many connections'), { code: 'ECONNECTION' }))
  await turn()
  g.conns[0]!.answer()
  await x
  await turn()
  g.conns[0]!.answer()
  assert.equal((await y).final?.code, 250, 'it waited for the open connection instead of failing')
  const z = g.pool.send(env('z@x.test'), raw)
  await turn()
  assert.equal(g.opens.length, 2, 'no new connection during the pause')
  g.conns[0]!.answer()
  await z
  g.advance(1000)
  const w = [g.pool.send(env('w1@x.test'), raw), g.pool.send(env('w2@x.test'), raw)]
  assert.equal(g.opens.length, 3, 'growth resumes after the pause')
  g.opens[2]!.resolve(new FakeConnection(2))
  await turn()
  for (const c of g.conns) if (c.pending.length > 0) c.answer()
  await Promise.all(w)
  g.pool.close()
})

test('close fails what waits and quits idle connections; without pooling a connection is quit once nothing waits', async () => {
  const h = harness(1)
  const a = h.pool.send(env('a@x.test'), raw)
  const b = h.pool.send(env('b@x.test'), raw)
  h.opens[0]!.resolve(new FakeConnection(0))
  await turn()
  h.pool.close()
  await assert.rejects(b, /closed/)
  h.conns[0]!.answer()
  await a
  await turn()
  assert.equal(h.conns[0]!.quitted, true, 'the busy connection is quit when its transaction ends')
  await assert.rejects(h.pool.send(env('c@x.test'), raw), /closed/)

  const once = harness(1, 0)
  const s = once.pool.send(env('a@x.test'), raw)
  once.opens[0]!.resolve(new FakeConnection(0))
  await turn()
  once.conns[0]!.answer()
  await s
  await turn()
  assert.equal(once.conns[0]!.quitted, true)
  assert.equal(once.pool.size, 0)
})

test('a connection that pipelines takes a second transaction while its first is answered, never a third', async () => {
  const h = harness(1)
  const sends = ['a', 'b', 'c'].map((r) => h.pool.send(env(`${r}@x.test`), raw))
  h.opens[0]!.resolve(new FakeConnection(0, 2))
  await turn()
  const conn = h.conns[0]!
  assert.deepEqual(conn.pending.map((p) => p.envelope.to[0]), ['a@x.test', 'b@x.test'], 'two at once, in order')
  conn.answer()
  await turn()
  assert.deepEqual(conn.pending.map((p) => p.envelope.to[0]), ['b@x.test', 'c@x.test'], 'the third takes the freed place')
  conn.answer()
  conn.answer()
  assert.equal((await Promise.all(sends)).length, 3)
  assert.equal(h.opens.length, 1)
  h.pool.close()
})

test('idle connections are spread over before a second transaction goes on a busy one', async () => {
  const h = harness(2)
  const first = [h.pool.send(env('a@x.test'), raw), h.pool.send(env('b@x.test'), raw)]
  h.opens[0]!.resolve(new FakeConnection(0, 2))
  h.opens[1]!.resolve(new FakeConnection(1, 2))
  await turn()
  for (const c of h.conns) while (c.pending.length > 0) c.answer()
  await Promise.all(first)
  await turn()
  const next = [h.pool.send(env('c@x.test'), raw), h.pool.send(env('d@x.test'), raw)]
  assert.deepEqual(h.conns.map((c) => c.pending.length), [1, 1])
  for (const c of h.conns) c.answer()
  await Promise.all(next)
  h.pool.close()
})

test('a connection carries at most maxMessages transactions, then says QUIT and a fresh one takes over', async () => {
  const h = harness(1, 30_000, { maxMessages: 2 })
  const sends = Array.from({ length: 5 }, (_, i) => h.pool.send(env(`r${i}@x.test`), raw))
  let opened = 0
  for (let round = 0; round < 20 && h.conns.reduce((n, c) => n + c.sent, 0) < 5; round++) {
    while (opened < h.opens.length) h.opens[opened]!.resolve(new FakeConnection(opened++))
    await turn()
    for (const c of h.conns) if (c.pending.length > 0) c.answer()
    await turn()
  }
  assert.equal((await Promise.all(sends)).length, 5, 'every transaction answered once')
  assert.deepEqual(h.conns.map((c) => c.sent), [2, 2, 1])
  assert.deepEqual(h.conns.map((c) => c.quitted), [true, true, false], 'each retired connection quit after its last')
  h.pool.close()
})

test('a retired connection finishes what it carries and still counts toward the cap until it closes', async () => {
  const h = harness(1, 30_000, { maxMessages: 3 })
  const sends = ['a', 'b', 'c', 'd'].map((r) => h.pool.send(env(`${r}@x.test`), raw))
  h.opens[0]!.resolve(new FakeConnection(0, 2))
  await turn()
  const conn = h.conns[0]!
  assert.deepEqual(conn.pending.map((p) => p.envelope.to[0]), ['a@x.test', 'b@x.test'])
  conn.answer()
  await turn()
  // c is its third and last: d waits, and no second connection opens while this one is still open.
  assert.deepEqual(conn.pending.map((p) => p.envelope.to[0]), ['b@x.test', 'c@x.test'])
  assert.equal(h.opens.length, 1)
  conn.answer()
  await turn()
  assert.equal(h.opens.length, 1, 'still carrying c')
  assert.equal(conn.quitted, false)
  conn.answer()
  await turn()
  assert.equal(conn.quitted, true)
  assert.equal(h.opens.length, 2, 'its place goes to a fresh connection for d')
  h.opens[1]!.resolve(new FakeConnection(1, 2))
  await turn()
  h.conns[1]!.answer()
  assert.equal((await Promise.all(sends)).length, 4)
  h.pool.close()
})

test('a connection older than maxAgeMs takes nothing new: idle it quits at once, busy it quits after its transaction', async () => {
  const h = harness(2, 600_000, { maxAgeMs: 300_000 })
  const first = [h.pool.send(env('a@x.test'), raw), h.pool.send(env('b@x.test'), raw)]
  h.opens[0]!.resolve(new FakeConnection(0))
  h.opens[1]!.resolve(new FakeConnection(1))
  await turn()
  h.conns[0]!.answer()
  await first[0]
  h.advance(300_000)
  // conns[1] is still busy with b; conns[0] is idle and too old: the next send opens a fresh one instead.
  const c = h.pool.send(env('c@x.test'), raw)
  assert.equal(h.conns[0]!.quitted, true)
  assert.equal(h.opens.length, 3)
  h.conns[1]!.answer()
  await first[1]
  await turn()
  assert.equal(h.conns[1]!.quitted, true, 'the busy one quit once its transaction ended')
  h.opens[2]!.resolve(new FakeConnection(2))
  await turn()
  h.conns[2]!.answer()
  assert.equal((await c).final?.code, 250)
  assert.equal(h.conns[2]!.quitted, false)
  h.pool.close()
})

test('a reused connection answering MAIL with 421 (closing) gets its transaction tried once more on another; a fresh one does not', async () => {
  const h = harness(1)
  const { second } = await onReusedConnection(h)
  h.conns[0]!.closing()
  await turn()
  assert.equal(h.opens.length, 2, 'a fresh connection for it')
  h.opens[1]!.resolve(new FakeConnection(1))
  await turn()
  // On the fresh connection the relay says 421 again: that answer is the transaction's, not tried a third time.
  h.conns[1]!.closing()
  const replies = await second
  assert.equal(replies.mail.code, 421)
  assert.equal(replies.final, undefined)
  assert.equal(h.opens.length, 2)
  h.pool.close()
})

test('a pipelined transaction failed by a 421 before its message went out is tried once more on another', async () => {
  const h = harness(1)
  const { second } = await onReusedConnection(h, 2)
  const p = h.conns[0]!.pending.shift()!
  h.conns[0]!.close()
  p.reject(Object.assign(new Error('the relay is closing the connection'), { code: 'ECLOSED', bodySent: false, reply: { code: 421, text: '421 closing' } }))
  await turn()
  assert.equal(h.opens.length, 2)
  h.opens[1]!.resolve(new FakeConnection(1, 2))
  await turn()
  h.conns[1]!.answer()
  assert.equal((await second).final?.code, 250)
  h.pool.close()
})

test('a transaction tried again waits for a new connection rather than going on another old one, which may be at the same limit', async () => {
  const h = harness(2)
  const warm = [h.pool.send(env('a@x.test'), raw), h.pool.send(env('b@x.test'), raw)]
  h.opens[0]!.resolve(new FakeConnection(0))
  h.opens[1]!.resolve(new FakeConnection(1))
  await turn()
  for (const c of h.conns) c.answer()
  await Promise.all(warm)
  const x = h.pool.send(env('x@x.test'), raw)
  const y = h.pool.send(env('y@x.test'), raw)
  assert.deepEqual(h.conns.map((c) => c.pending.length), [1, 1])
  h.conns[1]!.answer()
  await y
  h.conns[0]!.closing()
  await turn()
  assert.equal(h.conns[1]!.pending.length, 0, 'not on the other old connection, idle as it is')
  assert.equal(h.opens.length, 3, 'a new connection for it')
  h.opens[2]!.resolve(new FakeConnection(2))
  await turn()
  assert.deepEqual(h.conns[2]!.pending.map((p) => p.envelope.to), [['x@x.test']])
  h.conns[2]!.answer()
  assert.equal((await x).final?.code, 250)
  h.pool.close()
})

test('a connection that answered 421 is let go even before it hangs up: QUIT, and it no longer counts toward the cap', async () => {
  const h = harness(1)
  const { second } = await onReusedConnection(h)
  h.conns[0]!.closing(false)
  await turn()
  assert.equal(h.conns[0]!.quitted, true)
  assert.equal(h.opens.length, 2, 'its place goes to a new connection at once')
  h.opens[1]!.resolve(new FakeConnection(1))
  await turn()
  h.conns[1]!.answer()
  assert.equal((await second).final?.code, 250)
  h.pool.close()
})
