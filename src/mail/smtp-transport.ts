import net from 'node:net'
import { Readable } from 'node:stream'
import { domainToASCII } from 'node:url'
import nodemailer from 'nodemailer'
import type SMTPPool from 'nodemailer/lib/smtp-pool/index.js'
import type SMTPTransport from 'nodemailer/lib/smtp-transport/index.js'
import { Counter, type Registry } from 'prom-client'
import { isLoopbackHost } from '../../config/index.js'
import { mimeTemplate } from './mime.js'
import { stageTimer, type StageTimer } from './stages.js'
import {
  bareAddress,
  envelopeRecipients,
  formatMessageId,
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
  /** TCP connect and greeting timeout. Default 10 000 ms. */
  connectionTimeoutMs?: number
  /** Inactivity on an open connection before giving up. Default 60 000 ms. */
  socketTimeoutMs?: number
  /** Where `svc_mail_rendered_total` and the stage timings are registered; no metric without it. */
  registry?: Registry
  /** Instead of the registry (in the SMTP thread, which has none): where stage times and counts go. */
  report?: { stages: StageTimer; rendered: (what: 'template' | 'copy', n: number) => void }
}

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

/** Connections to the relay at once, unless SMTP_POOL_SIZE says otherwise. */
export const DEFAULT_SMTP_POOL_SIZE = 10

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
      parts.name = value
    } else {
      throw new Error(`invalid SMTP URL: unknown parameter ${JSON.stringify(key)} (known: requireTLS, name)`)
    }
  }
  return parts
}

/**
 * With Nagle off, each write is a packet and a system call; nodemailer writes the commands of a pipelined
 * transaction (MAIL FROM, RCPT TO, DATA) and a message's last chunk and its "." one by one. The writes of
 * one turn of the event loop go out together instead (cork, then uncork on the next tick): no delay, fewer calls.
 */
function coalesceWrites (socket: net.Socket): void {
  const write = socket.write.bind(socket) as (...args: unknown[]) => boolean
  let corked = false
  socket.write = ((...args: unknown[]) => {
    if (!corked) {
      corked = true
      socket.cork()
      process.nextTick(() => {
        corked = false
        socket.uncork()
      })
    }
    return write(...args)
  }) as typeof socket.write
}

type GetSocket = (options: unknown, callback: (err: Error | null, socketOptions?: { connection: net.Socket }) => void) => void

/** The part of a nodemailer transporter used here; its own types differ per transport kind. */
interface Relay {
  close(): void
  on(event: 'error', listener: (err: Error) => void): unknown
  /** The SMTP transport (pooled or not) under nodemailer's Mail object: what sendMail hands the message to. */
  transporter: { send(mail: ReadyMessage, callback: (err: Error | null, info?: unknown) => void): unknown }
}

/**
 * A message already rendered, in the shape nodemailer's SMTP transports take from Mail.sendMail: the
 * envelope, the Message-ID for their logs, and the bytes. Handing it over directly skips sendMail's
 * second MailComposer pass over bytes that are already built (about a third of the CPU per message).
 */
interface ReadyMessage {
  data: Record<string, never>
  message: {
    getEnvelope(): { from: string; to: string[] }
    messageId(): string
    getHeader(name: string): string | undefined
    createReadStream(): Readable
  }
}

/** An envelope address with its domain in ASCII (IDNA), as the SMTP commands need it. */
function envelopeAddress (address: string): string {
  const at = address.lastIndexOf('@')
  if (at < 0) return address
  const domain = address.slice(at + 1)
  return `${address.slice(0, at)}@${domainToASCII(domain) || domain}`
}

function readyMessage (envelope: { from: string; to: string[] }, raw: Buffer, messageId: string): ReadyMessage {
  const env = { from: envelopeAddress(envelope.from), to: envelope.to.map(envelopeAddress) }
  return {
    data: {},
    message: {
      getEnvelope: () => ({ from: env.from, to: [...env.to] }),
      messageId: () => messageId,
      getHeader: (name) => (name.toLowerCase() === 'message-id' ? messageId : undefined),
      createReadStream: () => Readable.from([raw], { objectMode: false }),
    },
  }
}

/** What sendMail resolves with over SMTP, rejectedErrors included (partly refused RCPTs). */
interface RelayInfo {
  accepted: Array<string | { address: string }>
  rejectedErrors?: SmtpError[]
  response: string
}

