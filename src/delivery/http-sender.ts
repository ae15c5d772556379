// Sends webhook deliveries over HTTP: sign, POST, classify the answer. It runs inside the Piscina worker
// threads, so everything it returns is plain data (Error objects and their fields do not survive the
// thread boundary), and it never throws out of send(): every task gets exactly one result.
import { performance } from 'node:perf_hooks'
import type { LookupAddress, LookupOptions } from 'node:dns'
import { isIP } from 'node:net'
import type { Readable } from 'node:stream'
import { Pool } from 'undici'
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
import { signatureHeader } from './signature.js'

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

// How much of a failing receiver's answer goes into the delivery's error, in characters.
const ANSWER_IN_ERROR = 200

/** A receiver's answer as one short printable line, for the delivery log. */
function answerSnippet (body: string): string {
  return body.replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ').replace(/\s+/g, ' ').trim().slice(0, ANSWER_IN_ERROR)
}

export interface HttpSender {
  send (batch: DeliveryTask[]): Promise<DeliveryResult[]>
  /** One delivery; never rejects: a failure of any kind is a `retry` result. */
  deliver (task: DeliveryTask): Promise<DeliveryResult>
  close (): Promise<void>
}

export const DEFAULT_USER_AGENT = 'svc-webhooks/1'

// After the kept part of a response body, this much more is read and discarded so the keep-alive
// connection can be reused; beyond it the socket is cheaper to close than to drain.
const DRAIN_LIMIT_BYTES = 64 * 1024

// Marks errors whose message is already the sentence to show the account (SSRF refusals, DNS failures),
// as opposed to socket errors that need translating.
const GUARD_ERROR = 'ERR_SVC_WEBHOOK_GUARD'

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

function codeSuffix (err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code
  return typeof code === 'string' ? ` (${code})` : ''
}

const ERROR_PHRASES: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset by the receiver',
  EPIPE: 'connection closed by the receiver',
  ENOTFOUND: 'DNS lookup failed',
  EAI_AGAIN: 'DNS lookup failed temporarily',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ETIMEDOUT: 'connect timed out',
  UND_ERR_SOCKET: 'connection closed by the receiver',
  UND_ERR_CLOSED: 'connection closed',
  UND_ERR_RES_CONTENT_LENGTH_MISMATCH: 'response body shorter or longer than its Content-Length',
}

/** A short, stack-free description, without addresses the socket layer tends to put in messages. */
function describeError (err: unknown, timeoutMs: number): string {
  const e = err as { code?: unknown; message?: unknown; cause?: unknown } | null
  const code = typeof e?.code === 'string' ? e.code : undefined
  if (code === GUARD_ERROR) return String(e?.message)
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return `timeout after ${timeoutMs} ms`
  }
  if (code && ERROR_PHRASES[code]) return `${ERROR_PHRASES[code]} (${code})`
  // undici's argument errors describe our own request (a header value it refused), never the network.
  if (code === 'UND_ERR_INVALID_ARG' && typeof e?.message === 'string') return `${e.message.slice(0, 200)} (${code})`
  if (code && (code.startsWith('ERR_TLS') || code.startsWith('ERR_SSL') || code.includes('CERT'))) return `TLS error (${code})`
  if (code) return code
  if (e?.cause) return describeError(e.cause, timeoutMs)
  const message = typeof e?.message === 'string' ? e.message : String(err)
  return (message.split('\n')[0] ?? '').slice(0, 200) || 'unknown error'
}

/** `Retry-After` as milliseconds from now: delta-seconds or an HTTP date. Undefined when unusable. */
export function parseRetryAfter (value: string | string[] | undefined, nowMs: number = Date.now()): number | undefined {
  const text = (Array.isArray(value) ? value[0] : value)?.trim()
  if (!text) return undefined
  if (/^\d+$/.test(text)) return Number(text) * 1000
  // All three HTTP-date formats start with a day name; Date.parse alone would accept "-5" as a year.
  if (!/^[A-Za-z]{3}/.test(text)) return undefined
  const at = Date.parse(text)
  if (Number.isNaN(at)) return undefined
  return Math.max(0, at - nowMs)
}

/**
 * Keeps the first `max` bytes of a body as text and drains or drops the rest, so the socket is either
 * reusable or closed, never left stalled holding a pooled connection.
 */
