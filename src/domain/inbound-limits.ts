// The rules that keep the inbound SMTP listener's slots for senders that deliver (src/mail/inbound/slots.ts
// applies them; it knows sessions, this file knows only addresses and times).
//
// Who counts as one sender: a network, not an address. One IPv6 customer gets a /64 at least and picks any
// of its 2^64 addresses for each connection, so per-address counts key on the /64; IPv4 keys on a prefix
// the operator chooses (32 by default: the address), and an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is
// the IPv4 address it carries.
//
// How long a connection may stay: a connection does useful work when it moves a message forward (MAIL,
// RCPT, DATA, STARTTLS). NOOP, RSET, HELP, VRFY, EHLO again, and commands the server does not know keep
// nothing going, so they do not count: a connection with no useful command for `idleMs` is closed, whatever
// else it sends. MAIL counts for the first few transactions without a DATA and RCPT for the first few of a
// transaction, so MAIL/RSET or RCPT loops cannot pass for work either. A connection is closed between
// transactions once it is `maxAgeMs` old (and refused a new MAIL then); a transaction begun before that may
// finish, within `transactionMs` from its MAIL FROM to the answer after its DATA.
//
// DATA is work, but only at a rate: once `dataGraceMs` have passed since DATA, a connection whose bytes have
// come in at less than `dataBytesPerSecond` on average is overdue (and may be put out for a newcomer), so a
// few connections each trickling a message cannot hold the slots for the whole of `transactionMs`. The
// clock stops at the end of the message: waiting for svc's answer is not the sender's slowness.
import { isIP } from 'node:net'
import ipaddr from 'ipaddr.js'

export interface PrefixLengths {
  /** Leading bits of an IPv4 address that name its sender, 8 to 32. */
  ipv4: number
  /** Leading bits of an IPv6 address that name its sender, 16 to 128. */
  ipv6: number
}

export const DEFAULT_PREFIXES: PrefixLengths = { ipv4: 32, ipv6: 64 }

/**
 * The network `address` is counted under, as `network/bits` (`192.0.2.7/32`, `2001:db8:1:2::/64`). Text
 * that is not an IP address (a socket that closed before its address was read) is its own key.
 */
export function addressKey (address: string, prefixes: PrefixLengths = DEFAULT_PREFIXES): string {
  // Only canonical text: ipaddr.js alone would also read `10` or `0x0a000001` as IPv4.
  if (isIP(address) === 0) return address
  const parsed = ipaddr.process(address)
  const bits = parsed.kind() === 'ipv4' ? prefixes.ipv4 : prefixes.ipv6
  const bytes = parsed.toByteArray()
  for (let i = 0; i < bytes.length; i++) {
    const keep = Math.min(8, Math.max(0, bits - i * 8))
    bytes[i] = bytes[i]! & (0xff << (8 - keep)) & 0xff
  }
  return `${ipaddr.fromByteArray(bytes).toString()}/${bits}`
}

export interface ConnectionLimits {
  /** Closed after this long without a useful command (outside DATA). */
  idleMs: number
  /** Closed between transactions once this old; no MAIL is taken after it. */
  maxAgeMs: number
  /** From MAIL FROM to the answer after DATA at most. */
  transactionMs: number
  /** MAIL commands since the last DATA that count as activity ("RSET beyond a few"). */
  usefulMails: number
  /** RCPT commands of one transaction that count as activity. */
  usefulRcpts: number
  /** From DATA, how long before the rate of its bytes is judged. */
  dataGraceMs: number
  /** The slowest average rate of a message's bytes, from DATA on, once dataGraceMs have passed. */
  dataBytesPerSecond: number
}

export type CloseReason = 'idle' | 'age' | 'transaction_age' | 'slow_data'

/** One connection's clock: what it did when, and whether it is over a limit. Times in ms, from the caller's clock. */
export class ConnectionLife {
  readonly openedAt: number
  private lastUseful: number
  /** MAIL FROM of the transaction in progress; undefined between transactions. */
  private transactionAt: number | undefined
  private inData = false
  /** When DATA began, the bytes of the message since, and whether they have all come (the end of data). */
  private dataAt = 0
  private dataBytes = 0
  private dataDone = false
  private mailsSinceData = 0
  private rcpts = 0

  constructor (now: number, private readonly limits: ConnectionLimits) {
    this.openedAt = now
    this.lastUseful = now
  }

  /** MAIL FROM: false when the connection is too old to begin a transaction (answer 421 then). */
  mail (now: number): boolean {
    if (now - this.openedAt >= this.limits.maxAgeMs) return false
    if (this.mailsSinceData < this.limits.usefulMails) this.lastUseful = now
    this.mailsSinceData += 1
    this.transactionAt = now
    this.inData = false
    this.rcpts = 0
    return true
  }

  rcpt (now: number): void {
    if (this.rcpts < this.limits.usefulRcpts) this.lastUseful = now
    this.rcpts += 1
  }

  /** DATA began: from here its rate (after dataGraceMs), the byte timeout of the server and `transactionMs` bound it. */
  data (now: number): void {
    this.lastUseful = now
    this.inData = true
    this.dataAt = now
    this.dataBytes = 0
    this.dataDone = false
    this.mailsSinceData = 0
  }

  /** `bytes` of the message came in (during DATA). */
  received (_now: number, bytes: number): void {
    this.dataBytes += bytes
  }

  /** The whole message is in; what remains is svc's answer. */
  dataEnd (_now: number): void {
    this.dataDone = true
  }

  /** In DATA past its grace, with the message's bytes slower than the floor on average. */
  private slowData (now: number): boolean {
    if (!this.inData || this.dataDone) return false
    const elapsed = now - this.dataAt
    return elapsed >= this.limits.dataGraceMs && this.dataBytes * 1000 < this.limits.dataBytesPerSecond * elapsed
  }

  /** The TLS handshake after STARTTLS completed. */
  secured (now: number): void {
    this.lastUseful = now
  }

  /** The transaction is over (answered after DATA, RSET, or reset by STARTTLS). */
  ended (now: number): void {
    if (this.transactionAt === undefined) return
    if (this.inData) this.lastUseful = now
    this.transactionAt = undefined
    this.inData = false
  }

  get inTransaction (): boolean {
    return this.transactionAt !== undefined
  }

  /** Why the connection must be closed now, or null. */
  overdue (now: number): CloseReason | null {
    if (this.transactionAt !== undefined) {
      if (now - this.transactionAt >= this.limits.transactionMs) return 'transaction_age'
      if (this.slowData(now)) return 'slow_data'
      if (this.inData) return null
    } else if (now - this.openedAt >= this.limits.maxAgeMs) {
      return 'age'
    }
    return now - this.lastUseful >= this.limits.idleMs ? 'idle' : null
  }

  /** How long since the last useful command; during DATA 0 (never worth evicting), or its time in DATA when it is too slow. */
  idleFor (now: number): number {
    if (this.slowData(now)) return now - this.dataAt
    return this.inData ? 0 : now - this.lastUseful
  }
}
