// One actor per webhook. It keeps one endpoint's trouble to itself: an adaptive number of requests in
// flight (the window, see window.ts), a short hold when the receiver pushes back, a circuit breaker that
// stops calling an endpoint that is down, and, for a webhook with a rate limit, the permits it may spend.
// While the breaker is open its deliveries go back to the store, due when it reopens, so a dead endpoint
// holds no memory and no one else's turn.
//
// Busy, flaky and down are told apart (see attempt-outcome.ts for the classification of one answer):
// - busy: 429/503 while the endpoint still answers 2xx now and then (its trouble is younger than
//   `downAfterMs`): the window shrinks, the delivery waits a moment, nothing else;
// - flaky: failures between successes: each failed delivery waits its retry step, the breaker stays shut;
// - down: failures and no 2xx for `downAfterMs` (or `failureThreshold × 4` failures in a row, whatever the
//   time): the breaker opens. Its probes come at a quarter of how long the endpoint has been down, between
//   `cooldownMs` and `maxCooldownMs`, so a short outage is noticed seconds after it ends and a long one
//   costs a probe every few minutes.
import type { DeliveryWork } from '../store/deliveries.js'
import { AdaptiveWindow, type WindowBounds } from './window.js'

export type BreakerState = 'closed' | 'open' | 'half_open'

export interface ActorOptions {
  /** Bounds of the adaptive window (requests in flight at the receiver at once). */
  window: WindowBounds
  /**
   * Deliveries handed to the worker thread beyond the window, in windows (see lanes.ts): queued there to
   * start the moment a request finishes, so the receiver's window stays full while the engine is busy.
   */
  ahead: number
  /** Work queued in memory beyond the window; more is sent back to the store. */
  mailboxLimit: number
  /** Consecutive failures that open the breaker (once the endpoint has been failing for downAfterMs). */
  failureThreshold: number
  /** Shortest and longest time the breaker stays open before a probe. */
  cooldownMs: number
  maxCooldownMs: number
  /** How long without a 2xx makes an endpoint down rather than busy. */
  downAfterMs: number
  /** The longest hold after consecutive pushbacks (it doubles from 10 ms). */
  maxHoldMs: number
}

const FIRST_HOLD_MS = 10
/** How long an idle actor is kept for an endpoint in trouble. */
const FORGET_TROUBLE_MS = 86_400_000

/**
 * Requests handed to the senders and not answered yet, on the whole node: the one count, changed only by
 * the actors, in the same step as each actor's own share of it (the engine's budget reads the total).
 */
export class RequestTally {
  total = 0
}

export class WebhookActor {
  private readonly mailbox: DeliveryWork[] = []
  /** Handed to the worker thread and not answered yet: in flight at the receiver, or queued there. */
  private sent = 0
  /** Consecutive failed attempts (pushbacks do not count). */
  private failuresInARow = 0
  /** Consecutive pushbacks without a 2xx between. */
  private pushbacksInARow = 0
  /** Until when (ms) nothing is sent: breaker open. 0 = not paused. */
  private paused = 0
  /** Until when (ms) nothing new starts after pushbacks (the mailbox stays). */
  private held = 0
  /** Since when (ms) the endpoint has answered nothing but failures and pushbacks; null after a 2xx. */
  private troubleSince: number | null = null
  /** Deliveries per second this webhook may get (its rateLimit), null for none; and the permits in hand. */
  private rate: number | null = null
  private permitsLeft = 0
  private permitsUntil = 0
  /** When to ask the shared counters for permits again (the current window's are spent). */
  private askAgainAt = 0
  /** A permit request to the store is under way. */
  private asking = false
  private readonly window: AdaptiveWindow
  private opens = 0
  private probing = false
  /** The breaker was open or a failing streak ran long since the last 2xx: the next 2xx is a recovery. */
  private recovering = false

  constructor (
    readonly webhookId: string,
    readonly shard: number,
    private readonly opts: ActorOptions,
    private readonly tally: RequestTally = new RequestTally(),
  ) {
    this.window = new AdaptiveWindow(opts.window)
  }

  // ── what it holds ──

