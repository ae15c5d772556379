// Connections to the relay, shared by the transactions waiting for one. A transaction takes an idle
// connection, or has one opened when fewer than `max` are open, or rides behind another on a connection
// that pipelines (its commands go out with the message before it); it waits in line otherwise. A connection
// that fails to open while others are open costs nothing but a pause in growing (a relay that caps
// connections says so by refusing more); when none can be opened, everything waiting fails at once (the
// mailer retries it later). A transaction whose reused connection died before its message went out,
// without a word or with a 421 ("closing"), is tried once more, on a connection that has carried nothing
// yet when one can be had: the relay idled the connection out just before we used it, or it takes only so
// many messages on one connection (and the others, as old, may be at that limit too).
//
// A connection is retired after `maxMessages` transactions or `maxAgeMs` (as Postfix's own client limits
// how long it reuses one): it takes nothing new, finishes what it carries, says QUIT, and a fresh one takes
// its place. A relay that allows only so many messages a connection (Exim: 1,000 by default) never has to
// refuse one, and a relay behind a name with many addresses sees the load spread again as connections
// turn over.

import type { Envelope, MessageBytes, TransactionReplies } from './smtp-connection.js'

/** What the pool needs of a connection (src/mail/smtp-connection.ts; fakes in the unit tests). */
export interface PoolConnection {
  send (envelope: Envelope, raw: MessageBytes): Promise<TransactionReplies>
  quit (): void
  onClose (listener: () => void): void
  /** Transactions completed on it. */
  readonly sent: number
  /** Transactions it takes at once (2 when the relay pipelines). */
  readonly depth: number
  /** The largest message the relay takes (its SIZE in EHLO); 0 or absent: it names none. */
  readonly maxSize?: number
}

/** A connection fault as the pool reads it: did the message's end go out, and did the relay say anything. */
interface Fault { bodySent?: boolean; reply?: unknown; code?: string }

export interface SmtpPoolOptions {
  max: number
  open: () => Promise<PoolConnection>
  /** An idle connection is closed after this long; 0 closes each one as soon as nothing waits for it. */
  idleMs: number
  /** After a failed open while others are open, no new connection for this long. Default 1 s. */
  growPauseMs?: number
  /** Transactions one connection carries before it is retired; 0 or absent: no limit. */
  maxMessages?: number
  /** How long one connection is used for new transactions; 0 or absent: no limit. */
  maxAgeMs?: number
  now?: () => number
}

interface Job {
  envelope: Envelope
  raw: MessageBytes
  resolve: (r: TransactionReplies) => void
  reject: (err: unknown) => void
  /** Tried again after a reused connection closed under it: once only, and on a new connection if it can. */
  retried: boolean
}

interface Held { inFlight: number; idleSince: number; openedAt: number; started: number }

/** The relay's "closing this connection": a refusal that is about the connection, not the message. */
const CLOSING = 421

export class SmtpPool {
  private queue: Job[] = []
  private live = new Map<PoolConnection, Held>()
  /** Retired: finishing what they carry, then QUIT. They still count toward `max` until they close. */
  private retiring = new Map<PoolConnection, Held>()
  private opening = 0
  private growPausedUntil = 0
  private relayMaxSize = 0
  private closed = false
  private sweeper: NodeJS.Timeout | undefined
  private readonly now: () => number

  constructor (private readonly opts: SmtpPoolOptions) {
    this.now = opts.now ?? Date.now
    if (opts.idleMs > 0) {
      this.sweeper = setInterval(() => this.sweep(), Math.max(1000, opts.idleMs / 2))
      this.sweeper.unref()
    }
  }

  /** Connections open or being opened. */
  get size (): number {
    return this.live.size + this.retiring.size + this.opening
  }

  /**
   * The largest message the relay takes, as the last connection opened heard it (SIZE in EHLO); 0 before
   * any connection, or when the relay names no limit.
   */
  get maxSize (): number {
    return this.relayMaxSize
  }

  send (envelope: Envelope, raw: MessageBytes): Promise<TransactionReplies> {
    if (this.closed) return Promise.reject(new Error('SMTP transport is closed'))
    return new Promise((resolve, reject) => {
      this.queue.push({ envelope, raw, resolve, reject, retried: false })
      this.pump()
    })
  }

  /** Fails what waits, closes idle connections now and busy ones when their transactions end. */
  close (): void {
    if (this.closed) return
    this.closed = true
    if (this.sweeper !== undefined) clearInterval(this.sweeper)
    const waiting = this.queue
    this.queue = []
    for (const job of waiting) job.reject(new Error('SMTP transport is closed'))
    for (const [conn, held] of [...this.live]) {
      if (held.inFlight === 0) {
        this.live.delete(conn)
        conn.quit()
      }
    }
  }

  private pump (): void {
    // Idle connections first, then a second transaction on those that pipeline.
    for (let pass = 1; pass <= 2 && this.queue.length > 0; pass++) {
      for (const [conn, held] of this.live) {
        if (this.spent(held)) {
          this.retire(conn, held)
          continue
        }
        while (this.queue.length > 0 && held.inFlight < Math.min(pass, conn.depth) && this.live.has(conn) && this.fits(this.queue[0]!, held)) {
          this.run(conn, held, this.queue.shift()!)
        }
        if (this.queue.length === 0) break
      }
    }
    // One new connection per transaction still waiting beyond those being opened, up to the cap.
    while (this.queue.length > this.opening && this.size < this.opts.max && (this.live.size === 0 || this.now() >= this.growPausedUntil)) {
      this.grow()
    }
  }

