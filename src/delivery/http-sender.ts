// Sends webhook deliveries over HTTP: sign, POST, classify the answer. It runs inside the Piscina worker
// threads, so everything it returns is plain data (Error objects and their fields do not survive the
// thread boundary), and it never throws out of send(): every task gets exactly one result.
import { performance } from 'node:perf_hooks'
import type { LookupAddress, LookupOptions } from 'node:dns'
import { isIP } from 'node:net'
import type { IncomingHttpHeaders } from 'node:http'
import { Pool, type Dispatcher } from 'undici'
import {
  checkHost,
  checkUrlShape,
  parseCidrList,
  resolveHost,
  systemResolver,
  type CidrList,
  type HostVerdict,
  type Resolver,
  type UrlPolicy,
  type UrlVerdict,
} from '../domain/webhook-url.js'
import { isPushbackStatus } from '../domain/pushback.js'
import { signDelivery, signingKeys, type SigningKeys } from './signature.js'
import { GUARD_ERROR, answerSnippet, classifyStatus, codeSuffix, deadlineText, describeError, parseRetryAfter } from './answers.js'

export { parseRetryAfter }

export interface DeliveryTask { deliveryId: string; webhookId: string; url: string; event: string; body: string; secrets: string[] }

export interface SenderOptions {
  /** Whole attempt, DNS and connect to the last body byte, in milliseconds. */
  timeoutMs: number
  /** How much of a failed attempt's response body is read for the delivery log, in bytes. */
  maxResponseBytes: number
  production: boolean
  /** Raw `WEBHOOK_ALLOWED_CIDRS` text; parsed here so that plain text is all that crosses into a thread. */
  allowedCidrs: string
  resolver?: Resolver
  userAgent?: string
  /** Sockets per origin; unlimited when absent (the actor's in-flight window bounds it in practice). */
  connections?: number
}

export interface DeliveryResult {
  deliveryId: string
  /** `returned`: handed back unattempted (see lanes.ts); the sender itself never answers it. */
  outcome: 'delivered' | 'retry' | 'gone' | 'returned'
  status?: number
  error?: string
  retryAfterMs?: number
  durationMs: number
}

export interface HttpSender {
  send (batch: DeliveryTask[]): Promise<DeliveryResult[]>
  /** One delivery; never rejects: a failure of any kind is a `retry` result. */
  deliver (task: DeliveryTask): Promise<DeliveryResult>
  /** The same without a promise: `done` is called exactly once, never synchronously. */
  dispatch (task: DeliveryTask, done: (result: DeliveryResult) => void): void
  close (): Promise<void>
}

export const DEFAULT_USER_AGENT = 'svc-webhooks/1'

/**
 * Of any response, at most this much body is read (the log only shows a failure's first 200 characters).
 * A shorter body is read to its end, so the keep-alive connection can be reused; past this, reading
 * stops, the socket is closed, and the answer counts by its status alone (a 2xx is still delivered).
 */
export const MAX_READ_BYTES = 64 * 1024

// Marks errors whose message is already the sentence to show the account (SSRF refusals, DNS failures),
// as opposed to socket errors that need translating.

function guardError (message: string): Error {
  return Object.assign(new Error(message), { code: GUARD_ERROR })
}

/**
 * The DNS step of every new connection. In production it resolves with the injected resolver, judges
 * EVERY address, and hands only checked addresses to the socket, so nothing can re-resolve the name
 * between the check and the connect (DNS rebinding).
 */
function connectLookup (resolver: Resolver, production: boolean, allowed: CidrList) {
  return (
    hostname: string,
    options: LookupOptions,
    callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
  ): void => {
    const verdict: Promise<HostVerdict> = production ? checkHost(hostname, allowed, resolver) : resolveHost(hostname, resolver)
    verdict.then((v) => {
      if (!v.ok) {
        callback(guardError(v.unresolved ? v.reason : `blocked: ${v.reason}`), '')
        return
      }
      // The family comes from the text, not from the resolver's word for it, so that the socket is never
      // handed something net would reject (which would throw inside this promise chain).
      const wanted = options.family === 4 || options.family === 6 ? options.family : 0
      const usable: LookupAddress[] = v.addresses
        .map((a) => ({ address: a.address, family: isIP(a.address) }))
        .filter((a) => a.family !== 0 && (wanted === 0 || a.family === wanted))
      const first = usable[0]
      if (!first) {
        callback(guardError(`webhook URL host ${hostname} has no usable ${wanted === 0 ? 'IP' : `IPv${wanted}`} address`), '')
      } else if (options.all) {
        callback(null, usable)
      } else {
        callback(null, first.address, first.family)
      }
    }, (err: unknown) => callback(guardError(`webhook URL host ${hostname} could not be checked${codeSuffix(err)}`), ''))
  }
}

