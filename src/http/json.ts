// Request bodies are JSON. Before a body is parsed, one linear pass checks how deeply it nests: no route
// takes more than a few levels, and a 200,000-level body must cost a scan, not a parse (and then a
// validator, a canonical hash, …, each walking it again).
import sjson from 'secure-json-parse'
import { ValidationError } from '../errors.js'

/** Deeper than any body svc takes (a batch item's tag is 4 levels). */
export const MAX_JSON_DEPTH = 32

const QUOTE = 0x22
const BACKSLASH = 0x5c
const OPEN_OBJECT = 0x7b
const CLOSE_OBJECT = 0x7d
const OPEN_ARRAY = 0x5b
const CLOSE_ARRAY = 0x5d

/** The deepest nesting of objects and arrays in `text`, counted outside strings; stops once past `limit`. */
export function jsonDepth (text: string, limit = Number.POSITIVE_INFINITY): number {
  let depth = 0
  let deepest = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === BACKSLASH) i++
      else if (c === QUOTE) inString = false
    } else if (c === QUOTE) {
      inString = true
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (++depth > deepest) {
        deepest = depth
        if (deepest > limit) return deepest
      }
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      depth--
    }
  }
  return deepest
}

/**
 * A request body: whitespace alone is no body (undefined); nesting deeper than MAX_JSON_DEPTH is refused
 * unparsed; `__proto__` and `constructor.prototype` keys are refused outright.
 */
export function parseJsonBody (text: string): unknown {
  if (text.trim() === '') return undefined
  if (jsonDepth(text, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) {
    throw ValidationError(`The request body nests deeper than ${MAX_JSON_DEPTH} levels; no route takes that`)
  }
  try {
    return sjson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' })
  } catch {
    throw ValidationError('The request body is not valid JSON')
  }
}
