import { createCipheriv, createDecipheriv, createHmac, randomFillSync } from 'node:crypto'
import { QuoteType, Tokenizer } from 'htmlparser2'
import { sealingKey } from '../domain/secrets.js'

export type TrackingKind = 'open' | 'click' | 'unsubscribe'

export interface TrackingClaims {
  kind: TrackingKind
  emailId: string
  recipient: string
  /** The destination of a click; only click tokens carry one. */
  url?: string
  /** Unix seconds after which the token is refused. */
  exp: number
}

/** Far above any real token; refusing longer input bounds the work an attacker can cause. */
const MAX_TOKEN_LENGTH = 8192
/** The longest link target that is tracked; a longer href is left as written (README, Tracking). */
export const MAX_TRACKED_URL_LENGTH = 2048
/** Links rewritten per email at most; the ones after that are left as written (README, Tracking). */
export const MAX_TRACKED_LINKS = 1000
const B64URL = /^[A-Za-z0-9_-]+$/

function isHttpUrl(value: string): boolean {
  if (!/^https?:/i.test(value)) return false
  // The same few URLs come back for every recipient of a campaign (its links, PUBLIC_URL): their verdict
  // is kept rather than parsed again, a few per copy.
  const known = httpUrls.get(value)
  if (known !== undefined) return known
  let ok: boolean
  try {
    const u = new URL(value)
    ok = u.protocol === 'http:' || u.protocol === 'https:'
  } catch {
    ok = false
  }
  if (value.length <= MAX_TRACKED_URL_LENGTH) {
    if (httpUrls.size >= 256) httpUrls.delete(httpUrls.keys().next().value!)
    httpUrls.set(value, ok)
  }
  return ok
}
const httpUrls = new Map<string, boolean>()

// ---- Tokens ------------------------------------------------------------------------------
//
// A token is sealed, not just signed: whoever holds a link (a forwarded email, a proxy log) learns
// nothing from it, not the recipient's address and not the link behind a tracked click.
//
//   base64url( 0x02 | salt (16 random bytes) | AES-256-GCM ciphertext of the claims | GCM tag (16) )
//
// The AES key of each token is HMAC-SHA256(sealKey, salt), where sealKey is the 'tracking token' key of
// domain/secrets.ts (HKDF of SVC_SECRET for this purpose alone; the same secret also keys sessions, API-key
// hashes and the other sealed values). This form rather than secrets.ts's seal(): a token is in every link
// of every copy, so it is kept short (no IV, the version byte as the only header). A key of its own
// per token lets GCM run with a fixed nonce and takes away the birthday limit of random 96-bit nonces
// under one key (about 2^32 tokens), which a busy sender would reach: 128-bit salts never repeat in
// practice. The version byte is authenticated too. Tampering with any bit is a failed tag, so a token
// is still the proof that svc issued it.
//
// Claims, before encryption: kind (1 byte), exp (6 bytes, unix seconds, big-endian), emailId and
// recipient (1-byte length + UTF-8 each), then the url of a click (the rest).

const VERSION = 0x02
const HEADER = Buffer.of(VERSION)
const SALT_BYTES = 16
const TAG_BYTES = 16
const FIXED_IV = Buffer.alloc(12)
const MIN_CLAIMS_BYTES = 1 + 6 + 1 + 1 + 1 + 1
const MIN_TOKEN_BYTES = HEADER.length + SALT_BYTES + MIN_CLAIMS_BYTES + TAG_BYTES
const MAX_EXP = 2 ** 48 - 1
const KIND_CODE = { open: 0, click: 1, unsubscribe: 2 } as const
const KIND_OF_CODE: readonly TrackingKind[] = ['open', 'click', 'unsubscribe']

/** The tracking purpose's key of `secret` (derived once per secret: a 1,000-link email stays cheap). */
function sealKeyOf(secret: string): Buffer {
  if (typeof secret !== 'string' || secret === '') throw new TypeError('tracking secret must not be empty')
  return sealingKey(secret, 'tracking token')
}

// Salts come from a pool filled 256 at a time: an email with many links makes many tokens, and one call
// to the system's random source per token costs more than the rest of the token.
const saltPool = Buffer.alloc(SALT_BYTES * 256)
let saltPoolUsed = saltPool.length

