// Regression: a write asked for after the database was closed (a background worker still polling while
// the process stops) must reject, not leave its promise pending forever and hang the stop. It did when
// the batch needed another synchronous level than the last one, because that switch ran outside the
// guarded transaction.
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import Database from 'better-sqlite3'
import { RecentEvents } from '../../src/store/sqlite/recent-events.js'
import { WriteQueue } from '../../src/store/sqlite/write-queue.js'

test('writes queued after the database closed reject, whatever their durability', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-wq-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  const db = new Database(join(dir, 'q.db'))
  db.pragma('journal_mode = WAL')
  const writes = new WriteQueue(db)
  assert.equal(await writes.run(() => 1, { durable: false }), 1)
  db.close()
  await assert.rejects(writes.run(() => 2), /not open/)
  await assert.rejects(writes.run(() => 3, { durable: false }), /not open/)
})

// The fsync of the WAL runs off the event loop. A gate stands in for the disk here, so the test decides
// when "the disk" finishes; the real fdatasync is used by every other SQLite test.
function gatedSync () {
  const gates: Array<{ open: () => void; fail: (err: Error) => void }> = []
  return {
    gates,
    sync: {
      sync: () => new Promise<void>((resolve, reject) => { gates.push({ open: resolve, fail: reject }) }),
      close () {},
    },
  }
}

async function settled (p: Promise<unknown>): Promise<boolean> {
  let done = false
  p.then(() => { done = true }, () => { done = true })
  await new Promise((resolve) => setImmediate(resolve))
  await new Promise((resolve) => setImmediate(resolve))
  return done
}

function openDb (t: { after: (fn: () => void) => void }) {
  const dir = mkdtempSync(join(tmpdir(), 'svc-wq-'))
  const db = new Database(join(dir, 'q.db'))
  db.pragma('journal_mode = WAL')
  db.exec('CREATE TABLE t (v INTEGER)')
  t.after(() => { db.close(); rmSync(dir, { recursive: true, force: true }) })
  return db
}

