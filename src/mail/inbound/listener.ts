// The SMTP listener for mail that comes back (INBOUND_SMTP_PORT): bounces (DSNs) mailed to VERP
// Return-Paths and feedback reports (ARF) mailed to the complaints address, and, with `receiving`, mail
// to any address at a verified domain with receiving on (receiving.ts keeps it; src/app/received.ts
// decides what). It is no relay: RCPT TO is refused unless it is a VERP address svc signed, the complaints
// address or a receiving domain's; a report is held in memory only while it is read (at most MAX_BYTES)
// and is never stored; what it means is decided in src/app/returned-mail.ts. The answer to DATA comes
// after the outcome is written, so a sender whose report could not be recorded (store down) gets a 451
// and tries again later. Returning mail and received mail never share a transaction: the RCPT of the
// second kind is answered 452 and the sender sends it in a transaction of its own (a report is read here,
// on this thread, and only within the reports' size; a received message only in the worker thread).
//
// Its slots go to senders that move mail (./slots.ts, README "Inbound connections and STARTTLS"): this
// file tells them what each connection does and answers with their refusals. STARTTLS only with the
// operator's certificate.
import type { FastifyBaseLogger } from 'fastify'
import { simpleParser, type Attachment } from 'mailparser'
import { readFile } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { Counter, type Registry } from 'prom-client'
import { SMTPServer, type SMTPServerSession } from 'smtp-server'
import {
  addressField, classifyDsn, type ComplaintMatch, type ReturnedMail, type ReturnedOutcome,
} from '../../domain/returned-mail.js'
import { DEFAULT_PREFIXES, type ConnectionLimits } from '../../domain/inbound-limits.js'
import { parseVerpAddress, type VerpClaims } from '../../domain/verp.js'
import { readFieldBlocks, scanHeaderFields, type Block } from './fields.js'
import type { Receiving, ReceivingTarget } from './receiving.js'
import { CLOSING, ConnectionSlots, TOO_MANY_UNKNOWN, type Closable, type SlotOutcome } from './slots.js'

export const INBOUND_LIMITS = {
  /** Reports carry a part of the original message at most; 256 KiB is ample. */
  maxBytes: 256 * 1024,
  maxClients: 20,
  /** Connections open at once from one remote address: a share of maxClients, so no one address holds them all. */
  connectionsPerAddress: 5,
  /** New connections per remote address and minute. */
  connectionsPerMinute: 60,
  /** Remote addresses whose per-minute count is remembered; past it, the one heard from least recently is forgotten. */
  trackedAddresses: 10_000,
  /** A connection with no useful command (MAIL, RCPT, DATA, STARTTLS; not NOOP, RSET, HELP, VRFY…) for this long is closed. */
  idleMs: 30_000,
  /** Socket silence that closes a connection, DATA included (RFC 5321 §4.5.3.2 suggests minutes; the idle rule is stricter outside DATA). */
  stallMs: 60_000,
  /** A connection is closed between transactions once this old (one in a transaction may finish it). */
  maxAgeMs: 5 * 60_000,
  /**
   * MAIL FROM to the answer after DATA: 2 minutes for the commands and the verdict, plus the largest message
   * at 20 KiB/s (about 160 kbit/s, a slow path): 10 MiB gets about 10.5 minutes, a 256 KiB report 2.2.
   */
  transactionBaseMs: 2 * 60_000,
  slowestBytesPerSecond: 20 * 1024,
  /** MAIL commands since the last DATA that count as activity; more is a MAIL/RSET loop. */
  usefulMails: 3,
  /** RCPT commands per transaction that count as activity (twice what a message may have). */
  usefulRcpts: 20,
  /** When every slot is taken, a newcomer takes the slot of a connection with no useful command for this long. */
  evictIdleMs: 5_000,
  /**
   * From DATA, the time before a message's rate is judged, and the slowest average it may come at then:
   * 1 KiB/s (8 kbit/s) is far below any path that carries mail, and a few slow DATA cannot hold the slots
   * for the whole transaction age.
   */
  dataGraceMs: 10_000,
  dataBytesPerSecond: 1024,
  recipientsPerMessage: 10,
  /**
   * Recipients refused (550) on one connection, whatever its transactions: past it, the next RCPT is
   * answered 421 and the connection closed. Each refusal is a store lookup, and a sender with the right
   * addresses does not guess; a real MTA with a few stale recipients stays well under it.
   */
  refusedRcpts: 20,
} as const

