import type tls from 'node:tls'
import { domainToASCII } from 'node:url'
import { Counter, type Registry } from 'prom-client'
import { DEFAULT_SMTP_POOL_SIZE, isLoopbackHost } from '../../config/index.js'
import { MessageBuildError, MessageRefusedError } from './compose.js'
import { mimeTemplate } from './mime.js'
import { SmtpConnection, SmtpConnectionError, SmtpSetupError, bytesOf, type Envelope, type MessageBytes, type SmtpEndpoint, type TransactionReplies } from './smtp-connection.js'
import { SmtpPool } from './smtp-pool.js'
import type { SmtpReply } from './smtp-reply.js'
import { stageTimer, type StageTimer } from './stages.js'
import {
  bareAddress,
  envelopeRecipients,
  simulatorOutcome,
  type MailTransport,
  type OutgoingMessage,
  type RecipientResult,
} from './transport.js'

export interface SmtpTransportOptions {
  /** Keep connections open and reuse them. Default true. */
  pool?: boolean
  /** Simultaneous connections when pooled (SMTP_POOL_SIZE). Default DEFAULT_SMTP_POOL_SIZE. */
  maxConnections?: number
  /** When a pooled connection is retired (after so many messages, or so long in use; 0: never). Default: none. */
  connectionLimits?: { maxMessages: number; maxAgeMs: number }
  /** TCP connect and greeting timeout. Default 10 000 ms. */
  connectionTimeoutMs?: number
  /** Silence from the relay while it owes a reply to a command, before giving up. Default 60 000 ms. */
  socketTimeoutMs?: number
  /**
   * Silence from the relay while it owes the reply to a message's end. Default 600 000 ms, RFC 5321's
   * 10 minutes: a relay scanning a message takes its time, and giving up early may send it twice.
   */
  dataEndTimeoutMs?: number
  /** Where `svc_mail_rendered_total` and the stage timings are registered; no metric without it. */
  registry?: Registry
  /** Instead of the registry (in the SMTP thread, which has none): where stage times and counts go. */
  report?: { stages: StageTimer; rendered: (what: 'template' | 'copy', n: number) => void }
  /** Extra TLS options for smtps and STARTTLS (a CA to trust, say). */
  tls?: tls.ConnectionOptions
}

/** An idle connection to the relay is closed after this long. */
const IDLE_MS = 30_000

/** svc_mail_rendered_total in the registry (none without one): SMTP templates built and copies made. */
export function renderedCounter (registry: Registry | undefined): Counter<'what'> | undefined {
  return registry
    ? new Counter({
        name: 'svc_mail_rendered_total',
        help: 'SMTP messages rendered (MIME template, then one copy per recipient, each DKIM-signed when the sender has a key): what was made',
        labelNames: ['what'] as const,
        registers: [registry],
      })
    : undefined
}

/** Connections to the relay at once, unless SMTP_POOL_SIZE says otherwise (config/index.ts). */
export { DEFAULT_SMTP_POOL_SIZE }

export interface SmtpUrlParts {
  host: string
  port: number
  secure: boolean
  user?: string
  pass?: string
  requireTLS: boolean
  /** Name announced in EHLO; nodemailer uses the machine's hostname when unset. */
  name?: string
}