  /** Deliveries waiting in the mailbox, not yet handed to a sender. */
  get queued (): number {
    return this.mailbox.length
  }

  /** Handed to the sender and not answered yet. */
  get inFlight (): number {
    return this.sent
  }

  /** Room in the mailbox; `share` can raise the limit when few actors share the node's memory budget. */
  hasRoom (share = 0): boolean {
    return this.mailbox.length < Math.max(this.opts.mailboxLimit, share)
  }

  /** New work, at the back of the mailbox. */
  enqueue (work: DeliveryWork): void {
    this.mailbox.push(work)
  }

  /** Work handed back unattempted goes to the front, in its order, ahead of what came later. */
  requeueFirst (works: DeliveryWork[]): void {
    this.mailbox.unshift(...works)
  }

  /** Empties the mailbox (it goes back to the store): what was in it. */
  emptyMailbox (): DeliveryWork[] {
    return this.mailbox.splice(0)
  }

  // ── what it may send ──

  state (now: number): BreakerState {
    if (this.opens === 0) return 'closed'
    return now < this.paused ? 'open' : 'half_open'
  }

  isPaused (now: number): boolean {
    return now < this.paused
  }

  /** Until when (ms) the breaker or a Retry-After keeps everything back (0: never paused). */
  get pausedUntil (): number {
    return this.paused
  }

  /** Whether pushbacks hold new requests back at `now` (the mailbox stays). */
  isHeld (now: number): boolean {
    return now < this.held
  }

  /** Until when (ms) pushbacks hold new requests back. */
  get holdUntil (): number {
    return this.held
  }

  /** True when the endpoint has been without a 2xx for downAfterMs (its 429/503 are failures, not pushback). */
  isDown (now: number): boolean {
    return this.troubleSince !== null && now - this.troubleSince >= this.opts.downAfterMs
  }

  /** Consecutive failed attempts (pushbacks do not count). */
  get failures (): number {
    return this.failuresInARow
  }

  /** Consecutive pushbacks without a 2xx between. */
  get pushbacks (): number {
    return this.pushbacksInARow
  }

  /** Requests the receiver gets at once now (the adaptive window), and its smoothed round trip in ms. */
  get windowLimit (): number {
    return this.window.limit
  }

  get roundTripMs (): number {
    return this.window.roundTrip
  }

  /** How many more may be handed to the worker thread now. */
  capacity (now: number): number {
    if (now < this.paused || now < this.held) return 0
    // Half-open: one probe at a time until a success closes the breaker.
    if (this.opens > 0) return this.probing || this.sent > 0 ? 0 : 1
    const limit = this.window.limit
    let room = limit + limit * this.opts.ahead - this.sent
    if (this.rate !== null) room = Math.min(room, now < this.permitsUntil ? this.permitsLeft : 0)
    return room
  }

  /** Takes up to `n` deliveries to send now (each counts in flight until it is answered). */
  take (now: number, n: number): DeliveryWork[] {
    const count = Math.min(n, this.capacity(now), this.mailbox.length)
    if (count <= 0) return []
    if (this.opens > 0) this.probing = true
    if (this.rate !== null) this.permitsLeft -= count
    this.sent += count
    this.tally.total += count
    return this.mailbox.splice(0, count)
  }

  // ── a rate limit's permits (pacer.ts asks the shared counters for them) ──

  /** Deliveries per second this webhook may get, null for no limit. */
  get rateLimit (): number | null {
    return this.rate
  }

  /** The webhook's rate limit as the latest claim carries it. */
  limitRate (perSecond: number | null): void {
    this.rate = perSecond
  }

  /** A rate-limited actor that may send but holds no permit for now: the pacer must ask for some. */
  needsPermits (now: number): boolean {
    return this.rate !== null && now >= this.paused && (now >= this.permitsUntil || this.permitsLeft <= 0)
  }

  /** Permits in hand that are still good at `now`. */
  hasPermits (now: number): boolean {
    return this.permitsLeft > 0 && now < this.permitsUntil
  }

  /** Permits in hand (whether they are still good: see hasPermits). */
  get permits (): number {
    return this.permitsLeft
  }

  get askingForPermits (): boolean {
    return this.asking
  }