/** 16 fresh random bytes, valid until the next call (they are copied into the token at once). */
function nextSalt(): Buffer {
  if (saltPoolUsed === saltPool.length) {
    randomFillSync(saltPool)
    saltPoolUsed = 0
  }
  saltPoolUsed += SALT_BYTES
  return saltPool.subarray(saltPoolUsed - SALT_BYTES, saltPoolUsed)
}

function tokenKey(seal: Buffer, salt: Buffer): Buffer {
  return createHmac('sha256', seal).update(salt).digest()
}

/** The UTF-8 length of a 1-to-255-byte field, or a TypeError. */
function shortField(value: string, what: string): number {
  const n = Buffer.byteLength(value, 'utf8')
  if (n === 0 || n > 255) throw new TypeError(`${what} must be 1 to 255 bytes`)
  return n
}

function encodeClaims(claims: TrackingClaims): Buffer {
  const code = Object.hasOwn(KIND_CODE, claims.kind) ? KIND_CODE[claims.kind] : undefined
  if (code === undefined) throw new TypeError(`unknown tracking kind ${String(claims.kind)}`)
  if (typeof claims.emailId !== 'string' || claims.emailId === '') throw new TypeError('emailId is required')
  if (typeof claims.recipient !== 'string' || claims.recipient === '') throw new TypeError('recipient is required')
  if (!Number.isSafeInteger(claims.exp) || claims.exp < 0 || claims.exp > MAX_EXP) {
    throw new TypeError('exp must be an integer number of unix seconds')
  }
  const idBytes = shortField(claims.emailId, 'emailId')
  const recipientBytes = shortField(claims.recipient, 'recipient')
  let urlBytes = 0
  if (claims.kind === 'click') {
    // A click token is a sealed redirect: it may only ever point at the web.
    if (typeof claims.url !== 'string' || !isHttpUrl(claims.url)) throw new TypeError('a click token needs an http(s) url')
    if (claims.url.length > MAX_TRACKED_URL_LENGTH) throw new TypeError(`a click url is at most ${MAX_TRACKED_URL_LENGTH} characters`)
    urlBytes = Buffer.byteLength(claims.url, 'utf8')
  } else if (claims.url !== undefined) {
    throw new TypeError(`a ${claims.kind} token carries no url`)
  }
  // One buffer, written in place: kind, exp, then each field after its length.
  const out = Buffer.allocUnsafe(7 + 1 + idBytes + 1 + recipientBytes + urlBytes)
  out[0] = code
  out.writeUIntBE(claims.exp, 1, 6)
  let at = 7
  out[at++] = idBytes
  at += out.write(claims.emailId, at, 'utf8')
  out[at++] = recipientBytes
  at += out.write(claims.recipient, at, 'utf8')
  if (urlBytes > 0) out.write(claims.url!, at, 'utf8')
  return out
}

/** The tag proves we wrote it; the layout is still checked as strictly as if it were input. */
function decodeClaims(b: Buffer): TrackingClaims | null {
  if (b.length < MIN_CLAIMS_BYTES) return null
  const kind = KIND_OF_CODE[b[0]!]
  if (kind === undefined) return null
  const exp = b.readUIntBE(1, 6)
  let at = 7
  const field = (): string | null => {
    const n = b[at] ?? 0
    if (n === 0 || at + 1 + n > b.length) return null
    const s = b.toString('utf8', at + 1, at + 1 + n)
    at += 1 + n
    return s
  }
  const emailId = field()
  const recipient = field()
  if (emailId === null || recipient === null) return null
  const claims: TrackingClaims = { kind, emailId, recipient, exp }
  if (kind === 'click') {
    const url = b.toString('utf8', at)
    if (!isHttpUrl(url)) return null
    claims.url = url
  } else if (at !== b.length) {
    return null
  }
  return claims
}

export function createTrackingToken(secret: string, claims: TrackingClaims): string {
  const plain = encodeClaims(claims)
  const salt = nextSalt()
  const cipher = createCipheriv('aes-256-gcm', tokenKey(sealKeyOf(secret), salt), FIXED_IV, { authTagLength: TAG_BYTES })
  cipher.setAAD(HEADER)
  // GCM is a stream cipher: update gives every byte, and final none (it completes the tag).
  let sealed = cipher.update(plain)
  const rest = cipher.final()
  if (rest.length > 0) sealed = Buffer.concat([sealed, rest])
  const out = Buffer.allocUnsafe(HEADER.length + SALT_BYTES + sealed.length + TAG_BYTES)
  out[0] = VERSION
  salt.copy(out, HEADER.length)
  sealed.copy(out, HEADER.length + SALT_BYTES)
  cipher.getAuthTag().copy(out, HEADER.length + SALT_BYTES + sealed.length)
  return out.toString('base64url')
}

