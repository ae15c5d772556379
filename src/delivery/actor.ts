// One actor per webhook. It keeps one endpoint's trouble to itself: a bounded number of requests in flight
// (the window), a circuit breaker that stops calling an endpoint that keeps failing, and a pause when the
// receiver asks for one (Retry-After). While the breaker is open or the actor paused, its deliveries go
// back to the store, due when it reopens, so a dead endpoint holds no memory and no one else's turn.
import type { DeliveryWork } from '../store/deliveries.js'

export type BreakerState = 'closed' | 'open' | 'half_open'

export interface ActorOptions {
  /** Requests in flight at the receiver at once. */
  window: number
  /**
   * Deliveries handed to the worker thread beyond the window, queued there to start the moment a request
   * finishes (see lanes.ts): the receiver's window stays full while the engine's thread is busy.
   */
  ahead: number
  /** Work queued in memory beyond the window; more is sent back to the store. */
  mailboxLimit: number
  /** Consecutive failures that open the breaker. */
  failureThreshold: number
  /** First open period; doubles on each failed probe up to maxCooldownMs. */
  cooldownMs: number
  maxCooldownMs: number
}

export class WebhookActor {
  readonly mailbox: DeliveryWork[] = []
  /** Handed to the worker thread and not answered yet: in flight at the receiver, or queued there. */
  inFlight = 0
  /** Consecutive failed attempts. */
  failures = 0
  /** Until when (ms) nothing is sent: breaker open, or a receiver's Retry-After. 0 = not paused. */
  pausedUntil = 0
  private opens = 0
  private probing = false

  constructor (readonly webhookId: string, readonly shard: number, private readonly opts: ActorOptions) {}

  state (now: number): BreakerState {
    if (this.opens === 0) return 'closed'
    return now < this.pausedUntil ? 'open' : 'half_open'
  }

  isPaused (now: number): boolean {
    return now < this.pausedUntil
  }

  /** Room in the mailbox; `share` can raise the limit when few actors share the node's memory budget. */
  hasRoom (share = 0): boolean {
    return this.mailbox.length < Math.max(this.opts.mailboxLimit, share)
  }

  /** How many more requests may start now. */
  capacity (now: number): number {
    if (this.isPaused(now)) return 0
    // Half-open: one probe at a time until a success closes the breaker.
    if (this.opens > 0) return this.probing || this.inFlight > 0 ? 0 : 1
    return this.opts.window + this.opts.ahead - this.inFlight
  }

  /** Takes up to `n` deliveries to send now. */
  take (now: number, n: number): DeliveryWork[] {
    const count = Math.min(n, this.capacity(now), this.mailbox.length)
    if (count <= 0) return []
    if (this.opens > 0) this.probing = true
    this.inFlight += count
    return this.mailbox.splice(0, count)
  }

  succeeded (): void {
    this.inFlight -= 1
    this.failures = 0
    this.opens = 0
    this.probing = false
  }

  /** A delivery the worker handed back unattempted: it counts neither way. */
  returned (): void {
    this.inFlight -= 1
    this.probing = false
  }

  /** A failed attempt. Returns true when this failure opened (or reopened) the breaker. */
  failed (now: number): boolean {
    this.inFlight -= 1
    this.failures += 1
    const probeFailed = this.probing
    this.probing = false
    if (probeFailed || (this.opens === 0 && this.failures >= this.opts.failureThreshold)) {
      const cooldown = Math.min(this.opts.maxCooldownMs, this.opts.cooldownMs * 2 ** this.opens)
      this.opens += 1
      this.pausedUntil = Math.max(this.pausedUntil, now + cooldown)
      return true
    }
    return false
  }

  /** The receiver asked for a pause (429/503 with Retry-After). */
  pause (until: number): void {
    this.pausedUntil = Math.max(this.pausedUntil, until)
  }

  /** Nothing queued, nothing in flight, no pause running: the actor can be dropped (its breaker too). */
  idle (now: number): boolean {
    return this.mailbox.length === 0 && this.inFlight === 0 && !this.isPaused(now)
  }
}