export interface InboundOptions {
  port: number
  host: string
  verpKey: Buffer
  /** Lower case; undefined: only VERP addresses are accepted. */
  complaintsAddress: string | undefined
  returnedMail: ReturnedMail
  logger: FastifyBaseLogger
  registry?: Registry
  maxBytes?: number
  connectionsPerMinute?: number
  /** Mail for domains with receiving on; undefined: refused like any other address. */
  receiving?: Receiving
  connectionsPerAddress?: number
  trackedAddresses?: number
  /** IPv4 prefix length counted as one sender (INBOUND_IPV4_PREFIX; default 32); IPv6 counts per /64. */
  ipv4Prefix?: number
  /** INBOUND_TLS_CERT / INBOUND_TLS_KEY (PEM files): STARTTLS is offered with them, not without. */
  tls?: { certFile: string; keyFile: string }
  /** Tests: the limits of INBOUND_LIMITS in small numbers. */
  maxClients?: number
  idleMs?: number
  maxAgeMs?: number
  transactionMs?: number
  evictIdleMs?: number
  dataGraceMs?: number
}

type Kind = 'dsn' | 'arf' | 'other' | 'rcpt' | 'connection' | 'received'
type Outcome = ReturnedOutcome | 'refused' | 'forged' | 'mixed' | 'too_large' | 'failed' | 'received' | 'over_limit' | 'unreadable' | SlotOutcome

const DSN_TYPES = new Set(['message/delivery-status', 'message/global-delivery-status'])
const ORIGINAL_TYPES = new Set(['message/rfc822', 'text/rfc822-headers', 'message/global', 'message/global-headers'])

function smtpError (message: string, responseCode: number): Error {
  return Object.assign(new Error(message), { responseCode })
}

/** RCPT of returning mail in a transaction of received mail, or the other way round (RFC 5321 §4.5.3.1.10: the sender sends it later). */
const MIXED = '4.5.3 Returning mail and received mail go in separate transactions; send this recipient in another'

/** `Alice <alice@example.net>` or `alice@example.net` → the address, lower case. */
function mailboxOf (value: string | undefined): string | null {
  if (value === undefined) return null
  const open = value.lastIndexOf('<')
  const close = value.lastIndexOf('>')
  return addressField(open >= 0 && close > open ? value.slice(open, close + 1) : value)
}

interface Envelope {
  verp: VerpClaims[]
  complaints: boolean
  /** Receiving: the envelope sender and who takes the message. */
  mailFrom: string
  receiving: ReceivingTarget[]
}

const newEnvelope = (mailFrom = ''): Envelope => ({ verp: [], complaints: false, mailFrom, receiving: [] })

export class InboundMail {
  readonly name = 'inbound-smtp'
  private server: SMTPServer | undefined
  private readonly counter: Counter<'kind' | 'outcome'> | undefined
  private readonly maxBytes: number
  /** Who may connect, and for how long (./slots.ts). */
  private readonly slots: ConnectionSlots
  /** The idle limit, which also bounds the socket's silence. */
  private readonly idleMs: number
  private sweeper: NodeJS.Timeout | undefined
  private listening: number | undefined
  /** Per connection: aborted when it closes, so that the work on its message stops (receive()). */
  private readonly hangUps = new WeakMap<SMTPServerSession, AbortController>()

