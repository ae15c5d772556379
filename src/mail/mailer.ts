// The mail queue's worker. Accepted emails wait in the store (status, pending recipients, attempts,
// nextAttemptAt, a lease); the mailer leases the due ones, sends each through the transport with bounded
// concurrency (./attempt-send.ts composes and sends one), and writes the outcome of every attempt (the
// email's new state, its events, its suppressions) as one atomic write. Nothing lives only in memory: a
// restart resumes from the store.
import os from 'node:os'
import { leaseOwner, leaseUntil } from '../domain/lease-owner.js'
import type { FastifyBaseLogger } from 'fastify'
import pRetry from 'p-retry'
import { Counter, type Registry } from 'prom-client'
import { iso, type Clock } from '../domain/clock.js'
import { DEFAULT_RETRY_DELAYS_MS, planAttempt } from '../domain/mail-attempt.js'
import type { Component } from '../component.js'
import type { EmailAttempt, EmailLease, EmailRecord } from '../store/emails.js'
import type { Store } from '../store/types.js'
import { AttemptSender } from './attempt-send.js'
import { MessageBuildError, composeMessage } from './compose.js'
import type { Composer } from './compose-pool.js'
import { HandOffGate, type LocalIntake, type SendSignals } from './hand-off.js'
import { RecordBatch } from './record-batch.js'
import { stageTimer, type StageTimer } from './stages.js'
import { instrumentHtml } from './tracking.js'
import type { MailTransport, OutgoingMessage } from './transport.js'
import { DEFAULT_ATTACHMENT_BYTES_IN_FLIGHT, DEFAULT_ATTACHMENT_RETENTION_MS } from './attachments.js'

export { MessageBuildError, composeMessage }

export interface MailerTuning {
  /**
   * The owner this process's leases are held under; default: leaseOwner(the host name), unique to this
   * process (src/domain/lease-owner.ts). Nothing held under another owner is released at start.
   */
  owner?: string
  /** Emails in flight at once. Default 32. */
  concurrency?: number
  /** Waits before each retry of a deferred recipient; default DEFAULT_RETRY_DELAYS_MS (about 24 h). */
  retryDelaysMs?: number[]
  /**
   * How long a lease lasts unless renewed; the mailer renews the leases of the emails it holds every
   * third of this, so a dead node's emails are taken over this long after it died. Default 30 s.
   */
  leaseMs?: number
  /**
   * How often the queue is read when nothing wakes the mailer (other nodes' sends, retries). Default 1 s.
   * Scheduled emails and retries do not wait for it: the mailer sleeps until the earliest one is due.
   */
  pollMs?: number
  /**
   * How long an email's attachment bytes stay in the store after its last attempt (once it is final);
   * default 24 h (ATTACHMENT_RETENTION_HOURS). Its attachments' facts stay with it.
   */
  attachmentRetentionMs?: number
  /** Attachment bytes (decoded) held by attempts at once; default DEFAULT_ATTACHMENT_BYTES_IN_FLIGHT (64 MiB). */
  attachmentBytesInFlight?: number
  /** For tests of the jitter; default Math.random. */
  random?: () => number
}

export interface MailerOptions extends MailerTuning {
  store: Store
  transport: MailTransport
  /** True when the mailer made the transport and so must close it. */
  closeTransport: boolean
  emails: SendSignals
  clock: Clock
  logger: FastifyBaseLogger
  registry?: Registry
  publicUrl: string
  secret: string
  /**
   * Builds each attempt's message (./compose-pool.ts: large bodies in a worker thread); the mailer closes
   * it when it stops. Default: composeMessage in this thread.
   */
  composer?: Composer
  /** Adds the DKIM key and the VERP Return-Path to a composed message (src/mail/outbound.ts). */
  outbound?: (email: EmailRecord, msg: OutgoingMessage) => Promise<OutgoingMessage>
}

const HOUSEKEEPING_MS = 10 * 60_000
// A multi-step write younger than this may still be in progress; repair leaves it to its writer.
const REPAIR_GRACE_MS = 60_000
/** Recording an attempt is tried 5 times in all, 200, 400, 800 and 1,600 ms apart (p-retry's options). */
const RECORD_RETRY = { retries: 4, minTimeout: 200, factor: 2 } as const

