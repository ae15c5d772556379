// The bytes an SMTP relay is handed, made once per message and then per recipient by substitution. A
// message goes through nodemailer's MailComposer once, with markers where the html, the text and the
// List-Unsubscribe value go; each recipient's copy is that template with their own List-Unsubscribe and
// html put in (base64, as MailComposer would encode them), and, for a verified domain, its own DKIM
// signature (relaxed/relaxed, rsa-sha256, signed in libuv's thread pool so the main thread goes on).
// MailComposer's whole pipeline per recipient cost about a millisecond of the main thread; the
// substitution is a few string joins and one hash (benchmarks/HISTORY.md, mail over SMTP, issue 20).
import { createHash, type KeyObject } from 'node:crypto'
import MailComposer from 'nodemailer/lib/mail-composer/index.js'
import MimeNode from 'nodemailer/lib/mime-node/index.js'
import type { SendMailOptions } from 'nodemailer'
import { MessageBuildError, errorKind } from './compose.js'
import { attachedTemplate } from './mime-attachments.js'
import { UNSUBSCRIBE, base64Lines, dkimHeader, headerFields, keyOf, marker, relaxedBody, type MimeTemplate } from './mime-parts.js'
import { customHeaders, formatMessageId, type OutgoingMessage } from './transport.js'

/** The DKIM-Signature header field for a message (head: its header block, body: as sent). */
async function dkimSignature (head: string, body: string, dkim: NonNullable<OutgoingMessage['dkim']>, key: KeyObject): Promise<string> {
  return await dkimHeader(head, createHash('sha256').update(relaxedBody(body), 'latin1').digest('base64'), dkim, key)
}

/** A message's header block and body, with the markers where each recipient's parts go. */
interface Built {
  head: string
  body: string
  htmlMark: string | undefined
  textMark: string | undefined
  unsubscribeMark: string | undefined
}

/**
 * The header fields that differ between messages of the same shape. Messages of one shape (the same
 * sender, reply-to, custom headers, parts and signing domain: a campaign, or one kind of transactional
 * mail) share everything else of what MailComposer writes, down to the boundary (never found in base64).
 */
const PER_MESSAGE = new Set(['to', 'cc', 'subject', 'message-id', 'date'])

/** Shapes seen lately: what MailComposer wrote for the first message of each, with the per-message fields to replace. */
const shapes = new Map<string, Built & { fields: Array<{ key: string; line: string }> }>()
const MAX_SHAPES = 256

/** The per-message header fields of a message, exactly as MailComposer would write them. */
function perMessageFields (msg: OutgoingMessage): Map<string, string> {
  return plainFields(msg) ?? composedFields(msg)
}

/** A bare address MimeNode writes as it is. */
const PLAIN_ADDRESS = /^[a-z0-9._+-]{1,64}@[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63}){0,8}$/i
/** Printable ASCII but the double quote (which MimeNode encodes), single spaces between words: a subject MimeNode leaves as it is. */
const PLAIN_SUBJECT = /^[\x21\x23-\x7e]+(?: [\x21\x23-\x7e]+)*$/

/**
 * The common case without MimeNode: bare ASCII addresses, a short plain subject, our own Message-ID. Each
 * line is what MimeNode writes for it (test/unit/mime-shapes.test.ts compares them over many inputs); any
 * other message takes composedFields.
 */
export function plainFields (msg: OutgoingMessage): Map<string, string> | undefined {
  const out = new Map<string, string>()
  const line = (key: string, name: string, value: string): boolean => {
    const text = `${name}: ${value}`
    // Within MimeNode's fold width: nothing to fold.
    if (text.length > 76) return false
    out.set(key, text)
    return true
  }
  for (const [key, name, list] of [['to', 'To', msg.to], ['cc', 'Cc', msg.cc]] as const) {
    if (list.length === 0) continue
    if (list.length > 8 || !list.every((a) => PLAIN_ADDRESS.test(a))) return undefined
    if (!line(key, name, list.join(', '))) return undefined
  }
  if (msg.subject) {
    if (msg.subject.length > 60 || !PLAIN_SUBJECT.test(msg.subject)) return undefined
    if (!line('subject', 'Subject', msg.subject)) return undefined
  }
  const id = formatMessageId(msg)
  if (!/^<[\x21-\x7e]{1,60}>$/.test(id) || !line('message-id', 'Message-ID', id)) return undefined
  out.set('date', `Date: ${new Date().toUTCString().replace(/GMT/, '+0000')}`)
  return out
}

