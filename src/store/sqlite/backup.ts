// Backup and restore of the embedded store (README "Backup and restore").
//
// backup: VACUUM INTO from a connection of its own. It reads the whole database inside one read
// transaction, and in WAL mode a reader neither blocks the server's writer nor is blocked by it, so the
// copy is the database as it was at one commit, however busy the server is. (SQLite's online backup
// API copies in steps and starts over whenever another connection writes between two steps: under a
// steady stream of sends it might never finish.) The copy is written beside the target under another
// name, checked, flushed to disk, and only then given the target's name, which is never overwritten.
//
// restore: into an empty DATA_DIR only. The file is copied in under a temporary name, checked (a
// SQLite file, integrity_check, foreign keys, a svc schema no newer than this svc's), migrated when
// older, and linked as svc.db: link() fails if a server has created svc.db meanwhile. The backup's check
// value of its secret (./meta.ts) is compared with the secret svc will start under before any of that is
// named svc.db: a backup written under another secret is refused unless forced.
import Database from 'better-sqlite3'
import { chmodSync, closeSync, copyFileSync, constants, existsSync, fsyncSync, linkSync, mkdirSync, openSync, readdirSync, rmSync, statSync, unlinkSync } from 'node:fs'
import path from 'node:path'
import { judgeBackupSecret, noSecretToCheckMessage, otherSecretMessage, secretCheckValue, type BackupSecret, type SecretSource } from '../../domain/secret-check.js'
import { deliveryLeaseRelease, emailLeaseRelease } from './leases.js'
import { migrate } from './migrations.js'
import { readSecretCheck, writeSecretCheck } from './meta.js'
import { migrations } from './migrations.js'

export const DB_FILE = 'svc.db'

/** A refusal worth telling the operator as it is: nothing was changed. */
export class BackupError extends Error {}

export interface BackupResult {
  file: string
  bytes: number
  schemaVersion: number
}

export interface RestoreResult {
  dataDir: string
  /** The backup's schema version, and the version it was migrated to (the same when it was current). */
  fromVersion: number
  toVersion: number
  counts: { accounts: number; apiKeys: number; webhooks: number; emails: number; domains: number }
  /**
   * What the backup's check value said (judgeBackupSecret): 'matched', 'unchecked' (it has none); 'other'
   * or 'unknown' only when forced, and then the restored store's check value was replaced (by this
   * secret's, or removed when no secret is known yet, for svc's first start to write its own).
   */
  secret: BackupSecret
}

export interface RestoreOptions {
  /** The secret svc will start under, when one is known: SVC_SECRET, or a DATA_DIR/secret already in place. */
  secret: string | undefined
  /** Where svc's secret comes from (or will: DATA_DIR/secret), for the messages. */
  source: SecretSource
  /** Restore a backup written under another secret, or one there is no secret to check against. */
  force?: boolean
}

/**
 * Entries a fresh volume may hold that do not make a directory "in use": and the old DATA_DIR/secret, put
 * in place first so that the backup can be checked against it.
 */
const IGNORED = new Set(['lost+found', 'secret'])

function fsyncPath (p: string, flags = constants.O_RDONLY): void {
  const fd = openSync(p, flags)
  try { fsyncSync(fd) } finally { closeSync(fd) }
}

function removeDatabase (file: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true })
}

/** integrity_check and foreign_key_check; the problems found, at most `limit` of them. */
function problemsOf (db: Database.Database, limit = 5): string[] {
  const integrity = db.prepare(`PRAGMA integrity_check(${limit})`).pluck().all() as string[]
  if (!(integrity.length === 1 && integrity[0] === 'ok')) return integrity
  const fks = db.prepare('PRAGMA foreign_key_check').all() as Array<{ table: string; rowid: number; parent: string }>
  return fks.slice(0, limit).map((r) => `a row of ${r.table} (rowid ${r.rowid}) names a missing ${r.parent}`)
}

