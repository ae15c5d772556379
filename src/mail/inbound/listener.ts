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
// Its slots go to senders that move mail (README "Inbound connections and STARTTLS"): counts per sender
// network (addressKey), and each admitted connection's clock (ConnectionLife, src/domain/inbound-limits.ts)
// read by a sweep that closes with 421 4.4.2 the idle, the too old, the too long transactions and the DATA
// too slow; a newcomer finding every slot taken puts out the connection idle longest. STARTTLS only with the
// operator's certificate.
import type { FastifyBaseLogger } from 'fastify'
import { simpleParser, type Attachment } from 'mailparser'
import { readFile } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { Counter, type Registry } from 'prom-client'
import { SMTPServer, type SMTPServerSession } from 'smtp-server'
import {
  addressField, classifyDsn, type ComplaintMatch, type ReturnedMailService, type ReturnedOutcome,
} from '../../app/returned-mail.js'
import { addressKey, ConnectionLife, DEFAULT_PREFIXES, type CloseReason, type ConnectionLimits, type PrefixLengths } from '../../domain/inbound-limits.js'
import { parseVerpAddress, type VerpClaims } from '../../domain/verp.js'
import { readFieldBlocks, scanHeaderFields, type Block } from './fields.js'
import type { Receiving, ReceivingTarget } from './receiving.js'

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
  returnedMail: ReturnedMailService
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
type Outcome = ReturnedOutcome | 'refused' | 'forged' | 'mixed' | 'too_large' | 'failed' | 'received' | 'over_limit' | 'unreadable' | CloseReason | 'evicted' | 'refused_rcpts'

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

/** An admitted connection: how to close it, the sender it counts for, its clock, and the recipients refused to it. */
interface Admitted {
  connection: { send(code: number, data?: string): void }
  key: string
  life: ConnectionLife
  refused: number
}

const CLOSING: Record<CloseReason | 'evicted', string> = {
  idle: '4.4.2 No mail moved for too long, closing connection',
  age: '4.4.2 Connection open too long, closing; reconnect to send more',
  transaction_age: '4.4.2 This transaction took too long, closing connection',
  slow_data: '4.4.2 The message is arriving too slowly, closing connection',
  evicted: '4.4.2 Every slot is taken and this connection was idle, closing it; try again later',
}

const newEnvelope = (mailFrom = ''): Envelope => ({ verp: [], complaints: false, mailFrom, receiving: [] })

export class InboundMail {
  readonly name = 'inbound-smtp'
  private server: SMTPServer | undefined
  private readonly counter: Counter<'kind' | 'outcome'> | undefined
  private readonly maxBytes: number
  private readonly perMinute: number
  private readonly perAddress: number
  private readonly tracked: number
  /** Per sender (addressKey: the /64, or the IPv4 prefix): its current one-minute window; least recently heard first (Map order). */
  private readonly windows = new Map<string, { startedAt: number; n: number }>()
  /** Per sender (addressKey): connections open now (only those admitted and not yet let go). */
  private readonly openFrom = new Map<string, number>()
  /** The connections admitted and not yet let go: what maxClients counts and the sweep looks at. */
  private readonly open = new Map<SMTPServerSession, Admitted>()
  private readonly prefixes: PrefixLengths
  private readonly limits: ConnectionLimits
  private readonly maxClients: number
  private readonly evictIdleMs: number
  private sweeper: NodeJS.Timeout | undefined
  private listening: number | undefined
  /** Per connection: aborted when it closes, so that the work on its message stops (receive()). */
  private readonly hangUps = new WeakMap<SMTPServerSession, AbortController>()

