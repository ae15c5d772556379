// Who an outgoing message says it is from, beyond its headers: the DKIM key of the sender's verified
// domain, and a VERP Return-Path per recipient on that domain's bounce subdomain (or BOUNCE_DOMAIN for
// senders without a verified domain), so that a bounce mailed back names the email and the recipient.
import { bareOf } from '../domain/addresses.js'
import { bounceHost, type SigningKey } from '../domain/sender-domains.js'
import { MAX_RECIPIENT_INDEX, verpAddress } from '../domain/verp.js'
import type { EmailRecord } from '../store/emails.js'
import type { OutgoingMessage } from './transport.js'

export interface OutboundOptions {
  /** The sender's verified domain's key (src/app/domains.ts signingKey); null: none, the mail goes unsigned. */
  domains: { signingKey(accountId: string, from: string): Promise<SigningKey | null> }
  verpKey: Buffer
  bounceDomain: string | undefined
}

export function createOutbound ({ domains, verpKey, bounceDomain }: OutboundOptions) {
  return async (email: EmailRecord, msg: OutgoingMessage): Promise<OutgoingMessage> => {
    const from = bareOf(email.from)
    const key = await domains.signingKey(email.accountId, from)
    const bounce = key !== null ? bounceHost(key.domainName) : bounceDomain
    const out: OutgoingMessage = { ...msg }
    if (key !== null) out.dkim = key
    if (bounce !== undefined) {
      const index = new Map(email.recipients.map((r, i) => [r.address, i]))
      out.returnPath = (recipient) => {
        const i = index.get(recipient)
        return i === undefined || i > MAX_RECIPIENT_INDEX ? from : verpAddress(verpKey, email.id, i, bounce)
      }
    }
    return out
  }
}
