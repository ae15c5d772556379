// Connections to the relay, shared by the transactions waiting for one. A transaction takes an idle
// connection, or has one opened when fewer than `max` are open, or rides behind another on a connection
// that pipelines (its commands go out with the message before it); it waits in line otherwise. A connection
// that fails to open while others are open costs nothing but a pause in growing (a relay that caps
// connections says so by refusing more); when none can be opened, everything waiting fails at once (the
// mailer retries it later). A transaction whose reused connection died without a word before its
// message went out is tried once more on another: the relay idled it out just before we used it.

import type { Envelope, TransactionReplies } from './smtp-connection.js'

/** What the pool needs of a connection (src/mail/smtp-connection.ts; fakes in the unit tests). */
export interface PoolConnection {
  send (envelope: Envelope, raw: Buffer): Promise<TransactionReplies>
  quit (): void
  onClose (listener: () => void): void
  /** Transactions completed on it. */
  readonly sent: number
  /** Transactions it takes at once (2 when the relay pipelines). */
  readonly depth: number
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
  now?: () => number
}

interface Job {
  envelope: Envelope
  raw: Buffer
  resolve: (r: TransactionReplies) => void
  reject: (err: unknown) => void
  retried: boolean
}

interface Held { inFlight: number; idleSince: number }

export class SmtpPool {
  private queue: Job[] = []
  private live = new Map<PoolConnection, Held>()
  private opening = 0
  private growPausedUntil = 0
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
    return this.live.size + this.opening
  }

  send (envelope: Envelope, raw: Buffer): Promise<TransactionReplies> {
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
        while (this.queue.length > 0 && held.inFlight < Math.min(pass, conn.depth)) this.run(conn, held, this.queue.shift()!)
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
      const held: Held = { inFlight: 0, idleSince: this.now() }
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
    })
  }

  private run (conn: PoolConnection, held: Held, job: Job): void {
    const reused = conn.sent > 0
    held.inFlight += 1
    conn.send(job.envelope, job.raw).then((replies) => {
      held.inFlight -= 1
      job.resolve(replies)
      this.release(conn, held)
    }, (err: unknown) => {
      held.inFlight -= 1
      const fault = err as Fault
      if (reused && !job.retried && fault.bodySent === false && fault.reply === undefined && !this.closed) {
        job.retried = true
        this.queue.unshift(job)
      } else {
        job.reject(err)
      }
      // The connection is gone (its close listener forgets it); what waits gets another.
      this.pump()
    })
  }

  /** A transaction on `conn` ended, or it just opened: it takes what waits, or idles. */
  private release (conn: PoolConnection, held: Held): void {
    if (!this.live.has(conn)) return
    if (this.closed) {
      if (held.inFlight === 0) {
        this.live.delete(conn)
        conn.quit()
      }
      return
    }
    if (this.queue.length > 0) this.pump()
    if (held.inFlight > 0) return
    if (this.opts.idleMs === 0) {
      this.live.delete(conn)
      conn.quit()
    } else {
      held.idleSince = this.now()
    }
  }

  private forget (conn: PoolConnection): void {
    this.live.delete(conn)
    if (!this.closed && this.queue.length > 0) this.pump()
  }

  private sweep (): void {
    const cutoff = this.now() - this.opts.idleMs
    for (const [conn, held] of [...this.live]) {
      if (held.inFlight === 0 && held.idleSince <= cutoff) {
        this.live.delete(conn)
        conn.quit()
      }
    }
  }
}
