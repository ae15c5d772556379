// Where a received message is read and judged: in a worker thread (workers/inbound.ts), never on the thread
// that answers the API, with a deadline on the whole, a cap on messages at once, and work dropped when its
// connection is gone.
//
// - At most `maxJobs` messages are read and judged at once; one more is refused at the end of DATA with
//   `451 4.3.2` and nothing is kept (the sender tries again later).
// - One deadline (`deadlineMs`, INBOUND_JUDGE_DEADLINE_MS) from the end of DATA: a judgement that passes
//   it is ended (its thread terminated, so it burns no more CPU) and the message is kept with every
//   verdict `temperror`. A message that could not even be read by then is refused with `451` instead.
// - The client gone before the answer (its AbortSignal): the work is ended the same way, and nothing is
//   kept; with no 250, the sender sends it again.
// - Each DNS lookup gets one try of `lookupTimeoutMs`, and one message at most `maxLookups` distinct ones,
//   begun within the first half of the time left when the judgement begins (DMARC's own excepted): a
//   sender whose lookups never answer cannot hold the judgement until the deadline, so DMARC is still
//   judged on what was verified.
import { fileURLToPath } from 'node:url'
import type { FastifyBaseLogger } from 'fastify'
import { Piscina } from 'piscina'
import { Counter, type Registry } from 'prom-client'
import type { Authentication, ParsedMessage } from '../../domain/received-message.js'
import type { InboundAnswer, InboundTask, InboundWorkerData } from '../../../workers/inbound.js'
import { SIGNATURE_BOUNDS, type SignatureBounds } from './signature-bounds.js'

const WORKER_FILE = fileURLToPath(new URL('../../../workers/inbound.js', import.meta.url))

/** The defaults (README "Receiving mail"). */
export const JUDGING = {
  /** From the end of DATA to the verdicts. */
  deadlineMs: 10_000,
  /** One try per lookup: a zone that never answers costs this, not the resolver's default 4 × 5 s. */
  lookupTimeoutMs: 1500,
  /** Distinct DNS lookups per message: SPF's ten with some MX hosts, ten signatures, DMARC, an ARC chain. */
  maxLookups: 64,
  /** Worker threads: one (on two cores the other belongs to the delivery threads). */
  threads: 1,
  /** Messages read and judged at once, waiting for the thread included. */
  maxJobs: 4,
  /** The thread is stopped after this long with no message: a listener that receives nothing runs none. */
  idleMs: 30_000,
} as const

export type JudgingTuning = { -readonly [K in keyof typeof JUDGING]?: number } & { bounds?: SignatureBounds }

export interface JudgingOptions extends JudgingTuning {
  /** DNS_SERVERS ([]: the system's). */
  dnsServers: readonly string[]
  /** The name this server gives itself in verdicts (INBOUND_MX_HOST). */
  mta: string
  logger: FastifyBaseLogger
  registry?: Registry
}

export interface Examined {
  parsed: ParsedMessage
  authentication: Authentication
}

/** How a message's judgement ended (the `result` label of svc_inbound_judgements_total). */
export type JudgementResult = 'ok' | 'deadline' | 'aborted' | 'refused_busy' | 'unreadable' | 'failed'

/** The answer to the end of DATA when the message is not taken now: the sender tries again later. */
function tryLater (why: string): Error {
  return Object.assign(new Error(`4.3.2 ${why}, try again later`), { responseCode: 451 })
}

const DEADLINE = 'deadline'
const GONE = 'gone'

const TEMPERROR: Omit<Authentication, 'arc'> = { spf: 'temperror', dkim: 'temperror', dmarc: 'temperror' }

export class Judging {
  private pool: Piscina | undefined
  private idle: NodeJS.Timeout | undefined
  private running = 0
  private closed = false
  private readonly stopping = new AbortController()
  private readonly counter: Counter<'result'> | undefined
  private readonly deadlineMs: number
  private readonly maxJobs: number
  private readonly threads: number
  private readonly idleMs: number
  private readonly workerData: InboundWorkerData

  constructor (private readonly options: JudgingOptions) {
    this.deadlineMs = options.deadlineMs ?? JUDGING.deadlineMs
    this.maxJobs = options.maxJobs ?? JUDGING.maxJobs
    this.threads = options.threads ?? JUDGING.threads
    this.idleMs = options.idleMs ?? JUDGING.idleMs
    this.workerData = {
      dnsServers: [...options.dnsServers],
      lookupTimeoutMs: options.lookupTimeoutMs ?? JUDGING.lookupTimeoutMs,
      maxLookups: options.maxLookups ?? JUDGING.maxLookups,
      bounds: options.bounds ?? { ...SIGNATURE_BOUNDS },
    }
    this.counter = options.registry
      ? new Counter({
          name: 'svc_inbound_judgements_total',
          help: 'Received messages read and judged, by result: ok, deadline (verdicts temperror), aborted (connection gone), refused_busy (451), unreadable, failed',
          labelNames: ['result'] as const,
          registers: [options.registry],
        })
      : undefined
  }

  /** The ids of the worker threads alive now (tests: one ended at its deadline is gone, another in its place). */
  get threadIds (): number[] {
    return this.pool?.threads.map((t) => t.threadId) ?? []
  }

  private count (result: JudgementResult): void {
    this.counter?.inc({ result })
  }

