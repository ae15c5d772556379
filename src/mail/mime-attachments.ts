// The MIME of a message with attachments, made once per message and shared by every recipient's copy.
//
// MailComposer writes the structure (multipart/mixed for files, multipart/related for the inline ones the
// html names by cid:, each part's headers with its file name encoded as RFC 2231 asks) with a marker line
// in place of each attachment's body, as ./mime.ts does for the html and the text. The message is then
// cut at those markers into small text segments, and each attachment's bytes are encoded into base64 once
// (lines of 76 characters). A copy is the segments with its own List-Unsubscribe and html put in, around
// the shared encoded buffers: a few kilobytes of its own, however large the files, and nothing encoded
// again. Sent as a list of buffers (the relay connection writes them one after another).
//
// DKIM still signs each copy: relaxed canonicalization works line by line, base64 lines are canonical
// already, and every cut falls at a line's end, so the canonical body is the segments' canonical forms
// (computed once) around the same buffers; a copy hashes that, and signs. When the copies' html is the
// same (no tracking), the body hash is computed once for all of them.
import { createHash, type KeyObject } from 'node:crypto'
import MailComposer from 'nodemailer/lib/mail-composer/index.js'
import type { SendMailOptions } from 'nodemailer'
import { base64Body } from './attachments.js'
import { MessageBuildError, errorKind } from './compose.js'
import { UNSUBSCRIBE, base64Lines, dkimHeader, marker, relaxedBody, type MimeTemplate } from './mime-parts.js'
import { formatMessageId, type OutgoingMessage } from './transport.js'

/** Relaxed canonicalization (RFC 6376 §3.4.4) of lines that end inside the body: no trailing-lines rule. */
function relaxedLines (text: string): string {
  return text.split('\r\n').map((line) => line.replace(/[ \t]+/g, ' ').replace(/ $/, '')).join('\r\n')
}

/** Where each piece of a message goes: text (with markers still in it) and, between them, attachment bodies. */
interface Cut {
  /** segments.length === order.length + 1 */
  segments: string[]
  /** Which attachment's body follows segments[i]. */
  order: number[]
}

function cutAt (body: string, marks: string[]): Cut {
  const found = marks.map((m, i) => {
    const at = body.indexOf(Buffer.from(m, 'latin1').toString('base64'))
    if (at < 0) throw new MessageBuildError('rendering the MIME message failed (an attachment was not where it belongs)')
    return { at, end: at + 76, i }
  }).sort((a, b) => a.at - b.at)
  const segments: string[] = []
  const order: number[] = []
  let from = 0
  for (const f of found) {
    segments.push(body.slice(from, f.at))
    order.push(f.i)
    from = f.end
  }
  segments.push(body.slice(from))
  return { segments, order }
}

/**
 * The template of a message with attachments (msg.attachments non-empty): `headers` are its custom headers
 * (customHeaders), `key` its DKIM key when it is signed. Throws MessageBuildError when it cannot be built.
 */