function schemaVersion (db: Database.Database): number {
  return db.pragma('user_version', { simple: true }) as number
}

/**
 * An online, consistent copy of DATA_DIR/svc.db into `file` (which must not exist), safe beside a
 * running server: the copy is one commit's state, checked, and in rollback-journal mode so it is one
 * self-contained file.
 */
export function backupSqlite (dataDir: string, file: string): BackupResult {
  const source = path.join(path.resolve(dataDir), DB_FILE)
  if (!existsSync(source)) throw new BackupError(`no svc store in ${path.resolve(dataDir)} (DATA_DIR): nothing to back up`)
  const target = path.resolve(file)
  if (existsSync(target)) throw new BackupError(`${target} already exists: a backup never overwrites a file; name a new one`)
  if (!existsSync(path.dirname(target))) throw new BackupError(`${path.dirname(target)} does not exist`)
  const partial = `${target}.partial-${process.pid}`
  removeDatabase(partial)
  try {
    // Made empty first, readable by its owner only (it holds password and key hashes): VACUUM INTO
    // writes into an empty file, and keeps its mode.
    closeSync(openSync(partial, 'wx', 0o600))
    const db = new Database(source, { fileMustExist: true })
    try {
      db.pragma('busy_timeout = 5000')
      db.prepare('VACUUM INTO ?').run(partial)
    } finally {
      db.close()
    }
    const copy = new Database(partial, { fileMustExist: true })
    let version: number
    try {
      // VACUUM INTO keeps the source's WAL flag in the header; a backup is one file, so journal mode
      // DELETE (restore switches it back to WAL, as the server would).
      copy.pragma('journal_mode = DELETE')
      const problems = problemsOf(copy)
      if (problems.length > 0) throw new BackupError(`the copy failed its check (${problems.join('; ')}); nothing was written to ${target}`)
      version = schemaVersion(copy)
    } finally {
      copy.close()
    }
    // SQLite does not flush VACUUM INTO's output: do it before the file gets its name.
    fsyncPath(partial, constants.O_RDWR)
    linkSync(partial, target)
    unlinkSync(partial)
    fsyncPath(path.dirname(target))
    return { file: target, bytes: statSync(target).size, schemaVersion: version }
  } catch (err) {
    removeDatabase(partial)
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new BackupError(`${target} appeared while the backup ran; nothing was overwritten`)
    throw err
  }
}

/**
 * Restores a backup made by backupSqlite (or any stand-alone copy of svc.db) into an empty `dataDir`,
 * which is created when missing. Refuses a directory in use, a file that fails its checks, a schema
 * newer than this svc's, and (unless forced) a backup written under another secret than `opts.secret`
 * or with no secret to check it against; migrates an older one.
 */
/**
 * A restored store is served by processes that did not exist when it was backed up: the leases in it
 * (emails being mailed, deliveries in flight, the routing lease) belong to none of them. Released here,
 * the work they held is taken at once instead of after each lease runs out (DELIVERY_LEASE_SECONDS, 30 s
 * by default, with everything queued behind it). As when any lease expires, what was in flight when the
 * backup was taken is sent again (at least once).
 */
function releaseLeases (db: Database.Database, now: number): void {
  const emails = emailLeaseRelease(db, 'every')
  const deliveries = deliveryLeaseRelease(db, 'every')
  db.transaction(() => {
    emails()
    deliveries(now)
  })()
}

