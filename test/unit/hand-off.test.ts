// The mailer's hand-off gate (src/mail/hand-off.ts): when a new send may be taken at once instead of
// left to the store for a claim. A new email must never overtake an older one waiting in the store.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { HandOffGate } from '../../src/mail/hand-off.js'

/** A gate opened by a first claim that found the store empty. */
function opened (pollMs = 1000, now = 0): HandOffGate {
  const gate = new HandOffGate(pollMs)
  gate.claimed(gate.claiming(now), 0, 10)
  return gate
}

describe('hand-off gate', () => {
  test('shut until a claim has looked at the store and found it drained', () => {
    const gate = new HandOffGate(1000)
    assert.equal(gate.offer(5, 100), 0, 'the store may hold older emails')
    const began = gate.claiming(0)
    gate.claimed(began, 10, 10)
    assert.equal(gate.open, false, 'a full claim: there may be more')
    gate.claimed(gate.claiming(1), 3, 10)
    assert.equal(gate.open, true)
    assert.equal(gate.offer(5, 100), 5)
  })

  test('takes what fits; once one email is left out, none after it is taken until a claim drains the store', () => {
    const gate = opened()
    assert.equal(gate.offer(5, 3), 3, 'three fit, two go to the store')
    assert.equal(gate.open, false)
    assert.equal(gate.offer(1, 100), 0, 'room again, but two older ones wait in the store')
    gate.claimed(gate.claiming(10), 3, 8)
    assert.equal(gate.offer(1, 100), 1)
  })

  test('a claim that began before an email was left out does not open the gate', () => {
    const gate = opened()
    const began = gate.claiming(10)
    assert.equal(gate.offer(4, 0), 0, 'left to the store while the claim runs: its write may come after the claim')
    gate.claimed(began, 0, 8)
    assert.equal(gate.open, false)
    gate.claimed(gate.claiming(11), 0, 8)
    assert.equal(gate.open, true)
  })

  test('a retry come due, or an email released, shuts it', () => {
    const gate = opened()
    gate.shutNow()
    assert.equal(gate.offer(1, 100), 0)
  })

  test('at least once a poll the store is looked at, even by a mailer busy with its own sends', () => {
    const gate = opened(1000, 0)
    gate.tick(999)
    assert.equal(gate.open, true)
    gate.tick(1000)
    assert.equal(gate.open, false, 'a poll is due: claim first')
    gate.claimed(gate.claiming(1000), 0, 8)
    gate.tick(1500)
    assert.equal(gate.open, true)
  })

  test('nothing to take, nothing left out: a send of no emails changes nothing', () => {
    const gate = opened()
    assert.equal(gate.offer(0, 0), 0)
    assert.equal(gate.open, true)
  })
})
