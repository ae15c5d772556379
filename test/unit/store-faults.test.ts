// The store-fault classifier and the health tracker, on real driver errors where they can be made here
// (better-sqlite3, Node's fs); MongoDB errors are built from the driver's own classes.
import assert from 'node:assert/strict'
import { closeSync, fsyncSync, openSync } from 'node:fs'
import { describe, test } from 'node:test'
import Database from 'better-sqlite3'
import { MongoNetworkError, MongoServerError, MongoServerSelectionError, MongoWriteConcernError } from 'mongodb'
import { StoreFaultError, StoreHealth, storeFault, type HealthSnapshot } from '../../src/store/faults.js'

const sqliteError = (code: string) => new Database.SqliteError('boom', code)

describe('storeFault', () => {
  test('SQLite resource codes are faults, extended codes by their primary; a write that was rolled back had no effect', () => {
    const cases: Array<[string, string]> = [
      ['SQLITE_FULL', 'disk_full'],
      ['SQLITE_READONLY', 'read_only'],
      ['SQLITE_READONLY_DBMOVED', 'read_only'],
      ['SQLITE_IOERR', 'io_error'],
      ['SQLITE_IOERR_WRITE', 'io_error'],
      ['SQLITE_IOERR_FSYNC', 'io_error'],
      ['SQLITE_IOERR_NOMEM', 'out_of_memory'],
      ['SQLITE_CANTOPEN', 'cannot_open'],
      ['SQLITE_BUSY', 'locked'],
      ['SQLITE_BUSY_SNAPSHOT', 'locked'],
      ['SQLITE_LOCKED', 'locked'],
      ['SQLITE_NOMEM', 'out_of_memory'],
    ]
    for (const [code, kind] of cases) {
      const f = storeFault(sqliteError(code))
      assert.equal(f?.kind, kind, code)
      assert.equal(f?.code, code)
      assert.equal(f?.effect, 'none')
    }
  })

  test('bugs, bad data and corruption are not resource faults (they stay 500)', () => {
    for (const code of ['SQLITE_CONSTRAINT', 'SQLITE_CONSTRAINT_UNIQUE', 'SQLITE_ERROR', 'SQLITE_CORRUPT', 'SQLITE_NOTADB', 'SQLITE_MISMATCH', 'SQLITE_RANGE']) {
      assert.equal(storeFault(sqliteError(code)), null, code)
    }
    assert.equal(storeFault(new TypeError('The database connection is not open')), null)
    assert.equal(storeFault(new Error('ENOSPC')), null, 'a message is not a code')
    assert.equal(storeFault({ code: 'ENOSPC' }), null, 'not a system error (no errno)')
    for (const v of [undefined, null, 'SQLITE_FULL', 28, {}]) assert.equal(storeFault(v), null)
  })

  test('a real SQLite constraint error is not a fault; a write to a read-only connection is', () => {
    const db = new Database(':memory:')
    db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY)')
    db.prepare('INSERT INTO t VALUES (1)').run()
    assert.throws(() => db.prepare('INSERT INTO t VALUES (1)').run(), (err) => storeFault(err) === null)
    db.pragma('query_only = ON')
    assert.throws(() => db.prepare('INSERT INTO t VALUES (2)').run(), (err) => storeFault(err)?.kind === 'read_only')
    db.close()
  })

  test("Node's disk errors are faults; a real EBADF from fs is not", () => {
    const sys = (code: string) => Object.assign(new Error(code), { code, errno: -1, syscall: 'fdatasync' })
    assert.equal(storeFault(sys('ENOSPC'))?.kind, 'disk_full')
    assert.equal(storeFault(sys('EDQUOT'))?.kind, 'disk_full')
    assert.equal(storeFault(sys('EROFS'))?.kind, 'read_only')
    assert.equal(storeFault(sys('EIO'))?.kind, 'io_error')
    const fd = openSync(process.execPath, 'r')
    closeSync(fd)
    assert.throws(() => fsyncSync(fd), (err) => storeFault(err) === null)
  })

  test('MongoDB: unreachable servers, no writable primary, shutdown, write concern and a full disk are faults', () => {
    assert.deepEqual(storeFault(new MongoServerSelectionError('no server', { servers: new Map(), error: undefined } as never)), {
      kind: 'unreachable', reason: 'the database server cannot be reached', code: 'MongoServerSelectionError', effect: 'none',
    })
    assert.equal(storeFault(new MongoNetworkError('reset'))?.effect, 'unknown', 'sent, maybe applied')
    const server = (code: number) => new MongoServerError({ code, errmsg: 'x' })
    assert.equal(storeFault(server(10107))?.kind, 'not_primary')
    assert.equal(storeFault(server(13435))?.kind, 'not_primary')
    assert.equal(storeFault(server(11600))?.kind, 'shutting_down')
    assert.equal(storeFault(server(91))?.kind, 'shutting_down')
    assert.equal(storeFault(server(14031))?.kind, 'disk_full')
    assert.equal(storeFault(server(64))?.kind, 'write_concern')
    const wc = new MongoWriteConcernError({ writeConcernError: { code: 64, errmsg: 'waiting for replication timed out' } } as never)
    assert.equal(storeFault(wc)?.kind, 'write_concern')
    assert.equal(storeFault(wc)?.effect, 'unknown')
    assert.equal(storeFault(server(11000)), null, 'a duplicate key is not a fault')
    assert.equal(storeFault(server(2)), null, 'BadValue is not a fault')
  })

  test('a classified fault travels as StoreFaultError', () => {
    const f = { kind: 'io_error', reason: 'r', code: 'EIO', effect: 'unknown' } as const
    assert.equal(storeFault(new StoreFaultError(f)), f)
  })
})

