// What the reference points send: the same bodies svc stores (eventPayload) and the same header the seed
// specifies (`t=<unix s>,v1=<hex HMAC-SHA256 of "<t>.<body>">`), signed per request with node:crypto the
// way a team writing its own sender would.
import { createHmac } from 'node:crypto'
import { eventPayload } from '../../src/domain/events.js'
import { newId } from '../../src/domain/ids.js'

export function sign (secret: string, body: string, now = Date.now()): string {
  const t = Math.floor(now / 1000)
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`
}

/** `n` event bodies like the ones svc stores, to cycle through (building them is not part of a POST). */
export function payloads (n: number): string[] {
  const at = new Date().toISOString()
  return Array.from({ length: n }, (_, i) => eventPayload({
    id: newId('evt'), emailId: newId('em'), type: 'email.delivered', recipient: `someone${i}@example.com`, occurredAt: at,
  }))
}

export function headers (secret: string, body: string, deliveryId: string): Record<string, string> {
  return {
    'content-type': 'application/json',
    'user-agent': 'bench-peer/1',
    'x-svc-event': 'email.delivered',
    'x-svc-delivery': deliveryId,
    'x-svc-signature': sign(secret, body),
  }
}