function readCapped (body: Readable, max: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const kept: Buffer[] = []
    let keptBytes = 0
    let seen = 0
    let cut = false
    body.on('data', (chunk: Buffer) => {
      seen += chunk.length
      if (max > 0 && keptBytes < max) {
        const piece = chunk.subarray(0, max - keptBytes)
        kept.push(piece)
        keptBytes += piece.length
      }
      if (!cut && seen > max + DRAIN_LIMIT_BYTES) {
        cut = true
        body.destroy()
      }
    })
    body.on('error', (err) => { if (!cut) reject(err) })
    body.on('close', () => resolve(kept.length === 0 ? '' : Buffer.concat(kept).toString('utf8')))
  })
}

function classify (status: number): Pick<DeliveryResult, 'outcome' | 'error'> {
  if (status >= 200 && status < 300) return { outcome: 'delivered' }
  if (status === 410) return { outcome: 'gone', error: 'receiver answered 410 Gone' }
  if (status >= 300 && status < 400) return { outcome: 'retry', error: 'redirect not followed (3xx)' }
  return { outcome: 'retry', error: `receiver answered ${status}` }
}

function requireNumber (name: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    throw new RangeError(`http sender: ${name} must be an integer ≥ ${min}, got ${String(value)}`)
  }
  return value
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
  const poolOptions: Pool.Options = {
    ...(options.connections !== undefined ? { connections: options.connections } : {}),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    connect: {
      timeout: timeoutMs,
      ...(resolver ? { lookup: connectLookup(resolver, production, allowedCidrs) } : {}),
    },
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

  async function sendOne (task: DeliveryTask): Promise<DeliveryResult> {
    const started = performance.now()
    const done = (fields: Omit<DeliveryResult, 'deliveryId' | 'durationMs'>): DeliveryResult => ({
      deliveryId: task.deliveryId,
      ...fields,
      durationMs: Math.round(performance.now() - started),
    })

    // Literal-IP hosts never reach the lookup (there is nothing to resolve), so the shape check is what
    // judges them; names are judged at connect time.
    const shape = shapeOf(task.url)
    if (!shape.ok) return done({ outcome: 'retry', error: `blocked: ${shape.reason}` })

    // The deadline is the pool's: connect, then the response headers, then each gap in the body, each
    // within timeoutMs (no per-request timer: at full rate one costs more than the request's signing).
    let status: number | undefined
    try {
      const timestamp = Math.floor(Date.now() / 1000)
      const res = await poolFor(shape.origin!).request({
        path: shape.path!,
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'user-agent': userAgent,
          'x-svc-event': task.event,
          'x-svc-delivery': task.deliveryId,
          'x-svc-signature': signatureHeader(task.secrets, timestamp, task.body),
        },
        body: task.body,
      })
      status = res.statusCode
      const { outcome, error } = classify(status)
      if (outcome === 'delivered') {
        // A 2xx's body says nothing the log needs, but it must arrive whole (a body that stalls is a
        // timeout, not a delivery): it is read and dropped.
        await readCapped(res.body, 0)
        return done({ outcome, status })
      }
      // A failure's answer is worth showing: its first line goes into the error the account sees.
      const answer = answerSnippet(await readCapped(res.body, maxResponseBytes))
      const retryAfterMs = status === 429 || status === 503 ? parseRetryAfter(res.headers['retry-after']) : undefined
      return done({
        outcome,
        status,
        error: answer !== '' ? `${error}: ${answer}` : error!,
        ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
      })
    } catch (err) {
      return done({
        outcome: 'retry',
        ...(status !== undefined ? { status } : {}),
        error: describeError(err, timeoutMs),
      })
    }
  }

  const settle = (task: DeliveryTask) => sendOne(task).catch((err: unknown): DeliveryResult => ({
    deliveryId: task.deliveryId,
    outcome: 'retry',
    error: describeError(err, timeoutMs),
    durationMs: 0,
  }))

  return {
    async send (batch) {
      return Promise.all(batch.map(settle))
    },
    deliver: settle,
    async close () {
      clearInterval(sweeper)
      const all = [...pools.values()]
      pools.clear()
      await Promise.all(all.map((pool) => pool.close()))
    },
  }
}
