import { mkdir, readdir, unlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import MailComposer from 'nodemailer/lib/mail-composer/index.js'
import {
  customHeaders,
  envelopeRecipients,
  formatMessageId,
  simulatorOutcome,
  type MailTransport,
  type OutgoingMessage,
  type RecipientResult,
} from './transport.js'

export interface SandboxTransport extends MailTransport {
  /** The most recent messages handed to send(), oldest first, at most `keep` of them. */
  sent(): OutgoingMessage[]
}

export interface SandboxOptions {
  /** How many messages to keep for inspection; 0 keeps none. Default 100. */
  keep?: number
  /**
   * A directory where each message is also written, so that a developer can open it: `<id>.eml` (the
   * whole message, as a relay would have received it) and, when it has HTML, `<id>.html` (that part, to
   * open in a browser: its tracked links and pixel reach svc, and a banner on top links its unsubscribe
   * page). Unset: nothing is written.
   */
  dir?: string
  /** How many messages to keep in `dir`, the newest (by id, which sorts by time); default 200. */
  keepFiles?: number
  /** Hears once where the files go (at the first message), and once when writing them fails. */
  logger?: { info(msg: string): void; warn(msg: string): void }
}

const escapeHtml = (s: string): string =>
  s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

/** The .eml and .html copies of the messages, the oldest removed beyond `keepFiles`. */
function fileWriter (dir: string, keepFiles: number, logger: SandboxOptions['logger']) {
  let names: Promise<string[]> | undefined
  let failed = false
  // Once, shared by the sends in flight; tried again at the next send if it failed.
  const ready = (): Promise<string[]> => names ??= (async () => {
    await mkdir(dir, { recursive: true, mode: 0o700 })
    // What earlier runs left counts against the bound too.
    const found = (await readdir(dir)).filter((f) => f.endsWith('.eml')).map((f) => f.slice(0, -4)).sort()
    logger?.info(`sandbox: every email is written to ${path.resolve(dir)} as <id>.eml (and <id>.html), the last ${keepFiles} kept; no email leaves this machine`)
    return found
  })().catch((err: unknown) => { names = undefined; throw err })

  return async (msg: OutgoingMessage): Promise<void> => {
    try {
      const list = await ready()
      // Ids are ours (em_…), but a file name is no place to trust that.
      const name = msg.messageId.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 100)
      const mail: ConstructorParameters<typeof MailComposer>[0] = {
        messageId: formatMessageId(msg), from: msg.from, to: msg.to, cc: msg.cc, subject: msg.subject,
        headers: customHeaders(msg.headers),
      }
      if (msg.replyTo !== undefined && msg.replyTo.length > 0) mail.replyTo = msg.replyTo
      if (msg.html !== undefined) mail.html = msg.html
      if (msg.text !== undefined) mail.text = msg.text
      const eml = await new MailComposer(mail).compile().build()
      await writeFile(path.join(dir, `${name}.eml`), eml, { mode: 0o600 })
      if (msg.html !== undefined) {
        const unsubscribe = /^<([^<>]*)>/.exec(msg.headers['List-Unsubscribe'] ?? '')?.[1]
        const banner = '<div style="font:14px sans-serif;background:#fffbe6;border-bottom:1px solid #e6d87a;padding:8px">' +
          `svc sandbox copy of ${escapeHtml(name)} (not part of the email)` +
          (unsubscribe ? ` · <a href="${escapeHtml(unsubscribe)}">its unsubscribe link</a> (List-Unsubscribe)` : '') + '</div>\n'
        await writeFile(path.join(dir, `${name}.html`), banner + msg.html, { mode: 0o600 })
      }
      // Sends in flight finish in any order; the ids sort by time, so the oldest is always first.
      if (!list.includes(name)) {
        list.push(name)
        list.sort()
      }
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
}

export const SANDBOX_RESPONSE = 'sandbox: not sent'

export function createSandboxTransport(opts: SandboxOptions = {}): SandboxTransport {
  const keep = opts.keep ?? 100
  if (!Number.isInteger(keep) || keep < 0) throw new RangeError('keep must be a non-negative integer')
  const keepFiles = opts.keepFiles ?? 200
  if (!Number.isInteger(keepFiles) || keepFiles < 1) throw new RangeError('keepFiles must be a positive integer')
  const write = opts.dir !== undefined ? fileWriter(opts.dir, keepFiles, opts.logger) : undefined
  const kept: OutgoingMessage[] = []
  let closed = false

  return {
    name: 'sandbox',
    async send(msg) {
      if (closed) throw new Error('sandbox transport is closed')
      if (keep > 0) {
        // A copy, so later changes by the caller do not rewrite what was "sent".
        kept.push(structuredClone(msg))
        if (kept.length > keep) kept.splice(0, kept.length - keep)
      }
      if (write) await write(msg)
      return envelopeRecipients(msg).map(
        (recipient): RecipientResult =>
          simulatorOutcome(recipient) ?? { recipient, outcome: 'delivered', response: SANDBOX_RESPONSE },
      )
    },
    sent() {
      return kept.map((m) => structuredClone(m))
    },
    async close() {
      closed = true
      kept.length = 0
    },
  }
}