  constructor (private readonly o: InboundOptions) {
    this.maxBytes = o.maxBytes ?? INBOUND_LIMITS.maxBytes
    this.perMinute = o.connectionsPerMinute ?? INBOUND_LIMITS.connectionsPerMinute
    this.perAddress = o.connectionsPerAddress ?? INBOUND_LIMITS.connectionsPerAddress
    this.tracked = o.trackedAddresses ?? INBOUND_LIMITS.trackedAddresses
    this.prefixes = { ...DEFAULT_PREFIXES, ipv4: o.ipv4Prefix ?? DEFAULT_PREFIXES.ipv4 }
    this.maxClients = o.maxClients ?? INBOUND_LIMITS.maxClients
    this.evictIdleMs = o.evictIdleMs ?? INBOUND_LIMITS.evictIdleMs
    const largest = Math.max(this.maxBytes, o.receiving?.maxBytes ?? 0)
    this.limits = {
      idleMs: o.idleMs ?? INBOUND_LIMITS.idleMs,
      maxAgeMs: o.maxAgeMs ?? INBOUND_LIMITS.maxAgeMs,
      transactionMs: o.transactionMs ?? INBOUND_LIMITS.transactionBaseMs + Math.ceil(largest / INBOUND_LIMITS.slowestBytesPerSecond) * 1000,
      usefulMails: INBOUND_LIMITS.usefulMails,
      usefulRcpts: INBOUND_LIMITS.usefulRcpts,
      dataGraceMs: o.dataGraceMs ?? INBOUND_LIMITS.dataGraceMs,
      dataBytesPerSecond: INBOUND_LIMITS.dataBytesPerSecond,
    }
    this.counter = o.registry
      ? new Counter({
          name: 'svc_inbound_messages_total',
          help: 'Returning and received mail by kind (dsn, arf, other, received; rcpt and connection for refusals) and outcome',
          labelNames: ['kind', 'outcome'] as const,
          registers: [o.registry],
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

  /** Counts a new connection from the sender `address` (its addressKey) in its minute; false when it is over perMinute. */
  private admit (address: string): boolean {
    const now = Date.now()
    let w = this.windows.get(address)
    if (w === undefined || now - w.startedAt >= 60_000) w = { startedAt: now, n: 0 }
    w.n += 1
    // Re-inserted: the map's first entry is always the address heard from least recently, the one
    // forgotten when the map is full (never all of them at once).
    this.windows.delete(address)
    this.windows.set(address, w)
    if (this.windows.size > this.tracked) this.windows.delete(this.windows.keys().next().value!)
    return w.n <= this.perMinute
  }

  /** Stops counting a connection (closed, or being closed by svc); safe to call twice. */
  private letGo (session: SMTPServerSession): void {
    const a = this.open.get(session)
    if (a === undefined) return
    this.open.delete(session)
    const left = (this.openFrom.get(a.key) ?? 1) - 1
    if (left > 0) this.openFrom.set(a.key, left)
    else this.openFrom.delete(a.key)
  }

  /** Answers `421 4.4.2` and closes the connection (smtp-server closes after any 421). */
  private closeFor (session: SMTPServerSession, a: Admitted, reason: CloseReason | 'evicted'): void {
    this.letGo(session)
    this.count('connection', reason)
    a.connection.send(421, CLOSING[reason])
  }

  /** Closes the connections over a limit; runs every sweepMs while the listener runs. */
  private sweep (): void {
    const now = Date.now()
    for (const [session, a] of this.open) {
      // smtp-server empties the envelope when a transaction ends (the answer after DATA, RSET, STARTTLS).
      if (a.life.inTransaction && session.envelope.mailFrom === false) a.life.ended(now)
      const reason = a.life.overdue(now)
      if (reason !== null) this.closeFor(session, a, reason)
    }
  }

  /** The admitted connection that has gone longest without a useful command, if that is at least evictIdleMs. */
  private idlest (now: number): [SMTPServerSession, Admitted] | undefined {
    let found: [SMTPServerSession, Admitted] | undefined
    let longest = this.evictIdleMs
    for (const [session, a] of this.open) {
      const idle = a.life.idleFor(now)
      if (idle >= longest) {
        found = [session, a]
        longest = idle
      }
    }
    return found
  }

  /** Connections admitted and open now (tests). */
  get openCount (): number {
    return this.open.size
  }

  /** Addresses whose per-minute count is remembered now (tests). */
  get trackedCount (): number {
    return this.windows.size
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
    const tls = this.o.tls !== undefined
      ? { cert: await readFile(this.o.tls.certFile), key: await readFile(this.o.tls.keyFile) }
      : undefined
    this.server = new SMTPServer({
      logger: false,
      authOptional: true,
      // STARTTLS only with the operator's certificate: smtp-server's built-in one has a published key.
      disabledCommands: tls !== undefined ? ['AUTH'] : ['AUTH', 'STARTTLS'],
      ...tls,
      size: Math.max(this.maxBytes, this.o.receiving?.maxBytes ?? 0),
      // smtp-server's own ceiling counts connections before onConnect too; maxClients (admitted ones) is
      // counted here, so that a newcomer can take the slot of an idle connection (onConnect).
      maxClients: this.maxClients * 2,
      banner: 'svc returning mail',
      // Silence on the socket; the idle rule (sweep) is stricter outside DATA.
      socketTimeout: Math.max(INBOUND_LIMITS.stallMs, this.limits.idleMs),
      closeTimeout: 1000,
      // No PTR lookup: nothing here reads the client's host name, and a lookup in a zone the client
      // controls may take 1.5 s of every connection.
      disableReverseLookup: true,
      onConnect: (session, cb) => {
        const key = addressKey(session.remoteAddress, this.prefixes)
        if (!this.admit(key)) {
          this.count('connection', 'refused')
          return cb(smtpError('Too many connections, try again later', 421))
        }
        const open = this.openFrom.get(key) ?? 0
        if (open >= this.perAddress) {
          this.count('connection', 'refused')
          return cb(smtpError('Too many connections from your address, try again later', 421))
        }
        let connection: Admitted['connection'] | undefined
        for (const c of this.server?.connections ?? []) {
          if (c.session === session) connection = c
        }
        // Cannot happen (smtp-server adds the connection before it asks): refused rather than left unwatched.
        if (connection === undefined) return cb(smtpError('Try again later', 421))
        const now = Date.now()
        if (this.open.size >= this.maxClients) {
          // Every slot taken: the connection idle longest goes, if it has been idle for evictIdleMs;
          // one that moves mail (or is in DATA) is never put out for a newcomer.
          const idlest = this.idlest(now)
          if (idlest === undefined) {
            this.count('connection', 'refused')
            return cb(smtpError('Too many connections, try again in a moment', 421))
          }
          this.closeFor(idlest[0], idlest[1], 'evicted')
        }
        // Read again: the connection evicted may have been this sender's own, and its count has just gone down.
        this.openFrom.set(key, (this.openFrom.get(key) ?? 0) + 1)
        this.open.set(session, { connection, key, life: new ConnectionLife(now, this.limits), refused: 0 })
        cb()
      },
      onSecure: (_socket, session, cb) => {
        this.open.get(session)?.life.secured(Date.now())
        cb()
      },
      onClose: (session) => {
        this.letGo(session)
        this.hungUp(session).abort()
      },
      onMailFrom: (address, session, cb) => {
        const admitted = this.open.get(session)
        if (admitted !== undefined && !admitted.life.mail(Date.now())) {
          this.letGo(session)
          this.count('connection', 'age')
          return cb(smtpError(CLOSING.age, 421))
        }
        envelopes.set(session, newEnvelope(address.address))
        cb()
      },
      onRcptTo: (address, session, cb) => {
        const admitted = this.open.get(session)
        admitted?.life.rcpt(Date.now())
        if (admitted !== undefined && admitted.refused >= INBOUND_LIMITS.refusedRcpts) {
          // Before any lookup: the connection has guessed enough (smtp-server closes after a 421).
          this.letGo(session)
          this.count('connection', 'refused_rcpts')
          return cb(smtpError('4.7.0 Too many unknown recipients, closing connection', 421))
        }
        const e = envelopeOf(session)
        if (e.verp.length + (e.complaints ? 1 : 0) + e.receiving.length >= INBOUND_LIMITS.recipientsPerMessage) return cb(smtpError('Too many recipients', 452))
        const a = address.address.toLowerCase()
        const mixed = () => {
          this.count('rcpt', 'mixed')
          cb(smtpError(MIXED, 452))
        }
        if (this.o.complaintsAddress !== undefined && a === this.o.complaintsAddress) {
          if (e.receiving.length > 0) return mixed()
          e.complaints = true
          return cb()
        }
        const v = parseVerpAddress(this.o.verpKey, a)
        if (typeof v === 'object') {
          if (e.receiving.length > 0) return mixed()
          e.verp.push(v)
          return cb()
        }
        if (v === 'not_verp' && this.o.receiving !== undefined) {
          // Before the lookup: a transaction of returning mail costs no store read for another kind.
          if (e.complaints || e.verp.length > 0) return mixed()
          return this.receivingRcpt(this.o.receiving, address.address, e, admitted, cb)
        }
        if (admitted !== undefined) admitted.refused++
        this.count('rcpt', v === 'forged' ? 'forged' : 'refused')
        cb(smtpError('5.1.1 No such recipient here', 550))
      },
      onData: (stream, session, cb) => {
        const life = this.open.get(session)?.life
        life?.data(Date.now())
        const chunks: Buffer[] = []
        let size = 0
        let tooLarge = false
        const receiving = envelopeOf(session).receiving.length > 0
        const limit = receiving ? this.o.receiving!.maxBytes : this.maxBytes
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
            this.o.logger.error({ err }, 'inbound: could not record returning mail; the sender will retry')
            cb(smtpError('4.3.0 Could not record this report now, try again later', 451))
          })
        })
      },
    })
    this.server.on('error', (err) => this.o.logger.warn({ err }, 'inbound: SMTP connection error'))
    await new Promise<void>((resolve, reject) => {
      const server = this.server!.server
      server.once('error', reject)
      this.server!.listen(this.o.port, this.o.host, () => {
        server.off('error', reject)
        this.listening = (server.address() as AddressInfo).port
        resolve()
      })
    })
    // A fifth of the shortest limit, between 20 ms (tests) and 1 s: a limit is kept to within a second.
    const { idleMs, maxAgeMs, transactionMs, dataGraceMs } = this.limits
    this.sweeper = setInterval(() => this.sweep(), Math.min(1000, Math.max(20, Math.floor(Math.min(idleMs, maxAgeMs, transactionMs, dataGraceMs) / 5))))
    this.sweeper.unref()
    this.o.logger.info({ port: this.listening, starttls: tls !== undefined }, 'inbound: listening for returning mail')
  }

  async stop (): Promise<void> {
    clearInterval(this.sweeper)
    this.sweeper = undefined
    const server = this.server
    this.server = undefined
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()))
  }

  /** RCPT TO an address that is not svc's own: taken when a domain with receiving on is its domain. */
  private receivingRcpt (receiving: Receiving, address: string, e: Envelope, admitted: Admitted | undefined, cb: (err?: Error | null) => void): void {
    receiving.recipient(address).then((targets) => {
      if (targets === 'full') {
        this.count('received', 'over_limit')
        return cb(smtpError('4.2.2 Mailbox full, try again later', 452))
      }
      if (targets.length === 0) {
        if (admitted !== undefined) admitted.refused++
        this.count('rcpt', 'refused')
        return cb(smtpError('5.1.1 No such recipient here', 550))
      }
      e.receiving.push(...targets)
      cb()
    }, (err: unknown) => {
      this.o.logger.error({ err }, 'inbound: could not look up a recipient; the sender will retry')
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
    const outcomes = await this.o.receiving!.take(raw, {
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
    let text = ''
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
      const fields: Block = readFieldBlocks(arf.content.toString('utf8'))[0] ?? new Map()
      const original = part(ORIGINAL_TYPES)
      const headers = original !== undefined
        ? [...(readFieldBlocks(original.content.toString('utf8'))[0] ?? new Map()).entries()].map(([name, value]) => ({ name, value }))
        // An inline original is folded into the text by mailparser: its header lines are still there.
        : scanHeaderFields(`${text}\n${raw.toString('utf8')}`, ['return-path'])
      // Only signed VERP addresses tie a report to a recipient (src/app/returned-mail.ts).
      const match: ComplaintMatch = { verp: [...envelope.verp] }
      const verpOf = (value: string | undefined) => {
        const a = mailboxOf(value)
        const v = a === null ? 'not_verp' : parseVerpAddress(this.o.verpKey, a)
        if (typeof v === 'object') match.verp.push(v)
      }
      verpOf(fields.get('original-mail-from'))
      for (const h of headers) {
        if (h.name === 'return-path') verpOf(h.value)
      }
      const outcome = await this.o.returnedMail.feedback(fields.get('feedback-type') ?? '', fields.get('user-agent') ?? '', match)
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
      for (const claims of envelope.verp) this.count('dsn', await this.o.returnedMail.deliveryStatus(claims, verdict))
      return
    }
    this.count('other', 'ignored')
  }
}