  constructor (private readonly options: InboundOptions) {
    this.maxBytes = options.maxBytes ?? INBOUND_LIMITS.maxBytes
    const largest = Math.max(this.maxBytes, options.receiving?.maxBytes ?? 0)
    const limits: ConnectionLimits = {
      idleMs: options.idleMs ?? INBOUND_LIMITS.idleMs,
      maxAgeMs: options.maxAgeMs ?? INBOUND_LIMITS.maxAgeMs,
      transactionMs: options.transactionMs ?? INBOUND_LIMITS.transactionBaseMs + Math.ceil(largest / INBOUND_LIMITS.slowestBytesPerSecond) * 1000,
      usefulMails: INBOUND_LIMITS.usefulMails,
      usefulRcpts: INBOUND_LIMITS.usefulRcpts,
      dataGraceMs: options.dataGraceMs ?? INBOUND_LIMITS.dataGraceMs,
      dataBytesPerSecond: INBOUND_LIMITS.dataBytesPerSecond,
    }
    this.idleMs = limits.idleMs
    this.slots = new ConnectionSlots({
      maxClients: options.maxClients ?? INBOUND_LIMITS.maxClients,
      perAddress: options.connectionsPerAddress ?? INBOUND_LIMITS.connectionsPerAddress,
      perMinute: options.connectionsPerMinute ?? INBOUND_LIMITS.connectionsPerMinute,
      trackedAddresses: options.trackedAddresses ?? INBOUND_LIMITS.trackedAddresses,
      evictIdleMs: options.evictIdleMs ?? INBOUND_LIMITS.evictIdleMs,
      refusedRcpts: INBOUND_LIMITS.refusedRcpts,
      prefixes: { ...DEFAULT_PREFIXES, ipv4: options.ipv4Prefix ?? DEFAULT_PREFIXES.ipv4 },
      limits,
    }, (outcome) => this.count('connection', outcome))
    this.counter = options.registry
      ? new Counter({
          name: 'svc_inbound_messages_total',
          help: 'Returning and received mail by kind (dsn, arf, other, received; rcpt and connection for refusals) and outcome',
          labelNames: ['kind', 'outcome'] as const,
          registers: [options.registry],
        })
      : undefined
  }

  /** The port it listens on (after start). */
  get port (): number {
    if (this.listening === undefined) throw new Error('the inbound listener is not started')
    return this.listening
  }

  private count (kind: Kind, outcome: Outcome): void {
    this.counter?.inc({ kind, outcome })
  }

  /** Connections admitted and open now (tests). */
  get openCount (): number {
    return this.slots.openCount
  }

  /** Addresses whose per-minute count is remembered now (tests). */
  get trackedCount (): number {
    return this.slots.trackedCount
  }

