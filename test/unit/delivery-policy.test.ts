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

function fill (actor: WebhookActor, n: number): void {
  for (const w of work(n)) actor.enqueue(w)
}

const OPTS = {
  window: { min: 1, max: 3, initial: 3 }, ahead: 0, mailboxLimit: 10, failureThreshold: 2, cooldownMs: 1000, maxCooldownMs: 4000, downAfterMs: 500, maxHoldMs: 1000,
}

describe('webhook actor', () => {
  test('hands over its window and what may wait ahead of it (in windows), no more', () => {
    const actor = new WebhookActor('wh_1', 0, { ...OPTS, ahead: 1 })
    fill(actor, 7)
    assert.equal(actor.take(0, 10).length, 6, 'three in flight, three queued in the worker thread')
    assert.equal(actor.take(0, 10).length, 0)
    actor.succeeded(0, 5)
    assert.equal(actor.take(0, 10).length, 1)
  })

  test('a delivery handed back unattempted counts neither as a success nor as a failure', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    fill(actor, 6)
    actor.take(0, 3)
    actor.failed(0)
    actor.returned()
    actor.returned()
    assert.equal(actor.inFlight, 0)
    assert.equal(actor.failures, 1, 'the streak is unchanged')
    assert.equal(actor.failed(600), true, 'one more failure still opens the breaker')
    assert.equal(actor.take(1600, 10).length, 1, 'half-open: one probe')
    actor.returned()
    assert.equal(actor.take(1600, 10).length, 1, 'a probe handed back unattempted is sent again')
  })

  test('never has more than its window in flight', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    fill(actor, 5)
    assert.equal(actor.take(0, 10).length, 3)
    assert.equal(actor.take(0, 10).length, 0)
    actor.succeeded(0, 5)
    assert.equal(actor.take(0, 10).length, 1)
  })

  test('a down endpoint opens the breaker; the probe comes after a quarter of the outage, within bounds; a 2xx closes it and asks for a re-drive', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    fill(actor, 8)
    actor.take(0, 3)
    assert.equal(actor.failed(0), false)
    assert.equal(actor.failed(100), false, 'two failures within downAfterMs: not down yet')
    assert.equal(actor.failed(600), true, 'failing for downAfterMs: the breaker opens')
    assert.equal(actor.pausedUntil, 1600, 'for cooldownMs at least')
    assert.equal(actor.state(1000), 'open')
    assert.equal(actor.take(1000, 10).length, 0, 'nothing is sent while open')
    assert.equal(actor.state(1600), 'half_open')
    assert.equal(actor.take(1600, 10).length, 1, 'one probe')
    assert.equal(actor.take(1600, 10).length, 0)
    assert.equal(actor.failed(12_000), true, 'a failed probe reopens')
    assert.equal(actor.pausedUntil, 12_000 + 3000, 'for a quarter of the 12 s outage')
    assert.equal(actor.take(15_000, 10).length, 1)
    assert.equal(actor.failed(40_000), true)
    assert.equal(actor.pausedUntil, 40_000 + 4000, 'never longer than maxCooldownMs')
    assert.equal(actor.take(44_000, 10).length, 1)
    assert.equal(actor.succeeded(44_000, 5), true, 'the 2xx after an outage asks for a re-drive')
    assert.equal(actor.state(44_000), 'closed')
    assert.ok(actor.take(44_000, 10).length >= 1, 'sending again')
  })

  test('a flaky endpoint (failures between successes) never opens the breaker, however many failures in all', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    for (let t = 0; t < 10_000; t += 10) {
      fill(actor, 2)
      actor.take(t, 2)
      assert.equal(actor.failed(t), false)
      assert.equal(actor.succeeded(t, 5), false, 'one failure between successes is no outage')
    }
    assert.equal(actor.state(10_000), 'closed')
  })

  test('many failures in a row open it without waiting for downAfterMs (a dead endpoint fails fast)', () => {
    const actor = new WebhookActor('wh_1', 0, { ...OPTS, window: { min: 1, max: 10, initial: 10 } })
    fill(actor, 10)
    actor.take(0, 10)
    const opened = Array.from({ length: 8 }, () => actor.failed(1))
    assert.deepEqual(opened.map((o, i) => o ? i + 1 : 0).filter((n) => n > 0), [8], 'at failureThreshold × 4 in a row')
  })

  test('pushbacks shrink the window, hold new requests from the second in a row, and are not failures', () => {
    const actor = new WebhookActor('wh_1', 0, { ...OPTS, window: { min: 1, max: 16, initial: 16 } })
    fill(actor, 40)
    assert.equal(actor.take(0, 40).length, 16)
    assert.equal(actor.pushedBack(0), 10, 'the first waits the shortest moment')
    assert.equal(actor.windowLimit, 8, 'halved')
    assert.equal(actor.holdUntil, 0, 'no hold after one pushback')
    actor.pushedBack(5)
    assert.equal(actor.windowLimit, 4, 'halved again a round trip later')
    assert.equal(actor.holdUntil, 15, 'the second in a row holds new requests 10 ms')
    assert.equal(actor.capacity(10), 0)
    assert.equal(actor.failures, 0, 'no failure counted')
    assert.equal(actor.state(10), 'closed')
    for (let i = 0; i < 14; i++) actor.succeeded(20, 5)
    assert.equal(actor.holdUntil, 0, 'a 2xx ends the hold')
    assert.equal(actor.pushbacks, 0)
  })

  test('an endpoint with no 2xx for downAfterMs is down: its 429/503 are failures from then on', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    fill(actor, 3)
    actor.take(0, 3)
    actor.pushedBack(0)
    assert.equal(actor.isDown(499), false)
    assert.equal(actor.isDown(500), true)
    actor.succeeded(600, 5)
    assert.equal(actor.isDown(600), false, 'a 2xx ends the trouble')
  })

  test('a rate-limited actor sends only the permits it holds, within their window', () => {
    const actor = new WebhookActor('wh_1', 0, OPTS)
    actor.limitRate(50)
    fill(actor, 5)
    assert.equal(actor.take(0, 10).length, 0, 'no permits: nothing')
    actor.permitsGranted(2, 60, 10)
    assert.equal(actor.take(10, 10).length, 2)
    assert.equal(actor.take(10, 10).length, 0, 'spent')
    actor.permitsGranted(2, 60, 10)
    assert.equal(actor.take(60, 10).length, 0, 'permits of a window that ended are void')
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
