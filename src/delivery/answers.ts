// What an attempt's answer or error says, as the delivery log shows it: the status classified, the
// answer cut to one short line, a network error described without stacks or addresses, Retry-After read.
// Used by the HTTP sender (http-sender.ts) inside the worker threads.

/** The code of the errors the connect-time address guard raises (its message is shown as it is). */
export const GUARD_ERROR = 'ERR_SVC_WEBHOOK_GUARD'

// How much of a failing receiver's answer goes into the delivery's error, in characters.
const ANSWER_IN_ERROR = 200

/** A receiver's answer as one short printable line, for the delivery log. */
export function answerSnippet (body: string): string {
  return body.replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ').replace(/\s+/g, ' ').trim().slice(0, ANSWER_IN_ERROR)
}

export function codeSuffix (err: unknown): string {
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

/** The error of an attempt that had no complete answer by its deadline (connect to the last body byte). */
export function deadlineText (timeoutMs: number): string {
  return `timeout after ${timeoutMs} ms: no complete answer`
}

/** A short, stack-free description, without addresses the socket layer tends to put in messages. */
export function describeError (err: unknown, timeoutMs: number): string {
  const e = err as { code?: unknown; message?: unknown; cause?: unknown } | null
  const code = typeof e?.code === 'string' ? e.code : undefined
  if (code === GUARD_ERROR) return String(e?.message)
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return deadlineText(timeoutMs)
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

export function classifyStatus (status: number): { outcome: 'delivered' | 'gone' | 'retry'; error?: string } {
  if (status >= 200 && status < 300) return { outcome: 'delivered' }
  if (status === 410) return { outcome: 'gone', error: 'receiver answered 410 Gone' }
  if (status >= 300 && status < 400) return { outcome: 'retry', error: 'redirect not followed (3xx)' }
  return { outcome: 'retry', error: `receiver answered ${status}` }
}