export class Mailer implements Component, LocalIntake {
  readonly name = 'mailer'
  readonly owner: string
  private readonly options: MailerOptions
  private readonly concurrency: number
  private readonly leaseMs: number
  private readonly pollMs: number
  private readonly policy: { retryDelaysMs: number[]; random: () => number }
  private readonly outcomes: Counter<'outcome'> | undefined
  private readonly accepted: Counter | undefined
  private readonly stages: StageTimer

  private running = false

  /** True between start() and stop(). */
  get started (): boolean {
    return this.running
  }
  private loop: Promise<void> | undefined
  /** Every attempt started and not yet finished (sending or recording): what stop() waits for. */
  private readonly inFlight = new Set<Promise<void>>()
  /** Claimed (leased, renewed) but not started yet, oldest due first: the next attempts start from here. */
  private readonly ready: EmailRecord[] = []
  /** Attempts composing or in the transport: at most `concurrency`. */
  private sending = 0
  /** Attempts whose send is over and whose outcome is being written: at most `maxRecording`. */
  private recording = 0
  private readonly maxRecording: number
  /** Outcome writes, a few milliseconds at most, so that many share a commit (./record-batch.ts). */
  private readonly records: RecordBatch<EmailAttempt, boolean>
  private woken = false
  private wakeUp: (() => void) | undefined
  /**
   * The earliest time an email is due that the mailer knows of (a retry it scheduled, a scheduled send
   * accepted or moved here, or the store's next due time), so it is not left to the next poll.
   */
  private nextDue: number | undefined
  /** Whether to ask the store for its next due time after the next claim that leaves room (src/store/emails.ts nextDueAt). */
  private lookAhead = true
  private lookedAt = Number.NEGATIVE_INFINITY
  private stopScheduled: (() => void) | undefined
  private housekeeping: NodeJS.Timeout | undefined
  /** The emails this node works on (id → the token it claimed them under): exactly what it renews. */
  private readonly held = new Map<string, number>()
  private renewing: NodeJS.Timeout | undefined
  private unsubscribe: (() => void) | undefined
  private stopHandOff: (() => void) | undefined
  /** Emails offer() promised to take that the API is storing now. */
  private promised = 0
  /** Whether a new send may be taken at once (./hand-off.ts). */
  private readonly gate: HandOffGate
  /** Each attempt's compose and send (./attempt-send.ts). */
  private readonly sender: AttemptSender

  constructor (options: MailerOptions) {
    this.options = options
    this.owner = options.owner ?? leaseOwner(os.hostname())
    // Sending is I/O: many attempts in flight at once keep a relay (or the sandbox) busy and let their
    // claims and outcomes share commits.
    this.concurrency = options.concurrency ?? 32
    // A send's slot is free once the transport has answered; its outcome is written (and waits for the
    // commit, and for any fsync ahead of it) without holding one. This bounds those writes instead, and
    // so the emails leased at once (a claim reads past every one of them). A full `concurrency` of
    // outcomes is written at once; fewer wait for the batch's linger.
    this.maxRecording = 2 * this.concurrency
    this.records = new RecordBatch((a) => this.options.store.recordEmailAttempt(a), { maxItems: this.concurrency })
    this.leaseMs = options.leaseMs ?? 30_000
    this.pollMs = options.pollMs ?? 1_000
    this.gate = new HandOffGate(this.pollMs)
    this.policy = { retryDelaysMs: options.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS, random: options.random ?? Math.random }
    // A bad PUBLIC_URL or secret would make every message fail to build, and each would be failed for it:
    // refuse to start instead.
    try {
      instrumentHtml('', { publicUrl: options.publicUrl, secret: options.secret, emailId: 'em_check', recipient: 'check@example.invalid', expiresAt: 1 })
    } catch (err) {
      throw new Error(`mailer: tracking links cannot be made with this PUBLIC_URL and secret (${err instanceof Error ? err.message : String(err)})`, { cause: err })
    }
    this.outcomes = options.registry
      ? new Counter({
          name: 'svc_mail_recipient_outcomes_total',
          help: 'Recipient results of send attempts: delivered, bounced, complained, deferred',
          labelNames: ['outcome'] as const,
          registers: [options.registry],
        })
      : undefined
    this.accepted = options.registry
      ? new Counter({ name: 'svc_emails_accepted_total', help: 'Emails accepted (202) by this node', registers: [options.registry] })
      : undefined
    this.stages = stageTimer(options.registry)
    this.sender = new AttemptSender({
      ...options,
      attachmentBytesInFlight: options.attachmentBytesInFlight ?? DEFAULT_ATTACHMENT_BYTES_IN_FLIGHT,
      stages: this.stages,
    })
  }

