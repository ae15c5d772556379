// The inbound listener's slots, kept for senders that move mail (README "Inbound connections and
// STARTTLS"): new connections per sender network and minute, connections open at once per sender network
// (addressKey), at most maxClients admitted, and each admitted connection's clock (ConnectionLife,
// src/domain/inbound-limits.ts) read by a sweep that closes with 421 4.4.2 the idle, the too old, the too
// long transactions and the DATA too slow. A newcomer finding every slot taken puts out the connection idle
// longest. The listener (./listener.ts) tells it what each connection does; it knows no SMTP beyond that.
import type { SMTPServerSession } from 'smtp-server'
import { addressKey, ConnectionLife, type CloseReason, type ConnectionLimits, type PrefixLengths } from '../../domain/inbound-limits.js'

export interface SlotSettings {
  /** Connections admitted at once. */
  maxClients: number
  /** Connections open at once from one sender network. */
  perAddress: number
  /** New connections per sender network and minute. */
  perMinute: number
  /** Sender networks whose per-minute count is remembered; past it, the one heard from least recently is forgotten. */
  trackedAddresses: number
  /** When every slot is taken, a newcomer takes the slot of a connection with no useful command for this long. */
  evictIdleMs: number
  /** Recipients refused on one connection before the next RCPT closes it. */
  refusedRcpts: number
  prefixes: PrefixLengths
  limits: ConnectionLimits
}

/** How a connection ended at svc's hand: refused at the door, or closed, and why. */
export type SlotOutcome = 'refused' | CloseReason | 'evicted' | 'refused_rcpts'

/** The 421 texts of the connections svc closes. */
export const CLOSING: Record<CloseReason | 'evicted', string> = {
  idle: '4.4.2 No mail moved for too long, closing connection',
  age: '4.4.2 Connection open too long, closing; reconnect to send more',
  transaction_age: '4.4.2 This transaction took too long, closing connection',
  slow_data: '4.4.2 The message is arriving too slowly, closing connection',
  evicted: '4.4.2 Every slot is taken and this connection was idle, closing it; try again later',
}

/** The 421 text of the RCPT that closes a connection past settings.refusedRcpts. */
export const TOO_MANY_UNKNOWN = '4.7.0 Too many unknown recipients, closing connection'

/** What closes a connection: smtp-server closes it after any 421. */
export interface Closable { send(code: number, data?: string): void }

/** An admitted connection: how to close it, the sender it counts for, its clock, and the recipients refused to it. */
interface Admitted {
  connection: Closable
  key: string
  life: ConnectionLife
  refused: number
}

export class ConnectionSlots {
  /** Per sender (addressKey: the /64, or the IPv4 prefix): its current one-minute window; least recently heard first (Map order). */
  private readonly windows = new Map<string, { startedAt: number; n: number }>()
  /** Per sender (addressKey): connections open now (only those admitted and not yet let go). */
  private readonly openFrom = new Map<string, number>()
  /** The connections admitted and not yet let go: what maxClients counts and the sweep looks at. */
  private readonly open = new Map<SMTPServerSession, Admitted>()

  /** `counted` hears of every connection refused or closed here. */
  constructor (private readonly settings: SlotSettings, private readonly counted: (outcome: SlotOutcome) => void) {}

  /**
   * A new connection (`connection`: smtp-server's, to close it by): null when it is admitted and watched
   * from now on, else the text of the 421 it is refused with.
   */
  admit (session: SMTPServerSession, connection: Closable | undefined): string | null {
    const key = addressKey(session.remoteAddress, this.settings.prefixes)
    if (!this.withinMinute(key)) {
      this.counted('refused')
      return 'Too many connections, try again later'
    }
    const open = this.openFrom.get(key) ?? 0
    if (open >= this.settings.perAddress) {
      this.counted('refused')
      return 'Too many connections from your address, try again later'
    }
    // Cannot happen (smtp-server adds the connection before it asks): refused rather than left unwatched.
    if (connection === undefined) return 'Try again later'
    const now = Date.now()
    if (this.open.size >= this.settings.maxClients) {
      // Every slot taken: the connection idle longest goes, if it has been idle for evictIdleMs;
      // one that moves mail (or is in DATA) is never put out for a newcomer.
      const idlest = this.idlest(now)
      if (idlest === undefined) {
        this.counted('refused')
        return 'Too many connections, try again in a moment'
      }
      this.closeFor(idlest[0], idlest[1], 'evicted')
    }
    // Read again: the connection evicted may have been this sender's own, and its count has just gone down.
    this.openFrom.set(key, (this.openFrom.get(key) ?? 0) + 1)
    this.open.set(session, { connection, key, life: new ConnectionLife(now, this.settings.limits), refused: 0 })
    return null
  }

