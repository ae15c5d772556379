import nodemailer, { type SendMailOptions } from 'nodemailer'
import type SMTPPool from 'nodemailer/lib/smtp-pool/index.js'
import type SMTPTransport from 'nodemailer/lib/smtp-transport/index.js'
import { Counter, type Registry } from 'prom-client'
import { isLoopbackHost } from '../../config/index.js'
import { createRenderer } from './render-pool.js'
import {
  bareAddress,
  customHeaders,
  DKIM_SIGNED_HEADERS,
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
  /** Simultaneous connections when pooled. Default 5. */
  maxConnections?: number
  /** TCP connect and greeting timeout. Default 10 000 ms. */
  connectionTimeoutMs?: number
  /** Inactivity on an open connection before giving up. Default 60 000 ms. */
  socketTimeoutMs?: number
  /** Where `svc_mail_rendered_total{thread}` is registered; no metric without it. */
  registry?: Registry
  /**
   * Messages whose body (html + text, in characters) is smaller than this are rendered in the calling
   * thread, in each SMTP transaction. Default 0: every message is rendered in the worker thread. Even a
   * 1 KiB message costs milliseconds of CPU to render and sign (nodemailer's MIME pipeline, then an RSA
   * signature), against well under one to hand it over: see benchmarks/README.md.
   */
  renderInThreadFromChars?: number
}

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

/** The part of a nodemailer transporter used here; its own types differ per transport kind. */
interface Relay {
  sendMail(mail: SendMailOptions): Promise<unknown>
  close(): void
  on(event: 'error', listener: (err: Error) => void): unknown
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
  const transporter: Relay = pooled
    ? nodemailer.createTransport({
        ...base,
        pool: true,
        maxConnections: opts.maxConnections ?? 5,
        // When a pooled connection drops mid-message nodemailer re-queues the message,
        // by default forever. One retry covers a connection the server idled out just
        // before we used it; anything else is the caller's to retry with backoff.
        maxRequeues: 1,
      } as SMTPPool.Options & { maxRequeues: number })
    : nodemailer.createTransport(base)
  // Without a listener an 'error' event from the transporter would crash the process;
  // every failure that matters already reaches the sendMail callback.
  transporter.on('error', () => {})

  const scrub = secretScrubber(parts.pass)
  let closed = false

  const rendered = opts.registry
    ? new Counter({
        name: 'svc_mail_rendered_total',
        help: 'SMTP messages rendered (MIME and DKIM signature), by thread: worker (once per message) or main (below renderInThreadFromChars, once per SMTP transaction)',
        labelNames: ['thread'] as const,
        registers: [opts.registry],
      })
    : undefined
  // Messages are rendered in a worker thread, started at the first one and stopped when idle.
  const renderer = createRenderer()
  const renderHereBelow = opts.renderInThreadFromChars ?? 0

  /**
   * With VERP (msg.returnPath) each recipient gets its own transaction, since the envelope sender names
   * the recipient; the transactions share the pool's connections. A message is rendered once, in the
   * worker thread, and its bytes go out as they are in every transaction (one whose body is below
   * renderInThreadFromChars is rendered by nodemailer here, in each transaction).
   * Throws MessageBuildError when the worker cannot render a message.
   */
  async function relay(msg: OutgoingMessage, recipients: string[]): Promise<RecipientResult[]> {
    const mail = mailOptions(msg)
    const size = (msg.html?.length ?? 0) + (msg.text?.length ?? 0)
    let content: (envelope: { from: string; to: string[] }) => SendMailOptions
    if (size < renderHereBelow) {
      content = (envelope) => {
        rendered?.inc({ thread: 'main' })
        return { ...mail, envelope }
      }
    } else {
      const raw = await renderer.render(mail)
      rendered?.inc({ thread: 'worker' })
      // No dkim option beside raw: nodemailer sends the bytes as they are, signed once, in the worker.
      content = (envelope) => ({ envelope, raw })
    }
    const returnPath = msg.returnPath
    if (returnPath === undefined) return relayOnce(content({ from: bareAddress(msg.from), to: recipients }), recipients)
    const each = await Promise.all(recipients.map((r) => relayOnce(content({ from: returnPath(r), to: [r] }), [r])))
    return each.flat()
  }

  async function relayOnce(mail: SendMailOptions, recipients: string[]): Promise<RecipientResult[]> {
    let info: RelayInfo
    try {
      info = (await transporter.sendMail(mail)) as RelayInfo
    } catch (e) {
      return failureResults(e as SmtpError, recipients, scrub)
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
      await renderer.close()
    },
  }
}

/**
 * What nodemailer is asked to build for a message, the same for either thread. The envelope is left out:
 * it is given per transaction, and keeps simulator addresses (and Bcc) off the wire while the headers
 * still show what the author wrote.
 */
function mailOptions(msg: OutgoingMessage): SendMailOptions {
  const mail: SendMailOptions = {
    messageId: formatMessageId(msg),
    from: msg.from,
    to: msg.to,
    cc: msg.cc,
    subject: msg.subject,
    headers: customHeaders(msg.headers),
  }
  if (msg.replyTo !== undefined && msg.replyTo.length > 0) mail.replyTo = msg.replyTo
  if (msg.html !== undefined) mail.html = msg.html
  if (msg.text !== undefined) mail.text = msg.text
  // relaxed/relaxed (nodemailer's canonicalisation), over the headers that matter to receivers.
  if (msg.dkim !== undefined) mail.dkim = { ...msg.dkim, headerFieldNames: DKIM_SIGNED_HEADERS }
  return mail
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