  async start (): Promise<void> {
    const envelopes = new WeakMap<SMTPServerSession, Envelope>()
    const envelopeOf = (session: SMTPServerSession): Envelope => {
      let e = envelopes.get(session)
      if (e === undefined) {
        e = newEnvelope()
        envelopes.set(session, e)
      }
      return e
    }
    // Read here, not kept in the config: the files as they are when the listener starts.
    const tls = this.options.tls !== undefined
      ? { cert: await readFile(this.options.tls.certFile), key: await readFile(this.options.tls.keyFile) }
      : undefined
    this.server = new SMTPServer({
      logger: false,
      authOptional: true,
      // STARTTLS only with the operator's certificate: smtp-server's built-in one has a published key.
      disabledCommands: tls !== undefined ? ['AUTH'] : ['AUTH', 'STARTTLS'],
      ...tls,
      size: Math.max(this.maxBytes, this.options.receiving?.maxBytes ?? 0),
      // smtp-server's own ceiling counts connections before onConnect too; maxClients (admitted ones) is
      // counted by the slots, so that a newcomer can take the slot of an idle connection (onConnect).
      maxClients: this.slots.maxClients * 2,
      banner: 'svc returning mail',
      // Silence on the socket; the idle rule (sweep) is stricter outside DATA.
      socketTimeout: Math.max(INBOUND_LIMITS.stallMs, this.idleMs),
      closeTimeout: 1000,
      // No PTR lookup: nothing here reads the client's host name, and a lookup in a zone the client
      // controls may take 1.5 s of every connection.
      disableReverseLookup: true,
      onConnect: (session, cb) => {
        let connection: Closable | undefined
        for (const c of this.server?.connections ?? []) {
          if (c.session === session) connection = c
        }
        const refusal = this.slots.admit(session, connection)
        cb(refusal === null ? undefined : smtpError(refusal, 421))
      },
      onSecure: (_socket, session, cb) => {
        this.slots.lifeOf(session)?.secured(Date.now())
        cb()
      },
      onClose: (session) => {
        this.slots.letGo(session)
        this.hungUp(session).abort()
      },
      onMailFrom: (address, session, cb) => {
        if (!this.slots.mail(session)) return cb(smtpError(CLOSING.age, 421))
        envelopes.set(session, newEnvelope(address.address))
        cb()
      },
      onRcptTo: (address, session, cb) => {
        // Before any lookup: a connection that has guessed enough is closed (smtp-server closes after a 421).
        if (!this.slots.rcpt(session)) return cb(smtpError(TOO_MANY_UNKNOWN, 421))
        const e = envelopeOf(session)
        if (e.verp.length + (e.complaints ? 1 : 0) + e.receiving.length >= INBOUND_LIMITS.recipientsPerMessage) return cb(smtpError('Too many recipients', 452))
        const a = address.address.toLowerCase()
        const mixed = () => {
          this.count('rcpt', 'mixed')
          cb(smtpError(MIXED, 452))
        }
        if (this.options.complaintsAddress !== undefined && a === this.options.complaintsAddress) {
          if (e.receiving.length > 0) return mixed()
          e.complaints = true
          return cb()
        }
        const v = parseVerpAddress(this.options.verpKey, a)
        if (typeof v === 'object') {
          if (e.receiving.length > 0) return mixed()
          e.verp.push(v)
          return cb()
        }
        if (v === 'not_verp' && this.options.receiving !== undefined) {
          // Before the lookup: a transaction of returning mail costs no store read for another kind.
          if (e.complaints || e.verp.length > 0) return mixed()
          return this.receivingRcpt(this.options.receiving, address.address, e, session, cb)
        }
        this.slots.refusedRecipient(session)
        this.count('rcpt', v === 'forged' ? 'forged' : 'refused')
        cb(smtpError('5.1.1 No such recipient here', 550))
      },
      onData: (stream, session, cb) => {
        const life = this.slots.lifeOf(session)
        life?.data(Date.now())
        const chunks: Buffer[] = []
        let size = 0
        let tooLarge = false
        const receiving = envelopeOf(session).receiving.length > 0
        const limit = receiving ? this.options.receiving!.maxBytes : this.maxBytes
        stream.on('data', (chunk: Buffer) => {
          life?.received(Date.now(), chunk.length)
          if (tooLarge) return
          size += chunk.length
          if (size > limit) {
            tooLarge = true
            chunks.length = 0
          } else {
            chunks.push(chunk)
          }
        })
        stream.on('error', () => {})
        stream.on('end', () => {
          life?.dataEnd(Date.now())
          if (tooLarge || stream.sizeExceeded) {
            this.count(receiving ? 'received' : 'other', 'too_large')
            return cb(smtpError(`5.3.4 Message too big (at most ${limit} bytes)`, 552))
          }
          const envelope = envelopeOf(session)
          const raw = Buffer.concat(chunks)
          // One kind per transaction (onRcptTo): a received message goes to the worker thread, a report
          // (at most maxBytes) is read here.
          const taken = receiving
            ? this.receive(raw, envelope, session)
            : envelope.verp.length > 0 || envelope.complaints ? this.handle(raw, envelope) : Promise.resolve()
          taken.then(() => cb(), (err: unknown) => {
            if (typeof (err as { responseCode?: unknown }).responseCode === 'number') return cb(err as Error)
            this.options.logger.error({ err }, 'inbound: could not record returning mail; the sender will retry')
            cb(smtpError('4.3.0 Could not record this report now, try again later', 451))
          })
        })
      },
    })
    this.server.on('error', (err) => this.options.logger.warn({ err }, 'inbound: SMTP connection error'))
    await new Promise<void>((resolve, reject) => {
      const server = this.server!.server
      server.once('error', reject)
      this.server!.listen(this.options.port, this.options.host, () => {
        server.off('error', reject)
        this.listening = (server.address() as AddressInfo).port
        resolve()
      })
    })
    this.sweeper = setInterval(() => this.slots.sweep(), this.slots.sweepEveryMs)
    this.sweeper.unref()
    this.options.logger.info({ port: this.listening, starttls: tls !== undefined }, 'inbound: listening for returning mail')
  }

