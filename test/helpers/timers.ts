import type { Timers } from '../../src/domain/clock.js'

/** Timers that fire only when told to; each remembers the delay it was set for. */
export class ManualTimers implements Timers {
  readonly pending = new Map<number, { fn: () => void; ms: number }>()
  private next = 0
  set (fn: () => void, ms: number): unknown {
    const id = ++this.next
    this.pending.set(id, { fn, ms })
    return id
  }

  clear (handle: unknown): void { this.pending.delete(handle as number) }

  /** Fires every timer set so far (not those the firing sets). */
  fireAll (): void {
    const due = [...this.pending.values()]
    this.pending.clear()
    for (const t of due) t.fn()
  }
}
