// One attempt's sending, apart from the mailer's queue (./mailer.ts claims the emails and records what
// happened): the message composed (in a worker thread when a composer is given), its attachments read
// within the budget of bytes in flight, DKIM and VERP added, and the message handed to the transport. It
// comes back with each pending recipient's outcome, or with the plan of an email that cannot be built
// (failed now, not retried at every start).
import type { FastifyBaseLogger } from 'fastify'
import { planBuildFailure, type RecipientOutcome } from '../domain/mail-attempt.js'
import type { Clock } from '../domain/clock.js'
import type { EmailAttempt, EmailRecord } from '../store/emails.js'
import type { Store } from '../store/types.js'
import { ByteBudget } from '../domain/byte-budget.js'
import { attachmentBytes, withAttachments } from './attachments.js'
import { MessageBuildError, MessageRefusedError, buildFailureReason, composeMessage, type MessageDraft } from './compose.js'
import type { Composer } from './compose-pool.js'
import type { StageTimer } from './stages.js'
import type { MailTransport, OutgoingMessage } from './transport.js'

/** An attempt's plan before it is given the lease it is recorded under. */
export type AttemptPlan = Omit<EmailAttempt, 'owner' | 'leaseToken'>

/** What an attempt's sending came to: each pending recipient's outcome, or the plan of a build failure. */
export interface SendOutcome {
  results: RecipientOutcome[]
  /** Set when the email cannot be built (or the relay can never take it): it is failed, not retried. */
  buildFailure?: AttemptPlan
}

export interface AttemptSenderParts {
  store: Store
  transport: MailTransport
  clock: Clock
  logger: FastifyBaseLogger
  /** The tracking links' base and key, for composing in this thread. */
  publicUrl: string
  secret: string
  composer?: Composer
  outbound?: (email: EmailRecord, msg: OutgoingMessage) => Promise<OutgoingMessage>
  /** Attachment bytes (decoded) held by attempts at once. */
  attachmentBytesInFlight: number
  stages: StageTimer
}

export class AttemptSender {
  private readonly attachmentBudget: ByteBudget

  constructor (private readonly parts: AttemptSenderParts) {
    this.attachmentBudget = new ByteBudget(parts.attachmentBytesInFlight)
  }

  /** Composes and sends one email to its pending recipients. Never throws: a fault defers them. */
  async send (email: EmailRecord): Promise<SendOutcome> {
    const { composer, transport, logger, stages } = this.parts
    const pending = email.recipients.filter((r) => r.state === 'pending').map((r) => r.address)
    let results: RecipientOutcome[] = []
    let msg: OutgoingMessage | undefined
    let draft: MessageDraft | undefined
    let buildFailure: AttemptPlan | undefined
    // A transport that makes each recipient's copy itself gets the draft: the copies (tracking tokens,
    // the html filled in) are then made in its thread rather than this one.
    const drafts = composer !== undefined && transport.sendDraft !== undefined
    if (pending.length > 0) {
      const t0 = performance.now()
      try {
        if (drafts) {
          draft = await composer.draft(email)
          msg = draft.msg
        } else {
          msg = composer ? await composer.compose(email) : composeMessage(email, this.parts)
        }
      } catch (err) {
        buildFailure = this.buildFailed(email, err)
      }
      stages.since('compose', t0)
    }
    // The attachment bytes held by this attempt until the transport has answered (src/domain/byte-budget.ts).
    let held = 0
    if (msg !== undefined && email.attachments !== undefined && email.attachments.length > 0) {
      held = attachmentBytes(email)
      await this.attachmentBudget.take(held)
      // The bytes, once per attempt, whatever the recipients (./attachments.ts).
      try {
        msg = await withAttachments(this.parts.store, email, msg)
      } catch (err) {
        msg = undefined
        if (err instanceof MessageBuildError) buildFailure = this.buildFailed(email, err)
        else {
          const reason = `the attachments could not be read (${err instanceof Error ? err.message : String(err)})`
          logger.warn({ emailId: email.id, reason }, 'mailer: the email will be retried')
          results = pending.map((recipient) => ({ recipient, outcome: 'deferred' as const, response: reason }))
        }
      }
    }
    if (msg !== undefined) {
      try {
        let out = msg
        if (this.parts.outbound) {
          const t1 = performance.now()
          out = await this.parts.outbound(email, msg)
          stages.since('outbound', t1)
        }
        results = draft !== undefined ? await transport.sendDraft!({ ...draft, msg: out }) : await transport.send(out)
      } catch (err) {
        if (err instanceof MessageBuildError) {
          // The transport could not render it (over SMTP, in its worker thread).
          buildFailure = this.buildFailed(email, err)
        } else {
          // Never the message itself in the log: only what went wrong.
          const reason = err instanceof Error ? err.message : String(err)
          logger.warn({ emailId: email.id, reason }, 'mailer: the transport failed; the email will be retried')
          results = pending.map((recipient) => ({ recipient, outcome: 'deferred' as const, response: `transport error: ${reason}` }))
        }
      }
    }
    // The transport is done with the files: the next email with files may start.
    this.attachmentBudget.give(held)
    return buildFailure === undefined ? { results } : { results, buildFailure }
  }

  /** Building it again would fail again: a poison email is failed now, not retried at every start. */
  private buildFailed (email: EmailRecord, err: unknown): AttemptPlan {
    const reason = buildFailureReason(err)
    if (err instanceof MessageRefusedError) {
      this.parts.logger.warn({ emailId: email.id, reason }, 'mailer: the relay cannot take the email; it is failed, not retried')
      return planBuildFailure(email, reason, this.parts.clock.now(), 'not sent')
    }
    this.parts.logger.warn({ emailId: email.id, reason }, 'mailer: the email could not be built; it is failed, not retried')
    return planBuildFailure(email, reason, this.parts.clock.now())
  }
}
