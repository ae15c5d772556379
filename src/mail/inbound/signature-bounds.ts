// How much of a received message's authentication is checked: at most so many DKIM signatures and ARC
// sets, in a header block of bounded size. A verifier may limit the signatures it checks (RFC 6376 §6.1,
// §8.4), and a chain of more ARC sets than a verifier takes fails (RFC 8617 §5.2). Without a bound, one
// message of 10 MiB carries thousands of DKIM-Signature fields, each a body hash over the whole message and
// a DNS lookup of a selector its sender picks. The fields are bounded in size too: mailauth matches each
// name of a signature's h= list against every header line, so one field of 300 KB (150,000 names) over
// 15,000 lines cost seconds of CPU; a real signature is well under 2 KiB.
//
// The header block is read the way mailauth reads it (lib/dkim/message-parser.js and tools.parseHeaders),
// so that what is counted here is what mailauth would check: it ends at the first empty line (a LF, then
// an optional CR, then a LF; a bare LF counts as CRLF), a line that starts with white space (tab, LF, VT,
// FF, CR, space or 0xA0) continues the field before it, and a field's name is what comes before its first
// colon, white space trimmed, in any case. One pass over the bytes, stopped at maxHeaderBytes.

/** The defaults, and what README "Receiving mail" documents. */
export const SIGNATURE_BOUNDS = {
  /** DKIM-Signature fields verified: the first ten (the newest, each hop adds its own on top). */
  dkim: 10,
  /** ARC sets (ARC-Seal, ARC-Message-Signature, ARC-Authentication-Results each): past it, arc is `fail`. */
  arcSets: 10,
  /** A header block longer than this (as the verifier reads it) is not judged: DKIM and DMARC are `permerror`. */
  headerBytes: 1024 * 1024,
  /**
   * Lines in the header block: mailauth joins folded lines at a cost that grows with their square, and
   * matches each name of a signature's h= against every line. Real mail has a few hundred at most.
   */
  headerLines: 4 * 1024,
  /** A DKIM-Signature or ARC field longer than this (its line ends included) is not verified; a real one is under 2 KiB. */
  fieldBytes: 8 * 1024,
  /** The DKIM-Signature fields verified, together: one that would pass it is not verified. */
  signatureBytes: 32 * 1024,
} as const

export type SignatureBounds = { [K in keyof typeof SIGNATURE_BOUNDS]: number }

export interface BoundedMessage {
  /**
   * What the verifier is given: the message itself, or a copy of the same length in which each
   * DKIM-Signature field past the bound has the first letter of its name made an X (XKIM-Signature), so
   * that no verifier takes it for a signature. Nothing is removed: a removal would move bytes, and how
   * mailauth reads a bare LF or CR depends on the bytes around it.
   */
  message: Buffer
  /** DKIM-Signature fields in the header block. */
  dkim: number
  /** Of those, how many were renamed in `message` (not verified): past the count, over fieldBytes, or past signatureBytes. */
  dkimDropped: number
  /** DKIM-Signature and ARC fields over fieldBytes (renamed in `message`). */
  oversized: number
  /** The most fields of any one ARC name (ARC-Seal, ARC-Message-Signature, ARC-Authentication-Results): the sets claimed. */
  arcSets: number
  /** arcSets is over the bound, or an ARC field over fieldBytes: the chain is not verified and fails. */
  arcOver: boolean
  /** The header block is over headerBytes or headerLines: not judged at all. */
  headerOver: boolean
}

const LF = 0x0a
const CR = 0x0d
const COLON = 0x3a
/** What the first letter of a field's name becomes when it is left out: a letter, so nothing else moves. */
const X = 0x58

/** JavaScript's white space among the bytes 0-255 (what `\s` and trim() match in a latin1 string). */
function isSpace (b: number): boolean {
  return (b >= 0x09 && b <= 0x0d) || b === 0x20 || b === 0xa0
}

const NAMES = ['dkim-signature', 'arc-seal', 'arc-message-signature', 'arc-authentication-results'] as const
const DKIM = 0
const NAME_BYTES = NAMES.map((n) => Buffer.from(n, 'latin1'))

/** Where the name of the field that starts at `start` begins: past any white space (only the first field may have some). */
function nameStart (raw: Buffer, start: number, end: number): number {
  let at = start
  while (at < end && isSpace(raw[at]!)) at++
  return at
}

/**
 * Which of NAMES the field in raw[start, end) has (its index), or -1. Reads at most the name's length
 * plus the white space around it: the field's name is trimmed and must be followed by a colon or the
 * field's end.
 */