  async start (): Promise<void> {
    // The owner is this process's own (src/domain/lease-owner.ts): what an earlier run held is taken
    // again when its leases run out, never released here, where it could still be another live process's.
    await this.housekeep()
    this.unsubscribe = this.options.emails.onAccepted((n) => {
      this.accepted?.inc(n)
      // 0: another process wrote: it may have scheduled (or moved) an email; look again after the claim.
      if (n === 0) this.lookAhead = true
      this.wake()
    })
    this.stopScheduled = this.options.emails.onScheduled?.((at) => this.dueBy(at))
    this.stopHandOff = this.options.emails.handOffTo?.(this)
    this.running = true
    this.loop = this.run()
    this.housekeeping = setInterval(() => { void this.housekeep() }, HOUSEKEEPING_MS).unref()
    this.renewing = setInterval(() => { void this.renewLeases() }, Math.max(1, Math.floor(this.leaseMs / 3))).unref()
  }

  async stop (): Promise<void> {
    this.running = false
    this.unsubscribe?.()
    this.stopScheduled?.()
    this.stopHandOff?.()
    clearInterval(this.housekeeping)
    this.wake()
    await this.loop
    // Sends in flight finish and their outcomes are written; nothing new starts.
    await Promise.allSettled([...this.inFlight])
    clearInterval(this.renewing)
    await this.options.store.releaseEmailLeases(this.owner).catch(() => 0)
    if (this.options.closeTransport) await this.options.transport.close()
    await this.options.composer?.close()
  }

  /**
   * How many of the `count` emails a send is about to store this node takes at once, leased to it in the
   * same write (LocalIntake): as many as fit beside what it is sending and has claimed ahead, and none
   * while older due emails may wait in the store. Once one email is left to the store, none is taken
   * until a claim has found the store drained, so a new email never overtakes an older one.
   */
  offer (count: number): { owner: string; leaseUntil: number; count: number } | null {
    if (!this.running || count <= 0) return null
    const taken = this.gate.offer(count, 2 * this.concurrency - this.sending - this.ready.length - this.promised)
    if (taken === 0) return null
    this.promised += taken
    return { owner: this.owner, leaseUntil: leaseUntil(this.options.clock.now(), this.leaseMs), count: taken }
  }

  /** The emails offer() promised, as stored (none if the send was refused or its write failed). */
  take (promised: number, emails: EmailRecord[]): void {
    this.promised -= promised
    if (emails.length === 0) return
    if (!this.running) {
      // Stopped meanwhile: let them go now rather than when their lease runs out.
      void this.options.store.releaseEmailLeases(this.owner, emails.map((e) => ({ id: e.id, leaseToken: e.leaseToken }))).catch(() => 0)
      return
    }
    for (const email of emails) {
      this.held.set(email.id, email.leaseToken)
      this.ready.push(email)
    }
    this.fill()
  }

  private wake (): void {
    this.woken = true
    this.wakeUp?.()
  }

  /** An email is due at `at`: the mailer's sleep ends then at the latest. */
  private dueBy (at: number): void {
    if (this.nextDue !== undefined && this.nextDue <= at) return
    this.nextDue = at
    this.wake()
  }