export function verifyTrackingToken(
  secret: string,
  token: string,
  kind: TrackingKind,
  nowSeconds: number = Math.floor(Date.now() / 1000),
): TrackingClaims | null {
  if (typeof token !== 'string' || token.length > MAX_TOKEN_LENGTH) return null
  const claims = openToken(sealKeyOf(secret), token)
  if (claims === null || claims.kind !== kind) return null
  if (nowSeconds >= claims.exp) return null
  return claims
}

function openToken(sealKey: Buffer, token: string): TrackingClaims | null {
  if (!B64URL.test(token)) return null
  const raw = Buffer.from(token, 'base64url')
  // Base64 has several spellings of the same bytes; only the canonical one is the token we issued.
  if (raw.length < MIN_TOKEN_BYTES || raw[0] !== VERSION || raw.toString('base64url') !== token) return null
  const salt = raw.subarray(HEADER.length, HEADER.length + SALT_BYTES)
  const tag = raw.subarray(raw.length - TAG_BYTES)
  let plain: Buffer
  try {
    const decipher = createDecipheriv('aes-256-gcm', tokenKey(sealKey, salt), FIXED_IV, { authTagLength: TAG_BYTES })
    decipher.setAAD(HEADER)
    decipher.setAuthTag(tag)
    plain = Buffer.concat([decipher.update(raw.subarray(HEADER.length + SALT_BYTES, raw.length - TAG_BYTES)), decipher.final()])
  } catch {
    return null // a wrong tag: altered, forged, or sealed under another secret
  }
  return decodeClaims(plain)
}

// ---- Links -------------------------------------------------------------------------------

export interface TrackingLinkOptions {
  publicUrl: string
  secret: string
  emailId: string
  recipient: string
  /** Unix seconds; the tokens stop working after this. */
  expiresAt: number
}

function baseUrl(publicUrl: string): string {
  if (!isHttpUrl(publicUrl)) throw new TypeError('publicUrl must be an absolute http(s) URL')
  let end = publicUrl.length
  while (end > 0 && publicUrl.charCodeAt(end - 1) === 0x2f) end--
  return publicUrl.slice(0, end)
}

/** The one-click unsubscribe URL; also usable as a visible link in the body (it is never rewritten). */
export function unsubscribeUrl(opts: TrackingLinkOptions): string {
  const token = createTrackingToken(opts.secret, {
    kind: 'unsubscribe',
    emailId: opts.emailId,
    recipient: opts.recipient,
    exp: opts.expiresAt,
  })
  return `${baseUrl(opts.publicUrl)}/t/u/${token}`
}

/** RFC 2369 List-Unsubscribe plus RFC 8058 one-click, which mailbox providers now require of bulk senders. */
export function unsubscribeHeaders(opts: TrackingLinkOptions): Record<string, string> {
  return {
    'List-Unsubscribe': `<${unsubscribeUrl(opts)}>`,
    'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
  }
}

export interface InstrumentOptions extends TrackingLinkOptions {
  /** Default true. */
  trackOpens?: boolean
  /** Default true. */
  trackClicks?: boolean
}

/**
 * An html body with its tracked places found once, for many recipients: the html cut at every link to
 * track and at the open pixel's place. `parts` has one more entry than `slots`; a recipient's html is
 * parts[0] + slot 0 filled for them + parts[1] + …, so the html is scanned once per email, however many
 * recipients get their own copy.
 */
export interface HtmlTemplate {
  parts: string[]
  slots: Array<{ kind: 'click'; url: string } | { kind: 'open' }>
}

/**
 * Finds where the html's http(s) links and the open pixel (before the last `</body>`, or at the end) go.
 * Everything else stays byte for byte as written: the html is tokenized (htmlparser2's tokenizer, one
 * linear pass, no tree) only to find where the href values and the `</body>` are.
 */
