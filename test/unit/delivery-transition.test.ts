// The transition table (src/domain/delivery-transition.ts): the rules it states, checked on its rows.
// (Both adapters applying every row is test/contract/delivery-contract.ts.)
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { BEFORE, OUTCOME_KINDS, firstStatus, firstTransition, shownNextAttempt, transition } from '../../src/domain/delivery-transition.js'

test('a failure of a cancelled delivery stays cancelled; a success succeeds; every attempt counts', () => {
  for (const kind of ['retry', 'failed', 'gone'] as const) {
    assert.equal(transition('cancelled', kind)?.status, 'cancelled', kind)
    assert.equal(transition('cancelled', kind)?.next, null, kind)
  }
  assert.equal(transition('cancelled', 'succeeded')?.status, 'succeeded')
  for (const before of BEFORE) {
    for (const kind of ['succeeded', 'retry', 'failed', 'gone'] as const) assert.equal(transition(before, kind)?.attempt, true, `${kind} of ${before}`)
    for (const kind of ['deferred', 'parked'] as const) assert.equal(transition(before, kind)?.attempt, false, `${kind} of ${before}`)
  }
})

test('only a live delivery keeps a next attempt or a lease; a cancelled one ends its lease', () => {
  for (const kind of OUTCOME_KINDS) {
    const t = transition('cancelled', kind)
    if (t === null) continue
    assert.equal(t.next, null, kind)
    assert.equal(t.lease, 'ended', kind)
  }
  assert.deepEqual(transition('live', 'parked'), { status: 'same', attempt: false, next: 'leaseUntil', lease: 'parked' })
})

test('leased applies only to a first attempt held in memory', () => {
  for (const before of BEFORE) assert.equal(transition(before, 'leased'), null)
  const t = firstTransition('live', 'leased')
  assert.deepEqual([firstStatus('live', t), t.next, t.lease], ['pending', 'leaseUntil', 'kept'])
  const c = firstTransition('cancelled', 'leased')
  assert.deepEqual([firstStatus('cancelled', c), c.next, c.lease], ['cancelled', null, 'ended'])
})

test('the log shows a next attempt only for a live delivery no node holds', () => {
  assert.equal(shownNextAttempt('retrying', false, 5), 5)
  assert.equal(shownNextAttempt('pending', true, 5), null)
  assert.equal(shownNextAttempt('failed', false, 5), null)
  assert.equal(shownNextAttempt('pending', false, null), null)
})
