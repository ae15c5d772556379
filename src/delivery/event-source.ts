// Where new events come in: one interface for both ways a store offers them.
//
// - Written once (a store with readEvents and renewRouting, SQLite): events are read into memory under
//   the routing lease; their first attempts have no row until their outcome makes it. This source counts,
//   per event, the first attempts without an outcome queued, and says how far the durable cursor may move
//   (to just before the first event that still has one); the outcome writer moves it with its next batch.
// - Routed (a store without them, MongoDB): each read routes events into stored, leased deliveries; there
//   is no cursor to keep, and the rest of the interface does nothing.
//
// Tested in test/unit/delivery-parts.test.ts.
import type { DeliveryOrigin, DeliveryStore, DeliveryWork, LeaseRequest, RoutedThrough, RoutingPosition } from '../store/deliveries.js'
import type { EngineLogger } from './engine-logger.js'

export interface EventSource {
  /** Up to req.limit new events, and the deliveries they make (leased, or first attempts held in memory). */
  read (req: LeaseRequest): Promise<{ events: number; work: DeliveryWork[] }>
  /** A first attempt came in (+1) or its outcome was queued (-1). */
  count (origin: DeliveryOrigin | undefined, by: 1 | -1): void
  /** Where the durable cursor may move now; undefined when nowhere new. */
  through (): RoutedThrough | undefined
  /** A write that carried `routed` landed. */
  written (routed: RoutedThrough): void
  /** The routing lease is given up (a failed write): what was read is read again. */
  lose (): void
  /** Extends the routing lease, when this node holds it. */
  renew (leaseUntil: number): void
  /** Whether first attempts read under the current routing lease wait for an outcome. */
  holdsFirstAttempts (): boolean
}

/** Routes events into the store: what comes back is leased like any claimed delivery. */
export class RoutedEvents implements EventSource {
  constructor (private readonly store: Pick<DeliveryStore, 'routeEvents'>) {}
  read (req: LeaseRequest): Promise<{ events: number; work: DeliveryWork[] }> {
    return this.store.routeEvents(req)
  }

  count (): void {}
  through (): undefined { return undefined }
  written (): void {}
  lose (): void {}
  renew (): void {}
  holdsFirstAttempts (): boolean { return false }
}

type CursorStore = Required<Pick<DeliveryStore, 'readEvents' | 'renewRouting'>>

/** Reads events into memory under the routing lease and keeps the durable cursor (see the header). */
export class CursorEvents implements EventSource {
  /** This node's place in the event stream while it holds the routing lease. */
  private routing: RoutingPosition | null = null
  /** Per event read under that lease (by seq, ascending): its first attempts without an outcome queued. */
  private readonly unwritten = new Map<number, number>()
  /** The cursor last written (under the current routing token). */
  private routedWritten = -1

  /**
   * `cursorMayMove` is called when events were read: those that made no delivery (or only ones already
   * stored) let the cursor move, so an outcome write should come soon.
   */
  constructor (
    private readonly store: CursorStore,
    private readonly owner: string,
    private readonly log: EngineLogger,
    private readonly cursorMayMove: () => void,
  ) {}

  async read (req: LeaseRequest): Promise<{ events: number; work: DeliveryWork[] }> {
    const before = this.routing
    const read = await this.store.readEvents(before ? { ...req, routing: before } : req)
    if (this.routing !== before) return { events: 0, work: [] } // lost meanwhile (a failed write): read again
    if (read.routing === null) {
      if (before !== null) this.lose()
      return read
    }
    // Taken (again): counting starts afresh under the new token; the reads start at the durable cursor.
    if (before === null || read.routing.token !== before.token) this.lose()
    this.routing = read.routing
    if (read.events > 0) this.cursorMayMove()
    return read
  }

  count (origin: DeliveryOrigin | undefined, by: 1 | -1): void {
    if (origin === undefined || this.routing === null || origin.router !== this.routing.token) return
    const n = (this.unwritten.get(origin.seq) ?? 0) + by
    if (n > 0) this.unwritten.set(origin.seq, n)
    else this.unwritten.delete(origin.seq)
  }

  through (): RoutedThrough | undefined {
    if (this.routing === null) return undefined
    let through = this.routing.through
    for (const seq of this.unwritten.keys()) {
      through = seq - 1
      break
    }
    if (through <= this.routedWritten) return undefined
    return { owner: this.owner, token: this.routing.token, through }
  }

  written (routed: RoutedThrough): void {
    if (this.routing !== null && routed.token === this.routing.token) this.routedWritten = Math.max(this.routedWritten, routed.through)
  }

  lose (): void {
    this.routing = null
    this.unwritten.clear()
    this.routedWritten = -1
  }

  renew (leaseUntil: number): void {
    const routing = this.routing
    if (routing === null) return
    this.store.renewRouting(this.owner, routing.token, leaseUntil).then(
      (held) => { if (!held && this.routing === routing) this.lose() },
      (err: unknown) => this.log.error({ err }, 'renewing the routing lease failed'),
    )
  }

  holdsFirstAttempts (): boolean {
    return this.routing !== null && this.unwritten.size > 0
  }
}

/** The source a store offers: written once where it can read events, routed otherwise. */
export function eventSourceFor (store: Pick<DeliveryStore, 'routeEvents' | 'readEvents' | 'renewRouting'>, owner: string, log: EngineLogger, cursorMayMove: () => void): EventSource {
  const { readEvents, renewRouting } = store
  if (readEvents === undefined || renewRouting === undefined) return new RoutedEvents(store)
  return new CursorEvents({ readEvents: readEvents.bind(store), renewRouting: renewRouting.bind(store) }, owner, log, cursorMayMove)
}
