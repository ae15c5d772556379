import type { FastifyError, FastifyInstance } from 'fastify'
import {
  AppError, InternalError, MethodNotAllowed, NotFound, PayloadTooLarge, RateLimited, Unavailable, UnsupportedMediaType, ValidationError, isAppError,
} from '../errors.js'
import { RETRY_AFTER_SECONDS, storeFault } from '../store/faults.js'
import { validationDetails } from './validation.js'

export function envelope (err: AppError): { success: false; error: { code: string; message: string; details?: unknown } } {
  return {
    success: false,
    error: err.details ? { code: err.code, message: err.message, details: err.details } : { code: err.code, message: err.message },
  }
}

/** Maps whatever was thrown to one of our typed errors. Unknown errors become internal_error. */
export function toAppError (err: unknown): AppError {
  if (isAppError(err)) return err
  const e = err as FastifyError
  if (e?.validation) {
    const part = e.validationContext ?? 'body'
    return ValidationError('The request is not valid', validationDetails(e.validation, part))
  }
  switch (e?.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE': return PayloadTooLarge()
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE': return UnsupportedMediaType()
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return ValidationError('The request body is not valid JSON')
  }
  if (e?.statusCode === 429) return RateLimited()
  if (e instanceof SyntaxError || e?.statusCode === 400) return ValidationError('The request body is not valid JSON')
  // The store cannot write (disk full, read-only, no primary…): 503, and the store's health logs it once.
  const fault = storeFault(err)
  if (fault !== null) {
    return Unavailable(fault.effect === 'none'
      ? undefined
      : 'The service is temporarily unavailable; the request may have taken effect: check before retrying, or retry with the same Idempotency-Key',
    undefined, { 'retry-after': String(RETRY_AFTER_SECONDS) })
  }
  return InternalError()
}

/**
 * How much of a body svc reads and throws away, at most, before answering an error that came before the
 * body was read (413, 401, 429 …): a client that writes its whole body before it reads (most do) then
 * reads the answer, instead of finding the connection closed under it (EPIPE). Past this, after
 * DRAIN_MS in all, or once the client has sent nothing for DRAIN_IDLE_MS (a Content-Length larger than
 * what it sends), the answer goes and the connection closes.
 */
export const DRAIN_LIMIT_BYTES = 16 * 1024 * 1024
const DRAIN_MS = 10_000
const DRAIN_IDLE_MS = 1_000

function discardBody (raw: import('node:http').IncomingMessage, limit: number): Promise<void> {
  return new Promise((resolve) => {
    let seen = 0
    const finish = () => {
      clearTimeout(timer)
      clearTimeout(idle)
      raw.off('data', onData)
      raw.off('end', finish)
      raw.off('error', finish)
      raw.off('close', finish)
      resolve()
    }
    const onData = (chunk: Buffer) => {
      idle.refresh()
      seen += chunk.length
      if (seen > limit) {
        raw.pause()
        finish()
      }
    }
    const timer = setTimeout(finish, DRAIN_MS)
    const idle = setTimeout(finish, DRAIN_IDLE_MS)
    raw.on('data', onData)
    raw.once('end', finish)
    raw.once('error', finish)
    raw.once('close', finish)
    raw.resume()
  })
}

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const

export function registerErrorHandling (app: FastifyInstance): void {
  app.setErrorHandler((err, request, reply) => {
    const appErr = toAppError(err)
    if (appErr.statusCode >= 500 && storeFault(err) === null) {
      // The cause goes to the log with the request id; the client gets the id and a generic message.
      request.log.error({ err, reqId: request.id }, 'request failed')
    }
    if (appErr.headers) reply.headers(appErr.headers)
    const raw = request.raw
    // readableEnded as well as complete: a request made by app.inject() has no `complete`, and one whose
    // body was read to its end has nothing left to drain (waiting for an 'end' already emitted would hold
    // the answer for DRAIN_MS).
    if (!raw.complete && !raw.readableEnded && !raw.destroyed && raw.headers['content-length'] !== '0' &&
        (raw.headers['content-length'] !== undefined || raw.headers['transfer-encoding'] !== undefined)) {
      // The body was never read (or only in part): read the rest away, then answer and close.
      reply.header('connection', 'close')
      return discardBody(raw, DRAIN_LIMIT_BYTES).then(() => { reply.code(appErr.statusCode).type('application/json').send(envelope(appErr)) })
    }
    reply.code(appErr.statusCode).type('application/json').send(envelope(appErr))
  })

  // A path that exists with other methods is a 405 naming them (Allow), not a 404.
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?', 1)[0]!
    const allowed = METHODS.filter((m) => m !== request.method && app.findRoute({ method: m, url: path }) !== null)
    if (allowed.length > 0) {
      const list = allowed.join(', ')
      reply.code(405).header('allow', list).send(envelope(MethodNotAllowed(`${request.method} is not allowed on this route; it takes ${list}`)))
      return
    }
    reply.code(404).send(envelope(NotFound('No such route')))
  })
}