export function restoreSqlite (file: string, dataDir: string, opts: RestoreOptions): RestoreResult {
  const source = path.resolve(file)
  const dir = path.resolve(dataDir)
  if (!existsSync(source) || !statSync(source).isFile()) throw new BackupError(`${source} is not a file`)
  if (existsSync(`${source}-wal`)) {
    throw new BackupError(`${source} has a ${path.basename(source)}-wal beside it: it is a live database, or a copy of one that may be torn; ` +
      'restore a file made by `npm run cli -- backup <file>`')
  }
  if (existsSync(dir)) {
    if (!statSync(dir).isDirectory()) throw new BackupError(`${dir} (DATA_DIR) is not a directory`)
    const present = readdirSync(dir).filter((name) => !IGNORED.has(name))
    if (present.length > 0) {
      throw new BackupError(`${dir} (DATA_DIR) is not empty (${present.slice(0, 5).join(', ')}${present.length > 5 ? ', …' : ''}): ` +
        'restore only into an empty directory (or one holding only the old secret); stop svc and move the old one aside first')
    }
  } else {
    mkdirSync(dir, { recursive: true })
  }

  const staging = path.join(dir, `.restore-${process.pid}.db`)
  const final = path.join(dir, DB_FILE)
  try {
    copyFileSync(source, staging, constants.COPYFILE_EXCL)
    chmodSync(staging, 0o600)
    let db: Database.Database
    try {
      db = new Database(staging, { fileMustExist: true })
      db.pragma('schema_version') // reads page 1: a file that is not SQLite fails here
    } catch (err) {
      throw new BackupError(`${source} is not an SQLite database (${(err as Error).message})`)
    }
    let result: Omit<RestoreResult, 'dataDir'>
    try {
      let problems: string[]
      try {
        problems = problemsOf(db)
      } catch (err) {
        problems = [(err as Error).message] // SQLITE_CORRUPT and friends: a page it could not even read
      }
      if (problems.length > 0) throw new BackupError(`${source} failed its integrity check: ${problems.join('; ')}`)
      const fromVersion = schemaVersion(db)
      const hasAccounts = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'accounts'").get() !== undefined
      if (fromVersion < 1 || !hasAccounts) throw new BackupError(`${source} is an SQLite database, but not svc's (no schema version, or no accounts table)`)
      if (fromVersion > migrations.length) {
        throw new BackupError(`${source} has schema version ${fromVersion}, newer than this svc knows (${migrations.length}): restore it with the svc that made it, or a newer one`)
      }
      const secret = judgeBackupSecret(opts.secret, readSecretCheck(db))
      if (opts.force !== true) {
        const anyway = '; or add --force to restore it under this secret all the same (its API keys, sessions, webhook signing secrets and DKIM keys will not work)'
        if (secret === 'other') throw new BackupError(otherSecretMessage(`the backup ${source}`, opts.source) + anyway)
        if (secret === 'unknown') throw new BackupError(noSecretToCheckMessage(`the backup ${source}`, path.join(dir, 'secret')) + anyway)
      }
      db.pragma('journal_mode = WAL')
      db.pragma('synchronous = FULL')
      db.pragma('foreign_keys = ON')
      migrate(db)
      releaseLeases(db, Date.now())
      if (secret === 'other' || secret === 'unknown') writeSecretCheck(db, opts.secret === undefined ? null : secretCheckValue(opts.secret))
      const count = (sql: string) => db.prepare(sql).pluck().get() as number
      result = {
        fromVersion,
        toVersion: schemaVersion(db),
        counts: {
          accounts: count('SELECT count(*) FROM accounts'),
          apiKeys: count('SELECT count(*) FROM api_keys WHERE revoked_at IS NULL'),
          webhooks: count('SELECT count(*) FROM webhooks WHERE deleted_at IS NULL'),
          emails: count('SELECT count(*) FROM emails'),
          domains: count('SELECT count(*) FROM domains'),
        },
        secret,
      }
    } finally {
      db.close() // checkpoints the WAL into the file and removes it
    }
    fsyncPath(staging, constants.O_RDWR)
    try {
      linkSync(staging, final)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new BackupError(`${final} appeared while restoring: is svc running on ${dir}? Nothing was overwritten`)
      throw err
    }
    unlinkSync(staging)
    fsyncPath(dir)
    return { dataDir: dir, ...result }
  } finally {
    removeDatabase(staging)
  }
}