export async function attachedTemplate (msg: OutgoingMessage, headers: Record<string, string>, key: KeyObject | undefined): Promise<MimeTemplate> {
  const files = msg.attachments!
  const htmlMark = msg.html !== undefined ? marker('html') : undefined
  const textMark = msg.text !== undefined ? marker('text') : undefined
  const unsubscribeMark = headers[UNSUBSCRIBE] !== undefined ? marker('unsubscribe') : undefined
  if (unsubscribeMark !== undefined) headers[UNSUBSCRIBE] = `<${unsubscribeMark}>`
  const marks = files.map((_, i) => marker(`file${i}`))
  const mail: SendMailOptions = {
    messageId: formatMessageId(msg), from: msg.from, to: msg.to, cc: msg.cc, subject: msg.subject, headers,
    disableFileAccess: true, disableUrlAccess: true,
    attachments: files.map((f, i) => ({
      filename: f.filename,
      contentType: f.contentType,
      content: marks[i],
      contentTransferEncoding: 'base64',
      contentDisposition: f.contentId !== undefined ? 'inline' : 'attachment',
      ...(f.contentId !== undefined ? { cid: f.contentId } : {}),
    })),
  }
  if (msg.replyTo !== undefined && msg.replyTo.length > 0) mail.replyTo = msg.replyTo
  if (textMark !== undefined) mail.text = { content: textMark, contentTransferEncoding: 'base64' } as never
  if (htmlMark !== undefined) mail.html = { content: htmlMark, contentTransferEncoding: 'base64' } as never
  const raw = (await new MailComposer(mail).compile().build()).toString('latin1')
  const split = raw.indexOf('\r\n\r\n')
  const head = raw.slice(0, split)
  const { segments, order } = cutAt(raw.slice(split + 4), marks)
  if (unsubscribeMark !== undefined && head.indexOf(unsubscribeMark) < 0) {
    throw new MessageBuildError('rendering the MIME message failed (a part was not where it belongs)')
  }

  // Once per message: each file's base64, and the segments' canonical forms for DKIM.
  const encoded = files.map((f) => base64Body(f.content))
  const last = segments.length - 1
  const canonical = segments.map((s, i) => (i === last ? relaxedBody(s) : relaxedLines(s)))
  const b64 = (m: string | undefined) => (m === undefined ? undefined : Buffer.from(m, 'latin1').toString('base64'))
  const htmlAt = b64(htmlMark)
  const textAt = b64(textMark)
  const text = msg.text !== undefined ? base64Lines(msg.text) : undefined
  if (textAt !== undefined) {
    for (let i = 0; i < segments.length; i++) {
      segments[i] = segments[i]!.replace(textAt, () => text!)
      canonical[i] = canonical[i]!.replace(textAt, () => text!)
    }
  }
  const withHtml = (list: string[], lines: string): string[] => {
    if (htmlAt === undefined) return list
    return list.map((s) => (s.indexOf(htmlAt) < 0 ? s : s.replace(htmlAt, () => lines)))
  }
  const ownHtml = msg.html
  const ownUnsubscribe = msg.headers[UNSUBSCRIBE]
  // The body hash of the last html seen: copies with the same html (no tracking) share it.
  let hashed: { html: string; bh: string } | undefined

  const parts = async (copy: Parameters<MimeTemplate['render']>[0]): Promise<Buffer[]> => {
    if (copy?.html !== undefined && typeof copy.html !== 'string') throw new MessageBuildError('rendering the MIME message failed (a body is not text)')
    const unsubscribe = copy?.headers[UNSUBSCRIBE] ?? ownUnsubscribe
    const html = copy?.html ?? ownHtml ?? ''
    let h = head
    if (unsubscribeMark !== undefined) h = h.replace(unsubscribeMark, () => `${unsubscribe ?? ''}`.replace(/[\r\n]+/g, ' ').replace(/^<|>$/g, ''))
    const htmlLines = htmlAt === undefined ? '' : base64Lines(html)
    const body = withHtml(segments, htmlLines)
    let signature = ''
    if (msg.dkim !== undefined && key !== undefined) {
      try {
        let bh = hashed?.html === html ? hashed.bh : undefined
        if (bh === undefined) {
          const hash = createHash('sha256')
          const canon = withHtml(canonical, htmlLines)
          for (let i = 0; i < canon.length; i++) {
            hash.update(canon[i]!, 'latin1')
            if (i < order.length) hash.update(encoded[order[i]!]!)
          }
          bh = hash.digest('base64')
          hashed = { html, bh }
        }
        signature = `${await dkimHeader(h, bh, msg.dkim, key)}\r\n`
      } catch (err) {
        if (err instanceof MessageBuildError) throw err
        throw new MessageBuildError(`signing the message failed (${errorKind(err)})`)
      }
    }
    const out: Buffer[] = [Buffer.from(`${signature}${h}\r\n\r\n${body[0]}`, 'latin1')]
    for (let i = 0; i < order.length; i++) {
      out.push(encoded[order[i]!]!)
      out.push(Buffer.from(body[i + 1]!, 'latin1'))
    }
    return out
  }

  return {
    parts,
    async render (copy) {
      return Buffer.concat(await parts(copy))
    },
  }
}
