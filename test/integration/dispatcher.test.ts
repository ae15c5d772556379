// The dispatcher's threads, started and stopped for real. Ending a thread while it is still loading its
// module aborted the whole process on Node 20 (a V8 fatal error, seen in CI): close() must let each
// thread finish loading first (if it does not, this file's process may die rather than fail politely).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Dispatcher } from '../../src/delivery/dispatcher.js'
import type { DeliveryResult } from '../../src/delivery/http-sender.js'
import { startReceiver } from '../helpers/receiver.js'

const workerData = { window: 4, timeoutMs: 2000, maxResponseBytes: 64, production: false, allowedCidrs: '' }

test('a dispatcher closed the instant after its first batch waits for its thread to load, then stops it cleanly', async (t) => {
  const receiver = await startReceiver(t, { '/ok': (_r, _n, res) => { res.statusCode = 200; res.end() } })
  for (let round = 0; round < 3; round++) {
    const results: DeliveryResult[] = []
    const lost: string[] = []
    const dispatcher = new Dispatcher({ threads: 2, workerData, onResults: (r) => results.push(...r), onLost: (ids) => lost.push(...ids) })
    dispatcher.send(0, [{ deliveryId: `dlv_${round}`, webhookId: 'wh_1', url: receiver.url('/ok'), event: 'email.sent', body: '{}', secrets: ['whsec_x'] }])
    await dispatcher.close()
    assert.deepEqual(lost, [], 'stopping is not a thread dying')
    assert.ok(results.every((r) => r.outcome === 'delivered'), 'whatever was answered before the stop was a delivery')
  }
})

test('a batch streams its results back; hold hands back what a thread has queued behind a full window', async (t) => {
  let release: () => void = () => {}
  const gate = new Promise<void>((resolve) => { release = resolve })
  const receiver = await startReceiver(t, { '/slow': (_r, _n, res) => { void gate.then(() => { res.statusCode = 200; res.end() }) } })
  const results: DeliveryResult[] = []
  let arrived: () => void = () => {}
  const dispatcher = new Dispatcher({
    threads: 1,
    workerData: { ...workerData, window: 2 },
    onResults: (r) => { results.push(...r); if (results.length >= 5) arrived() },
    onLost: () => assert.fail('no thread died'),
  })
  try {
    const tasks = Array.from({ length: 5 }, (_, i) => ({ deliveryId: `dlv_${i}`, webhookId: 'wh_1', url: receiver.url('/slow'), event: 'email.sent', body: '{}', secrets: ['whsec_x'] }))
    dispatcher.send(0, tasks)
    await receiver.until(() => receiver.received.length === 2, 'the window in flight')
    const all = new Promise<void>((resolve) => { arrived = resolve })
    dispatcher.hold(0, ['wh_1'])
    // The three queued come back unattempted; then the two in flight finish.
    await receiver.until(() => results.length === 3, 'the queued ones handed back')
    assert.deepEqual(results.map((r) => r.outcome), ['returned', 'returned', 'returned'])
    release()
    await all
    assert.deepEqual(results.slice(3).map((r) => r.outcome), ['delivered', 'delivered'])
    assert.equal(receiver.received.length, 2, 'nothing held back was sent')
  } finally {
    release()
    await dispatcher.close()
  }
})
