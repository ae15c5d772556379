// WAL checkpoints in the SQLite store's own thread (src/store/sqlite/checkpoints.ts), on real files with a
// real worker thread: committed rows reach the database file without the main connection copying them,
// the WAL stays bounded while writes keep coming, and closing leaves no WAL behind.
import assert from 'node:assert/strict'
import { copyFileSync, existsSync, mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import Database from 'better-sqlite3'
import { eventPayload, type EventRecord } from '../../src/domain/events.js'
import { newId } from '../../src/domain/ids.js'
import { SQLITE_FALLBACK_CHECKPOINT } from '../../src/store/sqlite/checkpoints.js'
import { openSqliteStore } from '../../src/store/sqlite/index.js'

function events (n: number, padding = 0): EventRecord[] {
  const now = Date.now()
  return Array.from({ length: n }, (_, i) => {
    const e = { id: newId('evt', now), accountId: 'acct_checkpoints', emailId: newId('em', now), type: 'email.sent' as const, recipient: `r${i}@example.test`, occurredAt: new Date(now).toISOString() }
    return { ...e, payload: eventPayload(e, padding > 0 ? { reason: 'x'.repeat(padding) } : undefined) }
  })
}

/** The events in the database file alone, as a copy without its WAL shows them (none before the first checkpoint: not even the table). */
function eventsInFileAlone (dir: string): number {
  const copyDir = mkdtempSync(join(tmpdir(), 'svc-ckpt-copy-'))
  try {
    copyFileSync(join(dir, 'svc.db'), join(copyDir, 'copy.db'))
    const db = new Database(join(copyDir, 'copy.db'), { readonly: true })
    try {
      if (db.prepare("SELECT 1 FROM sqlite_schema WHERE name = 'events'").get() === undefined) return 0
      return (db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n
    } finally {
      db.close()
    }
  } finally {
    rmSync(copyDir, { recursive: true, force: true })
  }
}

describe('SQLite checkpoints in their own thread', () => {
  test('committed rows reach the database file through the thread; inline, SQLite leaves them in the WAL', async () => {
    for (const mode of ['thread', 'inline'] as const) {
      const dir = mkdtempSync(join(tmpdir(), 'svc-ckpt-'))
      try {
        const store = openSqliteStore({ dataDir: dir, checkpoints: mode })
        await store.insertEvents(events(50))
        await store.checkpointsIdle()
        // 50 small rows are far below either connection's own threshold (1,000 or 4,000 pages).
        assert.equal(eventsInFileAlone(dir), mode === 'thread' ? 50 : 0, mode)
        await store.close()
        assert.equal(existsSync(join(dir, 'svc.db-wal')), false, `${mode}: the last connection to close removes the WAL`)
        assert.equal(eventsInFileAlone(dir), 50, mode)
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    }
  })

  test('while writes keep coming, the WAL stays within the main connection\'s backstop and nothing is lost', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-ckpt-'))
    try {
      const store = openSqliteStore({ dataDir: dir })
      const wal = join(dir, 'svc.db-wal')
      let largest = 0
      // About 30 MB in 300 commits: seven times the backstop's 4,000 pages of 4 KiB.
      for (let i = 0; i < 300; i++) {
        await store.insertEvents(events(20, 4_000))
        largest = Math.max(largest, statSync(wal).size)
      }
      const frame = 4096 + 24
      // The backstop runs after the commit that passes it: one commit (about 25 pages) may lie beyond.
      assert.ok(largest <= (SQLITE_FALLBACK_CHECKPOINT + 100) * frame + 32, `the WAL reached ${largest} bytes`)
      await store.close()
      const db = new Database(join(dir, 'svc.db'), { readonly: true })
      assert.equal((db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n, 6_000)
      db.close()
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