  /**
   * After a claim that found fewer emails due than it asked for: the store's next due time, at most once a
   * poll unless something may have changed it (another process wrote, the time the mailer waited for came).
   */
  private async lookForNextDue (now: number): Promise<void> {
    if (!this.lookAhead && now - this.lookedAt < this.pollMs) return
    this.lookAhead = false
    this.lookedAt = now
    const next = await this.options.store.nextDueAt?.(iso(now)) ?? null
    if (next === null) return
    const at = Date.parse(next)
    if (this.nextDue === undefined || at < this.nextDue) this.nextDue = at
  }

  private sleep (ms: number): Promise<void> {
    if (this.woken) {
      this.woken = false
      return Promise.resolve()
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer)
        this.wakeUp = undefined
        this.woken = false
        resolve()
      }
      const timer = setTimeout(done, ms)
      this.wakeUp = done
    })
  }

  /**
   * Claims come in batches: the mailer keeps up to one `concurrency` of emails claimed ahead (`ready`), and
   * claims again once room for at least half a `concurrency` has opened, so that a claim (a write, and a
   * scan past the emails already leased) is shared by many emails instead of made for each one that
   * finishes. An attempt that ends starts the next one from `ready` at once, without waiting for a claim.
   */
  private async run (): Promise<void> {
    while (this.running) {
      this.fill()
      // At least once a poll, what other nodes' sends, expired leases and retries left due is looked for
      // (a node kept busy by its own sends would otherwise never claim for an API-only node).
      this.gate.tick(this.options.clock.now())
      const room = this.claimRoom()
      if (room > 0) {
        const now = this.options.clock.now()
        if (this.nextDue !== undefined && this.nextDue <= now) {
          this.nextDue = undefined
          this.gate.shutNow()
          // What comes due after it is not known here yet.
          this.lookAhead = true
        }
        try {
          const t0 = performance.now()
          const began = this.gate.claiming(now)
          const claimed = await this.options.store.claimDueEmails({ owner: this.owner, dueBy: iso(now), now, leaseUntil: leaseUntil(now, this.leaseMs), limit: room })
          if (claimed.length > 0) this.stages.since('claim', t0)
          this.gate.claimed(began, claimed.length, room)
          for (const email of claimed) {
            this.held.set(email.id, email.leaseToken)
            this.ready.push(email)
          }
          this.fill()
          if (claimed.length < room) await this.lookForNextDue(now)
        } catch (err) {
          // A store fault (disk full…) is logged once by the store's health, not at every poll.
          if (!this.options.store.health.failed(err)) this.options.logger.error({ err }, 'mailer: could not read the mail queue')
        }
      }
      const untilDue = this.nextDue === undefined ? this.pollMs : Math.max(0, this.nextDue - this.options.clock.now())
      // Woken early by a new send, room opening in the pipeline, or stop().
      await this.sleep(Math.min(this.pollMs, untilDue))
    }
    // Claimed and never started: the lease is released at stop, so they are due again at once.
    for (const email of this.ready.splice(0)) this.forget(email)
  }

  /**
   * How many emails to claim now: 0 unless room for half a `concurrency` has opened (sending and ready
   * together are kept at most two `concurrency`), or the mailer has free slots and nothing ready (an
   * idle mailer takes even one email at once).
   */
  private claimRoom (): number {
    const room = 2 * this.concurrency - this.sending - this.ready.length - this.promised
    if (room >= Math.ceil(this.concurrency / 2)) return room
    return this.ready.length === 0 && this.sending < this.concurrency ? room : 0
  }

  /** Starts attempts from `ready` while slots are free. */
  private fill (): void {
    while (this.running && this.sending < this.concurrency && this.recording < this.maxRecording && this.ready.length > 0) {
      this.begin(this.ready.shift()!)
    }
  }

  /** When an attempt frees its slot: the next one starts, and the loop is woken if a claim is due. */
  private pump (): void {
    this.fill()
    if (this.running && this.claimRoom() > 0) this.wake()
  }

  private begin (email: EmailRecord): void {
    this.sending++
    let sent = false
    const onSent = () => {
      if (sent) return
      sent = true
      this.sending--
      this.recording++
      this.pump()
    }
    const work = this.attempt(email, onSent).finally(() => {
      onSent()
      this.recording--
      this.forget(email)
    })
    this.inFlight.add(work)
    void work.finally(() => {
      this.inFlight.delete(work)
      this.pump()
    })
  }

  /** One attempt: compose and send (then `onSent`), and write its outcome. Never throws. */
  private async attempt (email: EmailRecord, onSent: () => void): Promise<void> {
    const { results, buildFailure } = await this.sender.send(email)
    onSent()
    const plan = buildFailure ?? planAttempt(email, results, this.options.clock.now(), this.policy)
    const record = { ...plan, owner: this.owner, leaseToken: email.leaseToken }
    let recorded: boolean
    try {
      const t2 = performance.now()
      recorded = await pRetry(() => this.records.submit(record), RECORD_RETRY)
      this.stages.since('record', t2)
    } catch (err) {
      // A store fault (disk full…) is logged once by the store's health, not for every email.
      if (!this.options.store.health.failed(err)) this.options.logger.error({ err, emailId: email.id }, 'mailer: could not record an attempt; the email is sent again when its lease expires')
      // Dropped: no longer renewed, and released (if the store answers) so that it is due again at once;
      // new sends wait behind it.
      this.forget(email)
      this.gate.shutNow()
      await this.options.store.releaseEmailLeases(this.owner, [{ id: email.id, leaseToken: email.leaseToken }]).catch(() => 0)
      return
    }
    if (!recorded) {
      this.options.logger.warn({ emailId: email.id }, 'mailer: the lease on an email was lost during its attempt; its outcome was not recorded')
      return
    }
    for (const r of results) this.outcomes?.inc({ outcome: r.outcome })
    if (plan.nextAttemptAt !== null) {
      const due = Date.parse(plan.nextAttemptAt)
      if (this.nextDue === undefined || due < this.nextDue) this.nextDue = due
    }
    this.options.logger.debug({
      emailId: email.id, attempt: plan.attempts, status: plan.status,
      outcomes: results.reduce<Record<string, number>>((n, r) => ({ ...n, [r.outcome]: (n[r.outcome] ?? 0) + 1 }), {}),
    }, 'mailer: attempt recorded')
  }

  /** Stops renewing this claim of the email (a later claim of it, if any, stays renewed). */
  private forget (email: EmailRecord): void {
    if (this.held.get(email.id) === email.leaseToken) this.held.delete(email.id)
  }

  /** Extends the leases of exactly the emails in flight here; what was dropped is not renewed. */
  private async renewLeases (): Promise<void> {
    if (this.held.size === 0) return
    const leases: EmailLease[] = [...this.held].map(([id, leaseToken]) => ({ id, leaseToken }))
    try {
      const held = await this.options.store.renewEmailLeases(this.owner, leases, leaseUntil(this.options.clock.now(), this.leaseMs))
      // Fewer: recorded meanwhile, or lost (expired and taken over); a lost one's outcome is refused as stale.
      if (held < leases.length) this.options.logger.debug({ notRenewed: leases.length - held }, 'mailer: some leases were no longer held')
    } catch (err) {
      this.options.logger.warn({ err }, 'mailer: could not renew the mail leases; trying again shortly')
    }
  }

  /**
   * Drops the attachment bytes of emails final for longer than attachmentRetentionMs, a hundred emails
   * per store call; returns how many emails lost theirs.
   */
  async pruneAttachments (): Promise<number> {
    const before = iso(this.options.clock.now() - (this.options.attachmentRetentionMs ?? DEFAULT_ATTACHMENT_RETENTION_MS))
    let total = 0
    for (;;) {
      const n = await this.options.store.pruneAttachmentContents(before, 100)
      total += n
      if (n < 100) return total
    }
  }

  /** Drops expired idempotency keys and finishes writes a crash interrupted (MongoDB). */
  private async housekeep (): Promise<void> {
    const now = this.options.clock.now()
    try {
      await this.options.store.repairInterruptedWrites(iso(now - REPAIR_GRACE_MS))
      await this.options.store.pruneIdempotencyKeys(iso(now))
      await this.pruneAttachments()
    } catch (err) {
      this.options.logger.warn({ err }, 'mailer: housekeeping failed; it runs again later')
    }
  }
}