/** What nodemailer attaches to its errors (recipient and rejectedErrors are not in its types). */
interface SmtpError extends Error {
  code?: string
  command?: string
  response?: string
  responseCode?: number
  recipient?: string
  rejectedErrors?: SmtpError[]
}

export function createSmtpTransport(url: string, opts: SmtpTransportOptions = {}): MailTransport {
  const parts = parseSmtpUrl(url)
  const pooled = opts.pool ?? true
  const connectionTimeout = opts.connectionTimeoutMs ?? 10_000

  const base: SMTPTransport.Options = {
    host: parts.host,
    port: parts.port,
    secure: parts.secure,
    requireTLS: parts.requireTLS,
    connectionTimeout,
    greetingTimeout: connectionTimeout,
    socketTimeout: opts.socketTimeoutMs ?? 60_000,
    // The password must never reach a log line; nodemailer's own logger would print the dialogue.
    logger: false,
    debug: false,
    // Bodies come from API requests: a "path" or URL in them must never be read or fetched.
    disableFileAccess: true,
    disableUrlAccess: true,
  }
  if (parts.name !== undefined) base.name = parts.name
  if (parts.user !== undefined) base.auth = { user: parts.user, pass: parts.pass ?? '' }

  // The transporter lives only in this closure: the returned object holds no options,
  // so logging or serialising the transport cannot reveal the credentials.
  const transporter = (pooled
    ? nodemailer.createTransport({
        ...base,
        pool: true,
        maxConnections: opts.maxConnections ?? DEFAULT_SMTP_POOL_SIZE,
        // When a pooled connection drops mid-message nodemailer re-queues the message,
        // by default forever. One retry covers a connection the server idled out just
        // before we used it; anything else is the caller's to retry with backoff.
        maxRequeues: 1,
      } as SMTPPool.Options & { maxRequeues: number })
    : nodemailer.createTransport(base)) as unknown as Relay
  // Every connection with Nagle's algorithm off. nodemailer writes a message's body and its final "."
  // separately; with Nagle on, the second small write waits for the relay's ACK of the first, which the
  // relay delays (40 ms on Linux) since it has nothing to say before the "." arrives: every transaction
  // then took about 45 ms on loopback, whatever the CPU (benchmarks/README.md, mail over SMTP).
  ;(transporter.transporter as unknown as { getSocket: GetSocket }).getSocket = (options, callback) => {
    const socket = net.connect({ port: parts.port, host: parts.host })
    socket.setNoDelay(true)
    coalesceWrites(socket)
    const timer = setTimeout(() => socket.destroy(new Error('Connection timeout')), connectionTimeout)
    const done = (err: Error | null) => {
      clearTimeout(timer)
      socket.off('error', done)
      socket.off('connect', ok)
      if (err !== null) callback(err)
      else callback(null, { connection: socket })
    }
    const ok = () => done(null)
    socket.once('connect', ok)
    socket.once('error', done)
    void options
  }
  // Without a listener an 'error' event from the transporter would crash the process;
  // every failure that matters already reaches the sendMail callback.
  transporter.on('error', () => {})

  const scrub = secretScrubber(parts.pass)
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
    const messageId = formatMessageId(msg)
    const template = await mimeTemplate(msg)
    count('template', 1)
    const returnPath = msg.returnPath
    const copy = msg.copy
    if (returnPath === undefined && copy === undefined) {
      const raw = await template.render(undefined)
      count('copy', 1)
      stages.since('render', t0)
      return relayOnce(readyMessage({ from: bareAddress(msg.from), to: recipients }, raw, messageId), recipients)
    }
    // Every copy is made (and signed) before any is sent: a message that cannot be built sends nothing.
    const shared = copy === undefined ? await template.render(undefined) : undefined
    const raws = shared !== undefined ? recipients.map(() => shared) : await Promise.all(recipients.map((r) => template.render(copy!(r))))
    count('copy', shared !== undefined ? 1 : recipients.length)
    stages.since('render', t0)
    const each = await Promise.all(recipients.map((r, i) => relayOnce(
      readyMessage({ from: returnPath !== undefined ? returnPath(r) : bareAddress(msg.from), to: [r] }, raws[i]!, messageId), [r])))
    return each.flat()
  }

  async function relayOnce(mail: ReadyMessage, recipients: string[]): Promise<RecipientResult[]> {
    let info: RelayInfo
    const t0 = performance.now()
    try {
      info = await new Promise<RelayInfo>((resolve, reject) => {
        transporter.transporter.send(mail, (err, result) => { if (err) reject(err); else resolve(result as RelayInfo) })
      })
    } catch (e) {
      return failureResults(e as SmtpError, recipients, scrub)
    } finally {
      stages.since('smtp', t0)
    }

    const accepted = new Set(info.accepted.map(addressOf))
    const rejected = new Map<string, SmtpError>()
    for (const err of info.rejectedErrors ?? []) {
      if (err.recipient !== undefined) rejected.set(err.recipient.toLowerCase(), err)
    }
    const final = scrub(info.response)
    const finalCode = responseCode(info.response)
    return recipients.map((recipient): RecipientResult => {
      if (accepted.has(recipient)) {
        const r: RecipientResult = { recipient, outcome: 'delivered', response: final }
        if (finalCode !== undefined) r.code = finalCode
        return r
      }
      const err = rejected.get(recipient)
      if (err !== undefined) return fromSmtpError(recipient, err, scrub)
      return { recipient, outcome: 'deferred', response: 'no answer from the server for this recipient' }
    })
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
      transporter.close()
    },
  }
}