function requireNumber (name: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    throw new RangeError(`http sender: ${name} must be an integer ≥ ${min}, got ${String(value)}`)
  }
  return value
}

/**
 * The attempts in flight, in deadline order, and the one coarse timer that ends those past it. Every
 * attempt of a sender has the same timeout, so appending keeps the list sorted: adding and removing are
 * O(1) (the attempt is its own list node), and a sweep looks only at the head. The timer runs only while
 * something is in flight. No timer per request: at full rate one cost more than signing the request.
 */
class DeadlineList {
  head: Attempt | null = null
  tail: Attempt | null = null
  private timer: NodeJS.Timeout | null = null

  constructor (private readonly tickMs: number) {}

  add (a: Attempt): void {
    a.prev = this.tail
    a.next = null
    if (this.tail) this.tail.next = a
    else this.head = a
    this.tail = a
    a.listed = true
    if (this.timer === null) {
      this.timer = setInterval(() => this.sweep(), this.tickMs)
      this.timer.unref()
    }
  }

  remove (a: Attempt): void {
    if (!a.listed) return
    a.listed = false
    if (a.prev) a.prev.next = a.next
    else this.head = a.next
    if (a.next) a.next.prev = a.prev
    else this.tail = a.prev
    a.prev = a.next = null
  }

  /** Ends every attempt whose deadline has passed; stops the timer once nothing is in flight. */
  sweep (): void {
    const now = performance.now()
    while (this.head !== null && this.head.deadline <= now) this.head.expire()
    if (this.head === null) this.stop()
  }

  stop (): void {
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
  }
}

/** What an Attempt needs of its sender. */
interface AttemptContext {
  list: DeadlineList
  timeoutMs: number
  maxResponseBytes: number
}

/**
 * One POST in flight: undici's handler for it (the dispatcher API, so no response stream and no promise
 * per chunk) and its node in the deadline list. It finishes exactly once: at the response's end, at the
 * read cap, on an error, or at the deadline, whichever comes first; whatever undici reports after that
 * is ignored.
 */
class Attempt implements Dispatcher.DispatchHandler {
  prev: Attempt | null = null
  next: Attempt | null = null
  listed = false
  readonly deadline: number
  private controller: Dispatcher.DispatchController | null = null
  private finished = false
  private status = 0
  private retryAfter: string | string[] | undefined
  private read = 0
  private kept: Buffer[] | null = null
  private keptBytes = 0

  constructor (
    private readonly ctx: AttemptContext,
    private readonly deliveryId: string,
    private readonly started: number,
    private readonly resolve: (result: DeliveryResult) => void,
  ) {
    this.deadline = started + ctx.timeoutMs
    ctx.list.add(this)
  }

  onRequestStart (controller: Dispatcher.DispatchController): void {
    // Past its deadline while it waited for a socket: it is already answered as a timeout, so it is
    // never written.
    if (this.finished) controller.abort(new DeadlineExceeded())
    else this.controller = controller
  }

