// The engine's parts one by one, with a fake store and a fake clock: no threads, no sockets, no files.
// (The whole engine, with worker threads and real receivers, is test/integration/delivery-engine.test.ts.)
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { WebhookActor } from '../../src/delivery/actor.js'
import { actorOptionsOf } from '../../src/delivery/engine-options.js'
import { CursorEvents, RoutedEvents, eventSourceFor, type EventSource } from '../../src/delivery/event-source.js'
import { HeldWork, Leases } from '../../src/delivery/held.js'
import { Intake } from '../../src/delivery/intake.js'
import { OutcomeWriter } from '../../src/delivery/outcome-writer.js'
import { PRUNE_STEP, Retention, STATS_CACHE_MS } from '../../src/delivery/retention.js'
import { ManualTimers } from '../helpers/timers.js'
import type { DeliveryOrigin, DeliveryOutcome, DeliveryStats, DeliveryWork, LeaseRequest, RoutedThrough, RoutingPosition } from '../../src/store/deliveries.js'

const log = { info () {}, warn () {}, error () {} }

class FakeClock {
  constructor (public t = 1_000_000) {}
  now (): number { return this.t }
}

function origin (seq: number, router = 1, createdAt = 0): DeliveryOrigin {
  return { seq, accountId: 'acc_1', eventId: `evt_${seq}`, eventType: 'email.sent', emailId: 'em_1', eventAt: 0, router, createdAt }
}

function work (id: string, more: Partial<DeliveryWork> = {}): DeliveryWork {
  return { id, webhookId: 'wh_1', url: 'http://127.0.0.1/', secrets: ['s'], event: 'email.sent', payload: '{}', attempts: 0, eventAt: 0, lease: 1, ...more }
}

const deferred = (id: string, at: number): DeliveryOutcome => ({ kind: 'deferred', id, webhookId: 'wh_1', lease: 1, nextAttemptAt: at })

describe('held work and leases', () => {
  test('work leaves only with its outcome queued; emptied() resolves when the last one leaves', async () => {
    const queued: DeliveryOutcome[] = []
    const held = new HeldWork((o) => queued.push(o))
    const a = work('dlv_a')
    const b = work('dlv_b')
    held.hold(a)
    held.hold(b)
    let empty = false
    const emptied = held.emptied().then(() => { empty = true })
    held.defer(a, 5)
    await Promise.resolve()
    assert.equal(empty, false, 'one delivery is still held')
    assert.equal(held.get('dlv_a'), undefined)
    held.release(b, deferred('dlv_b', 9))
    await emptied
    assert.equal(held.size, 0)
    assert.deepEqual(queued, [deferred('dlv_a', 5), deferred('dlv_b', 9)])
  })

  test('a lease runs leaseMs from when it is taken', () => {
    const leases = new Leases('node:1', 30_000)
    assert.equal(leases.until(1_000), 31_000)
    assert.equal(leases.owner, 'node:1')
  })
})

