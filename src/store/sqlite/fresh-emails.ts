// Emails this process has just accepted, held until a claim takes them. What an email says (its sender,
// recipients, subject, bodies, headers, tags) never changes once it is stored; only its state does (the
// recipients' outcomes, status, attempts, lease). A claim of an email found here reads back from its row
// only the state, and takes the rest from the record the API stored: reading whole rows back (every
// column, and eight JSON columns parsed) was half of what a claim cost.
//
// A cache, not a source of truth: an email missing here (accepted by another process, claimed once
// already, too large, or the cache full) is read from its row, as before. Bounded in entries, in body
// characters, and in age: an entry no claim of this process takes (another process claimed the email,
// or its account was deleted) is dropped once it is older than `maxAgeMs`.
import type { EmailRecord } from '../emails.js'

export interface FreshEmailLimits {
  maxEntries: number
  /** html + text characters held at most, all entries together. */
  maxBodyChars: number
  maxAgeMs: number
}

/** Enough for the emails a busy mailer has queued ahead (a few seconds of sends), a few MB of bodies. */
export const FRESH_EMAIL_LIMITS: FreshEmailLimits = { maxEntries: 10_000, maxBodyChars: 8 * 1024 * 1024, maxAgeMs: 120_000 }

interface Entry { email: EmailRecord; at: number; chars: number }

export class FreshEmails {
  /** In insertion order, so the oldest are first: age pruning stops at the first young entry. */
  private readonly entries = new Map<string, Entry>()
  private chars = 0

  constructor (private readonly limits: FreshEmailLimits = FRESH_EMAIL_LIMITS, private readonly now: () => number = Date.now) {}

  /** How many are held, once those too old for any claim to come are dropped. */
  held (): number {
    this.prune()
    return this.entries.size
  }

  get bodyChars (): number {
    return this.chars
  }

  /**
   * Holds these emails, as stored. When full, new ones are left out rather than old ones pushed out: the
   * oldest are the next a claim takes (earliest due first), and whatever is left out is read from its row.
   */
  add (emails: readonly EmailRecord[]): void {
    this.prune()
    const at = this.now()
    for (const email of emails) {
      // The same email again (a write retried) goes to the end as new: the order stays the age order.
      this.take(email.id)
      if (this.entries.size >= this.limits.maxEntries) return
      const chars = (email.html?.length ?? 0) + (email.text?.length ?? 0)
      if (this.chars + chars > this.limits.maxBodyChars) continue
      this.entries.set(email.id, { email, at, chars })
      this.chars += chars
    }
  }

  /** The email as it was stored, once: it is no longer held after this. */
  take (id: string): EmailRecord | undefined {
    const entry = this.entries.get(id)
    if (entry === undefined) return undefined
    this.entries.delete(id)
    this.chars -= entry.chars
    return entry.email
  }

  /** Drops what no claim took in time. */
  private prune (): void {
    const oldest = this.now() - this.limits.maxAgeMs
    for (const [id, entry] of this.entries) {
      if (entry.at > oldest) return
      this.entries.delete(id)
      this.chars -= entry.chars
    }
  }
}