  onResponseStart (_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200) return // informational (100 Continue and the like): the answer is still to come
    this.status = statusCode
    if (statusCode >= 200 && statusCode < 300) return
    if (isPushbackStatus(statusCode)) this.retryAfter = headers['retry-after']
    if (this.ctx.maxResponseBytes > 0) this.kept = []
  }

  onResponseData (controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.finished) return
    this.read += chunk.length
    const kept = this.kept
    if (kept !== null && this.keptBytes < this.ctx.maxResponseBytes) {
      // A copy: the chunk is a view of undici's read buffer.
      const piece = Buffer.from(chunk.subarray(0, this.ctx.maxResponseBytes - this.keptBytes))
      kept.push(piece)
      this.keptBytes += piece.length
    }
    if (this.read > MAX_READ_BYTES) {
      // Enough: the answer counts by its status, and the connection, mid-body, is closed.
      this.answered()
      controller.abort(new ReadCapReached())
    }
  }

  onResponseEnd (): void {
    if (!this.finished) this.answered()
  }

  onResponseError (_controller: Dispatcher.DispatchController | undefined, err: Error): void {
    if (this.finished) return
    this.finish({ outcome: 'retry', ...(this.status !== 0 ? { status: this.status } : {}), error: describeError(err, this.ctx.timeoutMs) })
  }

  /** Called by the sweep once the deadline has passed. */
  expire (): void {
    if (!this.finished) {
      // A failure status needs no body to be decided: it counts, with what of its answer has arrived. A
      // 2xx whose body is not complete, or no answer at all, is a timeout.
      if (this.status !== 0 && (this.status < 200 || this.status >= 300)) this.answered()
      else this.finish({ outcome: 'retry', ...(this.status !== 0 ? { status: this.status } : {}), error: deadlineText(this.ctx.timeoutMs) })
    }
    this.ctx.list.remove(this)
    // Still on a socket: closing it ends the request (undici reports the abort, which is then ignored).
    // This runs in the sweep's timer: nothing may escape it and take the thread down.
    try {
      this.controller?.abort(new DeadlineExceeded())
    } catch { /* the attempt is finished either way */ }
  }

  /** The answer by its status (and, for a failure, the start of its body). */
  private answered (): void {
    const status = this.status
    const { outcome, error } = classifyStatus(status)
    if (outcome === 'delivered') {
      this.finish({ outcome, status })
      return
    }
    const answer = this.kept === null || this.kept.length === 0 ? '' : answerSnippet(Buffer.concat(this.kept).toString('utf8'))
    const retryAfterMs = this.retryAfter !== undefined ? parseRetryAfter(this.retryAfter) : undefined
    this.finish({
      outcome,
      status,
      error: answer !== '' ? `${error}: ${answer}` : error!,
      ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
    })
  }

  private finish (fields: Omit<DeliveryResult, 'deliveryId' | 'durationMs'>): void {
    this.finished = true
    this.kept = null
    this.ctx.list.remove(this)
    this.resolve({ deliveryId: this.deliveryId, ...fields, durationMs: Math.round(performance.now() - this.started) })
  }
}

/** The reason an attempt past its deadline is aborted with (never shown: the attempt is finished first). */
class DeadlineExceeded extends Error {
  constructor () { super('delivery deadline exceeded') }
}

/** The reason a response is cut at MAX_READ_BYTES (never shown either). */
class ReadCapReached extends Error {
  constructor () { super(`response body over ${MAX_READ_BYTES} bytes`) }
}

