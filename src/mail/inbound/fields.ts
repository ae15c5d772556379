// A bounded reader of the header-style blocks in report parts: message/delivery-status (RFC 3464: one
// block for the message, then one per recipient, separated by blank lines) and message/feedback-report
// (RFC 5965: one block). mailparser hands these parts over as text; this turns them into maps of field
// name (lower case) → value, with folded lines joined. One pass over at most MAX_TEXT characters; the
// number of blocks, of fields per block and the length of each value are capped, so a hostile part
// costs linear time and bounded memory.

export const LIMITS = {
  text: 64 * 1024,
  blocks: 100,
  fieldsPerBlock: 60,
  value: 1000,
} as const

export type Block = Map<string, string>

function isFieldNameChar (c: number): boolean {
  return c > 0x20 && c < 0x7f && c !== 0x3a
}

/** The blocks of `text`, in order; the first field of a name in a block wins. */
export function readFieldBlocks (text: string): Block[] {
  const input = text.length > LIMITS.text ? text.slice(0, LIMITS.text) : text
  const blocks: Block[] = []
  let block: Block | null = null
  let lastName: string | null = null
  let start = 0
  while (start <= input.length && blocks.length <= LIMITS.blocks) {
    let end = input.indexOf('\n', start)
    if (end < 0) end = input.length
    let line = input.slice(start, end)
    start = end + 1
    if (line.endsWith('\r')) line = line.slice(0, -1)
    if (line.trim() === '') {
      block = null
      lastName = null
      if (end >= input.length) break
      continue
    }
    const first = line.charCodeAt(0)
    if ((first === 0x20 || first === 0x09) && block !== null && lastName !== null) {
      // A folded continuation of the last field.
      const value = block.get(lastName)!
      if (value.length < LIMITS.value) block.set(lastName, (value + ' ' + line.trim()).slice(0, LIMITS.value))
      continue
    }
    const colon = line.indexOf(':')
    if (colon <= 0) {
      lastName = null
      continue
    }
    let valid = true
    for (let i = 0; i < colon; i++) {
      if (!isFieldNameChar(line.charCodeAt(i))) { valid = false; break }
    }
    if (!valid) {
      lastName = null
      continue
    }
    if (block === null) {
      if (blocks.length >= LIMITS.blocks) break
      block = new Map()
      blocks.push(block)
    }
    const name = line.slice(0, colon).toLowerCase()
    if (block.has(name) || block.size >= LIMITS.fieldsPerBlock) {
      lastName = null
      continue
    }
    block.set(name, line.slice(colon + 1, colon + 1 + LIMITS.value).trim())
    lastName = name
  }
  return blocks
}

/**
 * Values of the header fields named in `names` (lower case) anywhere in `text`, at line starts, up to
 * `max` of them: how the original message's Message-ID and Return-Path are found when a report carries
 * the original inline (mailparser folds an inline message/rfc822 part into the text).
 */
export function scanHeaderFields (text: string, names: readonly string[], max = 20): Array<{ name: string; value: string }> {
  const found: Array<{ name: string; value: string }> = []
  let start = 0
  const limit = Math.min(text.length, 512 * 1024)
  while (start < limit && found.length < max) {
    let end = text.indexOf('\n', start)
    if (end < 0 || end > limit) end = limit
    // Only the line's first characters are looked at: a field name is short.
    const head = text.slice(start, Math.min(end, start + 31)).indexOf(':')
    const colon = head < 0 ? -1 : start + head
    if (colon > start) {
      const name = text.slice(start, colon).toLowerCase()
      if (names.includes(name)) found.push({ name, value: text.slice(colon + 1, Math.min(end, colon + 1 + LIMITS.value)).trim() })
    }
    start = end + 1
  }
  return found
}