// Error text from this module may end up in logs; it never contains the URL
// because the URL carries the password.
export function parseSmtpUrl(url: string): SmtpUrlParts {
  let u: URL
  try {
    u = new URL(url)
  } catch {
    throw new Error('invalid SMTP URL: expected smtp://user:pass@host:port or smtps://user:pass@host:port')
  }
  if (u.protocol !== 'smtp:' && u.protocol !== 'smtps:') {
    throw new Error(`invalid SMTP URL: scheme must be smtp: or smtps:, not ${u.protocol}`)
  }
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1')
  if (host === '') throw new Error('invalid SMTP URL: no host')
  const secure = u.protocol === 'smtps:'
  // 587 (submission) rather than 25: relays take authenticated mail there.
  const port = u.port === '' ? (secure ? 465 : 587) : Number(u.port)
  const parts: SmtpUrlParts = { host, port, secure, requireTLS: false }
  if (u.username !== '') parts.user = decodeURIComponent(u.username)
  if (u.password !== '') parts.pass = decodeURIComponent(u.password)
  // Credentials never cross the network in the clear: over smtp:// to a host other than this machine they
  // wait for STARTTLS, and a relay that does not offer it is refused (?requireTLS=false says otherwise).
  if (!secure && parts.user !== undefined && !isLoopbackHost(host)) parts.requireTLS = true
  for (const [key, value] of u.searchParams) {
    if (key === 'requireTLS') {
      if (value !== 'true' && value !== 'false') throw new Error('invalid SMTP URL: requireTLS must be true or false')
      parts.requireTLS = value === 'true'
    } else if (key === 'name') {
      // It goes into EHLO as it is: a domain name or an address literal, nothing that could end the line.
      if (!/^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]{2,45}\]|\[IPv6:[0-9A-Fa-f:.]{2,45}\])$/.test(value)) {
        throw new Error('invalid SMTP URL: name must be a domain name or an address literal like [192.0.2.1]')
      }
      parts.name = value
    } else {
      throw new Error(`invalid SMTP URL: unknown parameter ${JSON.stringify(key)} (known: requireTLS, name)`)
    }
  }
  return parts
}

/** The envelope as the SMTP commands carry it; throws MessageBuildError before anything is sent. */
function wireEnvelope (from: string, to: string[]): Envelope {
  return { from: envelopeAddress(from), to: to.map(envelopeAddress) }
}

/** An envelope address with its domain in ASCII (IDNA), as the SMTP commands need it. */
function envelopeAddress (address: string): string {
  // A line break or bracket would end the command early and start another: such a message is not sent.
  if (/[\r\n<>\0]/.test(address)) throw new MessageBuildError('an envelope address holds a character SMTP cannot carry')
  const at = address.lastIndexOf('@')
  if (at < 0) return address
  const domain = address.slice(at + 1)
  return `${address.slice(0, at)}@${domainToASCII(domain) || domain}`
}

