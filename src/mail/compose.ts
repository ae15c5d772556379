// The message of one attempt, made from a stored email: the recipients still pending, our Message-ID,
// the List-Unsubscribe headers, and the tracked links and pixel in the html. A pure function of its
// inputs, so it runs in the mailer's thread or, for large bodies, in a worker thread (./compose-pool.ts).
import { bareOf } from '../domain/addresses.js'
import { MAX_BUILD_BODY_CHARS, TRACKING_TTL_MS, trackingRecipient } from '../app/emails.js'
import type { EmailRecord } from '../store/emails.js'
import { instrumentHtml, unsubscribeHeaders, type TrackingLinkOptions } from './tracking.js'
import type { OutgoingMessage } from './transport.js'

/** The message of an email cannot be built; the message says what failed and never quotes the content. */
export class MessageBuildError extends Error {
  override readonly name = 'MessageBuildError'
}

/** Only the error's class: its message may quote what it choked on. */
export function errorKind (err: unknown): string {
  return err instanceof Error && /^[A-Za-z]{1,40}$/.test(err.name) ? err.name : 'Error'
}

/** Why a message could not be built, for the email's timeline: the step that failed, never the content. */
export function buildFailureReason (err: unknown): string {
  return err instanceof MessageBuildError ? err.message : `composing the message failed (${errorKind(err)})`
}

/** One step of building a message; whatever it throws becomes a MessageBuildError that names the step only. */
function buildStep<T> (what: string, step: () => T): T {
  try {
    return step()
  } catch (err) {
    throw new MessageBuildError(`${what} failed (${errorKind(err)})`)
  }
}

/**
 * The message for one attempt: only the recipients still pending (a retry does not resend to those who
 * have it), our Message-ID, the List-Unsubscribe headers, and the tracking pixel and links in the html.
 * Throws MessageBuildError when the email's content makes that impossible.
 */
export function composeMessage (email: EmailRecord, opts: { publicUrl: string; secret: string }): OutgoingMessage {
  for (const part of ['html', 'text'] as const) {
    const body = email[part]
    if (body !== null && body.length > MAX_BUILD_BODY_CHARS) throw new MessageBuildError(`the ${part} is longer than ${MAX_BUILD_BODY_CHARS} characters`)
  }
  const pending = new Set(email.recipients.filter((r) => r.state === 'pending').map((r) => r.address))
  const only = (list: string[]) => list.filter((formatted) => pending.has(bareOf(formatted)))
  const link: TrackingLinkOptions = {
    publicUrl: opts.publicUrl,
    secret: opts.secret,
    emailId: email.id,
    recipient: trackingRecipient(email),
    expiresAt: Math.floor((Date.parse(email.createdAt) + TRACKING_TTL_MS) / 1000),
  }
  const msg: OutgoingMessage = {
    messageId: email.id,
    from: email.from,
    to: only(email.to),
    cc: only(email.cc),
    bcc: only(email.bcc),
    subject: email.subject,
    headers: { ...email.headers, ...buildStep('making the List-Unsubscribe link', () => unsubscribeHeaders(link)) },
  }
  if (email.replyTo.length > 0) msg.replyTo = email.replyTo
  const html = email.html
  if (html !== null) msg.html = buildStep('the tracking rewrite of the html', () => instrumentHtml(html, link))
  if (email.text !== null) msg.text = email.text
  return msg
}

