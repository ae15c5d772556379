// Two small parts of the engine's pacing, each testable with a fake clock and fake timers:
//
// - WakeList: actors with work that may not send before some time (a pushback hold, the next window of a
//   rate limit). One timer for the earliest of them; when it fires, those whose time has come are handed
//   back as ready, the others wait for the next.
// - Pacer: a rate-limited webhook's permits, from the counters every node shares (the store's rate-limit
//   windows, see webhookPace in ../domain/rate-limits.ts). It asks for at most one window's permits at a
//   time, and once a window's are spent, waits for the next window instead of asking again.
import { realTimers, type Clock, type Timers } from '../domain/clock.js'
import { webhookPace, webhookPaceKey, windowOf } from '../domain/rate-limits.js'
import type { WebhookActor } from './actor.js'

export class WakeList {
  private readonly waiting = new Set<WebhookActor>()
  private at = Number.POSITIVE_INFINITY
  private handle: unknown
  private closed = false

  constructor (private readonly clock: Clock, private readonly ready: (actors: WebhookActor[]) => void, private readonly timers: Timers = realTimers) {}

  get size (): number {
    return this.waiting.size
  }

  /** `actor` is to be made ready at `at` (or as soon as its own readyAt() allows, whichever is later). */
  add (actor: WebhookActor, at: number): void {
    if (this.closed) return
    this.waiting.add(actor)
    if (at >= this.at) return
    if (this.handle !== undefined) this.timers.clear(this.handle)
    this.at = at
    this.handle = this.timers.set(() => this.fire(), Math.max(1, at - this.clock.now()))
  }

  private fire (): void {
    this.handle = undefined
    this.at = Number.POSITIVE_INFINITY
    const now = this.clock.now()
    const ready: WebhookActor[] = []
    for (const actor of [...this.waiting]) {
      if (actor.queued === 0) this.waiting.delete(actor)
      else if (now >= actor.readyAt()) {
        this.waiting.delete(actor)
        ready.push(actor)
      }
    }
    for (const actor of this.waiting) this.add(actor, actor.readyAt())
    if (ready.length > 0) this.ready(ready)
  }

  close (): void {
    this.closed = true
    if (this.handle !== undefined) this.timers.clear(this.handle)
    this.handle = undefined
    this.waiting.clear()
  }
}

export interface PermitCounter {
  hitRateLimit (hit: { key: string; windowStart: number; windowEnd: number }): Promise<number>
}

export class Pacer {
  constructor (
    private readonly counter: PermitCounter,
    private readonly clock: Clock,
    /** Called when the actor has permits to spend now, or when it must wait until `at`. */
    private readonly then: (actor: WebhookActor, at: number | null) => void,
    private readonly onError: (err: unknown, actor: WebhookActor) => void,
  ) {}

  /** Asks for this window's permits of a rate-limited actor (nothing if a request is under way). */
  ask (actor: WebhookActor, now: number): void {
    if (actor.askingForPermits || actor.rateLimit === null || actor.queued === 0) return
    if (now < actor.nextPermitAt) {
      this.then(actor, actor.nextPermitAt)
      return
    }
    const pace = webhookPace(actor.rateLimit)
    const window = windowOf(now, pace.windowMs)
    const key = webhookPaceKey(actor.webhookId, pace.windowMs)
    const want = Math.min(pace.permits, actor.queued)
    actor.permitsAsked()
    Promise.all(Array.from({ length: want }, () => this.counter.hitRateLimit({ key, ...window })))
      .then((counts) => {
        const granted = counts.filter((n) => n <= pace.permits).length
        // This window had less than asked for: it is spent; ask again when the next one opens.
        actor.permitsGranted(granted, window.windowEnd, granted < want ? window.windowEnd : this.clock.now())
      }, (err: unknown) => {
        actor.permitsUnavailable(this.clock.now() + 100)
        this.onError(err, actor)
      })
      .finally(() => {
        const now = this.clock.now()
        this.then(actor, actor.hasPermits(now) ? null : actor.nextPermitAt)
      })
  }
}
