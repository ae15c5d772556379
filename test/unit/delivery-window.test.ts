// The adaptive window on a simulated receiver: a fake clock and a model of a receiver that takes a fixed
// number of requests at once (no threads, no sockets). The figures that matter (how close to the
// receiver's cap it settles, how often it is refused) are asserted as shares, not times.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { AdaptiveWindow } from '../../src/delivery/window.js'

/**
 * Rounds of one round trip each: the window's worth of requests go out; up to `cap` succeed, the rest are
 * refused (429). Answers what the window was each round and the share of attempts refused.
 */
function simulate (cap: number, rounds: number, bounds = { min: 1, max: 64, initial: 8 }): { limits: number[]; refused: number } {
  const w = new AdaptiveWindow(bounds)
  const limits: number[] = []
  let sent = 0
  let refused = 0
  for (let round = 0; round < rounds; round++) {
    const now = round * 20
    const n = w.limit
    limits.push(n)
    for (let i = 0; i < n; i++) {
      sent += 1
      if (i < cap) w.succeeded(now + 20, 20, n)
      else {
        refused += 1
        w.pushedBack(now + 1)
      }
    }
  }
  return { limits, refused: refused / sent }
}

describe('adaptive window', () => {
  test('against a receiver that takes 4 at once it settles at about 4, refused under 10 % of the time', () => {
    const { limits, refused } = simulate(4, 500)
    const late = limits.slice(100)
    const mean = late.reduce((a, b) => a + b, 0) / late.length
    assert.ok(mean >= 3 && mean <= 5, `mean window ${mean.toFixed(2)}`)
    assert.ok(refused <= 0.1, `refused ${(refused * 100).toFixed(1)} %`)
  })

  test('against a receiver with room it grows to its bound within a few round trips (slow start)', () => {
    const { limits, refused } = simulate(1000, 10)
    assert.equal(limits.at(-1), 64)
    assert.equal(refused, 0)
  })

  test('never leaves its bounds', () => {
    const w = new AdaptiveWindow({ min: 2, max: 5, initial: 50 })
    assert.equal(w.limit, 5)
    for (let t = 0; t < 100; t++) w.pushedBack(t * 100)
    assert.equal(w.limit, 2)
    for (let i = 0; i < 1000; i++) w.succeeded(10_000 + i, 1, 5)
    assert.equal(w.limit, 5)
  })

  test('one decrease per round trip: a burst of refusals halves it once', () => {
    const w = new AdaptiveWindow({ min: 1, max: 64, initial: 32 })
    w.succeeded(0, 20, 1)
    for (let i = 0; i < 10; i++) w.pushedBack(100 + i)
    assert.equal(w.limit, 16)
    w.pushedBack(125)
    assert.equal(w.limit, 8)
  })

  test('does not grow while it is not used', () => {
    const w = new AdaptiveWindow({ min: 1, max: 64, initial: 8 })
    for (let i = 0; i < 100; i++) w.succeeded(i, 5, 1)
    assert.equal(w.limit, 8)
  })

  test('round trips much slower than usual shrink it', () => {
    const w = new AdaptiveWindow({ min: 1, max: 64, initial: 32 })
    for (let i = 0; i < 50; i++) w.succeeded(i, 10, 1)
    let t = 100
    for (let i = 0; i < 50; i++) w.succeeded(t += 400, 400, 1)
    assert.ok(w.limit < 32, `window ${w.limit}`)
  })

  test('rejects bounds that make no sense', () => {
    assert.throws(() => new AdaptiveWindow({ min: 0, max: 4, initial: 1 }), RangeError)
    assert.throws(() => new AdaptiveWindow({ min: 5, max: 4, initial: 4 }), RangeError)
  })
})
