import { createHmac, timingSafeEqual } from 'node:crypto'

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

// Tokens sit in every link of every email, so the payload uses one-letter keys.
interface WirePayload {
  k: 'o' | 'c' | 'u'
  e: string
  r: string
  u?: string
  x: number
}

const KIND_TO_WIRE = { open: 'o', click: 'c', unsubscribe: 'u' } as const
const WIRE_TO_KIND = { o: 'open', c: 'click', u: 'unsubscribe' } as const

/** Far above any real token; refusing longer input bounds the work an attacker can cause. */
const MAX_TOKEN_LENGTH = 8192
const MAC_BYTES = 32
const B64URL = /^[A-Za-z0-9_-]+$/

/**
 * The same SVC_SECRET also signs session cookies; a key of its own for tracking means a
 * value signed for one purpose can never be replayed as the other.
 */
function trackingKey(secret: string): Buffer {
  if (secret === '') throw new TypeError('tracking secret must not be empty')
  return createHmac('sha256', secret).update('svc tracking token v1').digest()
}

function mac(secret: string, payload: string): Buffer {
  return createHmac('sha256', trackingKey(secret)).update(payload).digest()
}

function isHttpUrl(value: string): boolean {
  if (!/^https?:/i.test(value)) return false
  try {
    const u = new URL(value)
    return u.protocol === 'http:' || u.protocol === 'https:'
  } catch {
    return false
  }
}

export function createTrackingToken(secret: string, claims: TrackingClaims): string {
  const k = KIND_TO_WIRE[claims.kind]
  if (k === undefined) throw new TypeError(`unknown tracking kind ${String(claims.kind)}`)
  if (typeof claims.emailId !== 'string' || claims.emailId === '') throw new TypeError('emailId is required')
  if (typeof claims.recipient !== 'string' || claims.recipient === '') throw new TypeError('recipient is required')
  if (!Number.isSafeInteger(claims.exp)) throw new TypeError('exp must be an integer number of unix seconds')
  const wire: WirePayload = { k, e: claims.emailId, r: claims.recipient, x: claims.exp }
  if (claims.kind === 'click') {
    // A click token is a signed redirect: it may only ever point at the web.
    if (claims.url === undefined || !isHttpUrl(claims.url)) throw new TypeError('a click token needs an http(s) url')
    wire.u = claims.url
  } else if (claims.url !== undefined) {
    throw new TypeError(`a ${claims.kind} token carries no url`)
  }
  const payload = Buffer.from(JSON.stringify(wire), 'utf8').toString('base64url')
  return `${payload}.${mac(secret, payload).toString('base64url')}`
}

export function verifyTrackingToken(
  secret: string,
  token: string,
  kind: TrackingKind,
  nowSeconds: number = Math.floor(Date.now() / 1000),
): TrackingClaims | null {
  if (typeof token !== 'string' || token.length > MAX_TOKEN_LENGTH) return null
  const dot = token.indexOf('.')
  if (dot <= 0 || dot !== token.lastIndexOf('.')) return null
  const payload = token.slice(0, dot)
  const sig = token.slice(dot + 1)
  if (!B64URL.test(payload) || !B64URL.test(sig)) return null
  const given = Buffer.from(sig, 'base64url')
  // Base64 has several spellings of the same bytes; only the canonical one is the token we issued.
  if (given.length !== MAC_BYTES || given.toString('base64url') !== sig) return null
  if (!timingSafeEqual(given, mac(secret, payload))) return null

  let wire: unknown
  try {
    wire = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'))
  } catch {
    return null
  }
  const claims = claimsFromWire(wire)
  if (claims === null || claims.kind !== kind) return null
  if (nowSeconds >= claims.exp) return null
  return claims
}

