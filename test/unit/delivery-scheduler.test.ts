// The engine's scheduler with fakes (no threads, no sockets, no database): a fake port that records each
// batch and answers by hand, an in-memory store that hands out due work and records every outcome, a
// fake clock and timers fired by hand. What is checked is what a user would see: what reaches a
// receiver (the port), how many at once, and what the store records (delivered once, retried when,
// failed, handed back).
import assert from 'node:assert/strict'
import { afterEach, describe, test } from 'node:test'
import { Registry } from 'prom-client'
import { DeliveryEngine } from '../../src/delivery/engine.js'
import type { EngineOptions, EngineStore } from '../../src/delivery/engine-options.js'
import type { DeliveryResult } from '../../src/delivery/http-sender.js'
import type { DeliveryAnswers, DeliveryPort } from '../../src/delivery/port.js'
import { webhookPace } from '../../src/domain/rate-limits.js'
import type { DeliveryOutcome, DeliveryWork, LeaseRequest } from '../../src/store/deliveries.js'
import { ManualTimers } from '../helpers/timers.js'

const SCHEDULE = [5_000, 60_000]
const T0 = 1_000_000

function work (id: string, fields: Partial<DeliveryWork> = {}): DeliveryWork {
  return { id, webhookId: 'wh_a', url: 'http://127.0.0.1/hook', secrets: ['whsec_x'], event: 'email.sent', payload: '{}', attempts: 0, eventAt: T0, lease: 1, ...fields }
}

/** Due work to hand out once each, and every outcome written, in order. */
class MemoryStore {
  readonly due: DeliveryWork[] = []
  readonly recorded: DeliveryOutcome[] = []
  readonly redriven: string[] = []
  readonly health = { failed: () => false }
  private readonly counts = new Map<string, number>()
  subscribe () { return () => {} }
  async routeEvents () { return { events: 0, work: [] } }
  async claimDeliveries (req: LeaseRequest) { return this.due.splice(0, req.limit) }
  async unparkDeliveries () { return [] }
  async renewLeases () {}
  async releaseLeases () {}
  async recordOutcomes (outcomes: DeliveryOutcome[]) {
    this.recorded.push(...outcomes)
    return { stale: 0 }
  }

  async redriveDeliveries (webhookId: string) {
    this.redriven.push(webhookId)
    return 0
  }

  async hitRateLimit (hit: { key: string; windowStart: number }) {
    const k = `${hit.key}@${hit.windowStart}`
    const n = (this.counts.get(k) ?? 0) + 1
    this.counts.set(k, n)
    return n
  }

  async deliveryStats () { return { pending: 0, oldestPendingAgeSeconds: 0 } as never }
  async pruneDeliveries () { return 0 }
  async pruneEvents () { return 0 }

  /** The outcomes of one delivery, in the order written. */
  of (id: string): DeliveryOutcome[] {
    return this.recorded.filter((o) => o.id === id)
  }
}

/** Records what would go to the receivers; answers only when the test says. */
class FakePort implements DeliveryPort {
  readonly shards = 1
  /** Every delivery handed over, in order, with the window its webhook had. */
  readonly sent: Array<{ id: string; webhookId: string; window: number | undefined }> = []
  readonly batches: number[] = []
  readonly holds: Array<string[] | undefined> = []
  private readonly open = new Map<string, string>()
  constructor (private readonly answers: DeliveryAnswers) {}

  sendWork (_shard: number, works: DeliveryWork[], windowOf?: (webhookId: string) => number): void {
    this.batches.push(works.length)
    for (const w of works) {
      this.sent.push({ id: w.id, webhookId: w.webhookId, window: windowOf?.(w.webhookId) })
      this.open.set(w.id, w.webhookId)
    }
  }

  /** Requests handed over and not answered: in flight at the receivers. */
  inFlight (webhookId?: string): string[] {
    return [...this.open].filter(([, wh]) => webhookId === undefined || wh === webhookId).map(([id]) => id)
  }

  answer (...results: Array<Partial<DeliveryResult> & { deliveryId: string }>): void {
    for (const r of results) this.open.delete(r.deliveryId)
    this.answers.results(results.map((r) => ({ outcome: 'delivered', status: 200, durationMs: 5, ...r })))
  }

  deliver (...ids: string[]): void {
    this.answer(...ids.map((deliveryId) => ({ deliveryId })))
  }

  lose (...ids: string[]): void {
    for (const id of ids) this.open.delete(id)
    this.answers.lost(ids, 'worker failed: test')
  }

  hold (_shard: number, webhookIds?: string[]): void {
    this.holds.push(webhookIds)
  }