/** The whole message failed: map the one error to every recipient it concerns. */
function failureResults(err: SmtpError, recipients: string[], scrub: (s: string) => string): RecipientResult[] {
  // Every RCPT was refused: nodemailer reports each refusal separately, and they can
  // differ (one 550, one 451).
  if (err.rejectedErrors !== undefined && err.rejectedErrors.length > 0) {
    const byRecipient = new Map(err.rejectedErrors.map((e) => [e.recipient?.toLowerCase() ?? '', e]))
    return recipients.map((recipient) => {
      const e = byRecipient.get(recipient)
      return e !== undefined ? fromSmtpError(recipient, e, scrub) : deferred(recipient, err, scrub)
    })
  }
  // Only a refusal of the message itself (DATA, or the reply after the body) is about
  // the recipients. A refused MAIL FROM, AUTH or greeting is about our sender or our
  // account: suppressing every recipient for that would punish the wrong party.
  if (err.command === 'DATA') return recipients.map((recipient) => fromSmtpError(recipient, err, scrub))
  return recipients.map((recipient) => deferred(recipient, err, scrub))
}

function fromSmtpError(recipient: string, err: SmtpError, scrub: (s: string) => string): RecipientResult {
  const code = err.responseCode ?? responseCode(err.response)
  if (code !== undefined && code >= 500 && code < 600) {
    return { recipient, outcome: 'bounced', code, response: scrub(err.response ?? err.message) }
  }
  return deferred(recipient, err, scrub)
}

function deferred(recipient: string, err: SmtpError, scrub: (s: string) => string): RecipientResult {
  // Without a server reply the message alone can be vague ("Greeting never received");
  // nodemailer's code (ETIMEDOUT, ESOCKET, EAUTH…) says which kind of fault it was.
  const text = err.response ?? (err.code !== undefined ? `${err.code}: ${err.message}` : err.message)
  const r: RecipientResult = { recipient, outcome: 'deferred', response: scrub(text) }
  const code = err.responseCode ?? responseCode(err.response)
  if (code !== undefined) r.code = code
  return r
}

function responseCode(response: string | undefined): number | undefined {
  const m = /^([2-5]\d\d)\b/.exec(response ?? '')
  return m?.[1] !== undefined ? Number(m[1]) : undefined
}

function addressOf(a: string | { address: string }): string {
  return (typeof a === 'string' ? a : a.address).toLowerCase()
}

/**
 * Server replies are copied into results that get stored and shown; a server that
 * echoes what it was sent must not make the password one of them.
 */
function secretScrubber(pass: string | undefined): (s: string) => string {
  // A very short password would match ordinary text and garble every reply.
  if (pass === undefined || pass.length < 4) return (s) => s
  const forms = [...new Set([pass, encodeURIComponent(pass)])]
  return (s) => forms.reduce((acc, f) => acc.split(f).join('***'), s)
}