describe('event source', () => {
  test('a store without readEvents routes events; one with it keeps the cursor', () => {
    const routeEvents = async () => ({ events: 0, work: [] })
    assert.ok(eventSourceFor({ routeEvents }, 'me', log, () => {}) instanceof RoutedEvents)
    const cursor = eventSourceFor({ routeEvents, readEvents: async () => ({ events: 0, work: [], routing: null }), renewRouting: async () => true }, 'me', log, () => {})
    assert.ok(cursor instanceof CursorEvents)
  })

  test('routed: reads are the store\'s routeEvents and there is no cursor to move', async () => {
    const asked: LeaseRequest[] = []
    const source: EventSource = new RoutedEvents({ routeEvents: async (req) => { asked.push(req); return { events: 1, work: [work('dlv_1')] } } })
    const req = { owner: 'me', now: 1, leaseUntil: 2, limit: 3 }
    assert.deepEqual(await source.read(req), { events: 1, work: [work('dlv_1')] })
    assert.deepEqual(asked, [req])
    source.count(origin(1), 1)
    assert.equal(source.through(), undefined)
    assert.equal(source.holdsFirstAttempts(), false)
  })

  test('written once: the cursor stops just before the first event with a first attempt unanswered', async () => {
    let position: RoutingPosition = { token: 7, through: 12, recheckThrough: 0 }
    const reads: Array<RoutingPosition | undefined> = []
    let mayMove = 0
    const source = new CursorEvents({
      readEvents: async (req) => { reads.push(req.routing); return { events: 3, work: [], routing: position } },
      renewRouting: async () => true,
    }, 'me', log, () => { mayMove++ })
    const req = { owner: 'me', now: 1, leaseUntil: 2, limit: 3 }
    await source.read(req)
    assert.equal(mayMove, 1, 'events read: a write should carry the cursor soon')
    assert.deepEqual(source.through(), { owner: 'me', token: 7, through: 12 })
    source.count(origin(10, 7), 1)
    source.count(origin(10, 7), 1)
    source.count(origin(11, 7), 1)
    source.count(origin(11, 99), 1) // read under another token: not counted
    assert.equal(source.holdsFirstAttempts(), true)
    assert.deepEqual(source.through(), { owner: 'me', token: 7, through: 9 })
    source.count(origin(10, 7), -1)
    assert.equal(source.through()?.through, 9, 'event 10 still has a first attempt without an outcome')
    source.count(origin(10, 7), -1)
    assert.equal(source.through()?.through, 10)
    source.written({ owner: 'me', token: 7, through: 10 })
    assert.equal(source.through(), undefined, 'nothing new to write')
    source.count(origin(11, 7), -1)
    assert.equal(source.through()?.through, 12)
    // The next read passes the position; a new token starts counting afresh.
    position = { token: 8, through: 20, recheckThrough: 20 }
    source.count(origin(13, 7), 1)
    await source.read(req)
    assert.deepEqual(reads[1], { token: 7, through: 12, recheckThrough: 0 })
    assert.deepEqual(source.through(), { owner: 'me', token: 8, through: 20 })
    assert.equal(source.holdsFirstAttempts(), false)
  })

  test('written once: losing the routing lease (to another node, or by renewal) forgets the position', async () => {
    let routing: RoutingPosition | null = { token: 3, through: 5, recheckThrough: 0 }
    let renewed = true
    const source = new CursorEvents({
      readEvents: async () => ({ events: 1, work: [], routing }),
      renewRouting: async () => renewed,
    }, 'me', log, () => {})
    const req = { owner: 'me', now: 1, leaseUntil: 2, limit: 3 }
    await source.read(req)
    assert.ok(source.through())
    renewed = false
    source.renew(100)
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(source.through(), undefined, 'the renewal failed: the lease is gone')
    await source.read(req)
    assert.ok(source.through())
    routing = null
    await source.read(req)
    assert.equal(source.through(), undefined, 'another node holds the lease')
  })
})

class FakeOutcomeStore {
  readonly writes: Array<{ outcomes: DeliveryOutcome[]; routed?: RoutedThrough }> = []
  failures = 0
  stale = 0
  readonly health = { failed: () => null }
  async recordOutcomes (outcomes: DeliveryOutcome[], opts: { routed?: RoutedThrough }): Promise<{ stale: number }> {
    if (this.failures > 0) {
      this.failures--
      throw new Error('disk on fire')
    }
    this.writes.push({ outcomes, ...(opts.routed ? { routed: opts.routed } : {}) })
    return { stale: this.stale }
  }
}