  async stop (): Promise<void> {
    clearInterval(this.sweeper)
    this.sweeper = undefined
    const server = this.server
    this.server = undefined
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()))
  }

  /** RCPT TO an address that is not svc's own: taken when a domain with receiving on is its domain. */
  private receivingRcpt (receiving: Receiving, address: string, e: Envelope, session: SMTPServerSession, cb: (err?: Error | null) => void): void {
    receiving.recipient(address).then((targets) => {
      if (targets === 'full') {
        this.count('received', 'over_limit')
        return cb(smtpError('4.2.2 Mailbox full, try again later', 452))
      }
      if (targets.length === 0) {
        this.slots.refusedRecipient(session)
        this.count('rcpt', 'refused')
        return cb(smtpError('5.1.1 No such recipient here', 550))
      }
      e.receiving.push(...targets)
      cb()
    }, (err: unknown) => {
      this.options.logger.error({ err }, 'inbound: could not look up a recipient; the sender will retry')
      cb(smtpError('4.3.0 Could not check this recipient now, try again later', 451))
    })
  }

  /** The connection's hang-up: aborted by onClose (made already aborted when it closed first). */
  private hungUp (session: SMTPServerSession): AbortController {
    let c = this.hangUps.get(session)
    if (c === undefined) {
      c = new AbortController()
      this.hangUps.set(session, c)
    }
    return c
  }

  /**
   * Keeps a received message for each account it is for. Rejects only when the store could not be written,
   * or with the 451 of receiving's bounds (every job taken, not read by the deadline, the connection gone).
   */
  private async receive (raw: Buffer, envelope: Envelope, session: SMTPServerSession): Promise<void> {
    const outcomes = await this.options.receiving!.take(raw, {
      mailFrom: envelope.mailFrom, targets: envelope.receiving, ip: session.remoteAddress, helo: session.hostNameAppearsAs ?? '',
      signal: this.hungUp(session).signal,
    })
    for (const outcome of outcomes) this.count('received', outcome)
    // Refused only when no account kept it; a copy kept for one account is a 250 for the sender.
    if (outcomes.every((o) => o === 'unreadable')) throw smtpError('5.6.0 This message could not be read', 554)
    if (outcomes.every((o) => o === 'over_limit')) throw smtpError('4.2.2 Mailbox full, try again later', 452)
  }

  /** Reads one message and records what it means. Rejects only when the store could not be written. */
  private async handle (raw: Buffer, envelope: Envelope): Promise<void> {
    let attachments: Attachment[]
    let text: string
    try {
      const parsed = await simpleParser(raw, {
        keepDeliveryStatus: true, skipHtmlToText: true, skipTextToHtml: true, skipTextLinks: true, skipImageLinks: true,
      })
      attachments = parsed.attachments
      text = parsed.text ?? ''
    } catch {
      this.count('other', 'ignored')
      return
    }
    const part = (types: Set<string> | string) => attachments.find((a) =>
      typeof types === 'string' ? a.contentType === types : types.has(a.contentType))
    const arf = part('message/feedback-report')
    const dsn = part(DSN_TYPES)
    if (arf !== undefined) {
      const fields: Block = readFieldBlocks(arf.content.toString('utf8'))[0] ?? new Map<string, string>()
      const original = part(ORIGINAL_TYPES)
      const headers = original !== undefined
        ? [...(readFieldBlocks(original.content.toString('utf8'))[0] ?? new Map<string, string>()).entries()].map(([name, value]) => ({ name, value }))
        // An inline original is folded into the text by mailparser: its header lines are still there.
        : scanHeaderFields(`${text}\n${raw.toString('utf8')}`, ['return-path'])
      // Only signed VERP addresses tie a report to a recipient (src/app/returned-mail.ts).
      const match: ComplaintMatch = { verp: [...envelope.verp] }
      const verpOf = (value: string | undefined) => {
        const a = mailboxOf(value)
        const v = a === null ? 'not_verp' : parseVerpAddress(this.options.verpKey, a)
        if (typeof v === 'object') match.verp.push(v)
      }
      verpOf(fields.get('original-mail-from'))
      for (const h of headers) {
        if (h.name === 'return-path') verpOf(h.value)
      }
      const outcome = await this.options.returnedMail.feedback(fields.get('feedback-type') ?? '', fields.get('user-agent') ?? '', match)
      this.count('arf', outcome)
      return
    }
    if (dsn !== undefined) {
      const verdict = classifyDsn(readFieldBlocks(dsn.content.toString('utf8')))
      if (envelope.verp.length === 0) {
        // A DSN to the complaints address names no email we can trust.
        this.count('dsn', 'unmatched')
        return
      }
      for (const claims of envelope.verp) this.count('dsn', await this.options.returnedMail.deliveryStatus(claims, verdict))
      return
    }
    this.count('other', 'ignored')
  }
}
