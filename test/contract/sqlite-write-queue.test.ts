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