function fieldName (raw: Buffer, start: number, end: number): number {
  const at = nameStart(raw, start, end)
  // Every name starts "dkim-" or "arc-": the fifth byte (or the fourth) tells them apart from the rest.
  for (let n = 0; n < NAME_BYTES.length; n++) {
    const name = NAME_BYTES[n]!
    if (end - at < name.length) continue
    let same = true
    for (let k = 0; k < name.length; k++) {
      const b = raw[at + k]!
      // ASCII letters only: no byte outside ASCII lower-cases to one (latin1).
      if ((b >= 0x41 && b <= 0x5a ? b + 0x20 : b) !== name[k]) { same = false; break }
    }
    if (!same) continue
    let after = at + name.length
    while (after < end && isSpace(raw[after]!)) after++
    if (after === end || raw[after] === COLON) return n
  }
  return -1
}

/**
 * Counts the DKIM-Signature and ARC fields of `raw`'s header block and gives back a copy in which those
 * not to be verified are renamed (every other byte as it was): a signature is verified when fewer than
 * `bounds.dkim` are, it is no longer than `bounds.fieldBytes`, and the ones verified stay within
 * `bounds.signatureBytes` together; an ARC field over fieldBytes is renamed, and its chain fails.
 * Linear in the header block, which is read up to bounds.headerBytes at most.
 */
export function boundSignatures (raw: Buffer, bounds: SignatureBounds = SIGNATURE_BOUNDS): BoundedMessage {
  const keep = Math.max(0, bounds.dkim)
  const limit = Math.min(raw.length, bounds.headerBytes + 1)
  const counts = [0, 0, 0, 0]
  // Where the names of the fields to leave out begin.
  const rename: number[] = []
  let kept = 0
  let keptBytes = 0
  let oversized = 0
  let dkimDropped = 0
  let arcOversized = false
  let fieldStart = 0
  let lines = 0
  let headerEnd = -1
  let overLines = false
  const closeField = (end: number) => {
    if (end <= fieldStart) return
    const n = fieldName(raw, fieldStart, end)
    if (n < 0) return
    counts[n]!++
    const size = end - fieldStart
    const over = size > bounds.fieldBytes
    if (over) oversized++
    if (n === DKIM) {
      if (!over && kept < keep && keptBytes + size <= bounds.signatureBytes) {
        kept++
        keptBytes += size
        return
      }
      dkimDropped++
    } else if (over) {
      arcOversized = true
    } else {
      return
    }
    rename.push(nameStart(raw, fieldStart, end))
  }
  for (let i = 0; i < limit; i++) {
    if (raw[i] !== LF) continue
    // The end of the header block: this LF follows a LF, or a CR that follows a LF.
    if (i > 0 && (raw[i - 1] === LF || (raw[i - 1] === CR && i > 1 && raw[i - 2] === LF))) {
      headerEnd = i + 1
      break
    }
    lines++
    if (lines > bounds.headerLines) { overLines = true; break }
    const next = i + 1
    // A line that starts with white space continues the field; any other starts the next one.
    if (next < raw.length && !isSpace(raw[next]!)) {
      closeField(next)
      fieldStart = next
    }
  }
  const blockEnd = headerEnd >= 0 ? headerEnd : raw.length
  const headerOver = overLines || blockEnd > bounds.headerBytes
  if (!headerOver) {
    // The last field runs to the empty line (or to the end of a message without a body).
    const lastEnd = headerEnd >= 0 ? lastLineStart(raw, headerEnd) : raw.length
    closeField(lastEnd)
  }
  const arcSets = Math.max(counts[1]!, counts[2]!, counts[3]!)
  let message = raw
  if (!headerOver && rename.length > 0) {
    message = Buffer.from(raw)
    for (const at of rename) message[at] = X
  }
  return {
    message,
    dkim: counts[DKIM]!,
    dkimDropped: headerOver ? 0 : dkimDropped,
    oversized: headerOver ? 0 : oversized,
    arcSets,
    arcOver: arcSets > bounds.arcSets || arcOversized,
    headerOver,
  }
}

/** Where the empty line that ends the header block starts, given the index just past its LF. */
function lastLineStart (raw: Buffer, headerEnd: number): number {
  // headerEnd - 1 is the LF of the empty line; before it an optional CR, then the LF that ended the last field's line.
  let at = headerEnd - 1
  if (at > 0 && raw[at - 1] === CR) at--
  return at
}