describe('StoreHealth', () => {
  function tracker (probe: () => Promise<void>) {
    let now = 1_000_000
    const health = new StoreHealth({ probe, retryMs: 2000, now: () => now })
    const changes: Array<[HealthSnapshot['state'], HealthSnapshot['state']]> = []
    health.onChange((n, b) => changes.push([b.state, n.state]))
    return { health, changes, advance: (ms: number) => { now += ms } }
  }

  test('goes unwritable on a fault, once however many writes fail; only a successful probe brings it back', async () => {
    let probeFails = true
    let probes = 0
    const { health, changes, advance } = tracker(async () => {
      probes += 1
      if (probeFails) throw sqliteError('SQLITE_FULL')
    })
    try {
      assert.equal(health.failed(sqliteError('SQLITE_CONSTRAINT')), null)
      assert.equal(health.current().state, 'ok')
      for (let i = 0; i < 20; i++) assert.equal(health.failed(sqliteError('SQLITE_FULL'))?.kind, 'disk_full')
      const down = health.current()
      assert.equal(down.state, 'unwritable')
      assert.equal(down.state === 'unwritable' && down.reason, 'the disk is full')
      assert.deepEqual(changes, [['ok', 'unwritable']])
      // A probe at most every retryMs: a second check right away does not probe again.
      await health.check()
      const afterFirst = probes
      await health.check()
      assert.equal(probes, afterFirst)
      probeFails = false
      assert.equal((await health.check()).state, 'unwritable', 'not due yet')
      advance(2000)
      assert.equal((await health.check()).state, 'ok')
      assert.deepEqual(changes, [['ok', 'unwritable'], ['unwritable', 'ok']])
    } finally {
      health.close()
    }
  })

  test('the first check probes, so a store that was never writable is found before any request writes', async () => {
    const { health } = tracker(async () => { throw sqliteError('SQLITE_READONLY') })
    try {
      const s = await health.check()
      assert.equal(s.state, 'unwritable')
      assert.equal(s.state === 'unwritable' && s.kind, 'read_only')
    } finally {
      health.close()
    }
  })
})