export function createHttpSender (options: SenderOptions): HttpSender {
  const timeoutMs = requireNumber('timeoutMs', options.timeoutMs, 1)
  const maxResponseBytes = requireNumber('maxResponseBytes', options.maxResponseBytes, 0)
  if (options.connections !== undefined) requireNumber('connections', options.connections, 1)
  const production = options.production === true
  const allowedCidrs = parseCidrList(options.allowedCidrs ?? '')
  const policy: UrlPolicy = { production, allowedCidrs }
  const userAgent = options.userAgent ?? DEFAULT_USER_AGENT

  // Development keeps the platform's DNS unless a resolver is injected; production always goes through
  // the guard.
  const resolver = options.resolver ?? (production ? systemResolver : undefined)
  // The deadline is the sender's own (see DeadlineList), so undici's per-phase timers are off: they
  // restart at every phase and every body chunk, which let a slow drip run far past DELIVERY_TIMEOUT_MS.
  // Only the connect keeps undici's timeout, which also ends a connect nothing waits for any more.
  const poolOptions: Pool.Options = {
    ...(options.connections !== undefined ? { connections: options.connections } : {}),
    headersTimeout: 0,
    bodyTimeout: 0,
    connect: {
      timeout: timeoutMs,
      ...(resolver ? { lookup: connectLookup(resolver, production, allowedCidrs) } : {}),
    },
  }
  // A coarse tick: a tenth of the timeout, between 10 and 250 ms, is how late past its deadline an
  // attempt may end.
  const ctx: AttemptContext = {
    list: new DeadlineList(Math.min(250, Math.max(10, Math.floor(timeoutMs / 10)))),
    timeoutMs,
    maxResponseBytes,
  }
  // One keep-alive pool per origin, addressed directly: going through an Agent costs a dispatcher lookup
  // and more per request. Pools with nothing connected or queued are closed now and then, so a node that
  // once called many origins does not keep a pool for each.
  const pools = new Map<string, Pool>()
  const poolFor = (origin: string): Pool => {
    let pool = pools.get(origin)
    if (!pool) pools.set(origin, pool = new Pool(origin, poolOptions))
    return pool
  }
  const sweeper = setInterval(() => {
    for (const [origin, pool] of pools) {
      const { connected, pending, running } = pool.stats
      if (connected === 0 && pending === 0 && running === 0) {
        pools.delete(origin)
        void pool.close()
      }
    }
  }, 60_000)
  sweeper.unref()

  // The shape verdict of each URL is kept: a webhook's URL is the same for every delivery, and parsing
  // it per request is measurable at full rate. (Names are still resolved and judged at every connect.)
  const shapes = new Map<string, UrlVerdict & { origin?: string; path?: string }>()
  function shapeOf (url: string) {
    let verdict = shapes.get(url)
    if (!verdict) {
      const v = checkUrlShape(url, policy)
      verdict = v.ok ? { ...v, origin: v.url.origin, path: v.url.pathname + v.url.search } : v
      if (shapes.size >= 10_000) shapes.clear()
      shapes.set(url, verdict)
    }
    return verdict
  }

  // Each webhook's HMAC keys are made once per batch: the deliveries of one webhook in a batch share one
  // secrets array (see wire.ts), so it is the cache key, and the keys go when the batch does.
  const keyCache = new WeakMap<readonly string[], SigningKeys>()
  function keysFor (secrets: readonly string[]): SigningKeys {
    let keys = keyCache.get(secrets)
    if (!keys) keyCache.set(secrets, keys = signingKeys(secrets))
    return keys
  }

  const failed = (task: DeliveryTask, err: unknown): DeliveryResult => ({
    deliveryId: task.deliveryId,
    outcome: 'retry',
    error: describeError(err, timeoutMs),
    durationMs: 0,
  })

  /**
   * Sends one task and answers through `done`, exactly once and never in this turn of the event loop (so a
   * caller that queues a batch sees a failure after the batch is queued). No promise per request: the
   * attempt is undici's handler and calls `done` itself.
   */
  function dispatch (task: DeliveryTask, done: (result: DeliveryResult) => void): void {
    const started = performance.now()
    // Literal-IP hosts never reach the lookup (there is nothing to resolve), so the shape check is what
    // judges them; names are judged at connect time.
    const shape = shapeOf(task.url)
    if (!shape.ok) {
      const result: DeliveryResult = { deliveryId: task.deliveryId, outcome: 'retry', error: `blocked: ${shape.reason}`, durationMs: Math.round(performance.now() - started) }
      queueMicrotask(() => done(result))
      return
    }
    const timestamp = Math.floor(Date.now() / 1000)
    let headers: Record<string, string>
    try {
      // Throws for a task without a secret: that is the attempt's error.
      const signatures = signDelivery(keysFor(task.secrets), task.deliveryId, timestamp, task.body)
      headers = {
        'content-type': 'application/json',
        'user-agent': userAgent,
        'x-svc-event': task.event,
        'x-svc-delivery': task.deliveryId,
        'x-svc-signature': signatures.svc,
        'webhook-id': task.deliveryId,
        'webhook-timestamp': String(timestamp),
      }
      if (signatures.standard !== undefined) headers['webhook-signature'] = signatures.standard
    } catch (err) {
      const result = failed(task, err)
      queueMicrotask(() => done(result))
      return
    }
    // One deadline for the whole attempt, from here (DNS and connect included) to the last body byte.
    const attempt = new Attempt(ctx, task.deliveryId, started, done)
    try {
      // dispatch() reports its own failures (a header undici refuses, a closed pool) to the handler.
      poolFor(shape.origin!).dispatch({
        path: shape.path!,
        method: 'POST',
        headers,
        body: task.body,
      }, attempt)
    } catch (err) {
      queueMicrotask(() => attempt.onResponseError(undefined, err as Error))
    }
  }

  const deliverOne = (task: DeliveryTask): Promise<DeliveryResult> => new Promise((resolve) => dispatch(task, resolve))

  return {
    async send (batch) {
      return Promise.all(batch.map(deliverOne))
    },
    deliver: deliverOne,
    dispatch,
    async close () {
      clearInterval(sweeper)
      const all = [...pools.values()]
      pools.clear()
      // close() waits for what is in flight; the deadline sweep keeps running until then.
      await Promise.all(all.map((pool) => pool.close()))
      ctx.list.stop()
    },
  }
}
