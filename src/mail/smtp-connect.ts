// Reaching the relay: where it is and how (SmtpEndpoint), the TCP or TLS connection made within the
// connection timeout, the names EHLO and the certificate check use, and the errors a connection fails with.
import net from 'node:net'
import os from 'node:os'
import tls from 'node:tls'
import type { SmtpReply } from './smtp-reply.js'

export interface SmtpEndpoint {
  host: string
  port: number
  /** TLS from the first byte (smtps). */
  secure: boolean
  /** Refuse to go on without TLS (STARTTLS must be offered and work). */
  requireTLS: boolean
  /** Name announced in EHLO. Default: this machine's host name when it is a domain name, else the connection's address literal. */
  name?: string
  user?: string
  pass?: string
  /** TCP connect and greeting. */
  connectionTimeoutMs: number
  /** Silence from the relay while it owes a reply to a command. */
  socketTimeoutMs: number
  /**
   * Silence from the relay while it owes the reply to a message's end (the final dot). It is longer: the
   * relay may be scanning or queueing the message, and giving up then risks sending the message twice
   * (the relay may still take it). Default: socketTimeoutMs.
   */
  dataEndTimeoutMs?: number
  /** Extra TLS options (tests: a CA to trust). */
  tls?: tls.ConnectionOptions
}

/**
 * A fault of the connection rather than a reply: code ECONNECTION (could not connect), ETIMEDOUT, ETLS,
 * EPROTOCOL (not SMTP), EAUTH (no method to log in with), ECLOSED (the relay hung up). `reply` is the
 * last refusal the relay gave before hanging up (a 421), when it gave one.
 */
export class SmtpConnectionError extends Error {
  /** Set on a transaction's failure: whether its message's end had gone out (the relay may have taken it). */
  bodySent?: boolean
  constructor (readonly code: string, message: string, readonly reply?: SmtpReply) {
    super(message)
  }
}

/** A refusal during the set-up (greeting, EHLO, STARTTLS, AUTH): about our account or the relay, not a recipient. */
export class SmtpSetupError extends Error {
  constructor (readonly reply: SmtpReply, readonly stage: string) {
    super(reply.text)
  }
}

/**
 * This machine's host name when it is a domain name (dotted); else the connection's own address as an
 * address literal (RFC 5321 §4.1.3), which relays that refuse a bare "localhost" (Postfix's
 * reject_non_fqdn_helo_hostname) still take.
 */
export function defaultName (socket: net.Socket): string {
  const host = os.hostname()
  if (/^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$/i.test(host) && net.isIP(host) === 0) return host
  const local = socket.localAddress ?? '127.0.0.1'
  return net.isIPv6(local) ? `[IPv6:${local}]` : `[${local}]`
}

/** The name TLS checks the certificate against: the relay's host name; none for an address. */
export function serverName (host: string): string | undefined {
  return net.isIP(host) === 0 ? host : undefined
}

/** A TCP (or, for smtps, TLS) connection within the connection timeout; Nagle off (each write is a whole command group). */
export function connect (ep: SmtpEndpoint): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket: net.Socket = ep.secure
      ? tls.connect({ servername: serverName(ep.host), ...ep.tls, host: ep.host, port: ep.port })
      : net.connect({ host: ep.host, port: ep.port })
    socket.setNoDelay(true)
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new SmtpConnectionError('ETIMEDOUT', `could not connect to the relay within ${ep.connectionTimeoutMs} ms`))
    }, ep.connectionTimeoutMs)
    const done = (err?: Error) => {
      clearTimeout(timer)
      socket.off('error', done)
      socket.off(ep.secure ? 'secureConnect' : 'connect', connected)
      if (err !== undefined) {
        socket.destroy()
        reject(new SmtpConnectionError(ep.secure && !('syscall' in err) ? 'ETLS' : 'ECONNECTION', err.message))
      } else resolve(socket)
    }
    const connected = () => done()
    socket.once(ep.secure ? 'secureConnect' : 'connect', connected)
    socket.once('error', done)
  })
}
