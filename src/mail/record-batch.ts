// The mailer's outcome writes, held for a moment so that many share one commit. Over SMTP the relay's
// answers arrive one per turn of the event loop, and each recorded attempt alone was a commit of its own
// (the email's row, its events, their indexes written to the log, and the event reader woken for one
// event): about a sixth of the mailer's thread per email. Held until `maxItems` wait or `lingerMs` has
// passed since the first, they are handed to the store together, in the order they came (the SQLite
// store commits the writes asked for in one turn as one transaction).
//
// Tested in test/unit/record-batch.test.ts.
import type { Timers } from '../domain/clock.js'

export const RECORD_BATCH = 256
export const RECORD_LINGER_MS = 20

/** Not unref'd: an outcome held here keeps the process up until it is written (a stop waits for it). */
const heldTimers: Timers = { set: (fn, ms) => setTimeout(fn, ms), clear: (handle) => clearTimeout(handle as NodeJS.Timeout) }

interface Held<T, R> { item: T; resolve: (value: R) => void; reject: (err: unknown) => void }

export class RecordBatch<T, R> {
  private held: Array<Held<T, R>> = []
  private timer: unknown
  private readonly maxItems: number
  private readonly lingerMs: number
  private readonly timers: Timers

  constructor (private readonly write: (item: T) => Promise<R>, opts: { maxItems?: number; lingerMs?: number; timers?: Timers } = {}) {
    this.maxItems = opts.maxItems ?? RECORD_BATCH
    this.lingerMs = opts.lingerMs ?? RECORD_LINGER_MS
    this.timers = opts.timers ?? heldTimers
  }

  /** Settles as the store's write of `item` does, once the batch it joined is handed over. */
  submit (item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.held.push({ item, resolve, reject })
      if (this.held.length >= this.maxItems) this.flush()
      else if (this.timer === undefined) this.timer = this.timers.set(() => this.flush(), this.lingerMs)
    })
  }

  /** Hands everything held to the store now (in one turn, so they share a commit). */
  flush (): void {
    if (this.timer !== undefined) this.timers.clear(this.timer)
    this.timer = undefined
    const batch = this.held
    this.held = []
    for (const h of batch) {
      let written: Promise<R>
      try {
        written = this.write(h.item)
      } catch (err) {
        written = Promise.reject(err)
      }
      written.then(h.resolve, h.reject)
    }
  }

  get size (): number {
    return this.held.length
  }
}
