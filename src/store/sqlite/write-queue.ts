import { close as closeFd, fdatasync, open as openFile } from 'node:fs'
import type { Database } from 'better-sqlite3'
import { StoreFaultError, storeFault } from '../faults.js'

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown }

interface Pending {
  work: () => unknown
  durable: boolean
  resolve: (value: any) => void
  reject: (err: unknown) => void
}

/** Batches to settle once the WAL is on disk up to commit number `through` (or the sync failed: `err`). */
interface Waiting {
  through: number
  settle: Array<(err?: unknown) => void>
}

/**
 * Memory that writes add to beside the database (a cache of rows just written): it must end up holding
 * only what committed. The queue marks it before each write and rolls it back to the mark when that
 * write is undone (its savepoint, or the whole batch), and tells it when the batch has committed.
 */
export interface WriteJournal {
  mark (): number
  rollBack (mark: number): void
  commit (): void
}

/** Flushes the WAL file to disk; the default is fdatasync of the database's `-wal` file, in libuv's pool. */
export interface WalSync {
  sync (): Promise<void>
  close (): void
}

/**
 * Group commit, with the fsync off the event loop.
 *
 * Writes asked for during one turn of the event loop run together in one transaction, each inside its
 * own savepoint so that one failing write (a constraint, a thrown rule) rolls back alone.
 *
 * Every transaction commits with synchronous=NORMAL: in WAL mode that writes the commit to the WAL file
 * without waiting for the disk. A write that must survive a power cut (`durable`, the default: every API
 * write) resolves only once an fdatasync of the WAL file, started after its commit, has finished: that is
 * what synchronous=FULL does, except that the wait runs in libuv's thread pool instead of blocking this
 * thread, so requests keep being served while the disk works, and one fsync covers every commit made
 * meanwhile.
 *
 * The delivery engine's and the mailer's bookkeeping is written with `durable: false` (a lost write
 * means work done again, never lost). Their promises too wait for any fsync that covers an earlier
 * durable commit: so nothing is ever acted on (a webhook sent, an email handed to SMTP) on the strength
 * of data that a power cut could still take back.
 */
export class WriteQueue {
  private pending: Pending[] = []
  private scheduled = false
  /** Commits made so far, and the last one holding a durable write. */
  private commits = 0
  private lastDurable = 0
  /** The WAL is on disk up to this commit. */
  private syncedThrough = 0
  private syncing = false
  private waiting: Waiting[] = []
  private readonly sync: WalSync
  /** Told of every write's fate (see WriteJournal). */
  private readonly journals: WriteJournal[] = []
  /** Called after every successful commit (outside the transaction): see afterCommit. */
  private readonly commitListeners: Array<() => void> = []
  /** Called with how long each flush of the WAL to disk took (seconds), for svc_store_disk_flush_seconds. */
  onSynced: ((seconds: number) => void) | undefined
  /** Called when a batch fails for a resource fault (disk full, read-only, I/O error, locked): see faults.ts. */
  onFault: ((err: unknown) => void) | undefined

  constructor (private readonly db: Database, opts: { sync?: WalSync } = {}) {
    if (opts.sync) {
      this.sync = opts.sync
    } else if (!db.memory && db.pragma('journal_mode', { simple: true }) === 'wal') {
      this.sync = walSync(db.name)
    } else {
      // Not in WAL mode (or in memory): each commit is as durable as the connection's own setting makes it.
      this.sync = { sync: () => Promise.resolve(), close () {} }
      return
    }
    db.pragma('synchronous = NORMAL')
  }

