// SMTP replies as they come off a socket (RFC 5321 §4.2): lines of a three-digit code, then "-" when
// more lines of the same reply follow, or a space (or nothing) on its last line. Chunks may split a
// line or hold many replies (a pipelined group's answers arrive together). Linear in what arrives: each
// byte is looked at once, and a reply is bounded in size before it is kept.

export interface SmtpReply {
  code: number
  /** The whole reply as the server wrote it, its lines joined by "\n" (codes included). */
  text: string
}

/** A server that does not speak SMTP, or that talks without end, is a protocol error. */
export class SmtpProtocolError extends Error {
  /** The replies that came whole, in the same chunk, before the bad line. */
  replies: SmtpReply[] = []
}

/** RFC 5321 allows 512 octets per reply line; a few KiB more covers servers that go over. */
export const MAX_REPLY_BYTES = 64 * 1024

export class ReplyReader {
  private partial = ''
  private lines: string[] = []
  private size = 0

  /** The replies completed by this chunk, in order. Throws SmtpProtocolError on a malformed or oversized reply. */
  push (chunk: string): SmtpReply[] {
    const out: SmtpReply[] = []
    let start = 0
    for (;;) {
      const nl = chunk.indexOf('\n', start)
      if (nl < 0) break
      const piece = chunk.slice(start, nl)
      start = nl + 1
      const line = this.partial === '' ? piece : this.partial + piece
      this.partial = ''
      let reply: SmtpReply | undefined
      try {
        reply = this.line(line.endsWith('\r') ? line.slice(0, -1) : line)
      } catch (err) {
        if (err instanceof SmtpProtocolError) err.replies = out
        throw err
      }
      if (reply !== undefined) out.push(reply)
    }
    if (start < chunk.length) {
      this.partial += chunk.slice(start)
      if (this.size + this.partial.length > MAX_REPLY_BYTES) {
        const err = new SmtpProtocolError('the server sent a reply longer than 64 KiB')
        err.replies = out
        throw err
      }
    }
    return out
  }

  private line (line: string): SmtpReply | undefined {
    this.size += line.length + 1
    if (this.size > MAX_REPLY_BYTES) throw new SmtpProtocolError('the server sent a reply longer than 64 KiB')
    const code = /^[2-5]\d\d/.test(line) ? Number(line.slice(0, 3)) : NaN
    const sep = line.length > 3 ? line[3] : ' '
    if (Number.isNaN(code) || (sep !== ' ' && sep !== '-')) {
      throw new SmtpProtocolError(`the server's reply is not SMTP: ${JSON.stringify(line.slice(0, 80))}`)
    }
    if (this.lines.length > 0 && Number(this.lines[0]!.slice(0, 3)) !== code) {
      throw new SmtpProtocolError('the lines of one reply from the server carry different codes')
    }
    this.lines.push(line)
    if (sep === '-') return undefined
    const text = this.lines.join('\n')
    this.lines = []
    this.size = 0
    return { code, text }
  }
}

/** The text after the code of a reply's lines (EHLO keywords, say), one entry per line. */
export function replyLines (reply: SmtpReply): string[] {
  return reply.text.split('\n').map((l) => l.slice(4))
}

/**
 * A message's bytes as DATA carries them (RFC 5321 §4.5.2): a line that starts with "." gets another in
 * front, a last line without CRLF gets one, then the end-of-data line. One pass over the bytes.
 */
export function dataBlock (raw: Buffer): Buffer {
  const parts: Buffer[] = []
  let from = 0
  if (raw.length > 0 && raw[0] === 0x2e) {
    parts.push(DOT)
  }
  for (;;) {
    const at = raw.indexOf(CRLF_DOT, from)
    if (at < 0) break
    // Up to and including the CRLF and the dot, then one more dot.
    parts.push(raw.subarray(from, at + 3), DOT)
    from = at + 3
  }
  parts.push(raw.subarray(from))
  const endsInCrlf = raw.length >= 2 && raw[raw.length - 2] === 0x0d && raw[raw.length - 1] === 0x0a
  parts.push(endsInCrlf ? END : CRLF_END)
  return Buffer.concat(parts)
}

/**
 * dataBlock for a message given in pieces (./mime-attachments.ts): the same bytes on the wire, as a list
 * of buffers, the pieces' own buffers among them (nothing is copied but the few bytes around a dot). A
 * line that starts in one piece and goes on in the next is read across them.
 */
const dotFree = new WeakSet<Buffer>()

/**
 * Marks a buffer that holds no line starting with "." and does not start with one (an attachment's base64
 * lines, ./attachments.ts): dataChunks then does not search it, in each copy that carries it.
 */
export function markDotFree (buf: Buffer): Buffer {
  dotFree.add(buf)
  return buf
}

export function dataChunks (raw: Buffer | readonly Buffer[]): Buffer[] {
  if (Buffer.isBuffer(raw)) return [dataBlock(raw)]
  const out: Buffer[] = []
  // How much of CRLF the bytes so far end with (2: a line starts here; the data's start counts as one).
  let state = 2
  let any = false
  for (const chunk of raw) {
    const n = chunk.length
    if (n === 0) continue
    any = true
    let from = 0
    if (state === 2 && chunk[0] === 0x2e) {
      out.push(DOT)
    } else if (state === 1 && chunk[0] === 0x0a && n > 1 && chunk[1] === 0x2e) {
      out.push(chunk.subarray(0, 2), DOT)
      from = 2
    }
    for (;;) {
      const at = dotFree.has(chunk) ? -1 : chunk.indexOf(CRLF_DOT, from)
      if (at < 0) break
      out.push(chunk.subarray(from, at + 3), DOT)
      from = at + 3
    }
    if (from < n) out.push(from === 0 ? chunk : chunk.subarray(from))
    const lastByte = chunk[n - 1]
    if (lastByte === 0x0d) state = 1
    else if (lastByte === 0x0a && (n >= 2 ? chunk[n - 2] === 0x0d : state === 1)) state = 2
    else state = 0
  }
  out.push(any && state === 2 ? END : CRLF_END)
  return out
}

const DOT = Buffer.from('.')
const CRLF_DOT = Buffer.from('\r\n.')
const END = Buffer.from('.\r\n')
const CRLF_END = Buffer.from('\r\n.\r\n')