  /** Stopping: what it holds comes back unattempted, as the worker threads' lanes do. */
  holdAll (): void {
    const ids = [...this.open.keys()]
    this.open.clear()
    if (ids.length > 0) this.answers.results(ids.map((deliveryId) => ({ deliveryId, outcome: 'returned', durationMs: 0 })))
  }

  async close (): Promise<void> {}
  utilization (): number[] { return [0] }
  threadIds (): Array<number | undefined> { return [undefined] }
}

const running: DeliveryEngine[] = []
afterEach(async () => {
  for (const engine of running.splice(0)) await engine.stop()
})

async function setup (due: DeliveryWork[], opts: Partial<EngineOptions> = {}) {
  const store = new MemoryStore()
  store.due.push(...due)
  const clock = { t: T0, now () { return this.t } }
  const timers = new ManualTimers()
  let port: FakePort | undefined
  const engine = new DeliveryEngine({
    store: store as unknown as EngineStore,
    clock,
    registry: new Registry(),
    threads: 1,
    timeoutMs: 1_000,
    retrySchedule: SCHEDULE,
    window: 4,
    windowInitial: 4,
    ahead: 0,
    autoDisableMs: 86_400_000,
    retentionMs: 86_400_000,
    production: false,
    allowedCidrs: '',
    owner: 'node-1',
    pollMs: 3_600_000,
    random: () => 0.5,
    timers,
    port: (answers) => (port = new FakePort(answers)),
    ...opts,
  })
  running.push(engine)
  await engine.start()
  const fake = port!
  await until(() => fake.sent.length > 0 || store.due.length === 0)
  await turns()
  return { engine, store, port: fake, clock, timers }
}

/** Lets the engine's pending turns run (its pump waits for setImmediate, the store's answers for promises). */
async function turns (n = 5): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve))
}

async function until (condition: () => boolean, what = 'condition'): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (condition()) return
    await new Promise((resolve) => setImmediate(resolve))
  }
  assert.fail(`timed out waiting for ${what}`)
}

describe('scheduler: pump', () => {
  test('sends no more than the node\'s request budget at once, and the next as each answer frees room; each is delivered once', async () => {
    const due = Array.from({ length: 10 }, (_, i) => work(`dlv_${i}`, { webhookId: `wh_${i % 5}` }))
    const { engine, store, port } = await setup(due, { maxRequests: 4 })
    assert.equal(port.sent.length, 4, 'the budget: 4 requests in flight')
    port.deliver(...port.inFlight().slice(0, 2))
    await until(() => port.sent.length === 6, 'two more sent')
    await turns()
    assert.equal(port.inFlight().length, 4, 'never more than 4 at once')
    while (port.inFlight().length > 0) {
      port.deliver(...port.inFlight())
      await turns()
    }
    await engine.drained()
    assert.deepEqual(new Set(port.sent.map((s) => s.id)), new Set(due.map((w) => w.id)), 'every delivery sent')
    assert.equal(port.sent.length, 10, 'none sent twice')
    for (const w of due) assert.deepEqual(store.of(w.id).map((o) => o.kind), ['succeeded'], `${w.id} recorded delivered once`)
  })

  test('batches to the port are at most batchSize', async () => {
    const due = Array.from({ length: 7 }, (_, i) => work(`dlv_${i}`, { webhookId: `wh_${i}` }))
    const { port } = await setup(due, { batchSize: 3 })
    assert.equal(port.sent.length, 7)
    assert.ok(port.batches.every((n) => n <= 3), `batches ${port.batches.join(', ')}`)
  })

  test('one webhook gets at most its window in flight; another webhook is not held up by it', async () => {
    const due = [
      ...Array.from({ length: 6 }, (_, i) => work(`a_${i}`, { webhookId: 'wh_a' })),
      ...Array.from({ length: 2 }, (_, i) => work(`b_${i}`, { webhookId: 'wh_b' })),
    ]
    const { port } = await setup(due, { window: 2, windowInitial: 2 })
    assert.equal(port.inFlight('wh_a').length, 2, 'wh_a: its window of 2')
    assert.equal(port.inFlight('wh_b').length, 2, 'wh_b sends beside it')
    assert.ok(port.sent.every((s) => s.window === 2), 'each batch carries its webhook\'s window')
    port.deliver(port.inFlight('wh_a')[0]!)
    await until(() => port.sent.filter((s) => s.webhookId === 'wh_a').length === 3, 'the next of wh_a')
    assert.equal(port.inFlight('wh_a').length, 2, 'still 2 at once')
  })

  test('a rate-limited webhook gets one window\'s permits, and the rest in the next window, once its timer fires', async () => {
    const rate = 50
    const { permits, windowMs } = webhookPace(rate)
    const due = Array.from({ length: permits * 2 + 1 }, (_, i) => work(`dlv_${i}`, { rateLimit: rate }))
    const { port, clock, timers } = await setup(due, { window: 64, windowInitial: 64 })
    await until(() => port.sent.length === permits, 'the first window\'s permits spent')
    await turns()
    assert.equal(port.sent.length, permits, 'no more than the window allows')
    port.deliver(...port.inFlight())
    await turns()
    assert.equal(port.sent.length, permits, 'answers free no permits')
    clock.t += windowMs
    timers.fireAll()
    await until(() => port.sent.length === permits * 2, 'the next window\'s permits')
  })
})

