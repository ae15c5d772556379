import assert from 'node:assert/strict'
import { test } from 'node:test'
import { BudgetWaitAborted, ByteBudget } from '../../src/domain/byte-budget.js'

test('a waiter that gives up leaves the queue, and the one behind it moves up', async () => {
  const budget = new ByteBudget(100)
  await budget.take(80)
  const gone = new AbortController()
  const order: string[] = []
  const big = budget.take(60, gone.signal).then(() => order.push('big'), (err: unknown) => { order.push(err instanceof BudgetWaitAborted ? 'big gave up' : 'big failed') })
  const small = budget.take(20).then(() => order.push('small'))
  assert.equal(budget.queued, 2)
  // First come, first served: the small one waits behind the big one although it would fit.
  await Promise.resolve()
  assert.deepEqual(order, [])
  gone.abort()
  await Promise.all([big, small])
  assert.deepEqual(order, ['big gave up', 'small'])
  assert.equal(budget.held, 100)
  assert.equal(budget.queued, 0)
  budget.give(80)
  budget.give(20)
  assert.equal(budget.held, 0)
})

test('an aborted signal is refused at once when there is no room, and ignored once the bytes are held', async () => {
  const budget = new ByteBudget(10)
  const gone = new AbortController()
  gone.abort()
  // Room: taken, whatever the signal says.
  await budget.take(10, gone.signal)
  await assert.rejects(budget.take(5, gone.signal), BudgetWaitAborted)
  assert.equal(budget.held, 10)
  assert.equal(budget.queued, 0)
  const later = new AbortController()
  const waiting = budget.take(5, later.signal)
  budget.give(10)
  await waiting
  later.abort()
  assert.equal(budget.held, 5)
})

test('one larger than the whole budget goes alone', async () => {
  const budget = new ByteBudget(10)
  await budget.take(50)
  let second = false
  const next = budget.take(1).then(() => { second = true })
  await Promise.resolve()
  assert.equal(second, false)
  budget.give(50)
  await next
  assert.equal(budget.held, 1)
})