  private run (task: InboundTask, signal: AbortSignal): Promise<InboundAnswer> {
    // Closed between a message's two tasks: no pool is made again (nothing would destroy it).
    if (this.closed) return Promise.reject(new Error('inbound judging is closed'))
    // Started by the first message (stopped by retire() once idle). minThreads is the whole pool: a task
    // ended at its deadline takes its thread with it, and Piscina replaces a thread only up to minThreads;
    // below it, the tasks queued behind would wait for a thread until their own deadline.
    this.pool ??= new Piscina({
      filename: WORKER_FILE, workerData: this.workerData, minThreads: this.threads, maxThreads: this.threads,
    })
    return this.pool.run(task, { signal }) as Promise<InboundAnswer>
  }

  /** Stops the pool when no message has come for idleMs (the next one starts it again). */
  private retire (): void {
    if (this.running > 0) return
    const pool = this.pool
    this.pool = undefined
    pool?.destroy().catch((err: unknown) => this.options.logger.warn({ err }, 'inbound: stopping the idle judging thread failed'))
  }

  /**
   * Reads and judges one message in the worker thread: its fields and verdicts, or 'unreadable' (mailparser
   * refused it). Rejects with a `451` error (responseCode) when every job is taken, when the message could
   * not be read before the deadline, when `signal` fires (the connection is gone) and when the worker
   * failed; after any of these nothing is to be kept.
   */
  async examine (raw: Buffer, envelope: { ip: string; helo: string; sender: string }, signal?: AbortSignal): Promise<Examined | 'unreadable'> {
    if (this.closed) throw tryLater('Not taking mail now')
    if (this.running >= this.maxJobs) {
      this.count('refused_busy')
      throw tryLater('Too many messages at once')
    }
    this.running++
    clearTimeout(this.idle)
    // The worker thread sets the DNS budget from it (examine.ts dnsBudgetEnd).
    const deadlineAt = Date.now() + this.deadlineMs
    const job = new AbortController()
    const timer = setTimeout(() => job.abort(DEADLINE), this.deadlineMs)
    const gone = () => job.abort(GONE)
    const watched = [signal, this.stopping.signal].filter((s) => s !== undefined)
    for (const s of watched) s.addEventListener('abort', gone, { once: true })
    try {
      if (watched.some((s) => s.aborted)) gone()
      // One copy into shared memory: both tasks read the same bytes, none is copied between threads.
      const shared = new Uint8Array(new SharedArrayBuffer(raw.length))
      shared.set(raw)
      let read: InboundAnswer
      try {
        read = await this.run({ kind: 'read', raw: shared }, job.signal)
      } catch (err) {
        throw this.stopped(job.signal, err, 'read')
      }
      if (read.kind === 'unreadable') {
        this.count('unreadable')
        this.options.logger.warn({ reason: read.reason }, 'inbound: a received message could not be parsed; it is not kept')
        return 'unreadable'
      }
      if (read.kind !== 'read') throw new Error('inbound worker: unexpected answer')
      const parsed = fromWorker(read.parsed)
      let authentication: Authentication
      let result: JudgementResult = 'ok'
      try {
        const judged = await this.run({ kind: 'judge', raw: shared, mta: this.options.mta, ...envelope, deadlineAt }, job.signal)
        if (judged.kind !== 'judged') throw new Error('inbound worker: unexpected answer')
        authentication = judged.authentication
      } catch (err) {
        if (job.signal.aborted && job.signal.reason !== DEADLINE) throw this.stopped(job.signal, err, 'judge')
        result = job.signal.aborted ? 'deadline' : 'failed'
        if (result === 'failed') this.options.logger.warn({ err }, 'inbound: could not judge a received message\'s authentication')
        else this.options.logger.info({ deadlineMs: this.deadlineMs }, 'inbound: a received message\'s judgement passed its deadline; kept with temperror verdicts')
        // ARC is judged when the message carries a chain (its fields are among the first ones, each hop adds them on top).
        const chain = parsed.headers.some((h) => h.name.toLowerCase() === 'arc-seal')
        authentication = { ...TEMPERROR, arc: chain ? 'temperror' : null }
      }
      // Gone while the last answer came back: nothing is kept.
      if (job.signal.aborted && job.signal.reason !== DEADLINE) throw this.stopped(job.signal, undefined, 'judge')
      this.count(result)
      return { parsed, authentication }
    } finally {
      clearTimeout(timer)
      for (const s of watched) s.removeEventListener('abort', gone)
      this.running--
      if (this.running === 0 && !this.closed) {
        clearTimeout(this.idle)
        this.idle = setTimeout(() => this.retire(), this.idleMs).unref()
      }
    }
  }

  /** The error to answer with when a task did not finish: why, counted. */
  private stopped (signal: AbortSignal, err: unknown, stage: 'read' | 'judge'): Error {
    if (signal.aborted && signal.reason === DEADLINE) {
      this.count('deadline')
      this.options.logger.warn({ deadlineMs: this.deadlineMs }, 'inbound: a received message could not be read before its deadline; answered 451')
      return tryLater('This message took too long to read')
    }
    if (signal.aborted) {
      this.count('aborted')
      return tryLater('Connection gone')
    }
    this.count('failed')
    this.options.logger.error({ err, stage }, 'inbound: the worker thread failed on a received message; answered 451')
    return tryLater('Could not read this message now')
  }

  /** Ends the work under way (nothing of it is kept) and stops the thread. */
  async close (): Promise<void> {
    this.closed = true
    clearTimeout(this.idle)
    this.stopping.abort(GONE)
    const pool = this.pool
    this.pool = undefined
    await pool?.destroy()
  }
}

/** Attachments come back from the thread as Uint8Array: Buffers again, on the same memory. */
function fromWorker (parsed: ParsedMessage): ParsedMessage {
  for (const a of parsed.attachments) {
    const c = a.content as Uint8Array
    if (!Buffer.isBuffer(c)) a.content = Buffer.from(c.buffer, c.byteOffset, c.byteLength)
  }
  return parsed
}