  /** The connection's clock, while it is admitted. */
  lifeOf (session: SMTPServerSession): ConnectionLife | undefined {
    return this.open.get(session)?.life
  }

  /** A MAIL FROM: false when the connection is too old for another transaction (let go and counted; answer 421 CLOSING.age). */
  mail (session: SMTPServerSession): boolean {
    const admitted = this.open.get(session)
    if (admitted === undefined || admitted.life.mail(Date.now())) return true
    this.letGo(session)
    this.counted('age')
    return false
  }

  /** A RCPT TO: false when the connection has had enough recipients refused (let go and counted; answer 421 TOO_MANY_UNKNOWN). */
  rcpt (session: SMTPServerSession): boolean {
    const admitted = this.open.get(session)
    admitted?.life.rcpt(Date.now())
    if (admitted === undefined || admitted.refused < this.settings.refusedRcpts) return true
    // Before any lookup: the connection has guessed enough.
    this.letGo(session)
    this.counted('refused_rcpts')
    return false
  }

  /** A recipient refused as unknown on this connection. */
  refusedRecipient (session: SMTPServerSession): void {
    const admitted = this.open.get(session)
    if (admitted !== undefined) admitted.refused++
  }

  /** Stops counting a connection (closed, or being closed by svc); safe to call twice. */
  letGo (session: SMTPServerSession): void {
    const a = this.open.get(session)
    if (a === undefined) return
    this.open.delete(session)
    const left = (this.openFrom.get(a.key) ?? 1) - 1
    if (left > 0) this.openFrom.set(a.key, left)
    else this.openFrom.delete(a.key)
  }

  /** Closes the connections over a limit; runs every sweepEveryMs while the listener runs. */
  sweep (): void {
    const now = Date.now()
    for (const [session, a] of this.open) {
      // smtp-server empties the envelope when a transaction ends (the answer after DATA, RSET, STARTTLS).
      if (a.life.inTransaction && session.envelope.mailFrom === false) a.life.ended(now)
      const reason = a.life.overdue(now)
      if (reason !== null) this.closeFor(session, a, reason)
    }
  }

  /** A fifth of the shortest limit, between 20 ms (tests) and 1 s: a limit is kept to within a second. */
  get sweepEveryMs (): number {
    const { idleMs, maxAgeMs, transactionMs, dataGraceMs } = this.settings.limits
    return Math.min(1000, Math.max(20, Math.floor(Math.min(idleMs, maxAgeMs, transactionMs, dataGraceMs) / 5)))
  }

  /** Connections admitted at once at most. */
  get maxClients (): number {
    return this.settings.maxClients
  }

  /** Connections admitted and open now. */
  get openCount (): number {
    return this.open.size
  }

  /** Sender networks whose per-minute count is remembered now. */
  get trackedCount (): number {
    return this.windows.size
  }

  /** Counts a new connection from the sender `key` in its minute; false when it is over perMinute. */
  private withinMinute (key: string): boolean {
    const now = Date.now()
    let w = this.windows.get(key)
    if (w === undefined || now - w.startedAt >= 60_000) w = { startedAt: now, n: 0 }
    w.n += 1
    // Re-inserted: the map's first entry is always the sender heard from least recently, the one
    // forgotten when the map is full (never all of them at once).
    this.windows.delete(key)
    this.windows.set(key, w)
    if (this.windows.size > this.settings.trackedAddresses) this.windows.delete(this.windows.keys().next().value!)
    return w.n <= this.settings.perMinute
  }

  /** Answers `421 4.4.2` and closes the connection (smtp-server closes after any 421). */
  private closeFor (session: SMTPServerSession, a: Admitted, reason: CloseReason | 'evicted'): void {
    this.letGo(session)
    this.counted(reason)
    a.connection.send(421, CLOSING[reason])
  }

  /** The admitted connection that has gone longest without a useful command, if that is at least evictIdleMs. */
  private idlest (now: number): [SMTPServerSession, Admitted] | undefined {
    let found: [SMTPServerSession, Admitted] | undefined
    let longest = this.settings.evictIdleMs
    for (const [session, a] of this.open) {
      const idle = a.life.idleFor(now)
      if (idle >= longest) {
        found = [session, a]
        longest = idle
      }
    }
    return found
  }
}
