// Request bodies are JSON. Before a body is parsed, one linear pass checks how deeply it nests and how
// many members its widest object has: no route takes more than a few levels or a few dozen fields, and a
// 200,000-level body (or a 60,000-key object) must cost a scan, not a parse (and then a validator, a
// canonical hash, …, each walking it again).
import { isAscii } from 'node:buffer'
import sjson from 'secure-json-parse'
import { ValidationError } from '../errors.js'

/** Deeper than any body svc takes (a batch item's tag is 4 levels). */
export const MAX_JSON_DEPTH = 32
/**
 * Members in one object, at most: far above what any route takes (50 custom headers), far below the
 * tens of thousands of keys that make a parse (and any walk over the object) slow.
 */
export const MAX_OBJECT_MEMBERS = 1000

const QUOTE = 0x22
const BACKSLASH = 0x5c
const COLON = 0x3a
const OPEN_OBJECT = 0x7b
const CLOSE_OBJECT = 0x7d
const OPEN_ARRAY = 0x5b
const CLOSE_ARRAY = 0x5d
/** Characters of a string read one by one before the scan searches for its end instead. */
const SHORT_STRETCH = 64

export interface JsonShape {
  /** The deepest nesting of objects and arrays. */
  depth: number
  /** The most members any one object has. */
  widest: number
  /**
   * A member is named `__proto__` or `constructor`, or its name has an escape (which may spell either):
   * only then does the parse look for prototype keys (secure-json-parse), a scan of the whole text that a
   * megabyte of attachment would otherwise pay on every send.
   */
  prototypeKeys: boolean
}

/**
 * How deeply `text` nests and how wide its widest object is, counted outside strings, in one pass; it
 * stops as soon as either is past its limit. (Each colon outside a string ends an object member's name.)
 */
export function jsonShape (text: string, limits: { depth?: number; members?: number } = {}): JsonShape {
  const maxDepth = limits.depth ?? Number.POSITIVE_INFINITY
  const maxMembers = limits.members ?? Number.POSITIVE_INFINITY
  const members: number[] = [0]
  let depth = 0
  let deepest = 0
  let widest = 0
  let prototypeKeys = false
  // Where the next quote and the next backslash are (-1: none left), once searched for.
  let nextQuote = -2
  let nextSlash = -2
  // The last string: where it opened and closed, and whether it had an escape (a member's name, if a colon follows).
  let opened = -1
  let closed = -1
  let escaped = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === QUOTE) {
      // To the string's end: character by character for a short stretch (where escapes are dense), then
      // by the native search (an attachment's megabyte of base64 is one string). The positions of the next
      // quote and the next backslash are kept while they are ahead, so no stretch is searched twice: the
      // pass stays linear whatever the layout, and a clean string costs two searches.
      opened = i
      escaped = false
      let at = i + 1
      for (;;) {
        const stop = at + SHORT_STRETCH
        while (at < stop && at < text.length) {
          const d = text.charCodeAt(at)
          if (d === BACKSLASH) { at += 2; escaped = true } else if (d === QUOTE) break
          else at++
        }
        if (at >= text.length) { i = text.length; break }
        if (at < stop) { i = at; break }
        if (nextQuote < at) nextQuote = text.indexOf('"', at)
        if (nextQuote < 0) { i = text.length; break }
        if (nextSlash !== -1 && nextSlash < at) nextSlash = text.indexOf('\\', at)
        if (nextSlash === -1 || nextSlash > nextQuote) { i = nextQuote; break }
        at = nextSlash
      }
      closed = i
    } else if (c === COLON) {
      if (!prototypeKeys && opened >= 0) {
        const length = closed - opened - 1
        prototypeKeys = escaped ||
          (length === 9 && text.startsWith('__proto__', opened + 1)) ||
          (length === 11 && text.startsWith('constructor', opened + 1))
      }
      const n = (members[depth] ?? 0) + 1
      members[depth] = n
      if (n > widest) {
        widest = n
        if (widest > maxMembers) break
      }
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      members[++depth] = 0
      if (depth > deepest) {
        deepest = depth
        if (deepest > maxDepth) break
      }
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      if (depth > 0) depth--
    }
  }
  return { depth: deepest, widest, prototypeKeys }
}

/**
 * A body's bytes as text (UTF-8). Most bodies are ASCII (an attachment is base64), and ASCII is read byte
 * for byte: checked at memory speed, then copied, where decoding UTF-8 costs more than twice as much.
 */
export function bodyText (bytes: Buffer): string {
  return isAscii(bytes) ? bytes.toString('latin1') : bytes.toString('utf8')
}

/**
 * A request body: whitespace alone is no body (undefined); nesting deeper than MAX_JSON_DEPTH and objects
 * wider than MAX_OBJECT_MEMBERS are refused unparsed; `__proto__` and `constructor.prototype` keys are
 * refused outright.
 */
export function parseJsonBody (text: string): unknown {
  if (text.trim() === '') return undefined
  const shape = jsonShape(text, { depth: MAX_JSON_DEPTH, members: MAX_OBJECT_MEMBERS })
  if (shape.depth > MAX_JSON_DEPTH) {
    throw ValidationError(`The request body nests deeper than ${MAX_JSON_DEPTH} levels; no route takes that`)
  }
  if (shape.widest > MAX_OBJECT_MEMBERS) {
    throw ValidationError(`The request body has an object with more than ${MAX_OBJECT_MEMBERS} fields; no route takes that`)
  }
  try {
    return shape.prototypeKeys ? sjson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' }) : JSON.parse(text)
  } catch (err) {
    // secure-json-parse's own refusal names the prototype; JSON.parse's message quotes the body: not echoed.
    if (err instanceof SyntaxError && /prototype property/.test(err.message)) {
      throw ValidationError('The request body has a __proto__ or constructor.prototype key, which is refused')
    }
    throw ValidationError('The request body is not valid JSON')
  }
}