  private grow (): void {
    this.opening += 1
    this.opts.open().then((conn) => {
      this.opening -= 1
      if (this.closed) {
        conn.quit()
        return
      }
      this.relayMaxSize = conn.maxSize ?? 0
      const now = this.now()
      const held: Held = { inFlight: 0, idleSince: now, openedAt: now, started: 0 }
      this.live.set(conn, held)
      conn.onClose(() => this.forget(conn))
      this.release(conn, held)
    }, (err: unknown) => {
      this.opening -= 1
      if (this.closed) return
      if (this.size === 0) {
        // No connection at all: the relay is unreachable or refuses us, for everything that waits.
        const waiting = this.queue
        this.queue = []
        for (const job of waiting) job.reject(err)
        return
      }
      this.growPausedUntil = this.now() + (this.opts.growPauseMs ?? 1000)
      // A transaction waiting for a new connection takes an open one instead while growth is paused.
      if (this.live.size > 0) this.pump()
    })
  }

  /**
   * Whether `job` may go on this connection: one tried again goes on a connection that has carried nothing
   * yet, while one is open, being opened, or may be opened; on any other only when none can be had. What
   * waits behind it in the line waits too, for that one open (first come, first served).
   */
  private fits (job: Job, held: Held): boolean {
    if (!job.retried || held.started === 0) return true
    if (this.opening > 0 || (this.size < this.opts.max && this.now() >= this.growPausedUntil)) return false
    for (const other of this.live.values()) if (other.started === 0) return false
    return true
  }

  private run (conn: PoolConnection, held: Held, job: Job): void {
    const reused = conn.sent > 0
    held.inFlight += 1
    held.started += 1
    // Its last transaction: nothing more is given to it, and it closes once this one ends.
    if (this.spent(held)) this.retire(conn, held)
    conn.send(job.envelope, job.raw).then((replies) => {
      held.inFlight -= 1
      // Refused with 421 before any recipient: the relay is closing this connection, not judging the message.
      if (reused && replies.mail.code === CLOSING && replies.final === undefined && this.again(job)) {
        // The relay is hanging up (svc's connection has closed itself already; QUIT is then a no-op).
        this.forget(conn)
        conn.quit()
        return
      }
      job.resolve(replies)
      this.release(conn, held)
    }, (err: unknown) => {
      held.inFlight -= 1
      const fault = err as Fault
      const closing = fault.reply === undefined || (fault.reply as { code?: unknown }).code === CLOSING
      if (!(reused && fault.bodySent === false && closing && this.again(job))) job.reject(err)
      // The connection is gone (its close listener forgets it); what waits gets another.
      this.pump()
    })
  }

  /** Puts a transaction back at the head of the line, once; false when it was tried again already. */
  private again (job: Job): boolean {
    if (job.retried || this.closed) return false
    job.retried = true
    this.queue.unshift(job)
    return true
  }

  /** Whether a connection has carried its last transaction or been used for long enough. */
  private spent (held: Held): boolean {
    const { maxMessages, maxAgeMs } = this.opts
    return (maxMessages !== undefined && maxMessages > 0 && held.started >= maxMessages) ||
      (maxAgeMs !== undefined && maxAgeMs > 0 && this.now() - held.openedAt >= maxAgeMs)
  }

  /** Takes a connection out of use: QUIT now if it carries nothing, else once its transactions end. */
  private retire (conn: PoolConnection, held: Held): void {
    if (!this.live.delete(conn)) return
    if (held.inFlight === 0) conn.quit()
    else this.retiring.set(conn, held)
  }

  /** A transaction on `conn` ended, or it just opened: it takes what waits, or idles. */
  private release (conn: PoolConnection, held: Held): void {
    if (this.retiring.has(conn)) {
      if (held.inFlight === 0) {
        this.retiring.delete(conn)
        conn.quit()
        // Its place under `max` is free: what waits may open a fresh connection now.
        if (!this.closed && this.queue.length > 0) this.pump()
      }
      return
    }
    if (!this.live.has(conn)) return
    if (this.closed) {
      if (held.inFlight === 0) {
        this.live.delete(conn)
        conn.quit()
      }
      return
    }
    if (this.queue.length > 0) this.pump()
    // The pump may have retired it (too old) and quit it already.
    if (held.inFlight > 0 || !this.live.has(conn)) return
    if (this.opts.idleMs === 0) {
      this.live.delete(conn)
      conn.quit()
    } else {
      held.idleSince = this.now()
    }
  }

  private forget (conn: PoolConnection): void {
    this.live.delete(conn)
    this.retiring.delete(conn)
    if (!this.closed && this.queue.length > 0) this.pump()
  }

  private sweep (): void {
    const cutoff = this.now() - this.opts.idleMs
    for (const [conn, held] of [...this.live]) {
      if (held.inFlight === 0 && (held.idleSince <= cutoff || this.spent(held))) this.retire(conn, held)
    }
  }
}