export function htmlTemplate(html: string, opts: Pick<InstrumentOptions, 'publicUrl' | 'trackOpens' | 'trackClicks'>): HtmlTemplate {
  const base = baseUrl(opts.publicUrl)
  const trackClicks = opts.trackClicks !== false
  const trackOpens = opts.trackOpens !== false
  if (!trackClicks && !trackOpens) return { parts: [html], slots: [] }

  // Our own links (the unsubscribe link above all) must reach us untouched: a click event for an
  // unsubscribe would be noise, and wrapping a tracking link in another would break it once the outer
  // token expires.
  const ownPrefix = `${base}/t/`.toLowerCase()
  const cuts: Array<{ from: number; to: number; slot: HtmlTemplate['slots'][number] }> = []
  const scan = scanHtml(html, (href, from, to) => {
    if (!trackClicks || cuts.length >= MAX_TRACKED_LINKS) return
    const url = linkTarget(href)
    if (url === null || url.length > MAX_TRACKED_URL_LENGTH || url.toLowerCase().startsWith(ownPrefix)) return
    cuts.push({ from, to, slot: { kind: 'click', url } })
  })
  if (trackOpens) {
    const at = scan.lastBodyClose < 0 ? html.length : scan.lastBodyClose
    // Never inside an href (a `</body>` is outside any tag), so its place among the cuts is by position.
    let i = cuts.length
    while (i > 0 && cuts[i - 1]!.from > at) i--
    cuts.splice(i, 0, { from: at, to: at, slot: { kind: 'open' } })
  }
  const parts: string[] = []
  let copied = 0
  for (const c of cuts) {
    parts.push(html.slice(copied, c.from))
    copied = c.to
  }
  parts.push(html.slice(copied))
  return { parts, slots: cuts.map((c) => c.slot) }
}

/** One recipient's html: the template's slots filled with tracked links and a pixel that name them. */
export function fillHtml(template: HtmlTemplate, opts: TrackingLinkOptions): string {
  if (template.slots.length === 0) return template.parts[0]!
  const base = baseUrl(opts.publicUrl)
  const claims = { emailId: opts.emailId, recipient: opts.recipient, exp: opts.expiresAt }
  const out: string[] = [template.parts[0]!]
  for (let i = 0; i < template.slots.length; i++) {
    const slot = template.slots[i]!
    if (slot.kind === 'click') {
      const token = createTrackingToken(opts.secret, { kind: 'click', url: slot.url, ...claims })
      out.push(`"${escapeAttr(`${base}/t/c/${token}`)}"`)
    } else {
      const token = createTrackingToken(opts.secret, { kind: 'open', ...claims })
      out.push(`<img src="${escapeAttr(`${base}/t/o/${token}`)}" width="1" height="1" alt="" style="display:none">`)
    }
    out.push(template.parts[i + 1]!)
  }
  return out.join('')
}

/**
 * The html with its http(s) links rewritten to tracked ones and the open pixel before the last
 * `</body>` (or at the end), for one recipient (htmlTemplate, then fillHtml).
 */
export function instrumentHtml(html: string, opts: InstrumentOptions): string {
  return fillHtml(htmlTemplate(html, opts), opts)
}

// ---- HTML scanning -----------------------------------------------------------------------

/**
 * What a decoded href value may grow to before it is no longer collected: beyond the longest tracked
 * URL plus room for the spaces a browser trims around it. Bounds the memory per link, whatever is in it.
 */
const MAX_HREF_COLLECTED = MAX_TRACKED_URL_LENGTH + 256

const HTML_WS = new Set([0x09, 0x0a, 0x0c, 0x0d, 0x20])

/**
 * Calls `onHref(decoded value, from, to)` for the first href of every complete `<a>` start tag, in
 * document order, where source[from, to) is the value as written, quotes included. A value longer than
 * MAX_HREF_COLLECTED is not reported. Links inside Outlook's conditional comments (`<!--[if mso]>…`),
 * which Outlook renders, are reported too. Returns where the last top-level `</body>` starts (-1: none).
 *
 * htmlparser2's Tokenizer is a state machine that looks at each character once (per level: a
 * conditional comment's content is read a second time), keeps no element stack and follows the HTML
 * rules that matter here: quoting, entities in attribute values (`&copy=` in a query stays as written,
 * as in a browser), comments, and the raw text of <script>, <style>, <title>, <textarea>.
 */
function scanHtml(html: string, onHref: (value: string, from: number, to: number) => void): { lastBodyClose: number } {
  const result = { lastBodyClose: -1 }
  scanLevel(html, 0, true, onHref, result)
  return result
}