  /** When the pacer may ask for permits again. */
  get nextPermitAt (): number {
    return this.askAgainAt
  }

  /** A permit request to the shared counters is under way (one at a time). */
  permitsAsked (): void {
    this.asking = true
  }

  /** `count` permits, good until `until`; the next request no sooner than `askAgainAt`. */
  permitsGranted (count: number, until: number, askAgainAt: number): void {
    this.asking = false
    this.permitsLeft = count
    this.permitsUntil = until
    this.askAgainAt = askAgainAt
  }

  /** The request failed: ask again at `askAgainAt`. */
  permitsUnavailable (askAgainAt: number): void {
    this.asking = false
    this.askAgainAt = askAgainAt
  }

  /** When an actor with work may send again (0: now): after a pushback hold, and at its next permits. */
  readyAt (): number {
    return Math.max(this.held, this.rate === null ? 0 : this.askAgainAt)
  }

  // ── answers ──

  /** A 2xx. Returns true when it ends an outage (the breaker was open, or failures ran long): re-drive. */
  succeeded (now: number, durationMs: number): boolean {
    const inFlight = this.sent
    this.answered()
    this.window.succeeded(now, durationMs, Math.min(inFlight, this.window.limit))
    const recovered = this.recovering || this.opens > 0
    this.failuresInARow = 0
    this.pushbacksInARow = 0
    this.troubleSince = null
    this.held = 0
    this.opens = 0
    this.probing = false
    this.recovering = false
    return recovered
  }

  /** A delivery the worker handed back unattempted: it counts neither way. */
  returned (): void {
    this.answered()
    this.probing = false
  }

  /**
   * The receiver pushed back (429/503 while not down) or a request timed out / could not connect: the
   * window shrinks; a second pushback in a row also holds new requests a moment (doubling, up to maxHoldMs).
   * Returns how long the pushed-back delivery should wait.
   */
  pushedBack (now: number): number {
    this.answered()
    this.probing = false
    this.window.pushedBack(now)
    this.troubleSince ??= now
    this.pushbacksInARow += 1
    const hold = this.pushbacksInARow < 2 ? 0 : Math.min(this.opts.maxHoldMs, FIRST_HOLD_MS * 2 ** (this.pushbacksInARow - 2))
    this.held = Math.max(this.held, now + hold)
    return Math.max(hold, FIRST_HOLD_MS)
  }

  /** A sign of overload on a failed attempt (a timeout, a connection error): the window shrinks too. */
  shrink (now: number): void {
    this.window.pushedBack(now)
  }

  /** A failed attempt. Returns true when this failure opened (or reopened) the breaker. */
  failed (now: number): boolean {
    this.answered()
    this.failuresInARow += 1
    this.troubleSince ??= now
    const probeFailed = this.probing
    this.probing = false
    if (this.failuresInARow >= this.opts.failureThreshold) this.recovering = true
    const down = this.isDown(now) || this.failuresInARow >= this.opts.failureThreshold * 4
    if (probeFailed || (this.opens === 0 && this.failuresInARow >= this.opts.failureThreshold && down)) {
      const outage = now - (this.troubleSince ?? now)
      const cooldown = Math.min(this.opts.maxCooldownMs, Math.max(this.opts.cooldownMs, Math.round(outage / 4)))
      this.opens += 1
      this.recovering = true
      this.paused = Math.max(this.paused, now + cooldown)
      return true
    }
    return false
  }

  /** The receiver asked for a pause (429/503 with Retry-After) while down, or it is gone. */
  pause (until: number): void {
    this.paused = Math.max(this.paused, until)
  }

  /**
   * Nothing queued, nothing in flight, no pause running, and no trouble remembered (an endpoint in trouble
   * keeps its actor, so that its recovery re-drives what waits; for a day at most): the actor can be dropped.
   */
  idle (now: number): boolean {
    const troubled = this.troubleSince !== null && now - this.troubleSince < FORGET_TROUBLE_MS
    return this.mailbox.length === 0 && this.sent === 0 && now >= this.paused && !troubled && now >= this.held
  }

  private answered (): void {
    this.sent -= 1
    this.tally.total -= 1
  }
}
