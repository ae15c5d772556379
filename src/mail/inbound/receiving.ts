// The receiving branch of the inbound listener (listener.ts): mail to any address at a verified domain
// with receiving on. At RCPT TO it says who takes the address (src/app/received.ts); at the end of
// DATA it has the message parsed with mailparser and SPF, DKIM, DMARC and ARC judged with mailauth in the
// inbound worker thread, within bounds (judging.ts; through DNS_SERVERS; BIMI, which fetches logos over
// HTTPS, is off: nothing a message names is ever loaded), and has each account's copy kept with its
// email.received event. It also deletes messages older than RETENTION_DAYS, once a minute.
import type { FastifyBaseLogger } from 'fastify'
import type { Registry } from 'prom-client'
import { byAccount, type Authentication, type ParsedMessage, type ReceiveOutcome } from '../../domain/received-message.js'
import { Judging, type JudgingTuning } from './judging.js'

export { judge, lastMessageIds, messageIds, readMessage } from './examine.js'

/** What receiving asks of the received-mail use cases (src/app/received.ts, which decides all of it). */
export interface ReceivedMail {
  /** Who takes mail for `address`: one target per account. */
  targets (address: string): Promise<ReceivingTarget[]>
  /** Whether the account's plan has room for more received mail. */
  hasRoom (accountId: string): Promise<boolean>
  /** Keeps one account's copy and raises its email.received. */
  receive (input: {
    target: { accountId: string; domainId: string; recipients: readonly string[] }
    mailFrom: string
    raw: Buffer
    parsed: ParsedMessage
    authentication: Authentication
  }): Promise<{ outcome: ReceiveOutcome }>
  /** Deletes messages past RETENTION_DAYS, a batch at a time. */
  prune (): Promise<number>
}

export interface ReceivingOptions {
  received: ReceivedMail
  /** INBOUND_MAX_BYTES: the largest message taken. */
  maxBytes: number
  /** DNS_SERVERS ([] : the system's). */
  dnsServers: readonly string[]
  /** The name this server gives itself in verdicts (INBOUND_MX_HOST). */
  mta: string
  logger: FastifyBaseLogger
  /** How often old messages are deleted; default one minute. */
  pruneEveryMs?: number
  /** Where messages are read and judged: deadline, jobs at once, DNS bounds (judging.ts; defaults JUDGING). */
  judging?: JudgingTuning
  registry?: Registry
}

export interface ReceivingTarget { accountId: string; domainId: string; recipient: string }

/** What one message was to whom it was for: one outcome per account (or 'failed' for a message that could not be read). */
export type TakeOutcome = ReceiveOutcome | 'unreadable'

export class Receiving {
  readonly name = 'inbound-receiving'
  private readonly judging: Judging
  private timer: NodeJS.Timeout | undefined
  private pruning: Promise<unknown> | undefined

  constructor (private readonly options: ReceivingOptions) {
    this.judging = new Judging({ dnsServers: options.dnsServers, mta: options.mta, logger: options.logger, ...(options.registry ? { registry: options.registry } : {}), ...options.judging })
  }

  get maxBytes (): number {
    return this.options.maxBytes
  }

  /** The ids of the inbound worker threads alive (tests: one whose judgement passed its deadline is terminated). */
  get judgingThreads (): number[] {
    return this.judging.threadIds
  }

  /** Who takes mail for `address`: the targets, 'full' when each of them has no room left, [] when nobody. */
  async recipient (address: string): Promise<ReceivingTarget[] | 'full'> {
    const targets = await this.options.received.targets(address)
    if (targets.length === 0) return []
    const room = await Promise.all(targets.map((t) => this.options.received.hasRoom(t.accountId)))
    const open = targets.filter((_, i) => room[i])
    return open.length > 0 ? open : 'full'
  }

  /**
   * Keeps the message once for each account its targets name. Rejects only when the store could not be
   * written (the sender retries), or with a 451 from judging.ts: every job taken, not read by the deadline,
   * or `signal` fired (the connection is gone: the work stops and nothing is kept).
   */
  async take (raw: Buffer, envelope: { mailFrom: string; targets: ReceivingTarget[]; ip: string; helo: string; signal?: AbortSignal }): Promise<TakeOutcome[]> {
    const examined = await this.judging.examine(raw, { ip: envelope.ip, helo: envelope.helo, sender: envelope.mailFrom }, envelope.signal)
    if (examined === 'unreadable') return ['unreadable']
    const { parsed, authentication } = examined
    const outcomes: TakeOutcome[] = []
    // One message per account, listing each of its addresses the envelope named (each once).
    for (const target of byAccount(envelope.targets)) {
      const { outcome } = await this.options.received.receive({ target, mailFrom: envelope.mailFrom, raw, parsed, authentication })
      outcomes.push(outcome)
    }
    return outcomes
  }

  async start (): Promise<void> {
    this.timer = setInterval(() => {
      if (this.pruning !== undefined) return
      this.pruning = this.options.received.prune()
        .catch((err: unknown) => this.options.logger.error({ err }, 'inbound: pruning old received mail failed'))
        .finally(() => { this.pruning = undefined })
    }, this.options.pruneEveryMs ?? 60_000).unref()
  }

  async stop (): Promise<void> {
    clearInterval(this.timer)
    this.timer = undefined
    await Promise.all([this.pruning, this.judging.close()])
  }
}
