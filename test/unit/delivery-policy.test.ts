import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { WebhookActor } from '../../src/delivery/actor.js'
import { RETRY_AFTER_MAX_MS, RETRY_AFTER_MIN_MS, nextAttemptAt } from '../../src/delivery/backoff.js'
import { shardOf } from '../../src/delivery/dispatcher.js'
import type { DeliveryWork } from '../../src/store/deliveries.js'

const SCHEDULE = [5_000, 30_000, 120_000]

describe('retry schedule', () => {
  test('each retry waits its scheduled delay, within ±20 % jitter', () => {
    for (const [i, delay] of SCHEDULE.entries()) {
      assert.equal(nextAttemptAt({ schedule: SCHEDULE, random: () => 0 }, i + 1, 1000), 1000 + delay * 0.8)
      assert.equal(nextAttemptAt({ schedule: SCHEDULE, random: () => 0.5 }, i + 1, 1000), 1000 + delay)
      assert.equal(nextAttemptAt({ schedule: SCHEDULE, random: () => 1 }, i + 1, 1000), 1000 + delay * 1.2)
    }
  })

  test('after the last scheduled retry there is no next attempt', () => {
    assert.equal(nextAttemptAt({ schedule: SCHEDULE }, SCHEDULE.length + 1, 0), null)
  })

  test('Retry-After replaces the delay, clamped to [1 s, 1 h]', () => {
    assert.equal(nextAttemptAt({ schedule: SCHEDULE }, 1, 0, 42_000), 42_000)
    assert.equal(nextAttemptAt({ schedule: SCHEDULE }, 1, 0, 0), RETRY_AFTER_MIN_MS)
    assert.equal(nextAttemptAt({ schedule: SCHEDULE }, 1, 0, 10 * 86_400_000), RETRY_AFTER_MAX_MS)
    assert.equal(nextAttemptAt({ schedule: SCHEDULE }, 4, 0, 1000), null, 'Retry-After does not extend the schedule')
  })
})

function work (n: number): DeliveryWork[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `dlv_${i}`, webhookId: 'wh_1', url: 'http://127.0.0.1/', secrets: ['whsec_x'], event: 'email.sent', payload: '{}', attempts: 0, eventAt: 0, lease: 1,
  }))
}

const OPTS = { window: 3, ahead: 0, mailboxLimit: 10, failureThreshold: 2, cooldownMs: 1000, maxCooldownMs: 4000 }

describe('webhook actor', () => {
  test('hands over its window and what may wait ahead of it, no more', () => {
    const actor = new WebhookActor('wh_1', 0, { ...OPTS, ahead: 2 })
    actor.mailbox.push(...work(7))
    assert.equal(actor.take(0, 10).length, 5, 'three in flight, two queued in the worker thread')
    assert.equal(actor.take(0, 10).length, 0)
    actor.succeeded()
    assert.equal(actor.take(0, 10).length, 1)
  })

  test('a delivery handed back unattempted counts neither as a success nor as a failure', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    actor.mailbox.push(...work(6))
    actor.take(0, 3)
    actor.failed(0)
    actor.returned()
    actor.returned()
    assert.equal(actor.inFlight, 0)
    assert.equal(actor.failures, 1, 'the streak is unchanged')
    assert.equal(actor.failed(0), true, 'one more failure still opens the breaker')
    assert.equal(actor.take(1000, 10).length, 1, 'half-open: one probe')
    actor.returned()
    assert.equal(actor.take(1000, 10).length, 1, 'a probe handed back unattempted is sent again')
  })

  test('never has more than its window in flight', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    actor.mailbox.push(...work(5))
    assert.equal(actor.take(0, 10).length, 3)
    assert.equal(actor.take(0, 10).length, 0)
    actor.succeeded()
    assert.equal(actor.take(0, 10).length, 1)
  })

  test('opens after consecutive failures, probes once when the cooldown ends, closes on success', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    actor.mailbox.push(...work(8))
    actor.take(0, 2)
    assert.equal(actor.failed(0), false)
    assert.equal(actor.failed(0), true, 'the second consecutive failure opens the breaker')
    assert.equal(actor.state(500), 'open')
    assert.equal(actor.take(500, 10).length, 0, 'nothing is sent while open')
    assert.equal(actor.state(1000), 'half_open')
    assert.equal(actor.take(1000, 10).length, 1, 'one probe')
    assert.equal(actor.take(1000, 10).length, 0)
    assert.equal(actor.failed(1000), true, 'a failed probe reopens')
    assert.equal(actor.pausedUntil, 3000, 'for twice as long')
    assert.equal(actor.take(3000, 10).length, 1)
    actor.succeeded()
    assert.equal(actor.state(3000), 'closed')
    assert.equal(actor.take(3000, 10).length, 3, 'the full window again')
  })

  test('a success between failures resets the streak', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    actor.mailbox.push(...work(3))
    actor.take(0, 3)
    actor.failed(0)
    actor.succeeded()
    assert.equal(actor.failed(0), false)
  })

  test('a receiver\'s pause holds everything until it ends', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    actor.mailbox.push(...work(2))
    actor.pause(5000)
    assert.equal(actor.take(4999, 10).length, 0)
    assert.equal(actor.take(5000, 10).length, 2)
  })
})

describe('sharding', () => {
  test('a webhook always lands on the same shard, and shards share the load', () => {
    const counts = [0, 0, 0, 0]
    for (let i = 0; i < 4000; i++) {
      const shard = shardOf(`wh_${i}`, 4)
      assert.equal(shardOf(`wh_${i}`, 4), shard)
      counts[shard]! += 1
    }
    for (const c of counts) assert.ok(c > 800, `shard load ${counts.join(',')}`)
  })
})
