// What one answer means (src/delivery/attempt-outcome.ts): pure, so every row is checked without threads or sockets.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { DeliveryResult } from '../../src/delivery/http-sender.js'
import { attemptOutcome, classify, isOverload } from '../../src/delivery/attempt-outcome.js'
import type { DeliveryWork } from '../../src/store/deliveries.js'

const POLICY = { schedule: [5_000, 30_000], random: () => 0.5 }
const NOW = 1_000_000

function work (attempts = 0, pushbacks = 0): DeliveryWork {
  return { id: 'dlv_1', webhookId: 'wh_1', url: 'http://127.0.0.1/', secrets: ['s'], event: 'email.sent', payload: '{}', attempts, pushbacks, eventAt: 0, lease: 3 }
}
const result = (r: Partial<DeliveryResult>): DeliveryResult => ({ deliveryId: 'dlv_1', outcome: 'retry', durationMs: 7, ...r })

describe('attempt outcome: what one answer means', () => {
  test('classification: 429 and 503 are pushback while the endpoint is not down, failures once it is; other statuses are failures', () => {
    assert.equal(classify(result({ outcome: 'delivered', status: 200 }), false), 'delivered')
    assert.equal(classify(result({ outcome: 'gone', status: 410 }), false), 'gone')
    assert.equal(classify(result({ outcome: 'returned' }), false), 'returned')
    for (const status of [429, 503]) {
      assert.equal(classify(result({ status }), false), 'pushback')
      assert.equal(classify(result({ status }), true), 'failure')
    }
    for (const status of [500, 502, 504, 404, 301]) assert.equal(classify(result({ status }), false), 'failure')
    assert.equal(classify(result({ error: 'timeout after 10000 ms' }), false), 'failure')
  })

  test('no answer at all (timeout, connection error) is a sign of overload; an answer is not', () => {
    assert.equal(isOverload(result({ error: 'connection refused' })), true)
    assert.equal(isOverload(result({ status: 500 })), false)
    assert.equal(isOverload(result({ outcome: 'delivered', status: 200 })), false)
  })

  test('a pushback is an attempt but no step: due after the actor\'s wait, or its Retry-After, and never failed', () => {
    const o = attemptOutcome(result({ status: 429 }), work(9, 0), 'pushback', POLICY, NOW, 40)
    assert.deepEqual(o, { kind: 'retry', id: 'dlv_1', webhookId: 'wh_1', lease: 3, at: NOW, error: 'failed', durationMs: 7, statusCode: 429, nextAttemptAt: NOW + 40, pushback: true })
    const ra = attemptOutcome(result({ status: 503, retryAfterMs: 30_000 }), work(), 'pushback', POLICY, NOW, 40)
    assert.equal(ra.kind === 'retry' && ra.nextAttemptAt, NOW + 30_000, 'Retry-After wins')
  })

  test('a failure takes the schedule\'s next step, counting attempts that were not pushbacks; after the last it fails', () => {
    const first = attemptOutcome(result({ status: 500 }), work(0), 'failure', POLICY, NOW)
    assert.equal(first.kind === 'retry' && first.nextAttemptAt, NOW + 5_000)
    const afterPushbacks = attemptOutcome(result({ status: 500 }), work(5, 5), 'failure', POLICY, NOW)
    assert.equal(afterPushbacks.kind === 'retry' && afterPushbacks.nextAttemptAt, NOW + 5_000, 'five pushbacks before: still the first step')
    assert.equal(attemptOutcome(result({ status: 500 }), work(2, 0), 'failure', POLICY, NOW).kind, 'failed', 'the schedule is used up')
    assert.equal(attemptOutcome(result({ status: 500 }), work(4, 2), 'failure', POLICY, NOW).kind, 'failed')
  })

  test('a first attempt held in memory carries its origin into the outcome', () => {
    const origin = { seq: 1, accountId: 'a', eventId: 'e', eventType: 'email.sent' as const, emailId: 'm', eventAt: 0, router: 1, createdAt: 0 }
    const o = attemptOutcome(result({ outcome: 'delivered', status: 204 }), { ...work(), lease: 0, origin }, 'delivered', POLICY, NOW)
    assert.deepEqual(o, { kind: 'succeeded', id: 'dlv_1', webhookId: 'wh_1', lease: 0, origin, at: NOW, statusCode: 204, durationMs: 7 })
  })
})
