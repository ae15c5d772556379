import { mkdir, readdir, unlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import MailComposer from 'nodemailer/lib/mail-composer/index.js'
import { personalize } from './compose.js'
import {
  customHeaders,
  envelopeRecipients,
  formatMessageId,
  simulatorOutcome,
  type MailTransport,
  type MessageDraft,
  type OutgoingMessage,
  type RecipientResult,
} from './transport.js'

export interface SandboxTransport extends MailTransport {
  /** The most recent messages handed to send(), oldest first, at most `keep` of them. */
  sent(): OutgoingMessage[]
  /** Writes the messages not yet in `dir` now (they are written in the background anyway, shortly after). */
  flush(): Promise<void>
}

export interface SandboxOptions {
  /** How many messages to keep for inspection; 0 keeps none. Default 100. */
  keep?: number
  /**
   * A directory where the newest messages are also written, so that a developer can open them: `<id>.eml`
   * (the whole message, as a relay would have received it, for its first recipient) and, when it has
   * HTML, `<id>.html` (that part, to open in a browser: its tracked links and pixel reach svc, and a banner
   * on top links its unsubscribe page). Written in the background, a moment after the send, never on
   * the send's path. Unset: nothing is written.
   */
  dir?: string
  /** How many messages to keep in `dir`, the newest (by id, which sorts by time); default 200. */
  keepFiles?: number
  /**
   * Files are written once sends pause for this long (default 250 ms), and under a steady stream of sends
   * at most every 20 times that (5 s), so that at volume the writes stay a few per second.
   */
  writeDelayMs?: number
  /** Hears once where the files go (at the first message), and once when writing them fails. */
  logger?: { info(msg: string): void; warn(msg: string): void }
  /**
   * What a draft's copy is made with (MailTransport.sendDraft). With it, the mailer hands over drafts and
   * a copy (tracking tokens, the html filled in) is made only for the messages written to `dir` (the
   * newest `keepFiles`), when they are written: the others are never looked at. No sendDraft without it.
   */
  copies?: { publicUrl: string; secret: string }
}

const escapeHtml = (s: string): string =>
  s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

/** A message to write, or its draft, whose copy is made only if it is written. */
interface Pending {
  messageId: string
  /** What it costs to hold until it is written (its bodies, in characters). */
  size: number
  message: () => OutgoingMessage
}

const bodyChars = (m: Pick<OutgoingMessage, 'html' | 'text' | 'attachments'>) =>
  (m.html?.length ?? 0) + (m.text?.length ?? 0) + (m.attachments?.reduce((n, a) => n + a.content.length, 0) ?? 0)
/** Messages waiting to be written are held up to this many characters; the oldest beyond it are not written. */
const MAX_PENDING_CHARS = 32 * 1024 * 1024

/** The message as plain data: what a developer looks at (the first recipient's copy), without the functions. */
function plain (msg: OutgoingMessage): OutgoingMessage {
  const { copy: _copy, returnPath: _returnPath, ...rest } = msg
  return rest
}

/**
 * The .eml and .html copies of the newest messages, the oldest removed beyond `keepFiles`. A send only
 * puts its message in a list in memory; a timer writes the newest `keepFiles` of that list and removes
 * what falls out, so at volume the file system sees at most `keepFiles` messages per write round however
 * many were sent, and nothing of it is on the send's path.
 */
function fileWriter (dir: string, keepFiles: number, delayMs: number, logger: SandboxOptions['logger']) {
  let names: string[] | undefined
  let failed = false
  let pending: Pending[] = []
  let pendingChars = 0
  let timer: NodeJS.Timeout | undefined
  let writing: Promise<void> = Promise.resolve()
  let firstPendingAt = 0
  let lastAddAt = 0

  const ready = async (): Promise<string[]> => {
    if (names !== undefined) return names
    await mkdir(dir, { recursive: true, mode: 0o700 })
    // What earlier runs left counts against the bound too.
    const found = (await readdir(dir)).filter((f) => f.endsWith('.eml')).map((f) => f.slice(0, -4)).sort()
    logger?.info(`sandbox: every email is written to ${path.resolve(dir)} as <id>.eml (and <id>.html), the last ${keepFiles} kept; no email leaves this machine`)
    names = found
    return found
  }

  const writeOne = async (msg: OutgoingMessage, name: string): Promise<void> => {
    const mail: ConstructorParameters<typeof MailComposer>[0] = {
      messageId: formatMessageId(msg), from: msg.from, to: msg.to, cc: msg.cc, subject: msg.subject,
      headers: customHeaders(msg.headers),
    }
    if (msg.replyTo !== undefined && msg.replyTo.length > 0) mail.replyTo = msg.replyTo
    if (msg.html !== undefined) mail.html = msg.html
    if (msg.text !== undefined) mail.text = msg.text
    if (msg.attachments !== undefined && msg.attachments.length > 0) {
      mail.attachments = msg.attachments.map((a) => ({
        filename: a.filename, contentType: a.contentType, content: Buffer.from(a.content.buffer, a.content.byteOffset, a.content.byteLength),
        contentDisposition: a.contentId !== undefined ? 'inline' : 'attachment', ...(a.contentId !== undefined ? { cid: a.contentId } : {}),
      }))
    }
    const eml = await new MailComposer(mail).compile().build()
    await writeFile(path.join(dir, `${name}.eml`), eml, { mode: 0o600 })
    if (msg.html !== undefined) {
      const unsubscribe = /^<([^<>]*)>/.exec(msg.headers['List-Unsubscribe'] ?? '')?.[1]
      const banner = '<div style="font:14px sans-serif;background:#fffbe6;border-bottom:1px solid #e6d87a;padding:8px">' +
        `svc sandbox copy of ${escapeHtml(name)} (not part of the email)` +
        (unsubscribe ? ` · <a href="${escapeHtml(unsubscribe)}">its unsubscribe link</a> (List-Unsubscribe)` : '') + '</div>\n'
      await writeFile(path.join(dir, `${name}.html`), banner + msg.html, { mode: 0o600 })
    }
  }

  const writeRound = async (): Promise<void> => {
    const batch = pending
    pending = []
    pendingChars = 0
    if (batch.length === 0) return
    try {
      const list = await ready()
      // Ids are ours (em_…), but a file name is no place to trust that. Sends finish in any order; the ids
      // sort by time, so the newest are the last after sorting.
      const named = batch.map((entry) => ({ entry, name: entry.messageId.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 100) }))
        .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)).slice(-keepFiles)
      for (const { entry, name } of named) {
        await writeOne(entry.message(), name)
        if (!list.includes(name)) list.push(name)
      }
      list.sort()
      while (list.length > keepFiles) {
        const old = list.shift()!
        await Promise.all([`${old}.eml`, `${old}.html`].map((f) => unlink(path.join(dir, f)).catch(() => {})))
      }
    } catch (err) {
      // A convenience for development: a full disk must not fail the "send".
      if (!failed) logger?.warn(`sandbox: could not write the email to ${path.resolve(dir)}: ${err instanceof Error ? err.message : String(err)}`)
      failed = true
    }
  }

  const flush = (): Promise<void> => {
    clearTimeout(timer)
    timer = undefined
    writing = writing.then(writeRound)
    return writing
  }

  return {
    add (entry: Pending): void {
      pending.push(entry)
      pendingChars += entry.size
      // Only the newest keepFiles can end up in the directory; the rest need not be held.
      while (pending.length > keepFiles || (pendingChars > MAX_PENDING_CHARS && pending.length > 1)) pendingChars -= pending.shift()!.size
      lastAddAt = Date.now()
      if (timer === undefined) {
        firstPendingAt = lastAddAt
        const tick = () => {
          const now = Date.now()
          // Still sending: wait for a pause, but not past 20 delays since the first pending message.
          if (now - lastAddAt < delayMs && now - firstPendingAt < 20 * delayMs) timer = setTimeout(tick, delayMs)
          else void flush()
        }
        timer = setTimeout(tick, delayMs)
      }
    },
    flush,
  }
}

