// A mail transport that holds every send until release(), then delivers every recipient: for tests that
// need an attempt to stay in flight (leases renewed, taken over, or mail queued behind it).
import type { MailTransport, OutgoingMessage, RecipientResult } from '../../src/mail/transport.js'

export function heldTransport () {
  const sent: OutgoingMessage[] = []
  let open: () => void = () => {}
  const gate = new Promise<void>((resolve) => { open = resolve })
  const transport: MailTransport = {
    name: 'held',
    async send (msg: OutgoingMessage): Promise<RecipientResult[]> {
      sent.push(msg)
      await gate
      return [...msg.to, ...msg.cc, ...msg.bcc].map((r) => ({ recipient: r, outcome: 'delivered' as const }))
    },
    async close () {},
  }
  return { transport, sent, release: () => { open() } }
}