/**
 * The per-message fields as nodemailer's MimeNode writes them on a root node, as MailComposer's root node
 * does: the same encoding of names and subjects, the same folding. Exported for the tests.
 */
export function composedFields (msg: OutgoingMessage): Map<string, string> {
  const node = new MimeNode('text/plain', { disableFileAccess: true, disableUrlAccess: true })
  // As MailComposer.compile sets them: every field it is given a truthy value for.
  if (msg.to) node.setHeader('to', msg.to)
  if (msg.cc) node.setHeader('cc', msg.cc)
  if (msg.subject) node.setHeader('subject', msg.subject)
  node.setHeader('message-id', formatMessageId(msg))
  const out = new Map<string, string>()
  for (const f of headerFields(node.buildHeaders())) if (PER_MESSAGE.has(f.key)) out.set(f.key, f.line)
  return out
}

/**
 * The message through MailComposer once per shape; each further message of the shape is the first one's
 * text with its own per-message fields (about a fifth of the CPU of MailComposer's whole pipeline: it built
 * the tree and streamed it for every message, benchmarks/HISTORY.md, mail over SMTP, round 5). A shape is kept only
 * when the fields written alone match what MailComposer wrote, field for field.
 */
async function build (msg: OutgoingMessage, headers: Record<string, string>): Promise<Built> {
  const own = perMessageFields(msg)
  const shapeKey = JSON.stringify([
    msg.from, msg.replyTo ?? [], Object.entries(headers).map(([k, v]) => (k === UNSUBSCRIBE ? [k] : [k, v])),
    msg.html !== undefined, msg.text !== undefined, msg.dkim?.domainName, msg.dkim?.keySelector, [...own.keys()],
  ])
  const known = shapes.get(shapeKey)
  if (known !== undefined) {
    const head = known.fields.map((f) => (PER_MESSAGE.has(f.key) ? own.get(f.key)! : f.line)).join('\r\n')
    return { head, body: known.body, htmlMark: known.htmlMark, textMark: known.textMark, unsubscribeMark: known.unsubscribeMark }
  }
  const htmlMark = msg.html !== undefined ? marker('html') : undefined
  const textMark = msg.text !== undefined ? marker('text') : undefined
  const unsubscribeMark = headers[UNSUBSCRIBE] !== undefined ? marker('unsubscribe') : undefined
  if (unsubscribeMark !== undefined) headers[UNSUBSCRIBE] = `<${unsubscribeMark}>`
  const mail: SendMailOptions = {
    messageId: formatMessageId(msg), from: msg.from, to: msg.to, cc: msg.cc, subject: msg.subject, headers,
    // Bodies come from API requests: a "path" or URL in them must never be read or fetched.
    disableFileAccess: true, disableUrlAccess: true,
  }
  if (msg.replyTo !== undefined && msg.replyTo.length > 0) mail.replyTo = msg.replyTo
  if (textMark !== undefined) mail.text = { content: textMark, contentTransferEncoding: 'base64' } as never
  if (htmlMark !== undefined) mail.html = { content: htmlMark, contentTransferEncoding: 'base64' } as never
  const raw = (await new MailComposer(mail).compile().build()).toString('latin1')
  const split = raw.indexOf('\r\n\r\n')
  const built: Built = { head: raw.slice(0, split), body: raw.slice(split + 4), htmlMark, textMark, unsubscribeMark }
  const fields = headerFields(built.head)
  const theirs = fields.filter((f) => PER_MESSAGE.has(f.key))
  const same = theirs.length === own.size && theirs.every((f) => f.key === 'date' || own.get(f.key) === f.line)
  if (same) {
    if (shapes.size >= MAX_SHAPES) shapes.delete(shapes.keys().next().value!)
    shapes.set(shapeKey, { ...built, fields })
  }
  return built
}