export function createSmtpTransport(url: string, opts: SmtpTransportOptions = {}): MailTransport {
  const parts = parseSmtpUrl(url)
  const pooled = opts.pool ?? true
  const connectionTimeout = opts.connectionTimeoutMs ?? 10_000

  // The pool lives only in this closure: the returned object holds no options,
  // so logging or serialising the transport cannot reveal the credentials.
  const endpoint: SmtpEndpoint = {
    host: parts.host,
    port: parts.port,
    secure: parts.secure,
    requireTLS: parts.requireTLS,
    connectionTimeoutMs: connectionTimeout,
    socketTimeoutMs: opts.socketTimeoutMs ?? 60_000,
    dataEndTimeoutMs: opts.dataEndTimeoutMs ?? 600_000,
  }
  if (parts.name !== undefined) endpoint.name = parts.name
  if (parts.user !== undefined) { endpoint.user = parts.user; endpoint.pass = parts.pass ?? '' }
  if (opts.tls !== undefined) endpoint.tls = opts.tls
  const pool = new SmtpPool({
    max: pooled ? opts.maxConnections ?? DEFAULT_SMTP_POOL_SIZE : 1,
    idleMs: pooled ? IDLE_MS : 0,
    ...(opts.connectionLimits ?? {}),
    open: () => SmtpConnection.open(endpoint),
  })

  const scrub = secretScrubber(parts.pass, parts.user)
  let closed = false

  const rendered = opts.report === undefined ? renderedCounter(opts.registry) : undefined
  const stages = opts.report?.stages ?? stageTimer(opts.registry)

  const count = opts.report?.rendered ?? ((what: 'template' | 'copy', n: number) => rendered?.inc({ what }, n))

  /**
   * The message is built once (its MIME template, ./mime.ts); each recipient with a copy of their own
   * (msg.copy: their unsubscribe link and tracking) or an envelope sender of their own (VERP) gets their
   * own transaction, with their copy's bytes; otherwise one transaction carries every recipient. The
   * transactions share the pool's connections. Throws MessageBuildError when the message cannot be built.
   */
  async function relay(msg: OutgoingMessage, recipients: string[]): Promise<RecipientResult[]> {
    const t0 = performance.now()
    const template = await mimeTemplate(msg)
    count('template', 1)
    // A message with attachments comes in pieces that every copy shares (./mime-attachments.ts).
    const render = (c: Parameters<typeof template.render>[0]): Promise<MessageBytes> => (template.parts !== undefined ? template.parts(c) : template.render(c))
    const returnPath = msg.returnPath
    const copy = msg.copy
    const tooLarge: Array<{ size: number; limit: number }> = []
    if (returnPath === undefined && copy === undefined) {
      const raw = await render(undefined)
      count('copy', 1)
      stages.since('render', t0)
      refuseOverSize([raw])
      const results = await relayOnce(wireEnvelope(bareAddress(msg.from), recipients), recipients, raw, tooLarge)
      if (tooLarge.length > 0) throw refusal(tooLarge[0]!)
      return results
    }
    // Every copy is made (and signed) before any is sent: a message that cannot be built sends nothing.
    const shared = copy === undefined ? await render(undefined) : undefined
    const raws = shared !== undefined ? recipients.map(() => shared) : await Promise.all(recipients.map((r) => render(copy!(r))))
    count('copy', shared !== undefined ? 1 : recipients.length)
    stages.since('render', t0)
    refuseOverSize(raws)
    const envelopes = recipients.map((r) => wireEnvelope(returnPath !== undefined ? returnPath(r) : bareAddress(msg.from), [r]))
    const each = await Promise.all(recipients.map((r, i) => relayOnce(envelopes[i]!, [r], raws[i]!, tooLarge)))
    // Refused by its size everywhere: nothing went out, and nothing will as it is.
    if (tooLarge.length === recipients.length) throw refusal(tooLarge[0]!)
    return each.flat()
  }

  /**
   * Where the relay said how large a message it takes (SIZE in EHLO, heard by a connection opened
   * earlier), a larger one is refused before any of its transactions starts.
   */
  function refuseOverSize (raws: MessageBytes[]): void {
    const limit = pool.maxSize
    if (limit <= 0) return
    let size = 0
    for (const raw of raws) size = Math.max(size, bytesOf(raw))
    if (size > limit) throw refusal({ size, limit })
  }

  /** One transaction for these recipients (the envelope's), each with the relay's word on them. */
  async function relayOnce (envelope: Envelope, recipients: string[], raw: MessageBytes, tooLarge: Array<{ size: number; limit: number }>): Promise<RecipientResult[]> {
    const t0 = performance.now()
    let replies: TransactionReplies
    try {
      replies = await pool.send(envelope, raw)
    } catch (e) {
      return recipients.map((recipient) => faultResult(recipient, e, scrub))
    } finally {
      stages.since('smtp', t0)
    }
    if (replies.tooLarge !== undefined) tooLarge.push(replies.tooLarge)
    return recipients.map((recipient, i) => outcomeOf(recipient, replies, replies.rcpt[i], scrub))
  }

  return {
    name: 'smtp',
    async send(msg) {
      if (closed) throw new Error('SMTP transport is closed')
      const all = envelopeRecipients(msg)
      const byRecipient = new Map<string, RecipientResult>()
      const real: string[] = []
      for (const recipient of all) {
        const simulated = simulatorOutcome(recipient)
        if (simulated !== null) byRecipient.set(recipient, simulated)
        else real.push(recipient)
      }
      if (real.length > 0) {
        for (const r of await relay(msg, real)) byRecipient.set(r.recipient, r)
      }
      return all.map(
        (recipient) => byRecipient.get(recipient) ?? { recipient, outcome: 'deferred', response: 'not attempted' },
      )
    },
    async close() {
      if (closed) return
      closed = true
      pool.close()
    },
  }
}