test('a durable write resolves only after a WAL sync that started after its commit; the commit is visible at once', async (t) => {
  const db = openDb(t)
  const disk = gatedSync()
  const writes = new WriteQueue(db, { sync: disk.sync })
  assert.equal(db.pragma('synchronous', { simple: true }), 1, 'commits do not wait for the disk themselves')
  const first = writes.run(() => db.prepare('INSERT INTO t VALUES (1)').run().changes)
  assert.equal(await settled(first), false, 'not acknowledged before the fsync')
  assert.equal(disk.gates.length, 1, 'one fsync started')
  assert.equal((db.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n, 1, 'already committed')
  // Commits made while that fsync runs wait for the next one, which covers all of them at once.
  const more = [2, 3, 4].map((v) => writes.run(() => db.prepare('INSERT INTO t VALUES (?)').run(v).changes))
  await settled(Promise.all(more))
  const later = writes.run(() => 'bookkeeping', { durable: false })
  disk.gates[0]!.open()
  assert.equal(await first, 1)
  assert.equal(await settled(Promise.all(more)), false, 'the first fsync started before they committed')
  assert.equal(await settled(later), false, 'bookkeeping after a durable commit waits for its fsync too')
  assert.equal(disk.gates.length, 2, 'one more fsync for everything committed meanwhile')
  disk.gates[1]!.open()
  assert.deepEqual(await Promise.all(more), [1, 1, 1])
  assert.equal(await later, 'bookkeeping')
  assert.equal(await writes.run(() => 'alone', { durable: false }), 'alone', 'with nothing durable pending, no fsync is waited for')
  assert.equal(disk.gates.length, 2)
})

test('settled() waits only for the fsync covering the durable commits made so far, never for a later batch', async (t) => {
  const db = openDb(t)
  const disk = gatedSync()
  const writes = new WriteQueue(db, { sync: disk.sync })
  assert.equal(await settled(writes.settled()), true, 'nothing durable: at once')
  const first = writes.run(() => db.prepare('INSERT INTO t VALUES (1)').run().changes)
  await settled(first)
  // A plain read sees the commit at once; what it saw may be acted on once this fsync is done.
  const seen = writes.settled()
  const more = writes.run(() => db.prepare('INSERT INTO t VALUES (2)').run().changes)
  await settled(more)
  assert.equal(await settled(seen), false, 'the first commit is not on disk yet')
  disk.gates[0]!.open()
  await first
  assert.equal(await settled(seen), true, 'the first fsync covers what was read; the second batch is not waited for')
  assert.equal(await settled(more), false)
  assert.equal(await settled(writes.settled()), false, 'now the second commit is the one to wait for')
  disk.gates[1]!.open()
  assert.equal(await more, 1)
  assert.equal(await settled(writes.settled()), true)
})

test('when the WAL sync fails, durable writes fail and bookkeeping goes ahead', async (t) => {
  const db = openDb(t)
  const disk = gatedSync()
  const writes = new WriteQueue(db, { sync: disk.sync })
  const durable = writes.run(() => 1)
  const bookkeeping = writes.run(() => 2, { durable: false })
  await settled(durable)
  disk.gates[0]!.fail(Object.assign(new Error('EIO'), { code: 'EIO' }))
  await assert.rejects(durable, /EIO/)
  assert.equal(await bookkeeping, 2)
})

test('with the real fdatasync, durable writes resolve and close waits for them', async (t) => {
  const db = openDb(t)
  const writes = new WriteQueue(db)
  const all = Array.from({ length: 50 }, (_, i) => writes.run(() => db.prepare('INSERT INTO t VALUES (?)').run(i).changes))
  await writes.close()
  assert.equal(await settled(Promise.all(all)), true, 'close drained every write')
  assert.deepEqual(await Promise.all(all), Array(50).fill(1))
})

// Memory kept beside the database (the engine's cache of event rows just written) must hold exactly
// what committed: a write that fails is undone there too, and so is a batch the disk refused.
test('a journal keeps what committed: a failing write in the batch is undone there as in the table', async (t) => {
  const db = openDb(t)
  const writes = new WriteQueue(db)
  const journal = new RecentEvents()
  writes.journal(journal)
  const insert = db.prepare('INSERT INTO t VALUES (?)')
  const write = (v: number, fail = false) => writes.run(() => {
    const seq = Number(insert.run(v).lastInsertRowid)
    journal.stage({ seq, id: `evt_${v}`, account_id: 'a', email_id: 'e', type: 'email.sent', occurred_at: '', payload: String(v) })
    if (fail) throw new Error(`write ${v} refused`)
    return seq
  }, { durable: false })
  // One tick: one batch. The second write fails after its insert; the batch runs again with a savepoint each.
  const results = await Promise.allSettled([write(1), write(2, true), write(3)])
  assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled'])
  const inTable = (db.prepare('SELECT rowid AS seq, v FROM t ORDER BY rowid').all() as Array<{ seq: number; v: number }>)
  assert.deepEqual(inTable.map((r) => r.v), [1, 3])
  assert.deepEqual(journal.after(0, 10)?.map((r) => [r.seq, r.payload]), inTable.map((r) => [r.seq, String(r.v)]), 'the journal holds the rows the table holds, with their seqs')
})

test('a journal keeps nothing of a batch whose commit failed', async (t) => {
  const db = openDb(t)
  const writes = new WriteQueue(db)
  const journal = new RecentEvents()
  writes.journal(journal)
  await writes.run(() => db.prepare('INSERT INTO t VALUES (0)').run(), { durable: false })
  // The database turns read-only in the middle of the write, after its row was staged: a resource
  // fault, so the whole batch is abandoned.
  const refused = writes.run(() => {
    journal.stage({ seq: 2, id: 'evt_2', account_id: 'a', email_id: 'e', type: 'email.sent', occurred_at: '', payload: '' })
    db.pragma('query_only = ON')
    db.prepare('INSERT INTO t VALUES (2)').run()
  }, { durable: false })
  await assert.rejects(refused, /readonly/)
  db.pragma('query_only = OFF')
  await writes.run(() => 'next', { durable: false })
  assert.equal(journal.after(1, 10), undefined, 'the refused row is not held')
})
