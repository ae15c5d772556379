// The engine's pacing parts with a fake clock, fake timers and a fake shared counter (no store, no threads):
// two pacers sharing one counter stand for two nodes delivering for one rate-limited webhook.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { WebhookActor } from '../../src/delivery/actor.js'
import { Pacer, WakeList, type PermitCounter } from '../../src/delivery/pacer.js'
import type { Timers } from '../../src/domain/clock.js'
import { webhookPace } from '../../src/domain/rate-limits.js'
import type { DeliveryWork } from '../../src/store/deliveries.js'

const OPTS = { window: { min: 1, max: 64, initial: 64 }, ahead: 0, mailboxLimit: 10_000, failureThreshold: 5, cooldownMs: 1000, maxCooldownMs: 4000, downAfterMs: 5000, maxHoldMs: 1000 }

function work (n: number): DeliveryWork[] {
  return Array.from({ length: n }, (_, i) => ({ id: `dlv_${i}`, webhookId: 'wh_1', url: 'http://127.0.0.1/', secrets: ['s'], event: 'email.sent', payload: '{}', attempts: 0, eventAt: 0, lease: 1 }))
}

/** Timers run by hand: advance() fires what is due, in order. */
class FakeTime implements Timers {
  now = 0
  private queue: Array<{ at: number; fn: () => void; id: number }> = []
  private next = 0
  readonly clock = { now: () => this.now }
  set (fn: () => void, ms: number): unknown {
    const id = ++this.next
    this.queue.push({ at: this.now + ms, fn, id })
    return id
  }

  clear (handle: unknown): void { this.queue = this.queue.filter((t) => t.id !== handle) }
  async advance (to: number): Promise<void> {
    for (;;) {
      this.queue.sort((a, b) => a.at - b.at)
      const t = this.queue[0]
      if (!t || t.at > to) break
      this.queue.shift()
      this.now = t.at
      t.fn()
      await new Promise((resolve) => setImmediate(resolve))
    }
    this.now = to
  }
}

/** The store's rate-limit counters: a count per key and window. */
class FakeCounter implements PermitCounter {
  readonly counts = new Map<string, number>()
  async hitRateLimit (hit: { key: string; windowStart: number; windowEnd: number }): Promise<number> {
    const k = `${hit.key}@${hit.windowStart}`
    const n = (this.counts.get(k) ?? 0) + 1
    this.counts.set(k, n)
    return n
  }
}

describe('pacing', () => {
  test('webhookPace: about 50 windows a second, and any second holds at most a few percent over the limit', () => {
    for (const rate of [1, 7, 20, 50, 333, 1000, 10_000]) {
      const { permits, windowMs } = webhookPace(rate)
      const windowsPerSecond = Math.ceil(1000 / windowMs) + 1
      assert.ok(permits * windowsPerSecond <= Math.max(rate * 1.05, rate + 2), `rate ${rate}: ${permits} per ${windowMs} ms`)
      assert.ok(permits * (1000 / windowMs) >= rate * 0.95, `rate ${rate}: not slower than asked (${permits} per ${windowMs} ms)`)
    }
  })

  test('two nodes sharing the counters spend one window\'s permits between them, and wait for the next', async () => {
    const time = new FakeTime()
    const counter = new FakeCounter()
    const outcomes: Array<{ node: string; at: number | null }> = []
    const node = (name: string) => new Pacer(counter, time.clock, (_a, at) => outcomes.push({ node: name, at }), (err) => { throw err })
    const a = new WebhookActor('wh_1', 0, OPTS)
    const b = new WebhookActor('wh_1', 0, OPTS)
    for (const actor of [a, b]) {
      actor.limitRate(50)
      for (const w of work(100)) actor.enqueue(w)
    }
    const { permits, windowMs } = webhookPace(50)
    time.now = 5
    node('a').ask(a, time.now)
    node('b').ask(b, time.now)
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(a.permits + b.permits, permits, 'the window\'s permits, once, between both nodes')
    const waiting = outcomes.filter((o) => o.at !== null)
    assert.ok(waiting.every((o) => o.at === windowMs), 'a node left short waits for the next window')
    assert.equal(a.take(time.now, 100).length + b.take(time.now, 100).length, permits)
    assert.equal(a.take(time.now, 100).length, 0, 'spent')
  })

  test('a request under way is not doubled, and nothing is asked while the window is spent', async () => {
    const time = new FakeTime()
    const counter = new FakeCounter()
    const calls: Array<number | null> = []
    const pacer = new Pacer(counter, time.clock, (_a, at) => calls.push(at), (err) => { throw err })
    const a = new WebhookActor('wh_1', 0, OPTS)
    a.limitRate(20)
    for (const w of work(10)) a.enqueue(w)
    pacer.ask(a, 0)
    pacer.ask(a, 0)
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal([...counter.counts.values()].reduce((x, y) => x + y, 0), 1, 'one permit asked for (rate 20: 1 per window)')
    a.take(0, 10)
    pacer.ask(a, 0)
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal([...counter.counts.values()].reduce((x, y) => x + y, 0), 2)
    assert.equal(a.permits, 0, 'the second ask found the window spent')
    pacer.ask(a, 1)
    assert.equal([...counter.counts.values()].reduce((x, y) => x + y, 0), 2, 'no third ask within the spent window')
    assert.equal(calls.at(-1), webhookPace(20).windowMs)
  })

  test('WakeList: one timer for the earliest; each actor is handed back when its own time has come', async () => {
    const time = new FakeTime()
    const woken: string[][] = []
    const list = new WakeList(time.clock, (actors) => woken.push(actors.map((a) => a.webhookId)), time)
    const early = new WebhookActor('wh_early', 0, OPTS)
    const late = new WebhookActor('wh_late', 0, OPTS)
    const empty = new WebhookActor('wh_empty', 0, OPTS)
    // Two pushbacks in a row hold an actor's new requests 10 ms: until 10 for one, until 50 for the other.
    for (const [actor, at] of [[early, 0], [late, 40]] as const) {
      for (const w of work(3)) actor.enqueue(w)
      actor.take(at, 2)
      actor.pushedBack(at)
      actor.pushedBack(at)
    }
    assert.deepEqual([early.holdUntil, late.holdUntil], [10, 50])
    list.add(late, 50)
    list.add(early, 10)
    list.add(empty, 5)
    await time.advance(9)
    assert.deepEqual(woken, [], 'nothing before its time')
    await time.advance(10)
    assert.deepEqual(woken, [['wh_early']], 'the actor without work is dropped, the early one handed back')
    await time.advance(49)
    assert.equal(woken.length, 1)
    await time.advance(50)
    assert.deepEqual(woken, [['wh_early'], ['wh_late']])
    assert.equal(list.size, 0)
    list.add(late, 60)
    list.close()
    await time.advance(100)
    assert.equal(woken.length, 2, 'closed: nothing fires')
  })
})
