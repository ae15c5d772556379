import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createLoginThrottle } from '../../src/domain/login-throttle.js'

describe('login throttle (per account and client address)', () => {
  test('after the free failures, each further one doubles the wait, up to the ceiling', () => {
    let now = 1_000_000
    const throttle = createLoginThrottle({ clock: { now: () => now }, freeFailures: 3, baseDelayMs: 1000, maxDelayMs: 8000 })
    const waits: number[] = []
    for (let i = 0; i < 8; i++) {
      now += throttle.waitMs('a@example.com', '10.0.0.1') // the guesser waits as told, then fails again
      waits.push(throttle.failed('a@example.com', '10.0.0.1'))
    }
    assert.deepEqual(waits, [0, 0, 0, 1000, 2000, 4000, 8000, 8000])
    assert.equal(throttle.waitMs('a@example.com', '10.0.0.1'), 8000)
    // The owner elsewhere, and another account from the guesser's address, are not held back.
    assert.equal(throttle.waitMs('a@example.com', '10.0.0.2'), 0)
    assert.equal(throttle.waitMs('b@example.com', '10.0.0.1'), 0)
  })

  test('a success clears the count; a long quiet starts afresh', () => {
    let now = 0
    const throttle = createLoginThrottle({ clock: { now: () => now }, freeFailures: 1, forgetAfterMs: 60_000 })
    throttle.failed('a', 'x')
    assert.ok(throttle.failed('a', 'x') > 0)
    throttle.succeeded('a', 'x')
    assert.equal(throttle.waitMs('a', 'x'), 0)
    assert.equal(throttle.failed('a', 'x'), 0, 'counting starts again')
    now += 61_000
    assert.equal(throttle.failed('a', 'x'), 0, 'forgotten after the quiet')
  })

  test('the map is bounded and forgets the pair heard from least recently', () => {
    const throttle = createLoginThrottle({ clock: { now: () => 0 }, freeFailures: 1, maxEntries: 3 })
    for (const address of ['1', '2', '3']) { throttle.failed('a', address); throttle.failed('a', address) }
    throttle.failed('a', '1') // heard again: now the most recent
    throttle.failed('a', '4')
    assert.equal(throttle.size, 3)
    assert.equal(throttle.waitMs('a', '2'), 0, 'the oldest went')
    assert.ok(throttle.waitMs('a', '1') > 0 && throttle.waitMs('a', '3') > 0)
  })
})
