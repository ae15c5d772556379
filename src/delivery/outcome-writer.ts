// Outcomes in, store writes out: queued outcomes are written in batches, at once when many wait, else
// within LINGER_MS, so a busy engine makes one store write per few hundred deliveries rather than one per
// handful (the delivery itself is not delayed: only its record). Each write carries the durable cursor as
// far as the event source says it may move, is retried with p-retry, and, given up, gives up the routing
// lease so that what it carried is read again. Outcomes are written in the order they happened.
//
// Tested in test/unit/delivery-parts.test.ts.
import pRetry from 'p-retry'
import { realTimers, type Clock, type Timers } from '../domain/clock.js'
import type { DeliveryOutcome, DeliveryStore } from '../store/deliveries.js'
import type { StoreHealth } from '../store/faults.js'
import type { EngineLogger } from './engine-logger.js'
import type { EventSource } from './event-source.js'

export const OUTCOME_BATCH = 512
export const LINGER_MS = 5
/** A failed outcome write is tried 5 times in all, 200, 400, 800 and 800 ms apart (p-retry's options). */
export const WRITE_RETRY = { retries: 4, minTimeout: 200, factor: 2, maxTimeout: 800 } as const

export interface OutcomeWriterOptions {
  store: Pick<DeliveryStore, 'recordOutcomes'> & { readonly health: Pick<StoreHealth, 'failed'> }
  clock: Clock
  log: EngineLogger
  source: EventSource
  autoDisableMs: number
  /** Each outcome as it is queued (metrics). */
  onQueued?: (outcome: DeliveryOutcome) => void
  /** Outcomes the store did not apply: their lease had passed to another node. */
  onStale?: (count: number) => void
  timers?: Timers
  /** p-retry's options for a failed write (tests shorten the waits). */
  retry?: { retries: number; minTimeout: number; factor: number; maxTimeout: number }
}

export class OutcomeWriter {
  private queued: DeliveryOutcome[] = []
  /** The batch being written now: still this node's leases until the write lands. */
  private inWrite: DeliveryOutcome[] = []
  private writing: Promise<void> = Promise.resolve()
  private lingering: unknown
  private soon = false
  private readonly timers: Timers

  constructor (private readonly opts: OutcomeWriterOptions) {
    this.timers = opts.timers ?? realTimers
  }

  /** Outcomes queued and not yet taken into a write. */
  get pending (): number {
    return this.queued.length
  }

  queue (outcome: DeliveryOutcome): void {
    this.queued.push(outcome)
    this.opts.onQueued?.(outcome)
    this.opts.source.count(outcome.origin, -1)
    this.schedule()
  }

  /** A write soon: at once when a batch is full, else after LINGER_MS. */
  schedule (): void {
    if (this.queued.length >= OUTCOME_BATCH && !this.soon) {
      this.soon = true
      setImmediate(() => {
        this.soon = false
        void this.flush()
      })
    } else if (this.lingering === undefined) {
      this.lingering = this.timers.set(() => {
        this.lingering = undefined
        void this.flush()
      }, LINGER_MS)
    }
  }

  /** Ids of stored deliveries whose outcomes wait here: their leases must outlive a slow write. */
  leasedIds (): string[] {
    const ids: string[] = []
    for (const o of this.queued) if (o.origin === undefined) ids.push(o.id)
    for (const o of this.inWrite) if (o.origin === undefined) ids.push(o.id)
    return ids
  }

  /** Resolves when the write under way (if any) is done. */
  lastWrite (): Promise<void> {
    return this.writing
  }

  /** Writes every queued outcome (and the cursor) now, after the write under way. */
  flush (): Promise<void> {
    if (this.lingering !== undefined) {
      this.timers.clear(this.lingering)
      this.lingering = undefined
    }
    this.writing = this.writing.then(() => this.writeAll())
    return this.writing
  }

  private async writeAll (): Promise<void> {
    const { store, source, log } = this.opts
    for (;;) {
      // The cursor moves with the outcomes that complete its events, in the same write.
      const routed = source.through()
      if (this.queued.length === 0 && routed === undefined) return
      const batch = this.queued
      this.queued = []
      this.inWrite = batch
      try {
        let stale: number
        try {
          ({ stale } = await pRetry(
            () => store.recordOutcomes(batch, { now: this.opts.clock.now(), autoDisableMs: this.opts.autoDisableMs, ...(routed ? { routed } : {}) }),
            {
              ...(this.opts.retry ?? WRITE_RETRY),
              // A store fault is logged once, by the store's health; anything else at every attempt.
              onFailedAttempt: ({ error, attemptNumber }) => {
                if (!store.health.failed(error)) log.error({ err: error, attempt: attemptNumber, outcomes: batch.length }, 'writing delivery outcomes failed')
              },
            },
          ))
        } catch {
          // Given up. The leases still stood while the batch was retried (they are renewed); now they run
          // out and the work is simply done again. First attempts held in memory have no lease: the
          // routing lease is given up instead, so that their events are read again from the durable cursor.
          if (routed !== undefined || batch.some((o) => o.origin !== undefined)) source.lose()
          return
        }
        if (routed !== undefined) source.written(routed)
        if (stale > 0) {
          // Another node took these deliveries over (this one stalled past their leases): its work stands.
          this.opts.onStale?.(stale)
          log.warn({ stale }, 'delivery outcomes arrived after their lease was lost; they were not applied')
        }
      } finally {
        this.inWrite = []
      }
    }
  }
}
