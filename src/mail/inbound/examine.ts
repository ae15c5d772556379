// What is made of a received message before it is kept: its fields as mailparser reads them
// (readMessage) and its sender's SPF, DKIM, DMARC and ARC as mailauth judges them (judge), through a
// resolver that bounds its lookups (limitedResolver). Both run in the inbound worker thread
// (workers/inbound.ts, started by judging.ts), never on the thread that answers the API; they are plain
// functions so that tests call them directly.
import { Resolver } from 'node:dns/promises'
import { simpleParser, type AddressObject, type EmailAddress } from 'mailparser'
import { LIMITS, authResult, type Authentication, type ParsedMessage } from '../../domain/received-message.js'
import { boundSignatures, SIGNATURE_BOUNDS, type SignatureBounds } from './signature-bounds.js'

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

/** `(name, type) => records`: the shape of dns.resolve, what mailauth's `resolver` option takes. */
export type Lookup = (name: string, type: string) => Promise<unknown>

export interface LookupBounds {
  /** Distinct lookups one message may make (DNS_LOOKUPS in judging.ts). */
  maxLookups: number
  /**
   * The message's DNS time budget, as a time of `now()`: from then on a new lookup fails at once, but for
   * DMARC's own (`_dmarc.` names). Undefined: no budget.
   */
  until?: number
  /** The clock `until` is read on; default Date.now. */
  now?: () => number
}

/**
 * A resolver for one message: the same name and type asked twice is one lookup (ten signatures naming one
 * selector cost one), and past `maxLookups` distinct ones, or once the time budget (`until`) is spent,
 * every new lookup fails at once with a code mailauth takes for a temporary DNS failure (the verdict it
 * touches is `temperror`). mailauth checks DKIM, then SPF, then DMARC, one lookup after another: without
 * the budget, a sender whose signatures name selectors in a zone that never answers would hold the
 * judgement past its deadline and turn its DMARC `fail` into `temperror`. DMARC's record is still looked
 * up past the budget (a name or two, of the From domain), so DMARC is judged on what was verified.
 */
export function limitedResolver (lookup: Lookup, bounds: LookupBounds): Lookup & { readonly count: number } {
  const seen = new Map<string, Promise<unknown>>()
  const now = bounds.now ?? Date.now
  const resolve = (name: string, type: string): Promise<unknown> => {
    const key = `${type} ${name.toLowerCase()}`
    let answer = seen.get(key)
    if (answer === undefined) {
      if (seen.size >= bounds.maxLookups) {
        return Promise.reject(Object.assign(new Error(`more than ${bounds.maxLookups} DNS lookups for one message`), { code: 'ELOOKUPLIMIT' }))
      }
      if (bounds.until !== undefined && now() >= bounds.until && !key.startsWith(`${type} _dmarc.`)) {
        return Promise.reject(Object.assign(new Error('the DNS time budget of this message is spent'), { code: 'EDNSBUDGET' }))
      }
      answer = lookup(name, type)
      // Every asker gets the same settled promise; none is left unhandled when nobody asks again.
      answer.catch(() => {})
      seen.set(key, answer)
    }
    return answer
  }
  return Object.defineProperty(resolve, 'count', { get: () => seen.size }) as Lookup & { readonly count: number }
}

/**
 * When a judgement that begins `now` stops beginning lookups (LookupBounds.until): half way to its
 * deadline. The lookups under way then end within their one try, and DMARC's (a name or two) has the rest.
 * Counted from the judgement's start, not the end of DATA: a message that waited for the thread keeps
 * half of what is left to it.
 */
export function dnsBudgetEnd (deadlineAt: number, now: number = Date.now()): number {
  return now + Math.max(0, Math.floor((deadlineAt - now) / 2))
}

/** A node:dns Resolver through DNS_SERVERS ([]: the system's), one try of `timeoutMs` per server. */
export function dnsLookup (dnsServers: readonly string[], timeoutMs: number): Lookup {
  const resolver = new Resolver({ timeout: timeoutMs, tries: 1 })
  if (dnsServers.length > 0) resolver.setServers([...dnsServers])
  return (name, type) => resolver.resolve(name, type as 'TXT')
}

interface MailauthShape {
  dkim?: { results?: Array<{ status?: { result?: string } }> }
  spf?: false | { status?: { result?: string } }
  dmarc?: false | { status?: { result?: string } }
  arc?: false | { status?: { result?: string } }
}

export interface JudgeInput {
  ip: string
  helo: string
  sender: string
  mta: string
  resolver: Lookup
  /** Default SIGNATURE_BOUNDS. */
  bounds?: SignatureBounds
}

/**
 * SPF, DKIM, DMARC (and ARC when the message carries a chain) as mailauth judges them, within
 * SIGNATURE_BOUNDS: the first `dkim` signatures of at most `fieldBytes` each and `signatureBytes`
 * together are verified and the rest are not (the verdict is `pass` when one of those passes); a chain of
 * more ARC sets than `arcSets`, or with a field over `fieldBytes`, is `fail` and not verified; a header
 * block past `headerBytes`/`headerLines` is not read at all (DKIM and DMARC `permerror`; SPF, which reads
 * only the envelope, is still judged).
 */
export async function judge (raw: Buffer, o: JudgeInput): Promise<Authentication> {
  const bounded = boundSignatures(raw, o.bounds ?? SIGNATURE_BOUNDS)
  const { authenticate } = await import('mailauth')
  const res = await authenticate(bounded.headerOver ? Buffer.from('\r\n') : bounded.message, {
    ip: o.ip,
    helo: o.helo,
    sender: o.sender,
    mta: o.mta,
    resolver: o.resolver as never,
    disableBimi: true,
    disableArc: bounded.arcOver || bounded.headerOver,
    trustReceived: false,
  }) as unknown as MailauthShape
  const spf = res.spf ? authResult(res.spf.status?.result) : 'none'
  if (bounded.headerOver) return { spf, dkim: 'permerror', dmarc: 'permerror', arc: bounded.arcSets > 0 ? 'permerror' : null }
  const dkimResults = res.dkim?.results ?? []
  const dkim = dkimResults.some((r) => r.status?.result === 'pass') ? 'pass' : authResult(dkimResults[0]?.status?.result)
  const arc = bounded.arcOver ? 'fail' : res.arc ? authResult(res.arc.status?.result) : 'none'
  return {
    spf,
    dkim,
    dmarc: res.dmarc ? authResult(res.dmarc.status?.result) : 'none',
    arc: arc === 'none' ? null : arc,
  }
}
