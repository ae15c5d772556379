// WAL checkpoints off the main thread.
//
// In WAL mode every commit appends pages to the `-wal` file, and a checkpoint copies them back into the
// database file (and syncs both) so the WAL can start over. By default SQLite does that inside the commit
// that takes the WAL past 1,000 pages, on the thread that commits: here the main thread, which also
// answers the API, runs the mailer and the delivery engine. In a micro-benchmark of the pipeline's own
// row writes (benchmarks/store-writes.ts) they were about 7 µs of that thread per email, 8-9 % of what the
// store's writes cost it.
//
// Here a worker thread with its own connection to the file runs a PASSIVE checkpoint (which never waits
// for, nor blocks, readers or the writer) shortly after commits, at most one at a time and at most one
// start per `everyMs`, with one more after the last commit of a burst. The main connection keeps a high
// automatic checkpoint (SQLITE_FALLBACK_CHECKPOINT pages) for two cases: the thread failing (or falling
// behind), and a WAL that never gets to start over because commits keep landing while the thread copies.
// A checkpoint by the committing connection leaves no frame behind, so the next write starts the WAL
// over; and since the thread has already copied most frames, that checkpoint has little left to do.
import { fileURLToPath } from 'node:url'
import type { Clock } from '../../domain/clock.js'
import { systemClock } from '../../domain/clock.js'
import { realTimers, type Timers } from '../../domain/clock.js'
import { oneThread } from '../../one-thread.js'

const WORKER_FILE = fileURLToPath(new URL('../../../workers/checkpoint.js', import.meta.url))

/** The main connection's own automatic checkpoint, in WAL pages (4 KiB each): the backstop. */
export const SQLITE_FALLBACK_CHECKPOINT = 4000

/** What `PRAGMA wal_checkpoint(PASSIVE)` answered: frames in the WAL, and how many are in the database file. */
export interface CheckpointResult {
  busy: boolean
  log: number
  checkpointed: number
}

/** A task for the checkpoint thread; `close`: the store is closing, let go of the file. */
export interface CheckpointJob {
  file: string
  close?: boolean
}

/** Where checkpoints run: a worker thread in production (workers/checkpoint.ts), a fake in unit tests. */
export interface CheckpointRunner {
  checkpoint(): Promise<CheckpointResult>
  close(): Promise<void>
}

export interface BackgroundCheckpointsOptions {
  /** At most one checkpoint starts per this many milliseconds (default 100). */
  everyMs?: number
  clock?: Clock
  timers?: Timers
  /** Every checkpoint that ended: whether it worked (a failed one is left to the main connection's backstop), and how long it took (seconds). */
  onDone?: (outcome: CheckpointOutcome) => void
}

export interface CheckpointOutcome {
  ok: boolean
  seconds: number
}

export class BackgroundCheckpoints {
  private readonly everyMs: number
  private readonly clock: Clock
  private readonly timers: Timers
  private running: Promise<void> | null = null
  private timer: unknown = undefined
  /** Commits made since the last checkpoint started. */
  private dirty = false
  private lastStart = Number.NEGATIVE_INFINITY
  private closed = false
  private idleWaiters: Array<() => void> = []

  constructor (private readonly runner: CheckpointRunner, private readonly opts: BackgroundCheckpointsOptions = {}) {
    this.everyMs = opts.everyMs ?? 100
    this.clock = opts.clock ?? systemClock
    this.timers = opts.timers ?? realTimers
  }

  /** Called after every commit. */
  committed (): void {
    if (this.closed) return
    this.dirty = true
    this.startIfDue()
  }

  /** Resolves once no checkpoint is running or waiting to start. */
  idle (): Promise<void> {
    if (this.running === null && this.timer === undefined) return Promise.resolve()
    return new Promise<void>((resolve) => this.idleWaiters.push(resolve))
  }

  /** Lets the checkpoint in flight finish, then stops the thread; no more start. */
  async close (): Promise<void> {
    this.closed = true
    if (this.timer !== undefined) {
      this.timers.clear(this.timer)
      this.timer = undefined
    }
    await this.running
    this.wakeIfIdle()
    await this.runner.close()
  }

  private startIfDue (): void {
    if (this.closed || !this.dirty || this.running !== null || this.timer !== undefined) return
    const now = this.clock.now()
    const wait = this.lastStart + this.everyMs - now
    if (wait > 0) {
      this.timer = this.timers.set(() => {
        this.timer = undefined
        this.startIfDue()
        this.wakeIfIdle()
      }, wait)
      return
    }
    this.dirty = false
    this.lastStart = now
    const started = performance.now()
    const done = (ok: boolean) => this.opts.onDone?.({ ok, seconds: (performance.now() - started) / 1000 })
    this.running = this.runner.checkpoint().then(() => done(true), () => done(false)).finally(() => {
      this.running = null
      // Commits made while it ran: one more after `everyMs`.
      this.startIfDue()
      this.wakeIfIdle()
    })
  }

  private wakeIfIdle (): void {
    if (this.running !== null || this.timer !== undefined || this.idleWaiters.length === 0) return
    const waiters = this.idleWaiters
    this.idleWaiters = []
    for (const wake of waiters) wake()
  }
}

/** Checkpoints in a worker thread of their own, with their own connection to `file` (workers/checkpoint.ts). */
export function checkpointThread (file: string): CheckpointRunner {
  const thread = oneThread<CheckpointJob, CheckpointResult | null>(WORKER_FILE)
  let used = false
  return {
    async checkpoint () {
      used = true
      const result = await thread.run({ file })
      if (result === null) throw new Error('the checkpoint thread answered nothing')
      return result
    },
    async close () {
      // Its connection goes first: the main connection, closing last, then checkpoints and removes the WAL.
      if (used) await thread.run({ file, close: true })
      await thread.close()
    },
  }
}