describe('outcome writer', () => {
  const NO_WAIT = { retries: 2, minTimeout: 0, factor: 1, maxTimeout: 0 }
  function setup (through?: RoutedThrough) {
    const store = new FakeOutcomeStore()
    const timers = new ManualTimers()
    const counted: Array<[number | undefined, number]> = []
    let cursor = through
    const lost: string[] = []
    const source: EventSource = {
      count: (o: DeliveryOrigin | undefined, by: 1 | -1) => { counted.push([o?.seq, by]) },
      through: () => cursor,
      written: (r: RoutedThrough) => { if (cursor?.through === r.through) cursor = undefined },
      lose: () => { lost.push('lost'); cursor = undefined },
      renew () {},
      holdsFirstAttempts: () => false,
      read: async () => ({ events: 0, work: [] }),
    }
    let stale = 0
    const writer = new OutcomeWriter({ store, clock: new FakeClock(), log, source, autoDisableMs: 1, timers, retry: NO_WAIT, onStale: (n) => { stale += n } })
    return { store, timers, writer, counted, lost, staleCount: () => stale }
  }

  test('outcomes queued together are written in one batch, in order, after the linger timer; the first attempts are counted down', async () => {
    const { store, timers, writer, counted } = setup()
    writer.queue(deferred('dlv_1', 1))
    writer.queue({ ...deferred('dlv_2', 2), origin: origin(4) })
    assert.equal(writer.pending, 2)
    assert.deepEqual(writer.leasedIds(), ['dlv_1'], 'a first attempt held in memory has no lease to renew')
    assert.equal(store.writes.length, 0)
    assert.equal(timers.pending.size, 1, 'one linger timer for the batch')
    timers.fireAll()
    await writer.lastWrite()
    assert.deepEqual(store.writes.map((w) => w.outcomes.map((o) => o.id)), [['dlv_1', 'dlv_2']])
    assert.deepEqual(counted, [[undefined, -1], [4, -1]])
    assert.equal(writer.pending, 0)
  })

  test('the cursor travels with the write, even with no outcome', async () => {
    const routed = { owner: 'me', token: 2, through: 40 }
    const { store, writer } = setup(routed)
    await writer.flush()
    assert.deepEqual(store.writes, [{ outcomes: [], routed }])
    await writer.flush()
    assert.equal(store.writes.length, 1, 'written once, not again')
  })

  test('a failed write is retried; given up, it gives up the routing lease when it carried the cursor', async () => {
    const routed = { owner: 'me', token: 2, through: 40 }
    const ok = setup(routed)
    ok.store.failures = 2
    ok.writer.queue(deferred('dlv_1', 1))
    await ok.writer.flush()
    assert.equal(ok.store.writes.length, 1, 'the third try landed')
    assert.deepEqual(ok.lost, [])

    const bad = setup(routed)
    bad.store.failures = 10
    bad.writer.queue(deferred('dlv_1', 1))
    await bad.writer.flush()
    assert.equal(bad.store.writes.length, 0)
    assert.deepEqual(bad.lost, ['lost'])
    assert.deepEqual(bad.writer.leasedIds(), [], 'given up: its leases run out')
  })

  test('stale outcomes are counted', async () => {
    const { store, writer, staleCount } = setup()
    store.stale = 3
    writer.queue(deferred('dlv_1', 1))
    await writer.flush()
    assert.equal(staleCount(), 3)
  })
})