export const SANDBOX_RESPONSE = 'sandbox: not sent'

export function createSandboxTransport(opts: SandboxOptions = {}): SandboxTransport {
  const keep = opts.keep ?? 100
  if (!Number.isInteger(keep) || keep < 0) throw new RangeError('keep must be a non-negative integer')
  const keepFiles = opts.keepFiles ?? 200
  if (!Number.isInteger(keepFiles) || keepFiles < 1) throw new RangeError('keepFiles must be a positive integer')
  const files = opts.dir !== undefined ? fileWriter(opts.dir, keepFiles, opts.writeDelayMs ?? 250, opts.logger) : undefined
  const kept: OutgoingMessage[] = []
  let closed = false

  let keptChars = 0
  const keepInMemory = (copy: OutgoingMessage) => {
    // A copy, so later changes by the caller do not rewrite what was "sent".
    kept.push(structuredClone(copy))
    keptChars += bodyChars(copy)
    // At most `keep` messages, and no more than MAX_PENDING_CHARS of bodies and attachments (the newest stays).
    while (kept.length > keep || (keptChars > MAX_PENDING_CHARS && kept.length > 1)) keptChars -= bodyChars(kept.shift()!)
  }
  const results = (msg: OutgoingMessage): RecipientResult[] => envelopeRecipients(msg).map(
    (recipient): RecipientResult =>
      simulatorOutcome(recipient) ?? { recipient, outcome: 'delivered', response: SANDBOX_RESPONSE },
  )

  const transport: SandboxTransport = {
    name: 'sandbox',
    async send(msg) {
      if (closed) throw new Error('sandbox transport is closed')
      if (keep > 0 || files !== undefined) {
        const copy = plain(msg)
        if (keep > 0) keepInMemory(copy)
        files?.add({ messageId: copy.messageId, size: bodyChars(copy), message: () => copy })
      }
      return results(msg)
    },
    sent() {
      return kept.map((m) => structuredClone(m))
    },
    flush: () => files?.flush() ?? Promise.resolve(),
    async close() {
      closed = true
      kept.length = 0
      keptChars = 0
      await files?.flush()
    },
  }
  const copies = opts.copies
  if (copies !== undefined) {
    transport.sendDraft = async (draft: MessageDraft) => {
      if (closed) throw new Error('sandbox transport is closed')
      // The message as the first recipient's copy, made only when it is looked at: a developer sees the
      // newest few hundred, and at volume the rest would be made for nothing (three tracking tokens and
      // the html filled in, per email). A draft that made it this far has its copies' parts checked.
      // Made once, whether it is kept in memory, written, or both.
      let copy: OutgoingMessage | undefined
      const made = () => (copy ??= plain(personalize(draft, copies)))
      if (keep > 0) keepInMemory(made())
      if (files !== undefined) {
        const size = (draft.template?.parts.reduce((n, part) => n + part.length, 0) ?? 0) + bodyChars(draft.msg)
        files.add({ messageId: draft.msg.messageId, size, message: made })
      }
      return results(draft.msg)
    }
  }
  return transport
}
