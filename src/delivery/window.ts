// The adaptive in-flight window of one webhook: how many requests its receiver is sent at once. It finds
// the receiver's pace by itself (AIMD, as TCP does, with a memory of where the receiver last pushed back):
//
// - slow start: until the receiver first pushes back, every fast 2xx adds one (the window doubles per
//   round trip), so an idle fast receiver gets its full window within a few round trips;
// - additive increase: after that, a full window's worth of fast 2xx adds one (one per round trip), and
//   only a tenth of that near the level where the receiver last pushed back (its ceiling), so a receiver
//   with a hard cap is probed past it rarely, not every few round trips;
// - multiplicative decrease: a pushback (429, 503), a timeout, a connection error, or a round trip much
//   slower than usual halves it, at most once per round trip (answers to requests that were already in
//   flight tell nothing new).
//
// Growth only happens while the window is used (an idle receiver's window does not climb for nothing).
// Pure: time comes in as an argument, nothing here does I/O. Tested in test/unit/delivery-window.test.ts.

export interface WindowBounds {
  min: number
  max: number
  initial: number
}

/** A round trip this much slower than the usual one, and at least LATENCY_SLACK_MS slower, shrinks the window. */
const LATENCY_FACTOR = 2
const LATENCY_SLACK_MS = 50
/** Near the ceiling (within this share of it) the window grows ten times slower. */
const NEAR_CEILING = 0.8

export class AdaptiveWindow {
  private w: number
  /** The window at the last pushback; null before the first (slow start). */
  private ceiling: number | null = null
  private lastDecreaseAt = Number.NEGATIVE_INFINITY
  /** Smoothed round trip (recent) and its long-run baseline, in ms; 0 until measured. */
  private rtt = 0
  private baseline = 0

  constructor (private readonly bounds: WindowBounds) {
    if (!(bounds.min >= 1 && bounds.max >= bounds.min)) throw new RangeError(`window bounds: need 1 ≤ min ≤ max, got ${bounds.min}…${bounds.max}`)
    this.w = clamp(bounds.initial, bounds.min, bounds.max)
  }

  /** Requests that may be in flight now (a whole number within the bounds). */
  get limit (): number {
    return Math.max(this.bounds.min, Math.floor(this.w))
  }

  /** The smoothed round trip, in ms (0 until measured). */
  get roundTrip (): number {
    return this.rtt
  }

  /**
   * A 2xx after `durationMs`. `inFlight` is what was in flight with it (this one included): the window
   * grows only while at least half of it is used.
   */
  succeeded (now: number, durationMs: number, inFlight: number): void {
    const slow = this.observe(durationMs)
    if (slow) {
      this.decrease(now)
      return
    }
    // A window less than half used says nothing about the receiver's room.
    if (inFlight * 2 < this.limit) return
    if (this.ceiling === null) this.w += 1
    else if (this.w < this.ceiling * NEAR_CEILING) this.w += 1 / this.w
    else {
      this.w += 0.1 / this.w
      // Well past the old ceiling: the receiver has grown; probe at the normal pace again.
      if (this.w >= this.ceiling + 2) this.ceiling = null
    }
    this.w = Math.min(this.w, this.bounds.max)
  }

  /** The receiver pushed back (429/503), or the request timed out or could not connect. */
  pushedBack (now: number): void {
    this.decrease(now)
  }

  private decrease (now: number): void {
    // One decrease per round trip: the answers to requests that were in flight together are one signal.
    if (now - this.lastDecreaseAt < Math.max(this.rtt, 1)) return
    this.lastDecreaseAt = now
    this.ceiling = this.w
    this.w = Math.max(this.bounds.min, this.w / 2)
  }

  /** Folds a round trip into the averages; true when it is much slower than the baseline. */
  private observe (durationMs: number): boolean {
    const ms = Math.max(0, durationMs)
    if (this.rtt === 0) {
      this.rtt = ms
      this.baseline = ms
      return false
    }
    this.rtt += (ms - this.rtt) / 8
    // The baseline follows slowly upward and quickly downward: it stays near the usual fast round trip.
    this.baseline += (ms - this.baseline) / (ms < this.baseline ? 4 : 256)
    return this.rtt > this.baseline * LATENCY_FACTOR && this.rtt > this.baseline + LATENCY_SLACK_MS
  }
}

function clamp (n: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, n))
}
