// The receiving branch of the inbound listener (listener.ts): mail to any address at a verified domain
// with receiving on. At RCPT TO it says who takes the address (src/app/received.ts); at the end of
// DATA it parses the message with mailparser, judges SPF, DKIM, DMARC and ARC with mailauth (through
// DNS_SERVERS; BIMI, which fetches logos over HTTPS, is off: nothing a message names is ever loaded), and
// has each account's copy kept with its email.received event. It also deletes messages older than
// RETENTION_DAYS, once a minute.
import { Resolver } from 'node:dns/promises'
import type { FastifyBaseLogger } from 'fastify'
import { simpleParser, type AddressObject, type EmailAddress } from 'mailparser'
import {
  LIMITS, authResult, byAccount, type Authentication, type ParsedMessage, type ReceiveOutcome, type ReceivedService,
} from '../../app/received.js'

export interface ReceivingOptions {
  received: ReceivedService
  /** INBOUND_MAX_BYTES: the largest message taken. */
  maxBytes: number
  /** DNS_SERVERS ([] : the system's). */
  dnsServers: readonly string[]
  /** The name this server gives itself in verdicts (INBOUND_MX_HOST). */
  mta: string
  logger: FastifyBaseLogger
  /** How often old messages are deleted; default one minute. */
  pruneEveryMs?: number
}

export interface ReceivingTarget { accountId: string; domainId: string; recipient: string }

/** What one message was to whom it was for: one outcome per account (or 'failed' for a message that could not be read). */
export type TakeOutcome = ReceiveOutcome | 'unreadable'

// Lines of a header block are bounded before they are unfolded.
const MAX_HEADER_LINE = 4 * LIMITS.headerValue

function addresses (field: AddressObject | AddressObject[] | undefined): string[] {
  const out: string[] = []
  const add = (list: EmailAddress[] | undefined, depth: number) => {
    for (const a of list ?? []) {
      if (out.length >= LIMITS.addresses) return
      if (a.group !== undefined && depth === 0) add(a.group, 1)
      else if (typeof a.address === 'string' && a.address !== '') out.push(a.address)
    }
  }
  for (const f of field === undefined ? [] : Array.isArray(field) ? field : [field]) add(f.value, 0)
  return out
}

/** The `<…>` message ids in a header value, in order, at most `max`. One pass, no regular expression. */
export function messageIds (value: string | string[] | undefined, max: number = LIMITS.messageIds): string[] {
  const out: string[] = []
  for (const v of value === undefined ? [] : Array.isArray(value) ? value : [value]) {
    let at = 0
    while (out.length < max) {
      const open = v.indexOf('<', at)
      if (open < 0) break
      const close = v.indexOf('>', open + 1)
      if (close < 0) break
      if (close - open <= LIMITS.headerValue) out.push(v.slice(open, close + 1))
      at = close + 1
    }
    if (out.length >= max) break
  }
  return out
}

/** The same, read from the end: the last `max` ids, last first (References lists the nearest parent last). */
export function lastMessageIds (value: string | string[] | undefined, max: number = LIMITS.messageIds): string[] {
  const out: string[] = []
  const values = value === undefined ? [] : Array.isArray(value) ? value : [value]
  for (let i = values.length - 1; i >= 0 && out.length < max; i--) {
    const v = values[i]!
    let at = v.length - 1
    while (out.length < max && at >= 0) {
      const close = v.lastIndexOf('>', at)
      if (close < 0) break
      const open = v.lastIndexOf('<', close - 1)
      if (open < 0) break
      if (close - open <= LIMITS.headerValue) out.push(v.slice(open, close + 1))
      at = open - 1
    }
  }
  return out
}

/** One message as mailparser reads it, in the shape the rules take (still unbounded: they bound it). */
export async function readMessage (raw: Buffer): Promise<ParsedMessage> {
  const parsed = await simpleParser(raw, {
    skipHtmlToText: true, skipTextToHtml: true, skipTextLinks: true, skipImageLinks: true,
  })
  const headers: ParsedMessage['headers'] = []
  for (const h of parsed.headerLines.slice(0, LIMITS.headers)) {
    const line = h.line.length > MAX_HEADER_LINE ? h.line.slice(0, MAX_HEADER_LINE) : h.line
    const colon = line.indexOf(':')
    if (colon <= 0) continue
    headers.push({ name: line.slice(0, colon).trim(), value: line.slice(colon + 1).replace(/\r?\n[ \t]+/g, ' ').trim() })
  }
  // In-Reply-To first; then References newest (last) first: the message answered is the nearest one.
  const replyIds = [...messageIds(parsed.inReplyTo), ...lastMessageIds(parsed.references)].slice(0, LIMITS.messageIds)
  return {
    from: parsed.from?.text ?? '',
    to: addresses(parsed.to),
    cc: addresses(parsed.cc),
    subject: parsed.subject ?? '',
    text: typeof parsed.text === 'string' ? parsed.text : null,
    html: typeof parsed.html === 'string' ? parsed.html : null,
    headers,
    messageId: parsed.messageId ?? null,
    replyIds,
    attachments: parsed.attachments.slice(0, LIMITS.attachments).map((a) => ({
      filename: a.filename ?? null, contentType: a.contentType ?? 'application/octet-stream', content: a.content,
    })),
  }
}

