// Receiving mail: what svc keeps of a message mailed to a domain with receiving on, and the email.received
// event it raises. The inbound listener (src/mail/inbound/receiving.ts) parses the message (mailparser)
// and judges its sender (mailauth); this file decides everything else:
//
// - which recipients are taken: any local part at a verified domain of an account with receiving on
//   (every account that has it verified and receiving gets its own copy); everything else is refused;
// - one message per SMTP transaction and account: it lists every address of that account the envelope
//   named, is stored once, raises one email.received, and counts its raw size once;
// - how big each field may be (LIMITS): text and html are cut at a documented length with a flag, the
//   header list, address lists and attachment list are capped, so a hostile message costs bounded memory
//   and an event body of bounded size; the raw message is kept whole (it is at most INBOUND_MAX_BYTES);
// - `inReplyTo`: the account's own email (em_…) that In-Reply-To or References names, else null;
// - the plan's storage limit (plans.ts receivedBytes), checked against the account's running total of
//   stored bytes (kept by the store), and RETENTION_DAYS; a message deleted frees its bytes at once.
//
// Nothing here follows a link or loads anything the message names, and nothing received is ever sent on.
import { domainToASCII } from 'node:url'
import {
  AUTH_RESULTS, LIMITS, authResult, byAccount, type Authentication, type AuthResult, type ParsedMessage, type ReceiveOutcome,
} from '../domain/received-message.js'
import type { Store } from '../store/types.js'
import type { ReceivedAttachment, ReceivedRecord } from '../store/received.js'
import { NotFound, ValidationError } from '../errors.js'
import { iso, type Clock } from '../domain/clock.js'
import { makeEvent } from '../domain/email-events.js'
import type { EventRecord } from '../domain/events.js'
import { looksLikeId, newId } from '../domain/ids.js'
import { PLANS } from '../domain/plans.js'
import { emailIdOfMessageId } from '../domain/returned-mail.js'

export { AUTH_RESULTS, LIMITS, authResult, byAccount, type Authentication, type AuthResult, type ParsedMessage, type ReceiveOutcome }

/** A recipient's address lower case, its domain in ASCII; null when it is not an address. */
export function splitRecipient (address: string): { local: string; domain: string } | null {
  if (address.length > LIMITS.address) return null
  const at = address.lastIndexOf('@')
  if (at <= 0 || at === address.length - 1) return null
  const local = address.slice(0, at)
  if (/[\s<>]/.test(address)) return null
  // An internationalised domain (SMTPUTF8) in punycode, as domains are stored.
  const domain = domainToASCII(address.slice(at + 1).replace(/\.$/, '')).toLowerCase()
  if (domain === '') return null
  return { local: local.toLowerCase(), domain }
}

/** `value` cut to `max` characters, never inside a surrogate pair. */
export function cut (value: string, max: number): { value: string; cut: boolean } {
  if (value.length <= max) return { value, cut: false }
  let end = max
  const c = value.charCodeAt(end - 1)
  if (c >= 0xd800 && c <= 0xdbff) end--
  return { value: value.slice(0, end), cut: true }
}

function bounded (value: string, max: number): string {
  return cut(value, max).value
}

/** A content type as `type/subtype`, lower case, or application/octet-stream when it is not one. */
export function safeContentType (value: string): string {
  const v = value.slice(0, 200).trim().toLowerCase()
  return /^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/.test(v) ? v : 'application/octet-stream'
}

