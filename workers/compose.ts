// The compose worker thread: builds the message of one attempt for an email whose body is large (the
// tracking rewrite of a megabyte of html costs tens of milliseconds), so that the main thread keeps
// answering requests meanwhile. Each recipient's copy is filled from the draft in the mailer's thread. Wiring only; the behaviour is src/mail/compose.ts, tested without threads.
import { workerData } from 'node:worker_threads'
import { buildFailureReason, draftMessage, type MessageDraft } from '../src/mail/compose.js'
import type { EmailRecord } from '../src/store/emails.js'

/** Piscina `workerData`: what every message is built with. */
export interface ComposeWorkerData {
  publicUrl: string
  secret: string
}

/** A build failure comes back as a reason (an Error's class does not survive the trip between threads). */
export type ComposeAnswer = { ok: true; draft: MessageDraft } | { ok: false; reason: string }

const options = workerData as ComposeWorkerData

export default function compose (email: EmailRecord): ComposeAnswer {
  try {
    return { ok: true, draft: draftMessage(email, options) }
  } catch (err) {
    return { ok: false, reason: buildFailureReason(err) }
  }
}
