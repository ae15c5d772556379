import type { Database } from 'better-sqlite3'

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown }

interface Pending {
  work: () => unknown
  durable: boolean
  resolve: (value: any) => void
  reject: (err: unknown) => void
}

/**
 * Group commit. Writes asked for during one turn of the event loop run together in one transaction, each
 * inside its own savepoint so that one failing write (a constraint, a thrown rule) rolls back alone. The
 * promises settle after the shared COMMIT, so a resolved write is durable, and N concurrent requests pay
 * for one fsync instead of N.
 *
 * A write may say it need not survive a power cut (`durable: false`): the delivery engine's bookkeeping,
 * where a lost write means a delivery is made again (at least once), never one lost. A batch of only such
 * writes commits with synchronous=NORMAL (in WAL mode: safe from process crashes and never corrupt, but
 * not fsynced); any batch holding a durable write commits with FULL.
 */
export class WriteQueue {
  private pending: Pending[] = []
  private scheduled = false
  private synchronous: 'FULL' | 'NORMAL' = 'FULL'
  /** Called after every successful commit (outside the transaction). */
  onCommit: (() => void) | undefined

  constructor (private readonly db: Database) {}

  run<T>(work: () => T, opts: { durable?: boolean } = {}): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ work, durable: opts.durable ?? true, resolve, reject })
      if (!this.scheduled) {
        this.scheduled = true
        setImmediate(() => this.flush())
      }
    })
  }

  /**
   * One transaction for the whole batch. Writes rarely fail, so the batch first runs without a savepoint
   * per write (two statements saved per write); if one throws, that transaction is rolled back and the
   * batch runs again with a savepoint around each write, so the failing one is undone alone.
   */
  private commit (batch: Pending[]): Outcome[] {
    const plain = this.db.transaction(() => batch.map((item): Outcome => ({ ok: true, value: item.work() })))
    try {
      return plain.immediate()
    } catch {
      // Fall through: run it again to find out which write failed, keeping the others.
    }
    return this.db.transaction(() => batch.map((item): Outcome => {
      try {
        // A nested better-sqlite3 transaction is a SAVEPOINT: a throw here undoes only this write.
        return { ok: true, value: this.db.transaction(item.work)() }
      } catch (error) {
        return { ok: false, error }
      }
    })).immediate()
  }

  /** Runs everything queued now; used by flush-on-close too. */
  flush (): void {
    this.scheduled = false
    const batch = this.pending
    if (batch.length === 0) return
    this.pending = []
    const outcomes: Outcome[] = []
    const level = batch.some((item) => item.durable) ? 'FULL' : 'NORMAL'
    try {
      // Inside the try: on a closed database this throws too, and every write must still settle.
      if (level !== this.synchronous) {
        this.db.pragma(`synchronous = ${level}`)
        this.synchronous = level
      }
      outcomes.push(...this.commit(batch))
    } catch (error) {
      // The COMMIT itself failed (disk full, I/O error): nothing in the batch is durable.
      for (const item of batch) item.reject(error)
      return
    }
    batch.forEach((item, i) => {
      const outcome = outcomes[i]!
      if (outcome.ok) item.resolve(outcome.value)
      else item.reject(outcome.error)
    })
    this.onCommit?.()
  }
}