describe('scheduler: answers', () => {
  test('a 5xx is retried at the schedule\'s step; a 2xx after it is recorded delivered', async () => {
    const { engine, store, port, clock } = await setup([work('dlv_1')])
    clock.t = T0 + 100
    port.answer({ deliveryId: 'dlv_1', outcome: 'retry', status: 500, error: 'receiver answered 500' })
    await engine.drained()
    const [retry] = store.of('dlv_1')
    assert.equal(retry?.kind, 'retry')
    assert.equal(retry.kind === 'retry' && retry.nextAttemptAt, T0 + 100 + SCHEDULE[0]!, 'the first step, jitter at its middle')
    assert.equal(retry.kind === 'retry' && retry.pushback, undefined, 'a failure, not a pushback')
  })

  test('the last scheduled retry failing fails the delivery for good', async () => {
    const { engine, store, port } = await setup([work('dlv_1', { attempts: SCHEDULE.length })])
    port.answer({ deliveryId: 'dlv_1', outcome: 'retry', status: 500, error: 'receiver answered 500' })
    await engine.drained()
    assert.deepEqual(store.of('dlv_1').map((o) => o.kind), ['failed'])
  })

  test('a 429 is a pushback: retried in a moment (or at its Retry-After), the window halves, and pushbacks in a row hold the webhook', async () => {
    const due = Array.from({ length: 10 }, (_, i) => work(`dlv_${i}`))
    const { engine, store, port, clock, timers } = await setup(due)
    assert.equal(port.sent.length, 4)
    port.answer({ deliveryId: 'dlv_0', outcome: 'retry', status: 429, error: 'receiver answered 429' })
    await turns()
    assert.equal(engine.deliveryState('wh_a')?.window, 2, 'the window halves')
    assert.equal(port.sent.length, 4, '3 still in flight: no room in a window of 2')
    clock.t += 10
    port.answer({ deliveryId: 'dlv_1', outcome: 'retry', status: 429, error: 'receiver answered 429', retryAfterMs: 2_000 })
    port.answer({ deliveryId: 'dlv_2' }, { deliveryId: 'dlv_3', outcome: 'retry', status: 429, error: 'receiver answered 429' })
    await turns()
    // dlv_2's 2xx ended the run of pushbacks; dlv_3's 429 is the first of a new one: no hold.
    assert.deepEqual(port.inFlight(), ['dlv_4', 'dlv_5'], 'sending goes on after a single pushback')
    port.answer(...port.inFlight().map((deliveryId) => ({ deliveryId, outcome: 'retry' as const, status: 503, error: 'receiver answered 503' })))
    await turns()
    assert.equal(port.sent.length, 6, 'pushbacks in a row hold the webhook: nothing more is sent')
    timers.fireAll() // the outcome writer's linger, and the wake-up at the hold's end
    await turns()
    assert.equal(port.sent.length, 6, 'not before the hold ends')
    clock.t = T0 + 30
    timers.fireAll()
    await until(() => port.sent.length > 6, 'sending again once the hold ends')
    running.splice(0)
    await engine.stop()
    const retries = store.recorded.filter((o) => o.kind === 'retry')
    assert.deepEqual(retries.map((o) => o.id), ['dlv_0', 'dlv_1', 'dlv_3', 'dlv_4', 'dlv_5'])
    assert.ok(retries.every((o) => o.kind === 'retry' && o.pushback === true), 'every 429/503 is recorded as a pushback')
    const inAMoment = store.of('dlv_0')[0]
    assert.equal(inAMoment?.kind === 'retry' && inAMoment.nextAttemptAt, T0 + 10, 'the first pushback waits 10 ms')
    const atRetryAfter = store.of('dlv_1')[0]
    assert.equal(atRetryAfter?.kind === 'retry' && atRetryAfter.nextAttemptAt, T0 + 10 + 2_000, 'Retry-After wins')
    assert.deepEqual(store.of('dlv_2').map((o) => o.kind), ['succeeded'])
  })

  test('410 Gone: recorded gone, the webhook paused, what waits for it handed back to the store and its queue at the port asked back', async () => {
    const due = Array.from({ length: 6 }, (_, i) => work(`dlv_${i}`))
    const { engine, store, port, clock } = await setup(due)
    port.answer({ deliveryId: 'dlv_0', outcome: 'gone', status: 410, error: 'receiver answered 410 Gone' })
    await turns()
    assert.deepEqual(port.holds, [['wh_a']], 'the port is asked for wh_a\'s queue back')
    assert.equal(port.sent.length, 4, 'nothing more is sent to it')
    port.answer(...port.inFlight().map((deliveryId) => ({ deliveryId, outcome: 'returned' as const, durationMs: 0 })))
    await engine.drained()
    assert.deepEqual(store.of('dlv_0').map((o) => o.kind), ['gone'])
    for (const id of ['dlv_1', 'dlv_2', 'dlv_3', 'dlv_4', 'dlv_5']) {
      const [o] = store.of(id)
      assert.equal(o?.kind, 'deferred', `${id} back in the store, unattempted`)
      assert.equal(o.kind === 'deferred' && o.nextAttemptAt, clock.t + 1_000, 'due when the pause ends')
    }
  })

  test('work handed back unattempted is sent again, first, without counting an attempt', async () => {
    const due = Array.from({ length: 5 }, (_, i) => work(`dlv_${i}`))
    const { engine, store, port } = await setup(due, { window: 2, windowInitial: 2 })
    assert.deepEqual(port.sent.map((s) => s.id), ['dlv_0', 'dlv_1'])
    port.answer({ deliveryId: 'dlv_1', outcome: 'returned', durationMs: 0 })
    await until(() => port.sent.length === 3)
    assert.equal(port.sent[2]?.id, 'dlv_1', 'ahead of what came later')
    while (port.inFlight().length > 0) {
      port.deliver(...port.inFlight())
      await turns()
    }
    await engine.drained()
    assert.deepEqual(store.of('dlv_1').map((o) => o.kind), ['succeeded'], 'one outcome: the attempt that was made')
  })

  test('deliveries a dead worker never answered are retried', async () => {
    const { engine, store, port } = await setup([work('dlv_1')])
    port.lose('dlv_1')
    await engine.drained()
    const [o] = store.of('dlv_1')
    assert.equal(o?.kind, 'retry')
    assert.match(o.kind === 'retry' ? o.error : '', /worker failed/)
  })

  test('a 2xx after the breaker opened asks the store to re-drive the webhook', async () => {
    const due = Array.from({ length: 30 }, (_, i) => work(`dlv_${i}`))
    const { engine, store, port, clock } = await setup(due, { window: 1, windowInitial: 1, breaker: { failureThreshold: 1, downAfterMs: 0, cooldownMs: 1_000 } })
    port.answer({ deliveryId: 'dlv_0', outcome: 'retry', status: 500, error: 'receiver answered 500' })
    await turns()
    assert.equal(engine.deliveryState('wh_a')?.breaker, 'open')
    assert.equal(port.sent.length, 1, 'nothing is sent while the breaker is open')
    await engine.drained()
    assert.ok(store.recorded.filter((o) => o.kind === 'deferred').length === 29, 'what waited went back to the store')
    clock.t += 1_000
    store.due.push(work('dlv_probe'))
    engine.wake()
    await until(() => port.sent.length === 2, 'the probe')
    port.deliver('dlv_probe')
    await until(() => store.redriven.length > 0, 'the re-drive')
    assert.deepEqual(store.redriven, ['wh_a'])
    assert.equal(engine.deliveryState('wh_a')?.breaker ?? 'closed', 'closed')
  })
})

describe('scheduler: stopping', () => {
  test('what waits and what the port held queued go back to the store unattempted; nothing is recorded twice', async () => {
    const due = Array.from({ length: 6 }, (_, i) => work(`dlv_${i}`))
    const { engine, store, port } = await setup(due, { window: 2, windowInitial: 2 })
    port.deliver('dlv_0')
    await turns()
    running.splice(0)
    await engine.stop()
    assert.deepEqual(store.of('dlv_0').map((o) => o.kind), ['succeeded'])
    for (const id of ['dlv_1', 'dlv_2', 'dlv_3', 'dlv_4', 'dlv_5']) assert.deepEqual(store.of(id).map((o) => o.kind), ['deferred'], id)
  })
})