/**
 * Builds the template of a message (its header block and MIME structure, through MailComposer).
 * Throws MessageBuildError when the message cannot be built.
 */
export async function mimeTemplate (msg: OutgoingMessage): Promise<MimeTemplate> {
  let key: KeyObject | undefined
  // A header name that is not a field-name is refused as it is (TypeError), before anything else.
  const headers = customHeaders(msg.headers)
  let built: Built
  try {
    if ((msg.html !== undefined && typeof msg.html !== 'string') || (msg.text !== undefined && typeof msg.text !== 'string')) {
      // Only text is taken: an object here (a "path" to read, a URL to fetch) is refused, never followed.
      throw new MessageBuildError('rendering the MIME message failed (a body is not text)')
    }
    if (msg.dkim !== undefined) {
      // A domain name goes into the signature as it is: it must be plain ASCII (svc stores them punycoded).
      if (!/^[a-z0-9.-]{1,253}$/i.test(msg.dkim.domainName) || !/^[a-z0-9._-]{1,63}$/i.test(msg.dkim.keySelector)) {
        throw new MessageBuildError('signing the message failed (the DKIM domain or selector is not plain ASCII)')
      }
      key = keyOf(msg.dkim.privateKey)
    }
    // Attachments: their bytes encoded once for every copy (./mime-attachments.ts).
    if (msg.attachments !== undefined && msg.attachments.length > 0) return await attachedTemplate(msg, headers, key)
    built = await build(msg, headers)
  } catch (err) {
    if (err instanceof MessageBuildError) throw err
    throw new MessageBuildError(`rendering the MIME message failed (${errorKind(err)})`)
  }
  const { head, body, htmlMark, textMark, unsubscribeMark } = built
  const b64 = (m: string | undefined) => (m === undefined ? undefined : Buffer.from(m, 'latin1').toString('base64'))
  const htmlAt = b64(htmlMark)
  const textAt = b64(textMark)
  // The text is the same in every copy: encoded once.
  const text = msg.text !== undefined ? base64Lines(msg.text) : undefined
  const ownHtml = msg.html
  const ownUnsubscribe = msg.headers[UNSUBSCRIBE]
  for (const [m, where] of [[htmlAt, body], [textAt, body], [unsubscribeMark, head]] as const) {
    if (m !== undefined && where.indexOf(m) < 0) throw new MessageBuildError('rendering the MIME message failed (a part was not where it belongs)')
  }

  return {
    async render (copy) {
      if (copy?.html !== undefined && typeof copy.html !== 'string') throw new MessageBuildError('rendering the MIME message failed (a body is not text)')
      const unsubscribe = copy?.headers[UNSUBSCRIBE] ?? ownUnsubscribe
      const html = copy?.html ?? ownHtml
      let h = head
      if (unsubscribeMark !== undefined) {
        // A header value is one line: a CR or LF in it would start another field.
        h = h.replace(unsubscribeMark, () => `${unsubscribe ?? ''}`.replace(/[\r\n]+/g, ' ').replace(/^<|>$/g, ''))
      }
      let b = body
      if (htmlAt !== undefined) b = b.replace(htmlAt, () => base64Lines(html ?? ''))
      if (textAt !== undefined) b = b.replace(textAt, () => text!)
      let out = `${h}\r\n\r\n${b}`
      if (msg.dkim !== undefined && key !== undefined) {
        try {
          out = `${await dkimSignature(h, b, msg.dkim, key)}\r\n${out}`
        } catch (err) {
          throw new MessageBuildError(`signing the message failed (${errorKind(err)})`)
        }
      }
      return Buffer.from(out, 'latin1')
    },
  }
}