/** The signature proves we wrote it, but a token from an older format must still not be trusted blindly. */
function claimsFromWire(wire: unknown): TrackingClaims | null {
  if (typeof wire !== 'object' || wire === null) return null
  const w = wire as Record<string, unknown>
  const kind = typeof w.k === 'string' && Object.hasOwn(WIRE_TO_KIND, w.k) ? WIRE_TO_KIND[w.k as WirePayload['k']] : null
  if (kind === null) return null
  if (typeof w.e !== 'string' || w.e === '' || typeof w.r !== 'string' || w.r === '') return null
  if (typeof w.x !== 'number' || !Number.isSafeInteger(w.x)) return null
  const claims: TrackingClaims = { kind, emailId: w.e, recipient: w.r, exp: w.x }
  if (kind === 'click') {
    if (typeof w.u !== 'string' || !isHttpUrl(w.u)) return null
    claims.url = w.u
  } else if (w.u !== undefined) {
    return null
  }
  return claims
}

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
  return publicUrl.replace(/\/+$/, '')
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

export function instrumentHtml(html: string, opts: InstrumentOptions): string {
  const base = baseUrl(opts.publicUrl)
  const claims = { emailId: opts.emailId, recipient: opts.recipient, exp: opts.expiresAt }
  let out = html

  if (opts.trackClicks !== false) {
    // Our own links (the unsubscribe link above all) must reach us untouched: a click
    // event for an unsubscribe would be noise, and wrapping a tracking link in another
    // would break it once the outer token expires.
    const ownPrefix = `${base}/t/`.toLowerCase()
    out = rewriteLinks(out, (url) => {
      if (url.toLowerCase().startsWith(ownPrefix)) return null
      const token = createTrackingToken(opts.secret, { kind: 'click', url, ...claims })
      return `${base}/t/c/${token}`
    })
  }

  if (opts.trackOpens !== false) {
    const token = createTrackingToken(opts.secret, { kind: 'open', ...claims })
    const pixel = `<img src="${escapeAttr(`${base}/t/o/${token}`)}" width="1" height="1" alt="" style="display:none">`
    const at = lastBodyClose(out)
    out = at < 0 ? out + pixel : out.slice(0, at) + pixel + out.slice(at)
  }
  return out
}

function lastBodyClose(html: string): number {
  let at = -1
  for (const m of html.matchAll(/<\/body[\t\n\f\r ]*>/gi)) at = m.index
  return at
}

// ---- HTML scanning -------------------------------------------------------------------
//
// A full HTML parser is more than this needs, but a plain regex over `<a ...>` goes wrong
// on `>` inside a quoted attribute or on `<a` inside another tag's attribute. So this
// walks tags the way a browser tokenizer does: tag name, then attributes with their
// three quoting styles, skipping the raw text of <script> and <style>.

const WS = /[\t\n\f\r ]/
const TAG_NAME = /<([A-Za-z][^\t\n\f\r />]*)/y
const ATTR_NAME = /[^\t\n\f\r />][^\t\n\f\r />=]*/y
const UNQUOTED_VALUE = /[^\t\n\f\r >]*/y
const RAW_TEXT = new Set(['script', 'style'])

interface Attr {
  name: string
  /** Decoded value. */
  value: string
  /** Source range of the value including its quotes; equal when there is no value. */
  start: number
  end: number
}

interface Tag {
  name: string
  attrs: Attr[]
  /** Index just past the closing `>`. */
  end: number
}

