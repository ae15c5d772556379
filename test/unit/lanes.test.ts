import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { Lanes } from '../../src/delivery/lanes.js'
import type { DeliveryResult, DeliveryTask } from '../../src/delivery/http-sender.js'

// The lanes are a scheduler: here the "request" is a promise the test settles by hand, so what is in
// flight at any moment is exact. Real HTTP through them is covered by the worker and engine tests.
function harness (window: number) {
  const started: DeliveryTask[] = []
  const answers = new Map<string, (r: DeliveryResult) => void>()
  const results: DeliveryResult[] = []
  const lanes = new Lanes(window, (task) => {
    started.push(task)
    return new Promise((resolve) => answers.set(task.deliveryId, resolve))
  }, (r) => results.push(r))
  const answer = async (id: string, outcome: DeliveryResult['outcome'] = 'delivered') => {
    answers.get(id)!({ deliveryId: id, outcome, status: outcome === 'delivered' ? 200 : 503, durationMs: 1 })
    await new Promise((resolve) => setImmediate(resolve))
  }
  return { lanes, started, results, answer }
}

let n = 0
function tasks (webhookId: string, count: number): DeliveryTask[] {
  return Array.from({ length: count }, () => ({ deliveryId: `dlv_${++n}`, webhookId, url: 'http://127.0.0.1/', event: 'email.sent', body: '{}', secrets: [] }))
}

describe('worker lanes (each webhook\'s window inside its thread)', () => {
  test('keep at most the window in flight per webhook and start the next one as each finishes, in order', async () => {
    const h = harness(2)
    const batch = tasks('wh_a', 5)
    h.lanes.add(batch)
    assert.deepEqual(h.started.map((t) => t.deliveryId), batch.slice(0, 2).map((t) => t.deliveryId))
    assert.equal(h.lanes.inFlight, 2)
    assert.equal(h.lanes.queued, 3)
    await h.answer(batch[1]!.deliveryId)
    assert.deepEqual(h.started.map((t) => t.deliveryId), batch.slice(0, 3).map((t) => t.deliveryId), 'the next in line starts at once')
    assert.equal(h.results.length, 1)
    for (const t of batch) if (!h.results.some((r) => r.deliveryId === t.deliveryId)) await h.answer(t.deliveryId)
    assert.deepEqual(h.started.map((t) => t.deliveryId), batch.map((t) => t.deliveryId))
    assert.equal(h.results.length, 5)
    assert.equal(h.lanes.inFlight, 0)
    assert.equal(h.lanes.queued, 0)
  })

  test('a webhook whose window is full holds back no other webhook', () => {
    const h = harness(1)
    const slow = tasks('wh_slow', 3)
    const fast = tasks('wh_fast', 1)
    h.lanes.add([...slow, ...fast])
    assert.deepEqual(h.started.map((t) => t.webhookId), ['wh_slow', 'wh_fast'])
  })

  test('hold hands back what is queued, unattempted, and leaves what is in flight alone', async () => {
    const h = harness(2)
    const a = tasks('wh_a', 4)
    const b = tasks('wh_b', 3)
    h.lanes.add([...a, ...b])
    assert.equal(h.lanes.hold(['wh_a']), 2)
    assert.deepEqual(h.results.map((r) => [r.deliveryId, r.outcome]), a.slice(2).map((t) => [t.deliveryId, 'returned']))
    await h.answer(a[0]!.deliveryId)
    assert.equal(h.started.filter((t) => t.webhookId === 'wh_a').length, 2, 'nothing more of wh_a starts')
    assert.equal(h.lanes.queued, 1, "wh_b's queue is untouched")
    assert.equal(h.lanes.hold(), 1, 'hold() with no list takes back every queue')
    assert.equal(h.lanes.queued, 0)
    assert.equal(h.lanes.inFlight, 3)
  })

  test('after a failure a lane sends nothing more on its own: its queue comes back right behind the failure', async () => {
    const h = harness(2)
    const a = tasks('wh_a', 5)
    h.lanes.add(a)
    await h.answer(a[0]!.deliveryId, 'retry')
    assert.equal(h.started.length, 2, 'nothing new started')
    assert.deepEqual(h.results.map((r) => [r.deliveryId, r.outcome]), [
      [a[0]!.deliveryId, 'retry'],
      ...a.slice(2).map((t) => [t.deliveryId, 'returned']),
    ])
    await h.answer(a[1]!.deliveryId)
    assert.equal(h.lanes.inFlight, 0)
    h.lanes.add(tasks('wh_a', 1))
    assert.equal(h.started.length, 3, 'the engine may send again at once')
  })

  test('a sender that throws still yields one result per delivery', async () => {
    const results: DeliveryResult[] = []
    const lanes = new Lanes(4, () => Promise.reject(new Error('boom')), (r) => results.push(r))
    lanes.add(tasks('wh_a', 2))
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(results.map((r) => r.outcome), ['retry', 'retry'])
    assert.match(results[0]!.error ?? '', /boom/)
  })

  test('a sender answering through its callback counts once per delivery, and one that throws at once fails after the batch is queued', async () => {
    const results: DeliveryResult[] = []
    const twice = new Lanes(2, (task, done) => {
      setImmediate(() => {
        done({ deliveryId: task.deliveryId, outcome: 'delivered', status: 200, durationMs: 1 })
        done({ deliveryId: task.deliveryId, outcome: 'retry', error: 'late', durationMs: 1 })
      })
    }, (r) => results.push(r))
    twice.add(tasks('wh_a', 3))
    for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(results.map((r) => r.outcome), ['delivered', 'delivered', 'delivered'])
    assert.equal(twice.inFlight, 0)

    const failing = [] as DeliveryResult[]
    const throwing = new Lanes(2, () => { throw new Error('boom') }, (r) => failing.push(r))
    throwing.add(tasks('wh_b', 5))
    assert.equal(failing.length, 0, 'nothing is answered inside add()')
    await new Promise((resolve) => setImmediate(resolve))
    // The two in the window fail; the three queued behind them come back unattempted.
    assert.deepEqual(failing.map((r) => r.outcome).sort(), ['retry', 'retry', 'returned', 'returned', 'returned'])
    assert.equal(throwing.inFlight, 0)
  })

  test('hold each webhook to the window its latest batch carries: a larger one starts more at once, a smaller one starts nothing new until under it', async () => {
    const h = harness(2)
    const batch = tasks('wh_w', 10)
    h.lanes.add(batch.slice(0, 4), new Map([['wh_w', 1]]))
    assert.equal(h.lanes.inFlight, 1, 'the window the engine gave, not the thread\'s default')
    h.lanes.add(batch.slice(4, 6), new Map([['wh_w', 4]]))
    assert.equal(h.lanes.inFlight, 4, 'grown: three more start at once')
    h.lanes.add(batch.slice(6), new Map([['wh_w', 2]]))
    assert.equal(h.lanes.inFlight, 4, 'shrunk: what is in flight finishes')
    await h.answer(batch[0]!.deliveryId)
    await h.answer(batch[1]!.deliveryId)
    assert.equal(h.lanes.inFlight, 2, 'nothing new starts until under the window')
    await h.answer(batch[2]!.deliveryId)
    assert.equal(h.lanes.inFlight, 2, 'then one for one')
  })
})
