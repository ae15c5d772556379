// The message of one attempt, made from a stored email: the recipients still pending, our Message-ID,
// and for each recipient their own List-Unsubscribe header and tracked links and pixel in the html. The
// html is scanned once (draftMessage: a pure function of its inputs, so it runs in the mailer's thread or,
// for large bodies, in a worker thread, ./compose-pool.ts); each recipient's copy is filled from it when
// the transport asks (personalize).
import { bareOf } from '../domain/addresses.js'
import { MAX_BUILD_BODY_CHARS } from '../domain/mail-attempt.js'
import { TRACKING_TTL_MS, trackingRecipient } from '../domain/tracking-links.js'
import type { EmailRecord } from '../store/emails.js'
import { htmlToText } from './html-text.js'
import { fillHtml, htmlTemplate, unsubscribeHeaders, type TrackingLinkOptions } from './tracking.js'
import type { MessageDraft, OutgoingMessage, RecipientCopy } from './transport.js'

/** The message of an email cannot be built; the message says what failed and never quotes the content. */
export class MessageBuildError extends Error {
  override readonly name = 'MessageBuildError'
}

/**
 * The relay cannot take the message as it is (it is larger than the relay's SIZE): nothing was sent, and
 * sending it again would be refused again. Failed like a message that cannot be built, in its own words.
 */
export class MessageRefusedError extends MessageBuildError {}

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

/** An attempt's message before it is made per recipient (its definition is in ./transport.ts). */
export type { MessageDraft }

/**
 * The draft of one attempt: only the recipients still pending (a retry does not resend to those who have
 * it), our Message-ID, and the html's tracked places. Throws MessageBuildError when the email's content
 * makes that impossible.
 */
export function draftMessage (email: EmailRecord, opts: { publicUrl: string }): MessageDraft {
  for (const part of ['html', 'text'] as const) {
    const body = email[part]
    if (body !== null && body.length > MAX_BUILD_BODY_CHARS) throw new MessageBuildError(`the ${part} is longer than ${MAX_BUILD_BODY_CHARS} characters`)
  }
  const pendingList = email.recipients.filter((r) => r.state === 'pending').map((r) => r.address)
  const pending = new Set(pendingList)
  const only = (list: string[]) => list.filter((formatted) => pending.has(bareOf(formatted)))
  const msg: OutgoingMessage = {
    messageId: email.id,
    from: email.from,
    to: only(email.to),
    cc: only(email.cc),
    bcc: only(email.bcc),
    subject: email.subject,
    headers: { ...email.headers },
  }
  if (email.replyTo.length > 0) msg.replyTo = email.replyTo
  const html = email.html
  // Tracking off: no pixel, and every link exactly as written (htmlTemplate leaves the html whole).
  const track = { trackOpens: email.tracking?.opens !== false, trackClicks: email.tracking?.clicks !== false }
  const template = html === null ? null : buildStep('the tracking rewrite of the html', () => htmlTemplate(html, { ...opts, ...track }))
  if (email.text !== null) msg.text = email.text
  // html only: a text part written from it (multipart/alternative, as mailbox providers expect).
  else if (html !== null) msg.text = buildStep('writing the text part from the html', () => htmlToText(html))
  // The links live TRACKING_TTL_MS from when the email goes out: a scheduled one's from its time.
  const sentAt = Math.max(Date.parse(email.createdAt), email.scheduledAt ? Date.parse(email.scheduledAt) : 0)
  return {
    msg, template, recipients: pendingList.length > 0 ? pendingList : [trackingRecipient(email)], emailId: email.id,
    expiresAt: Math.floor((sentAt + TRACKING_TTL_MS) / 1000),
    ...(email.unsubscribe === false ? { unsubscribe: false } : {}),
  }
}

/**
 * The message with each recipient's own copy (OutgoingMessage.copy): their List-Unsubscribe link, and the
 * tracked links and pixel of their html, all naming them. The message's own html and headers are the
 * first pending recipient's copy. Throws MessageBuildError when a copy cannot be made.
 */
export function personalize (draft: MessageDraft, opts: { publicUrl: string; secret: string }): OutgoingMessage {
  const unsubscribe = draft.unsubscribe !== false
  // Nothing names the recipient (no tracking, no unsubscribe link): every recipient gets the same message.
  if (!unsubscribe && (draft.template === null || draft.template.slots.length === 0)) {
    const msg: OutgoingMessage = { ...draft.msg, headers: { ...draft.msg.headers } }
    if (draft.template !== null) msg.html = draft.template.parts[0]!
    return msg
  }
  const copy = (recipient: string): RecipientCopy => {
    const link: TrackingLinkOptions = { publicUrl: opts.publicUrl, secret: opts.secret, emailId: draft.emailId, recipient, expiresAt: draft.expiresAt }
    const out: RecipientCopy = { headers: unsubscribe ? buildStep('making the List-Unsubscribe link', () => unsubscribeHeaders(link)) : {} }
    const template = draft.template
    if (template !== null) out.html = buildStep('the tracking rewrite of the html', () => fillHtml(template, link))
    return out
  }
  const first = copy(draft.recipients[0]!)
  const msg: OutgoingMessage = { ...draft.msg, headers: { ...draft.msg.headers, ...first.headers } }
  if (first.html !== undefined) msg.html = first.html
  msg.copy = (recipient) => recipient === draft.recipients[0] ? first : copy(recipient)
  return msg
}

/** draftMessage, then personalize: the message of one attempt, built in this thread. */
export function composeMessage (email: EmailRecord, opts: { publicUrl: string; secret: string }): OutgoingMessage {
  return personalize(draftMessage(email, opts), opts)
}