interface MailauthShape {
  dkim?: { results?: Array<{ status?: { result?: string } }> }
  spf?: false | { status?: { result?: string } }
  dmarc?: false | { status?: { result?: string } }
  arc?: false | { status?: { result?: string } }
}

/** SPF, DKIM, DMARC (and ARC when the message carries a chain) as mailauth judges them. */
export async function judge (raw: Buffer, o: { ip: string; helo: string; sender: string; mta: string; resolver: (name: string, type: string) => Promise<unknown> }): Promise<Authentication> {
  const { authenticate } = await import('mailauth')
  const res = await authenticate(raw, {
    ip: o.ip,
    helo: o.helo,
    sender: o.sender,
    mta: o.mta,
    resolver: o.resolver as never,
    disableBimi: true,
    trustReceived: false,
  }) as unknown as MailauthShape
  const dkimResults = res.dkim?.results ?? []
  const dkim = dkimResults.some((r) => r.status?.result === 'pass') ? 'pass' : authResult(dkimResults[0]?.status?.result)
  const arc = res.arc ? authResult(res.arc.status?.result) : 'none'
  return {
    spf: res.spf ? authResult(res.spf.status?.result) : 'none',
    dkim,
    dmarc: res.dmarc ? authResult(res.dmarc.status?.result) : 'none',
    arc: arc === 'none' ? null : arc,
  }
}

export class Receiving {
  readonly name = 'inbound-receiving'
  private readonly resolver: Resolver
  private timer: NodeJS.Timeout | undefined
  private pruning: Promise<unknown> | undefined

  constructor (private readonly o: ReceivingOptions) {
    this.resolver = new Resolver({ timeout: 3000, tries: 2 })
    if (o.dnsServers.length > 0) this.resolver.setServers([...o.dnsServers])
  }

  get maxBytes (): number {
    return this.o.maxBytes
  }

  /** Who takes mail for `address`: the targets, 'full' when each of them has no room left, [] when nobody. */
  async recipient (address: string): Promise<ReceivingTarget[] | 'full'> {
    const targets = await this.o.received.targets(address)
    if (targets.length === 0) return []
    const room = await Promise.all(targets.map((t) => this.o.received.hasRoom(t.accountId)))
    const open = targets.filter((_, i) => room[i])
    return open.length > 0 ? open : 'full'
  }

  /** Keeps the message once for each account its targets name. Rejects only when the store could not be written (the sender retries). */
  async take (raw: Buffer, envelope: { mailFrom: string; targets: ReceivingTarget[]; ip: string; helo: string }): Promise<TakeOutcome[]> {
    let parsed: ParsedMessage
    try {
      parsed = await readMessage(raw)
    } catch (err) {
      this.o.logger.warn({ err }, 'inbound: a received message could not be parsed; it is not kept')
      return ['unreadable']
    }
    const authentication = await judge(raw, {
      ip: envelope.ip,
      helo: envelope.helo,
      sender: envelope.mailFrom,
      mta: this.o.mta,
      resolver: (name, type) => this.resolver.resolve(name, type as 'TXT'),
    }).catch((err: unknown) => {
      this.o.logger.warn({ err }, 'inbound: could not judge a received message\'s authentication')
      return { spf: 'temperror', dkim: 'temperror', dmarc: 'temperror', arc: null } satisfies Authentication
    })
    const outcomes: TakeOutcome[] = []
    // One message per account, listing each of its addresses the envelope named (each once).
    for (const target of byAccount(envelope.targets)) {
      const { outcome } = await this.o.received.receive({ target, mailFrom: envelope.mailFrom, raw, parsed, authentication })
      outcomes.push(outcome)
    }
    return outcomes
  }

  async start (): Promise<void> {
    this.timer = setInterval(() => {
      if (this.pruning !== undefined) return
      this.pruning = this.o.received.prune()
        .catch((err: unknown) => this.o.logger.error({ err }, 'inbound: pruning old received mail failed'))
        .finally(() => { this.pruning = undefined })
    }, this.o.pruneEveryMs ?? 60_000).unref()
  }

  async stop (): Promise<void> {
    clearInterval(this.timer)
    this.timer = undefined
    await this.pruning
  }
}
