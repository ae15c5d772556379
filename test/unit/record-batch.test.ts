import assert from 'node:assert/strict'
import { test } from 'node:test'
import { RecordBatch } from '../../src/mail/record-batch.js'
import { ManualTimers } from '../helpers/timers.js'

test('writes wait for the linger, then go to the store together, in order, each settling with its own answer', async () => {
  const timers = new ManualTimers()
  const calls: Array<{ item: string; turn: number }> = []
  let turn = 0
  const batch = new RecordBatch<string, string>(async (item) => { calls.push({ item, turn }); return `ok ${item}` }, { maxItems: 10, lingerMs: 5, timers })
  const a = batch.submit('a')
  const b = batch.submit('b')
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepEqual(calls, [], 'nothing is written before the linger ends')
  assert.equal(timers.pending.size, 1, 'one timer for the whole batch')
  assert.equal([...timers.pending.values()][0]!.ms, 5)
  turn = 1
  timers.fireAll()
  assert.deepEqual(await Promise.all([a, b]), ['ok a', 'ok b'])
  assert.deepEqual(calls, [{ item: 'a', turn: 1 }, { item: 'b', turn: 1 }])
})

test('a full batch is written at once, without waiting for the timer', async () => {
  const timers = new ManualTimers()
  const calls: string[] = []
  const batch = new RecordBatch<string, void>(async (item) => { calls.push(item) }, { maxItems: 3, lingerMs: 5, timers })
  const all = ['x', 'y', 'z'].map((i) => batch.submit(i))
  await Promise.all(all)
  assert.deepEqual(calls, ['x', 'y', 'z'])
  assert.equal(timers.pending.size, 0, 'the timer of the batch is cleared')
  assert.equal(batch.size, 0)
})

test('a failing write (thrown or rejected) fails only its own item', async () => {
  const timers = new ManualTimers()
  const batch = new RecordBatch<number, number>((n) => {
    if (n === 1) throw new Error('thrown')
    if (n === 2) return Promise.reject(new Error('rejected'))
    return Promise.resolve(n * 10)
  }, { maxItems: 100, lingerMs: 5, timers })
  const results = [0, 1, 2, 3].map((n) => batch.submit(n))
  timers.fireAll()
  const settled = await Promise.allSettled(results)
  assert.deepEqual(settled.map((s) => s.status), ['fulfilled', 'rejected', 'rejected', 'fulfilled'])
  assert.equal((settled[3] as PromiseFulfilledResult<number>).value, 30)
  assert.match(String((settled[1] as PromiseRejectedResult).reason), /thrown/)
})

test('with the real timers an item held alone is still written (the timer is not unref\'d away)', async () => {
  const batch = new RecordBatch<string, string>(async (item) => item.toUpperCase(), { lingerMs: 1 })
  assert.equal(await batch.submit('late'), 'LATE')
})
