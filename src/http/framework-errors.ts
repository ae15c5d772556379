// The errors that happen before any route runs, answered in the envelope too: a URL the router cannot
// decode (Fastify's frameworkErrors), and a request Node's HTTP parser refuses (a raw non-ASCII byte in
// the path, a malformed header, headers too large, a request that never finished: clientError, where
// there is only a socket to write to).
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import { HeadersTooLarge, RequestTimeout, ValidationError, type AppError } from '../errors.js'
import { envelope } from './errors.js'
import { unroutedPath } from './logging.js'
import { newRequestId } from './request-id.js'

export function frameworkErrorHandler (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const err = error.code === 'FST_ERR_MAX_PARAM_LENGTH'
    ? ValidationError('A segment of the URL path is too long')
    : error.code === 'FST_ERR_BAD_URL'
      ? ValidationError('The URL path is not valid (a % must start a percent-encoded UTF-8 byte, like %20)')
      : ValidationError('The request could not be routed')
  // No hook runs for these: the request id is set, and the request logged, here.
  reply.code(err.statusCode).header('x-request-id', request.id).type('application/json').send(envelope(err))
  request.log.info({ method: request.method, path: unroutedPath(request.url), status: err.statusCode }, 'request')
}

function clientErrorOf (code: string | undefined): AppError {
  switch (code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT': return RequestTimeout()
    case 'HPE_HEADER_OVERFLOW': return HeadersTooLarge()
    default: return ValidationError('The request is not valid HTTP (a byte that is not allowed in the request line or a header?)')
  }
}

/**
 * Node calls this with the socket when it cannot parse a request. Nothing of the request is logged: the
 * raw packet Node attaches to the error may hold an API key or a session cookie.
 */
export function clientErrorHandler (this: { log: { debug: (obj: object, msg: string) => void } }, err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return
  const appErr = clientErrorOf(err.code)
  const id = newRequestId()
  this.log.debug({ reqId: id, code: err.code, status: appErr.statusCode }, 'client error')
  if (socket.writable) {
    const body = JSON.stringify(envelope(appErr))
    socket.write(`HTTP/1.1 ${appErr.statusCode} ${STATUS_CODES[appErr.statusCode]}\r\n` +
      'Content-Type: application/json; charset=utf-8\r\n' +
      `x-request-id: ${id}\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      'Connection: close\r\n\r\n' + body)
  }
  socket.destroy()
}
