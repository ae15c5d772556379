// Facts about the store itself in SQLite (the `meta` table, migration 18): the check value of the secret
// it was written under. The functions on a bare connection serve restore (./backup.ts), which works on a
// file before any store is opened on it.
import type Database from 'better-sqlite3'
import type { WriteQueue } from './write-queue.js'

const SECRET_CHECK = 'secret_check'

/** The stored check value; null when there is none, or no meta table yet (a schema older than 18). */
export function readSecretCheck (db: Database.Database): string | null {
  const table = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'meta'").get()
  if (table === undefined) return null
  const value = db.prepare('SELECT value FROM meta WHERE name = ?').pluck().get(SECRET_CHECK)
  return typeof value === 'string' ? value : null
}

/** Sets the check value, or removes it (null); the meta table must exist (a migrated store). */
export function writeSecretCheck (db: Database.Database, value: string | null): void {
  if (value === null) db.prepare('DELETE FROM meta WHERE name = ?').run(SECRET_CHECK)
  else db.prepare('INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value').run(SECRET_CHECK, value)
}

export class SqliteMeta {
  private readonly q

  constructor (db: Database.Database, private readonly writes: WriteQueue) {
    this.q = {
      get: db.prepare('SELECT value FROM meta WHERE name = ?').pluck(),
      keep: db.prepare('INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING'),
    }
  }

  async secretCheck (): Promise<string | null> {
    const value = this.q.get.get(SECRET_CHECK)
    return typeof value === 'string' ? value : null
  }

  initSecretCheck (value: string): Promise<string> {
    return this.writes.run(() => {
      this.q.keep.run(SECRET_CHECK, String(value))
      return this.q.get.get(SECRET_CHECK) as string
    })
  }
}