/** The message as kept: every field bounded. Attachments get ids att_1, att_2, … in order. */
export function boundMessage (p: ParsedMessage): Omit<ReceivedRecord, 'id' | 'accountId' | 'domainId' | 'recipients' | 'mailFrom' | 'inReplyTo' | 'authentication' | 'size' | 'createdAt'> & {
  contents: Array<{ id: string; content: Buffer }>
} {
  const text = p.text === null ? null : cut(p.text, LIMITS.text)
  const html = p.html === null ? null : cut(p.html, LIMITS.html)
  const attachments: ReceivedAttachment[] = []
  const contents: Array<{ id: string; content: Buffer }> = []
  for (const a of p.attachments.slice(0, LIMITS.attachments)) {
    const id = `att_${attachments.length + 1}`
    attachments.push({
      id,
      filename: a.filename === null ? null : bounded(a.filename.replace(/[\u0000-\u001f\u007f]/g, ''), LIMITS.filename),
      contentType: safeContentType(a.contentType),
      size: a.content.length,
    })
    contents.push({ id, content: a.content })
  }
  return {
    from: bounded(p.from, LIMITS.from),
    to: p.to.slice(0, LIMITS.addresses).map((a) => bounded(a, LIMITS.address)),
    cc: p.cc.slice(0, LIMITS.addresses).map((a) => bounded(a, LIMITS.address)),
    subject: bounded(p.subject, LIMITS.subject),
    text: text?.value ?? null,
    textTruncated: text?.cut ?? false,
    html: html?.value ?? null,
    htmlTruncated: html?.cut ?? false,
    headers: p.headers.slice(0, LIMITS.headers).map((h) => ({ name: bounded(h.name, 100), value: bounded(h.value, LIMITS.headerValue) })),
    messageId: p.messageId === null ? null : bounded(p.messageId, LIMITS.headerValue),
    attachments,
    contents,
  }
}

/**
 * The event's `data` (and GET /api/received/:id): what a receiver of email.received gets. `recipients`:
 * the envelope's addresses of this account (the event's top-level `to` is the first of them).
 */
export function receivedData (m: ReceivedRecord) {
  return {
    id: m.id,
    recipients: m.recipients,
    from: m.from,
    to: m.to,
    cc: m.cc,
    subject: m.subject,
    text: m.text,
    textTruncated: m.textTruncated,
    html: m.html,
    htmlTruncated: m.htmlTruncated,
    headers: m.headers,
    messageId: m.messageId,
    inReplyTo: m.inReplyTo,
    attachments: m.attachments,
    authentication: m.authentication,
  }
}

export type ReceivedData = ReturnType<typeof receivedData>

/** The API's view of a kept message: the event's data, the envelope (`recipient`: the first recipient), its size and when it came. */
export function receivedView (m: ReceivedRecord) {
  return { ...receivedData(m), recipient: m.recipients[0] ?? '', mailFrom: m.mailFrom, size: m.size, createdAt: m.createdAt }
}

export type ReceivedView = ReturnType<typeof receivedView>

/**
 * A Content-Disposition for a file a browser saves and never shows: `attachment`, an ASCII fallback name
 * (anything outside printable ASCII, quotes and backslashes become `_`) and the UTF-8 name (RFC 6266).
 */
