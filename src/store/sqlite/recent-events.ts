// Event rows this process has just committed, held for the delivery engine's next read. The engine reads
// the events after its routing position (seq > through, in seq order); when the rows it asks for are the
// ones this process just wrote, they are taken from here instead of read back from the table: that read
// (nine columns per row, the payload the largest) was about a tenth of the main thread in the pipeline.
//
// A cache, not a source of truth. It answers only when it holds the very next seq after `through` and
// then only a run of consecutive seqs: seq is the table's integer key, so no other row can sit between two
// consecutive ones. Any gap (another process's event, a test event, a row left out because the cache was
// full) and the caller reads the table, as before. Rows enter only once their transaction has committed
// (WriteJournal: a rolled-back write leaves nothing here), so the cache never holds a row the table lacks.
import type { WriteJournal } from './write-queue.js'

export interface EventRow {
  seq: number
  id: string
  account_id: string
  email_id: string
  type: string
  occurred_at: string
  payload: string
  /** What routing matches webhook filters on (EventRecord.route); null or absent when not known. */
  route?: string | null
}

export interface RecentEventLimits {
  maxRows: number
  /** Payload characters held at most, all rows together. */
  maxPayloadChars: number
}

/** A few seconds of events at full speed; a few MB at most. */
export const RECENT_EVENT_LIMITS: RecentEventLimits = { maxRows: 8192, maxPayloadChars: 4 * 1024 * 1024 }

export class RecentEvents implements WriteJournal {
  /** Committed rows, ascending seq. `head` is the first one still held (the array is compacted lazily). */
  private rows: EventRow[] = []
  private head = 0
  private chars = 0
  /** Rows inserted by the transaction in progress, ascending seq. */
  private staged: EventRow[] = []

  constructor (private readonly limits: RecentEventLimits = RECENT_EVENT_LIMITS) {}

  /** How many committed rows are held. */
  get size (): number {
    return this.rows.length - this.head
  }

  /** A row its transaction has just inserted; held once that transaction commits. */
  stage (row: EventRow): void {
    this.staged.push(row)
  }

  mark (): number {
    return this.staged.length
  }

  rollBack (mark: number): void {
    this.staged.length = Math.min(mark, this.staged.length)
  }

  /**
   * The transaction committed: its rows are held, in seq order. When full, new rows are left out rather
   * than old ones pushed out: the oldest are the next a read asks for, and what is left out is read from
   * the table.
   */
  commit (): void {
    const staged = this.staged
    if (staged.length === 0) return
    this.staged = []
    for (const row of staged) {
      // Seqs only grow from one commit to the next; anything else is not trusted to be in order.
      if (this.size > 0 && row.seq <= this.rows.at(-1)!.seq) this.clear()
      if (this.size >= this.limits.maxRows || this.chars + row.payload.length > this.limits.maxPayloadChars) return
      this.rows.push(row)
      this.chars += row.payload.length
    }
  }

  /**
   * Up to `limit` rows with seqs through + 1, through + 2, … without a gap; undefined when the row right
   * after `through` is not held (then only the table can say what comes next). Rows up to `through` are
   * dropped: a read from there on has no use for them.
   */
  after (through: number, limit: number): EventRow[] | undefined {
    while (this.head < this.rows.length && this.rows[this.head]!.seq <= through) {
      this.chars -= this.rows[this.head]!.payload.length
      this.head++
    }
    this.compact()
    if (this.size === 0 || this.rows[this.head]!.seq !== through + 1 || limit <= 0) return undefined
    const out: EventRow[] = []
    let expected = through + 1
    for (let i = this.head; i < this.rows.length && out.length < limit; i++) {
      const row = this.rows[i]!
      if (row.seq !== expected) break
      out.push(row)
      expected++
    }
    return out
  }

  /** Lets go of every committed row (staged ones are the transaction's). */
  clear (): void {
    this.rows = []
    this.head = 0
    this.chars = 0
  }

  private compact (): void {
    if (this.head === this.rows.length) {
      this.rows = []
      this.head = 0
    } else if (this.head > 1024 && this.head * 2 > this.rows.length) {
      this.rows = this.rows.slice(this.head)
      this.head = 0
    }
  }
}