/** The relay's SIZE is smaller than the message: a permanent failure of the message, said in words. */
function refusal ({ size, limit }: { size: number; limit: number }): MessageRefusedError {
  return new MessageRefusedError(`the relay takes at most ${limit} bytes (its SIZE) and this message is ${size} bytes; nothing was sent`)
}

/** A recipient's outcome from the replies of their transaction. */
function outcomeOf (recipient: string, replies: TransactionReplies, rcpt: SmtpReply | undefined, scrub: (s: string) => string): RecipientResult {
  // A refused MAIL FROM is about our sender or our account: suppressing every recipient for that would
  // punish the wrong party, so it defers.
  if (!accepted(replies.mail)) return replyResult(recipient, replies.mail, false, scrub)
  if (rcpt === undefined) return { recipient, outcome: 'deferred', response: 'no answer from the server for this recipient' }
  if (!accepted(rcpt)) return replyResult(recipient, rcpt, true, scrub)
  // Refusals of the message itself (DATA, or the reply after the body) are about every recipient.
  if (replies.data === undefined) return { recipient, outcome: 'deferred', response: 'the message was not sent' }
  if (replies.data.code !== 354) return replyResult(recipient, replies.data, true, scrub)
  if (replies.final === undefined) return { recipient, outcome: 'deferred', response: 'no answer from the server after the message' }
  if (!accepted(replies.final)) return replyResult(recipient, replies.final, true, scrub)
  return { recipient, outcome: 'delivered', code: replies.final.code, response: scrub(replies.final.text) }
}

function accepted (reply: SmtpReply): boolean {
  return reply.code >= 200 && reply.code < 300
}

/** A refusal: 5xx bounces when it is about the recipient or the message, anything else defers. */
function replyResult (recipient: string, reply: SmtpReply, aboutRecipient: boolean, scrub: (s: string) => string): RecipientResult {
  const outcome = aboutRecipient && reply.code >= 500 ? 'bounced' : 'deferred'
  return { recipient, outcome, code: reply.code, response: scrub(reply.text) }
}

/** The transaction could not finish: the relay refused us at set-up, hung up or went silent. It defers. */
function faultResult (recipient: string, err: unknown, scrub: (s: string) => string): RecipientResult {
  if (err instanceof SmtpSetupError) return replyResult(recipient, err.reply, false, scrub)
  if (err instanceof SmtpConnectionError) {
    if (err.reply !== undefined) return replyResult(recipient, err.reply, false, scrub)
    return { recipient, outcome: 'deferred', response: scrub(`${err.code}: ${err.message}`) }
  }
  return { recipient, outcome: 'deferred', response: scrub(err instanceof Error ? err.message : String(err)) }
}

/**
 * Server replies are copied into results that get stored and shown; a server that
 * echoes what it was sent must not make the password one of them.
 */
function secretScrubber(pass: string | undefined, user: string | undefined): (s: string) => string {
  // A very short password would match ordinary text and garble every reply.
  if (pass === undefined || pass.length < 4) return (s) => s
  // As typed, as in the URL, and as AUTH sent it (base64: the password alone for LOGIN, the PLAIN blob).
  const forms = [...new Set([
    pass, encodeURIComponent(pass), Buffer.from(pass, 'utf8').toString('base64'),
    Buffer.from(`\0${user ?? ''}\0${pass}`, 'utf8').toString('base64'),
  ])]
  return (s) => forms.reduce((acc, f) => acc.split(f).join('***'), s)
}
