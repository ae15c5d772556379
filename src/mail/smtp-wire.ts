// What crosses between the mailer's thread and the SMTP thread (./smtp-thread.ts, workers/smtp.ts). A
// message's per-recipient parts are functions in the mailer (OutgoingMessage.copy, .returnPath); they are
// called there, once per recipient, and travel as plain data. Tested in test/unit/smtp-wire.test.ts.
import { MessageBuildError, type MessageDraft } from './compose.js'
import type { MailStage } from './stages.js'
import { bareAddress, envelopeRecipients, simulatorOutcome, type OutgoingMessage, type RecipientCopy, type RecipientResult } from './transport.js'

/** An OutgoingMessage without its functions: each recipient's copy and envelope sender, made already. */
export type WireMessage = Omit<OutgoingMessage, 'copy' | 'returnPath'> & {
  copies?: Record<string, RecipientCopy>
  returnPaths?: Record<string, string>
}

/** The rest of a draft (./compose.ts) when the copies are made in the SMTP thread: plain data already. */
export type WireDraft = Omit<MessageDraft, 'msg'>

export interface RelayJob { id: number; msg: WireMessage; draft?: WireDraft }

export type RelayAnswer =
  | { id: number; results: RecipientResult[] }
  /**
   * `build`: the message could not be built (a MessageBuildError); `refused` with it: the relay cannot take
   * it (a MessageRefusedError, larger than its SIZE); otherwise the transport failed.
   */
  | { id: number; failed: { build: boolean; refused?: boolean; reason: string } }

/** What the thread sends back: answers, and the stage times and render counts measured meanwhile. */
export interface AnswerBatch {
  answers: RelayAnswer[]
  stages: Array<[MailStage, number]>
  rendered: { template: number; copy: number }
}

/**
 * The message as data. Only recipients the relay will see get a copy (the simulator's addresses are
 * answered without it). Throws MessageBuildError when a copy cannot be made, as the transport would.
 */
export function toWire (msg: OutgoingMessage): WireMessage {
  const { copy, returnPath, ...rest } = msg
  const wire: WireMessage = rest
  if (copy === undefined && returnPath === undefined) return wire
  const real = envelopeRecipients(msg).filter((r) => simulatorOutcome(r) === null)
  if (copy !== undefined) {
    const copies: Record<string, RecipientCopy> = {}
    for (const r of real) copies[r] = copy(r)
    wire.copies = copies
  }
  if (returnPath !== undefined) {
    const paths: Record<string, string> = {}
    for (const r of real) paths[r] = returnPath(r)
    wire.returnPaths = paths
  }
  return wire
}

/** A draft as data: its message's envelope senders made here (the copies are made in the SMTP thread). */
export function draftToWire (draft: MessageDraft): { msg: WireMessage; draft: WireDraft } {
  const { msg, ...rest } = draft
  if (msg.copy !== undefined) throw new TypeError('a draft\'s message has no copies yet')
  return { msg: toWire(msg), draft: rest }
}

/** The message again, its functions answering from the data (in the SMTP thread). */
export function fromWire (wire: WireMessage): OutgoingMessage {
  const { copies, returnPaths, ...rest } = wire
  const msg: OutgoingMessage = rest
  if (copies !== undefined) {
    msg.copy = (r) => {
      const c = Object.hasOwn(copies, r) ? copies[r] : undefined
      if (c === undefined) throw new MessageBuildError('making a recipient\'s copy failed (no copy for this recipient)')
      return c
    }
  }
  if (returnPaths !== undefined) msg.returnPath = (r) => (Object.hasOwn(returnPaths, r) ? returnPaths[r]! : bareAddress(msg.from))
  return msg
}