function scanLevel(
  src: string, offset: number, top: boolean,
  onHref: (value: string, from: number, to: number) => void, result: { lastBodyClose: number },
): void {
  let inAnchor = false // the start tag being read is <a …>
  let sawHref = false
  let inHref = false // the attribute being read is that tag's first href
  let hrefNameEnd = 0
  let value = ''
  let tooLong = false
  let found: { value: string; from: number; to: number } | null = null

  const endOfStartTag = () => {
    if (found !== null) onHref(found.value, offset + found.from, offset + found.to)
    found = null
    inAnchor = false
  }
  const nothing = () => {}

  const tokenizer = new Tokenizer({ decodeEntities: true }, {
    onopentagname (start, end) {
      inAnchor = end - start === 1 && (src.charCodeAt(start) | 0x20) === 0x61
      sawHref = false
      inHref = false
      found = null
    },
    onattribname (start, end) {
      // Browsers honour the first of duplicate attributes.
      inHref = inAnchor && !sawHref && end - start === 4 && src.slice(start, end).toLowerCase() === 'href'
      if (!inHref) return
      sawHref = true
      hrefNameEnd = end
      value = ''
      tooLong = false
    },
    onattribdata (start, end) {
      if (!inHref || tooLong) return
      if (value.length + (end - start) > MAX_HREF_COLLECTED) tooLong = true
      else value += src.slice(start, end)
    },
    onattribentity (codepoint) {
      if (!inHref || tooLong) return
      value += String.fromCodePoint(codepoint)
      if (value.length > MAX_HREF_COLLECTED) tooLong = true
    },
    onattribend (quote, end) {
      if (!inHref) return
      inHref = false
      if (quote === QuoteType.NoValue || tooLong) return
      const from = valueStart(src, hrefNameEnd)
      if (from >= 0) found = { value, from, to: end }
      value = ''
    },
    onopentagend: endOfStartTag,
    onselfclosingtag: endOfStartTag,
    onclosetag (start, end) {
      // `</body` exactly: the tokenizer also takes `</ body`, which a browser reads as a comment.
      if (top && end - start === 4 && start >= 2 && src.charCodeAt(start - 1) === 0x2f && src.charCodeAt(start - 2) === 0x3c &&
        src.slice(start, end).toLowerCase() === 'body') {
        result.lastBodyClose = offset + start - 2
      }
    },
    oncomment (start, end, endOffset) {
      // A closed `<!--[if …]> … <![endif]-->`: Outlook renders what is inside, links included.
      if (top && endOffset === 2 && end - start >= 3 && src.slice(start, start + 3).toLowerCase() === '[if') {
        scanLevel(src.slice(start, end - endOffset), offset + start, false, onHref, result)
      }
    },
    oncdata: nothing,
    ondeclaration: nothing,
    onend: nothing,
    onprocessinginstruction: nothing,
    ontext: nothing,
    ontextentity: nothing,
  })
  tokenizer.write(src)
  tokenizer.end()
}

/** Where the value of the attribute whose name ends at `nameEnd` starts: past spaces, `=`, spaces. */
function valueStart(src: string, nameEnd: number): number {
  let i = nameEnd
  while (i < src.length && HTML_WS.has(src.charCodeAt(i))) i++
  if (src.charCodeAt(i) !== 0x3d) return -1
  i++
  while (i < src.length && HTML_WS.has(src.charCodeAt(i))) i++
  return i
}

/** The URL a browser would follow for this href, if it is an absolute http(s) one. */
function linkTarget(href: string): string | null {
  // What the URL parser does before anything else: trim C0 controls and spaces, drop tabs and newlines.
  let start = 0
  let end = href.length
  while (start < end && href.charCodeAt(start) <= 0x20) start++
  while (end > start && href.charCodeAt(end - 1) <= 0x20) end--
  let url = href.slice(start, end)
  if (url.includes('\t') || url.includes('\n') || url.includes('\r')) {
    url = url.replaceAll('\t', '').replaceAll('\n', '').replaceAll('\r', '')
  }
  return isHttpUrl(url) ? url : null
}

function escapeAttr(s: string): string {
  return s.replaceAll('&', '&amp;').replaceAll('"', '&quot;').replaceAll('<', '&lt;').replaceAll('>', '&gt;')
}