export function attachmentDisposition (filename: string | null, fallback: string): string {
  const name = filename === null || filename.trim() === '' ? fallback : filename
  const ascii = name.replace(/[^\x20-\x7e]|["\\%]/g, '_')
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)}`
}

export interface ReceivedServiceOptions {
  store: Store
  clock: Clock
  retentionMs: number
}

export function createReceivedService ({ store, clock, retentionMs }: ReceivedServiceOptions) {
  async function find (accountId: string, id: string): Promise<ReceivedRecord> {
    const m = looksLikeId(id, 'rcv') ? await store.findReceived(accountId, id) : null
    if (m === null) throw NotFound('No received message with this id')
    return m
  }

  /** The account's email that one of `ids` names (In-Reply-To first), else null. */
  async function replyTarget (accountId: string, ids: readonly string[]): Promise<string | null> {
    const seen = new Set<string>()
    for (const value of ids.slice(0, LIMITS.messageIds)) {
      const id = emailIdOfMessageId(value)
      if (id === null || seen.has(id)) continue
      seen.add(id)
      const email = await store.findEmailById(id)
      if (email !== null && email.accountId === accountId) return email.id
    }
    return null
  }

  return {
    /**
     * Who takes mail for `address`: a domain id per account with receiving on for that verified domain;
     * [] when nobody does (the listener refuses the recipient).
     */
    async targets (address: string): Promise<Array<{ accountId: string; domainId: string; recipient: string }>> {
      const r = splitRecipient(address)
      if (r === null) return []
      const domains = await store.findReceivingDomains(r.domain, LIMITS.accountsPerDomain)
      return domains.map((d) => ({ accountId: d.accountId, domainId: d.id, recipient: `${r.local}@${r.domain}` }))
    },

    /**
     * Whether the account may keep one more message: its running total (one stored counter, read at each
     * RCPT) under the plan's storage. The insert checks again with the message's size.
     */
    async hasRoom (accountId: string): Promise<boolean> {
      const account = await store.findAccountById(accountId)
      if (account === null) return false
      return await store.receivedBytes(accountId) < PLANS[account.plan].receivedBytes
    },

    /**
     * Keeps one message for one account, listing `recipients` (that account's addresses of the envelope,
     * `domainId` the first one's domain), and raises its email.received; 'over_limit' when the plan's
     * storage has no room for its raw size.
     */
    async receive (input: {
      target: { accountId: string; domainId: string; recipients: readonly string[] }
      mailFrom: string
      raw: Buffer
      parsed: ParsedMessage
      authentication: Authentication
    }): Promise<{ outcome: ReceiveOutcome; id?: string; event?: EventRecord }> {
      const { target } = input
      const account = await store.findAccountById(target.accountId)
      if (account === null) return { outcome: 'over_limit' }
      const now = clock.now()
      const { contents, ...kept } = boundMessage(input.parsed)
      const recipients = [...new Set(target.recipients.map((r) => bounded(r, LIMITS.address)))].slice(0, LIMITS.recipients)
      if (recipients.length === 0) throw new Error('receive: a message needs a recipient')
      const message: ReceivedRecord = {
        ...kept,
        id: newId('rcv', now),
        accountId: target.accountId,
        domainId: target.domainId,
        recipients,
        mailFrom: bounded(input.mailFrom, LIMITS.address),
        inReplyTo: await replyTarget(target.accountId, input.parsed.replyIds),
        authentication: input.authentication,
        // The raw message is what counts: the attachments are inside it (kept decoded beside it as well).
        size: input.raw.length,
        createdAt: iso(now),
      }
      const event = makeEvent({ accountId: message.accountId, emailId: message.id, type: 'email.received', recipient: recipients[0]!, at: now }, receivedData(message))
      const result = await store.insertReceived({ message, raw: input.raw, contents, event, limitBytes: PLANS[account.plan].receivedBytes })
      return result === 'recorded' ? { outcome: 'received', id: message.id, event } : { outcome: 'over_limit' }
    },

    async list (accountId: string, q: { limit: number; cursor?: string; to?: string }): Promise<{ items: ReceivedView[]; nextCursor: string | null }> {
      if (q.cursor !== undefined && !looksLikeId(q.cursor, 'rcv')) {
        throw ValidationError('The request is not valid', [{ path: 'query.cursor', message: 'is not a cursor this API gave out' }])
      }
      const rows = await store.listReceived(accountId, {
        limit: q.limit + 1,
        ...(q.cursor !== undefined ? { before: q.cursor } : {}),
        ...(q.to !== undefined ? { to: q.to.trim().toLowerCase() } : {}),
      })
      const items = rows.slice(0, q.limit).map(receivedView)
      return { items, nextCursor: rows.length > q.limit ? items.at(-1)!.id : null }
    },

    async get (accountId: string, id: string): Promise<ReceivedView> {
      return receivedView(await find(accountId, id))
    },

    async raw (accountId: string, id: string): Promise<Buffer> {
      const raw = looksLikeId(id, 'rcv') ? await store.readReceivedRaw(accountId, id) : null
      if (raw === null) throw NotFound('No received message with this id')
      return raw
    },

    /** Deletes one of the account's messages with its bytes, freeing its size; NotFound for any other id. */
    async remove (accountId: string, id: string): Promise<ReceivedRecord> {
      const m = looksLikeId(id, 'rcv') ? await store.deleteReceived(accountId, id) : null
      if (m === null) throw NotFound('No received message with this id')
      return m
    },

    async attachment (accountId: string, id: string, attachmentId: string): Promise<{ meta: ReceivedAttachment; content: Buffer }> {
      const m = await find(accountId, id)
      const meta = m.attachments.find((a) => a.id === attachmentId)
      const content = meta === undefined ? null : await store.readReceivedAttachment(accountId, id, attachmentId)
      if (meta === undefined || content === null) throw NotFound('No attachment with this id')
      return { meta, content }
    },

    /** Deletes messages older than RETENTION_DAYS, `batch` at a time; returns how many. */
    async prune (batch = 100): Promise<number> {
      const before = iso(clock.now() - retentionMs)
      let total = 0
      for (;;) {
        const n = await store.pruneReceived(before, batch)
        total += n
        if (n < batch) return total
      }
    },
  }
}

export type ReceivedService = ReturnType<typeof createReceivedService>
