// When the mailer may take a new send at once, leased to it in the write that accepts it, instead of
// leaving it to the store for a claim (LocalIntake, below). Taking it at once saves a claim
// (a write, and its commit) per email; but a new email must never overtake an older one that waits in the
// store: a send accepted while the mailer was full, a retry come due, an email a dead node or a failed
// write released, another node's send. So the gate shuts whenever one of those may be there, and opens
// again only once a claim that began after that moment found fewer emails due than it asked for.
//
// The gate is pure bookkeeping (no store, no timers): the mailer tells it what happens. Tested in
// test/unit/hand-off.test.ts.
import type { EmailRecord } from '../store/emails.js'

export class HandOffGate {
  /** Shut at first: what the store holds is unknown until a claim has looked. */
  private shut = true
  /** Counts the times the gate was shut, so a claim knows whether that happened after it began. */
  private shutAt = 0
  private lastClaimAt = Number.NEGATIVE_INFINITY

  /** `pollMs`: the store is looked at at least this often, even by a mailer kept busy by its own sends. */
  constructor (private readonly pollMs: number) {}

  get open (): boolean {
    return !this.shut
  }

  /** How many of `count` new emails to take now, with `room` free; shuts the gate if any is left out. */
  offer (count: number, room: number): number {
    const taken = this.shut ? 0 : Math.max(0, Math.min(count, Math.floor(room)))
    if (taken < count) this.shutNow()
    return taken
  }

  /** Due emails may be waiting in the store (a retry came due, emails were released…). */
  shutNow (): void {
    this.shut = true
    this.shutAt++
  }

  /** Once a poll at least, the store is looked at: call at every turn of the mailer's loop. */
  tick (now: number): void {
    if (now - this.lastClaimAt >= this.pollMs) this.shutNow()
  }

  /** A claim begins; pass what this returns to claimed(). */
  claiming (now: number): number {
    this.lastClaimAt = now
    return this.shutAt
  }

  /** The claim found `got` emails of the `asked`: fewer means the store had no more due when it ran. */
  claimed (began: number, got: number, asked: number): void {
    // A shut after the claim began may stand for a send whose write came after the claim's.
    if (got < asked && began === this.shutAt) this.shut = false
  }
}

/**
 * This node's mailer, taking accepted emails straight from the send (src/app/emails.ts calls it): `offer`
 * says how many of the next `count` emails it takes, leased to it in the accept's own write, so no claim
 * is needed for them; `take` hands over the ones stored (none when the accept was refused or failed).
 */
export interface LocalIntake {
  offer (count: number): { owner: string; leaseUntil: number; count: number } | null
  take (promised: number, emails: EmailRecord[]): void
}

/**
 * What the mailer hears from the sending side (the email service, wired by the composition root): every
 * accepted send, every scheduled time, and where to hand accepted emails over at once.
 */
export interface SendSignals {
  /** `listener` runs after each accepted send with its number of emails; returns the unsubscribe function. */
  onAccepted (listener: (emails: number) => void): () => void
  /** `listener` hears the time of every scheduled send accepted or moved; returns the unsubscribe function. */
  onScheduled? (listener: (dueAt: number) => void): () => void
  /** Accepted emails are offered to `local` from now on; returns the function that stops it. */
  handOffTo? (local: LocalIntake): () => void
}
