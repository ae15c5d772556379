import {
  envelopeRecipients,
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
}

export const SANDBOX_RESPONSE = 'sandbox: not sent'

export function createSandboxTransport(opts: SandboxOptions = {}): SandboxTransport {
  const keep = opts.keep ?? 100
  if (!Number.isInteger(keep) || keep < 0) throw new RangeError('keep must be a non-negative integer')
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
