// Email addresses as senders write them: `someone@example.com` or `Some One <someone@example.com>`.
// Whatever we accept here ends up in a header line and an SMTP envelope, so the rules are strict: ASCII
// addresses only (international domains in their xn-- form), no control characters anywhere, and the
// formatted result must read back as exactly the one address it was made from.
import addressparser from 'nodemailer/lib/addressparser/index.js'
import { hasControlCharacter } from './text.js'

export interface Address {
  /** The display name, or null. */
  name: string | null
  /** The bare address, lower-case: what suppressions, events and the envelope use. */
  address: string
}

// RFC 5321 path limit, and its local-part limit.
const MAX_ADDRESS = 254
const MAX_LOCAL = 64
const MAX_NAME = 200
// Dot-atom local parts only: quoted local parts ("a b"@x) are legal but almost never real, and each one
// would be a new way to smuggle characters into an envelope.
const LOCAL = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/
const LABEL = /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/
// A display name made of these needs no quotes (RFC 5322 atext and spaces).
const PLAIN_NAME = /^[A-Za-z0-9 !#$%&'*+\-/=?^_`{|}~]+$/

/** The bare address, lower-cased, or an error message. */
export function parseBareAddress (input: string): string | { error: string } {
  const at = input.lastIndexOf('@')
  if (at <= 0 || at === input.length - 1) return { error: 'is not an email address' }
  const local = input.slice(0, at)
  const domain = input.slice(at + 1)
  if (input.length > MAX_ADDRESS) return { error: `is longer than ${MAX_ADDRESS} characters` }
  if (local.length > MAX_LOCAL || !LOCAL.test(local)) return { error: 'has a local part (before @) that is not valid' }
  const labels = domain.split('.')
  if (!labels.every((l) => LABEL.test(l)) || /^\d+$/.test(labels.at(-1)!)) {
    return { error: 'has a domain that is not valid (international domains go in their xn-- form)' }
  }
  // Whole-address lower case: every mailbox provider we know treats local parts case-insensitively, and
  // one spelling per mailbox is what makes a suppression hold.
  return input.toLowerCase()
}

// The characters of a dot-atom address (RFC 5322 atext, the dot and one @): none of them means anything
// to the address parser, so an input made only of them, with one @ inside it, is its own bare address.
const ATEXT = new Uint8Array(128)
for (const c of "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-/=?^_`{|}~.") ATEXT[c.charCodeAt(0)] = 1

/** `a.b+c@example.com`, in one linear pass: atext and dots, exactly one @, with something on either side. */
export function isPlainAddress (input: string): boolean {
  let at = -1
  for (let i = 0; i < input.length; i++) {
    const c = input.charCodeAt(i)
    if (c === 0x40) {
      if (at >= 0) return false
      at = i
    } else if (c >= 128 || ATEXT[c] === 0) {
      return false
    }
  }
  return at > 0 && at < input.length - 1
}

/** `addr` or `Name <addr>` (the name may be "quoted"), or an error message. */
export function parseAddress (input: string): Address | { error: string } {
  // Never in a header: C0 and C1 controls (CR, LF, tab, NEL, …), DEL, U+2028 and U+2029.
  if (hasControlCharacter(input)) return { error: 'must not contain control characters (CR, LF, tab, U+0085, U+2028, …)' }
  const text = input.trim()
  let name: string | null = null
  let bare = text
  if (text.endsWith('>')) {
    const open = text.lastIndexOf('<')
    if (open < 0) return { error: 'is not an email address' }
    bare = text.slice(open + 1, -1).trim()
    const rawName = text.slice(0, open).trim()
    if (rawName !== '') {
      const parsed = parseName(rawName)
      if (typeof parsed !== 'string') return parsed
      name = parsed === '' ? null : parsed
    }
  }
  const address = parseBareAddress(bare)
  if (typeof address !== 'string') return address
  const result = { name, address }
  // A bare dot-atom address is written as itself, and reads back as itself (isPlainAddress): the round
  // trip below can only agree, so it is skipped for the commonest input there is.
  if (name === null && isPlainAddress(address)) return result
  // The last word: what nodemailer will read back from the header we write must be this one address.
  const back = addressparser(formatAddress(result), { flatten: true })
  if (back.length !== 1 || back[0]?.address.toLowerCase() !== address || (back[0]?.name || null) !== name) {
    return { error: 'is not a single email address' }
  }
  return result
}

function parseName (raw: string): string | { error: string } {
  let name = raw
  if (raw.startsWith('"')) {
    if (raw.length < 2 || !raw.endsWith('"')) return { error: 'has a display name with unbalanced quotes' }
    name = raw.slice(1, -1).replace(/\\(.)/g, '$1')
  } else if (/[<>"]/.test(raw)) {
    return { error: 'has a display name with <, > or " in it: put the name in double quotes' }
  }
  // addressparser folds runs of spaces; so do we, or the round trip below would refuse the name.
  name = name.replace(/ +/g, ' ').trim()
  if (name.length > MAX_NAME) return { error: `has a display name longer than ${MAX_NAME} characters` }
  return name
}

/** The header form: `addr`, `Name <addr>`, or `"Name, with specials" <addr>`. */
export function formatAddress (a: Address): string {
  if (a.name === null || a.name === '') return a.address
  if (PLAIN_NAME.test(a.name)) return `${a.name} <${a.address}>`
  return `"${a.name.replace(/[\\"]/g, '\\$&')}" <${a.address}>`
}

/** The bare address of a header form we formatted ourselves. */
export function bareOf (formatted: string): string {
  const open = formatted.lastIndexOf('<')
  return open >= 0 && formatted.endsWith('>') ? formatted.slice(open + 1, -1) : formatted
}