/** Parses the tag at `lt`; null when it is not a start tag, undefined when it never closes. */
function readTag(html: string, lt: number): Tag | null | undefined {
  TAG_NAME.lastIndex = lt
  const m = TAG_NAME.exec(html)
  if (m === null || m[1] === undefined) return null
  const tag: Tag = { name: m[1].toLowerCase(), attrs: [], end: -1 }
  let pos = lt + m[0].length
  const n = html.length
  for (;;) {
    while (pos < n && (WS.test(html[pos] as string) || html[pos] === '/')) pos++
    if (pos >= n) return undefined
    if (html[pos] === '>') {
      tag.end = pos + 1
      return tag
    }
    ATTR_NAME.lastIndex = pos
    const name = ATTR_NAME.exec(html)
    if (name === null) return undefined
    pos = ATTR_NAME.lastIndex
    while (pos < n && WS.test(html[pos] as string)) pos++
    if (html[pos] !== '=') {
      tag.attrs.push({ name: name[0].toLowerCase(), value: '', start: pos, end: pos })
      continue
    }
    pos++
    while (pos < n && WS.test(html[pos] as string)) pos++
    const q = html[pos]
    if (q === '"' || q === "'") {
      const close = html.indexOf(q, pos + 1)
      if (close < 0) return undefined
      tag.attrs.push({ name: name[0].toLowerCase(), value: decodeEntities(html.slice(pos + 1, close)), start: pos, end: close + 1 })
      pos = close + 1
    } else {
      UNQUOTED_VALUE.lastIndex = pos
      const v = UNQUOTED_VALUE.exec(html)?.[0] ?? ''
      tag.attrs.push({ name: name[0].toLowerCase(), value: decodeEntities(v), start: pos, end: pos + v.length })
      pos += v.length
    }
  }
}

/**
 * Replaces the href of every <a> whose target is an http(s) URL with what `rewrite`
 * returns for it (null keeps the link). mailto:, tel:, #anchors and relative links
 * are never offered.
 */
function rewriteLinks(html: string, rewrite: (url: string) => string | null): string {
  let out = ''
  let copied = 0
  let i = 0
  for (;;) {
    const lt = html.indexOf('<', i)
    if (lt < 0) break
    const tag = readTag(html, lt)
    if (tag === undefined) break // an unterminated tag: leave the rest exactly as written
    if (tag === null) {
      i = lt + 1
      continue
    }
    i = tag.end
    if (tag.name === 'a') {
      // Browsers honour the first of duplicate attributes.
      const href = tag.attrs.find((a) => a.name === 'href')
      if (href !== undefined) {
        const url = linkTarget(href.value)
        const replacement = url === null ? null : rewrite(url)
        if (replacement !== null) {
          out += html.slice(copied, href.start) + `"${escapeAttr(replacement)}"`
          copied = href.end
        }
      }
    } else if (RAW_TEXT.has(tag.name)) {
      const closing = new RegExp(`</${tag.name}`, 'gi')
      closing.lastIndex = i
      const close = closing.exec(html)
      i = close === null ? html.length : close.index
    }
  }
  return out + html.slice(copied)
}

/** The URL a browser would follow for this href, if it is an absolute http(s) one. */
function linkTarget(href: string): string | null {
  // What the URL parser does before anything else: trim C0 controls and spaces, drop tabs and newlines.
  const cleaned = href.replace(/^[\x00-\x20]+|[\x00-\x20]+$/g, '').replace(/[\t\n\r]/g, '')
  return isHttpUrl(cleaned) ? cleaned : null
}

// HTML also accepts the upper-case spellings of these four.
const NAMED_ENTITIES = new Map([
  ['amp', '&'], ['AMP', '&'], ['lt', '<'], ['LT', '<'], ['gt', '>'], ['GT', '>'],
  ['quot', '"'], ['QUOT', '"'], ['apos', "'"], ['nbsp', '\u00a0'],
])

/**
 * Decodes the character references that occur in URLs. Named ones beyond these are left
 * as written, which is also what a browser does with `&copy=` inside a query string.
 */
function decodeEntities(s: string): string {
  if (!s.includes('&')) return s
  return s.replace(/&(?:#(\d{1,7})|#[xX]([0-9A-Fa-f]{1,6})|([A-Za-z]+));/g, (whole: string, dec?: string, hex?: string, name?: string) => {
    if (name !== undefined) return NAMED_ENTITIES.get(name) ?? whole
    const cp = dec !== undefined ? Number.parseInt(dec, 10) : Number.parseInt(hex ?? '', 16)
    if (cp === 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return '\ufffd'
    return String.fromCodePoint(cp)
  })
}

function escapeAttr(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
}
