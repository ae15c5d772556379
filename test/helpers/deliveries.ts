// What the delivery tests share: a webhook to a test receiver, events stored as sends would store them,
// and the busiest second of a list of arrival times.
import assert from 'node:assert/strict'
import { eventPayload, type EventType } from '../../src/domain/events.js'
import { newId } from '../../src/domain/ids.js'
import type { Receiver } from './receiver.js'
import type { Client, TestServer } from './server.js'

/** A webhook (email.delivered) to `receiver` at `path`; the receiver learns its secret. */
export async function webhookTo (client: Client, receiver: Receiver, path: string, extra: Record<string, unknown> = {}): Promise<{ id: string; rateLimit: number | null }> {
  const res = await client.post('/api/webhooks', { url: receiver.url(path), events: ['email.delivered'], ...extra })
  assert.equal(res.status, 201, res.text)
  receiver.secrets.push(res.body.data.secret)
  return res.body.data
}

/** `count` email.delivered events of the account, stored at once. */
export async function emitEvents (server: Pick<TestServer, 'store'>, accountId: string, count: number): Promise<void> {
  const type: EventType = 'email.delivered'
  const events = Array.from({ length: count }, () => {
    const base = { id: newId('evt'), emailId: newId('em'), type, recipient: 'someone@example.test', occurredAt: new Date().toISOString() }
    return { ...base, accountId, payload: eventPayload(base) }
  })
  await server.store.insertEvents(events)
}

/** The most of `times` (ms) that fall within any one second. */
export function mostInOneSecond (times: number[]): number {
  const t = times.slice().sort((a, b) => a - b)
  let most = 0
  for (let i = 0, j = 0; i < t.length; i++) {
    while (t[i]! - t[j]! >= 1000) j++
    most = Math.max(most, i - j + 1)
  }
  return most
}