describe('intake', () => {
  function setup (opts: { maxInFlight?: number; mailboxLimit?: number; unpark?: DeliveryWork[] } = {}) {
    const clock = new FakeClock()
    const queued: DeliveryOutcome[] = []
    const held = new HeldWork((o) => queued.push(o))
    const actors = new Map<string, WebhookActor>()
    const actorOptions = { ...actorOptionsOf({ window: 4, breaker: { mailboxLimit: opts.mailboxLimit ?? 2 } }) }
    const ready = new Set<string>()
    const unparked: Array<{ webhookId: string; limit: number }> = []
    let flushed = 0
    const source = new RoutedEvents({ routeEvents: async () => ({ events: 0, work: [] }) })
    const intake = new Intake({
      store: { unparkDeliveries: async (req) => { unparked.push({ webhookId: req.webhookId, limit: req.limit }); return opts.unpark ?? [] } },
      clock,
      log,
      held,
      leases: new Leases('me', 1_000),
      source,
      maxInFlight: opts.maxInFlight ?? 2,
      mailboxLimit: actorOptions.mailboxLimit,
      host: {
        running: () => true,
        actorFor: (id) => {
          let a = actors.get(id)
          if (!a) actors.set(id, a = new WebhookActor(id, 0, actorOptions))
          return a
        },
        actorCount: () => actors.size,
        ready: (a) => { ready.add(a.webhookId) },
        pump () {},
        room: () => 100,
        flushOutcomes: async () => { flushed++ },
      },
    })
    return { clock, queued, held, actors, ready, intake, unparked, flushed: () => flushed }
  }

  test('work fills its actor; what does not fit is parked, leased to this node, and the webhook is saturated', () => {
    const { queued, held, actors, ready, intake, clock } = setup()
    intake.accept([work('dlv_1'), work('dlv_2'), work('dlv_3')])
    assert.deepEqual(actors.get('wh_1')?.emptyMailbox().map((w) => w.id), ['dlv_1', 'dlv_2'])
    assert.deepEqual([...ready], ['wh_1'])
    assert.deepEqual(queued, [{ kind: 'parked', id: 'dlv_3', webhookId: 'wh_1', lease: 1, owner: 'me', leaseUntil: clock.t + 1_000 }])
    assert.equal(held.size, 2)
    assert.deepEqual(intake.saturated(), ['wh_1'])
    // A new first attempt for a saturated webhook goes behind its backlog, even with room.
    intake.accept([work('dlv_4', { lease: 0, origin: origin(1) })])
    assert.equal(queued.at(-1)?.kind, 'parked')
    assert.equal(queued.at(-1)?.id, 'dlv_4')
  })

  test('work for a paused actor goes back to the store, due when the pause ends', () => {
    const { queued, actors, intake, clock } = setup()
    intake.accept([work('dlv_1')])
    const actor = actors.get('wh_1')!
    actor.emptyMailbox()
    actor.pause(clock.t + 500)
    intake.accept([work('dlv_2')])
    assert.deepEqual(queued, [deferred('dlv_2', clock.t + 500)])
  })

  test('work claimed again while held keeps the newer lease and is not held twice', () => {
    const { held, actors, intake } = setup({ maxInFlight: 10, mailboxLimit: 10 })
    intake.accept([work('dlv_1', { lease: 1 })])
    intake.accept([work('dlv_1', { lease: 4 })])
    assert.equal(held.get('dlv_1')?.lease, 4)
    assert.equal(actors.get('wh_1')?.queued, 1)
  })

  test('a saturated actor whose mailbox has half emptied pages its backlog in, outcomes written first; a short page ends the saturation', async () => {
    const { actors, intake, unparked, flushed } = setup({ unpark: [work('dlv_9')] })
    intake.accept([work('dlv_1'), work('dlv_2'), work('dlv_3')])
    const actor = actors.get('wh_1')!
    intake.refill(actor)
    assert.deepEqual(unparked, [], 'the mailbox is still full')
    actor.emptyMailbox()
    intake.refill(actor)
    intake.refill(actor) // one page at a time
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(flushed(), 1)
    assert.deepEqual(unparked, [{ webhookId: 'wh_1', limit: 2 }])
    assert.deepEqual(actor.emptyMailbox().map((w) => w.id), ['dlv_9'])
    assert.deepEqual(intake.saturated(), [], 'fewer came back than asked for: the backlog is in')
  })
})

describe('retention', () => {
  const STATS: DeliveryStats = { pending: 1, retrying: 2, unroutedEvents: 3, oldestPendingAt: null }

  test('statistics are cached for STATS_CACHE_MS by the injected clock', async () => {
    const clock = new FakeClock()
    const asked: number[] = []
    const retention = new Retention({ clock, log, retentionMs: 1, store: { deliveryStats: async (now) => { asked.push(now); return STATS }, pruneDeliveries: async () => 0, pruneEvents: async () => 0 } })
    assert.deepEqual(await retention.stats(), STATS)
    clock.t += STATS_CACHE_MS
    await retention.stats()
    assert.equal(asked.length, 1)
    clock.t += 1
    await retention.stats()
    assert.deepEqual(asked, [1_000_000, 1_000_000 + STATS_CACHE_MS + 1])
  })

  test('pruning deletes what is older than the retention, step by step, deliveries before events, only while running', async () => {
    const clock = new FakeClock()
    const calls: string[] = []
    let deliveries = PRUNE_STEP * 2 + 1
    const retention = new Retention({
      clock,
      log,
      retentionMs: 1_000,
      store: {
        deliveryStats: async () => STATS,
        pruneDeliveries: async (before, n) => { calls.push(`d<${before}`); const k = Math.min(n, deliveries); deliveries -= k; return k },
        pruneEvents: async (before, n) => { calls.push(`e<${before}`); return n - 1 },
      },
    })
    await retention.prune()
    assert.deepEqual(calls, [], 'not started: nothing is deleted')
    await retention.start()
    await retention.prune()
    await retention.stop()
    const before = clock.t - 1_000
    assert.deepEqual(calls, [`d<${before}`, `d<${before}`, `d<${before}`, `e<${before}`])
  })
})