  run<T>(work: () => T, opts: { durable?: boolean } = {}): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ work, durable: opts.durable ?? true, resolve, reject })
      if (!this.scheduled) {
        this.scheduled = true
        setImmediate(() => this.flush())
      }
    })
  }

  /** `listener` runs after every successful commit, outside the transaction (the engine's cue, checkpoints). */
  afterCommit (listener: () => void): void {
    this.commitListeners.push(listener)
  }

  /** Adds memory kept in step with what commits (see WriteJournal). */
  journal (j: WriteJournal): void {
    this.journals.push(j)
  }

  /** Resolves once every write asked for so far is committed and as durable as it asked to be. */
  async drain (): Promise<void> {
    this.flush()
    if (this.syncedThrough >= this.lastDurable) return
    await new Promise<void>((resolve) => this.afterSync(this.lastDurable, () => resolve()))
  }

  /**
   * Resolves once every durable commit made so far is on disk: what a plain read (outside any write) saw
   * of this process's writes may then be acted on. No write of its own, so no wait for a later batch.
   */
  settled (): Promise<void> {
    if (this.syncedThrough >= this.lastDurable) return Promise.resolve()
    return new Promise<void>((resolve, reject) => this.afterSync(this.lastDurable, (err) => { if (err === undefined) resolve(); else reject(unsynced(err)) }))
  }

  /** Drains, then lets go of the WAL file (the database is closed by its owner). */
  async close (): Promise<void> {
    await this.drain()
    this.sync.close()
  }

  /**
   * One transaction for the whole batch. Writes rarely fail, so the batch first runs without a savepoint
   * per write (two statements saved per write); if one throws, that transaction is rolled back and the
   * batch runs again with a savepoint around each write, so the failing one is undone alone.
   *
   * A resource fault (disk full, read-only, I/O error, locked: faults.ts) is never narrowed down to one
   * write: it fails the whole batch. SQLite may roll the whole transaction back on such an error, and the
   * writes after it would then run (and commit) on their own, outside the batch: a write answered 503
   * would be stored. So the batch is abandoned at once, and every write in it is rejected with the fault.
   */
  private commit (batch: Pending[]): Outcome[] {
    const start = this.marks()
    const plain = this.db.transaction(() => batch.map((item): Outcome => ({ ok: true, value: item.work() })))
    try {
      return plain.immediate()
    } catch (err) {
      this.rollBack(start)
      if (storeFault(err) !== null) throw err
      // Otherwise fall through: run it again to find out which write failed, keeping the others.
    }
    try {
      return this.db.transaction(() => batch.map((item): Outcome => {
        const before = this.marks()
        try {
          // A nested better-sqlite3 transaction is a SAVEPOINT: a throw here undoes only this write.
          return { ok: true, value: this.db.transaction(item.work)() }
        } catch (error) {
          this.rollBack(before)
          if (storeFault(error) !== null || !this.db.inTransaction) throw error
          return { ok: false, error }
        }
      })).immediate()
    } catch (err) {
      this.rollBack(start)
      throw err
    }
  }

  private marks (): number[] {
    return this.journals.length === 0 ? [] : this.journals.map((j) => j.mark())
  }

  private rollBack (marks: number[]): void {
    this.journals.forEach((j, i) => j.rollBack(marks[i]!))
  }

  /** Commits everything queued now (settling happens after the fsync that covers it). */
  flush (): void {
    this.scheduled = false
    const batch = this.pending
    if (batch.length === 0) return
    this.pending = []
    let outcomes: Outcome[]
    try {
      // Inside the try: on a closed database this throws too, and every write must still settle.
      outcomes = this.commit(batch)
    } catch (error) {
      // The COMMIT itself failed (disk full, I/O error): nothing in the batch was kept.
      for (const item of batch) item.reject(error)
      if (storeFault(error) !== null) this.onFault?.(error)
      return
    }
    this.commits += 1
    for (const j of this.journals) j.commit()
    const durable = batch.some((item, i) => item.durable && outcomes[i]!.ok)
    if (durable) this.lastDurable = this.commits
    // If the fsync fails, durability is unknown: durable writes fail with a fault whose effect is
    // 'unknown' (their requests answer 503 saying it may have been kept), the bookkeeping goes ahead (at
    // worst it is done again).
    const settle = (syncError?: unknown) => {
      const failed = syncError === undefined ? undefined : unsynced(syncError)
      if (failed !== undefined && batch.some((item, i) => item.durable && outcomes[i]!.ok)) this.onFault?.(failed)
      batch.forEach((item, i) => {
        const outcome = outcomes[i]!
        if (!outcome.ok) item.reject(outcome.error)
        else if (failed !== undefined && item.durable) item.reject(failed)
        else item.resolve(outcome.value)
      })
    }
    if (this.syncedThrough >= this.lastDurable) settle()
    else this.afterSync(this.lastDurable, settle)
    for (const listener of this.commitListeners) listener()
  }

  private afterSync (through: number, settle: (err?: unknown) => void): void {
    let last = this.waiting.at(-1)
    if (!last || last.through !== through) this.waiting.push(last = { through, settle: [] })
    last.settle.push(settle)
    this.startSync()
  }

  private startSync (): void {
    if (this.syncing || this.waiting.length === 0) return
    this.syncing = true
    const through = this.commits
    const started = performance.now()
    this.sync.sync().then(
      () => {
        this.onSynced?.((performance.now() - started) / 1000)
        this.synced(through, undefined)
      },
      (err: unknown) => this.synced(through, err ?? new Error('WAL sync failed')),
    )
  }

  private synced (through: number, err: unknown): void {
    this.syncing = false
    if (err === undefined) this.syncedThrough = Math.max(this.syncedThrough, through)
    const done = this.waiting.filter((w) => w.through <= through)
    this.waiting = this.waiting.filter((w) => w.through > through)
    for (const w of done) for (const settle of w.settle) settle(err)
    this.startSync()
  }
}

/** A failed flush of the WAL: committed, so maybe kept, but not known to be on disk. */
function unsynced (err: unknown): StoreFaultError {
  const f = storeFault(err)
  const raw = (err as { code?: unknown } | null)?.code
  const code = f?.code ?? (typeof raw === 'string' || typeof raw === 'number' ? String(raw) : 'fdatasync')
  return new StoreFaultError({
    kind: f?.kind ?? 'io_error',
    reason: `${f?.reason ?? 'the disk reported an I/O error'} (flushing the WAL)`,
    code,
    effect: 'unknown',
  }, { cause: err })
}

/**
 * fdatasync of `<database>-wal`. The file is opened once and kept: fsync applies to the file, whatever
 * descriptor asks, and SQLite keeps the same file for as long as the database is open (it rewinds it
 * after a checkpoint rather than replacing it).
 */
function walSync (databaseFile: string): WalSync {
  let fd: number | undefined
  let closed = false
  const opened = (): Promise<number> => fd !== undefined
    ? Promise.resolve(fd)
    : new Promise((resolve, reject) => openFile(`${databaseFile}-wal`, 'r', (err, got) => {
      if (err) return reject(err)
      if (fd !== undefined || closed) closeFd(got, () => {})
      else fd = got
      resolve(got)
    }))
  return {
    sync: () => opened().then((f) => new Promise<void>((resolve, reject) => fdatasync(f, (err) => err ? reject(err) : resolve()))),
    close () {
      closed = true
      if (fd !== undefined) closeFd(fd, () => {})
      fd = undefined
    },
  }
}
