// The SMTP listener for mail that comes back (INBOUND_SMTP_PORT): bounces (DSNs) mailed to VERP
// Return-Paths and feedback reports (ARF) mailed to the complaints address, and, with `receiving`, mail
// to any address at a verified domain with receiving on (receiving.ts keeps it; src/app/received.ts
// decides what). It is no relay: RCPT TO is refused unless it is a VERP address svc signed, the complaints
// address or a receiving domain's; a report is held in memory only while it is read (at most MAX_BYTES)
// and is never stored; what it means is decided in src/app/returned-mail.ts. The answer to DATA comes
// after the outcome is written, so a sender whose report could not be recorded (store down) gets a 451
// and tries again later.
import type { FastifyBaseLogger } from 'fastify'
import { simpleParser, type Attachment } from 'mailparser'
import type { AddressInfo } from 'node:net'
import { Counter, type Registry } from 'prom-client'
import { SMTPServer, type SMTPServerSession } from 'smtp-server'
import {
  addressField, classifyDsn, type ComplaintMatch, type ReturnedMailService, type ReturnedOutcome,
} from '../../app/returned-mail.js'
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
  /** A connection that says nothing for this long is closed. */
  idleMs: 30_000,
  recipientsPerMessage: 10,
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
}

type Kind = 'dsn' | 'arf' | 'other' | 'rcpt' | 'connection' | 'received'
type Outcome = ReturnedOutcome | 'refused' | 'forged' | 'too_large' | 'failed' | 'received' | 'over_limit' | 'unreadable'

const DSN_TYPES = new Set(['message/delivery-status', 'message/global-delivery-status'])
const ORIGINAL_TYPES = new Set(['message/rfc822', 'text/rfc822-headers', 'message/global', 'message/global-headers'])

function smtpError (message: string, responseCode: number): Error {
  return Object.assign(new Error(message), { responseCode })
}

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
  private readonly perMinute: number
  private readonly perAddress: number
  private readonly tracked: number
  /** Per remote address: its current one-minute window; least recently heard first (Map order). */
  private readonly windows = new Map<string, { startedAt: number; n: number }>()
  /** Per remote address: connections open now (only those admitted). */
  private readonly openFrom = new Map<string, number>()
  private listening: number | undefined

  constructor (private readonly o: InboundOptions) {
    this.maxBytes = o.maxBytes ?? INBOUND_LIMITS.maxBytes
    this.perMinute = o.connectionsPerMinute ?? INBOUND_LIMITS.connectionsPerMinute
    this.perAddress = o.connectionsPerAddress ?? INBOUND_LIMITS.connectionsPerAddress
    this.tracked = o.trackedAddresses ?? INBOUND_LIMITS.trackedAddresses
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

  /** Counts a new connection from `address` in its minute; false when it is over perMinute. */
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
    const counted = new WeakSet<SMTPServerSession>()
    this.server = new SMTPServer({
      logger: false,
      authOptional: true,
      disabledCommands: ['AUTH', 'STARTTLS'],
      size: Math.max(this.maxBytes, this.o.receiving?.maxBytes ?? 0),
      maxClients: INBOUND_LIMITS.maxClients,
      banner: 'svc returning mail',
      socketTimeout: INBOUND_LIMITS.idleMs,
      closeTimeout: 1000,
      onConnect: (session, cb) => {
        const address = session.remoteAddress
        if (!this.admit(address)) {
          this.count('connection', 'refused')
          return cb(smtpError('Too many connections, try again later', 421))
        }
        const open = this.openFrom.get(address) ?? 0
        if (open >= this.perAddress) {
          this.count('connection', 'refused')
          return cb(smtpError('Too many connections from your address, try again later', 421))
        }
        this.openFrom.set(address, open + 1)
        counted.add(session)
        cb()
      },
      onClose: (session) => {
        if (!counted.has(session)) return
        counted.delete(session)
        const open = (this.openFrom.get(session.remoteAddress) ?? 1) - 1
        if (open > 0) this.openFrom.set(session.remoteAddress, open)
        else this.openFrom.delete(session.remoteAddress)
      },
      onMailFrom: (address, session, cb) => {
        envelopes.set(session, newEnvelope(address.address))
        cb()
      },
      onRcptTo: (address, session, cb) => {
        const e = envelopeOf(session)
        if (e.verp.length + (e.complaints ? 1 : 0) + e.receiving.length >= INBOUND_LIMITS.recipientsPerMessage) return cb(smtpError('Too many recipients', 452))
        const a = address.address.toLowerCase()
        if (this.o.complaintsAddress !== undefined && a === this.o.complaintsAddress) {
          e.complaints = true
          return cb()
        }
        const v = parseVerpAddress(this.o.verpKey, a)
        if (typeof v === 'object') {
          e.verp.push(v)
          return cb()
        }
        if (v === 'not_verp' && this.o.receiving !== undefined) return this.receivingRcpt(this.o.receiving, address.address, e, cb)
        this.count('rcpt', v === 'forged' ? 'forged' : 'refused')
        cb(smtpError('5.1.1 No such recipient here', 550))
      },
      onData: (stream, session, cb) => {
        const chunks: Buffer[] = []
        let size = 0
        let tooLarge = false
        const receiving = envelopeOf(session).receiving.length > 0
        const limit = receiving ? this.o.receiving!.maxBytes : this.maxBytes
        stream.on('data', (chunk: Buffer) => {
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
          if (tooLarge || stream.sizeExceeded) {
            this.count(receiving ? 'received' : 'other', 'too_large')
            return cb(smtpError(`5.3.4 Message too big (at most ${limit} bytes)`, 552))
          }
          const envelope = envelopeOf(session)
          const raw = Buffer.concat(chunks)
          const taken = receiving
            ? this.receive(raw, envelope, session)
            : Promise.resolve()
          taken.then(() => (envelope.verp.length > 0 || envelope.complaints ? this.handle(raw, envelope) : undefined)).then(() => cb(), (err: unknown) => {
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
    this.o.logger.info({ port: this.listening }, 'inbound: listening for returning mail')
  }

  async stop (): Promise<void> {
    const server = this.server
    this.server = undefined
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()))
  }

  /** RCPT TO an address that is not svc's own: taken when a domain with receiving on is its domain. */
  private receivingRcpt (receiving: Receiving, address: string, e: Envelope, cb: (err?: Error | null) => void): void {
    receiving.recipient(address).then((targets) => {
      if (targets === 'full') {
        this.count('received', 'over_limit')
        return cb(smtpError('4.2.2 Mailbox full, try again later', 452))
      }
      if (targets.length === 0) {
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

  /** Keeps a received message for each account it is for. Rejects only when the store could not be written. */
  private async receive (raw: Buffer, envelope: Envelope, session: SMTPServerSession): Promise<void> {
    const outcomes = await this.o.receiving!.take(raw, {
      mailFrom: envelope.mailFrom, targets: envelope.receiving, ip: session.remoteAddress, helo: session.hostNameAppearsAs ?? '',
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
      // Only signed VERP addresses tie a report to a recipient (src/domain/returned-mail.ts).
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
