// The delivery engine's part of the Store contract (src/store/deliveries.ts), written once against the
// interface. Routing, claiming, stats and pruning act on the whole store, so every case here opens a
// fresh store (the same `make` the Store contract uses) and closes it afterwards. Every time is passed
// explicitly (`now`, `at`, `leaseUntil`), so nothing depends on the wall clock.
import { afterEach, beforeEach, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { eventPayload, type EventRecord, type EventType } from '../../src/domain/events.js'
import { BEFORE, OUTCOME_KINDS, transition } from '../../src/domain/delivery-transition.js'
import { deliveryId, newId } from '../../src/domain/ids.js'
import type { DeliveryOutcome, DeliveryRecord, DeliveryStatus, DeliveryWork, LeaseRequest, RoutingPosition } from '../../src/store/deliveries.js'
import type { AccountRecord, Store, WebhookRecord } from '../../src/store/types.js'
import type { EmailRecord } from '../../src/store/emails.js'
import type { ReceivedRecord } from '../../src/store/received.js'
import { eventRoute } from '../../src/domain/webhook-filter.js'
import type { MadeStore, MakeStore } from './store-contract.js'

/** A fixed origin: every time in these cases is T + something. */
const T = Date.UTC(2030, 0, 1)
const SECOND = 1_000
const DAY = 86_400_000
const iso = (ms: number): string => new Date(ms).toISOString()
const unique = (): string => randomBytes(6).toString('hex')
/** Large enough that no case below auto-disables a webhook by accident. */
const HEALTHY = { autoDisableMs: 365 * DAY }

const ids = (xs: Array<{ id: string }>): string[] => xs.map((x) => x.id)
const sortedIds = (xs: Array<{ id: string }>): string[] => ids(xs).sort()

function lease (now: number, overrides: Partial<LeaseRequest & { routing: RoutingPosition }> = {}): LeaseRequest & { routing?: RoutingPosition } {
  return { owner: 'node-a', now, leaseUntil: now + 30 * SECOND, limit: 100, ...overrides }
}

/** A delivery as an outcome names it: its id, its webhook, and the lease token it was claimed under. */
type Held = { id: string; webhookId: string; lease: number }

function succeeded (w: Held, at: number, statusCode = 200): DeliveryOutcome {
  return { kind: 'succeeded', id: w.id, webhookId: w.webhookId, lease: w.lease, at, statusCode, durationMs: 12 }
}

function retry (w: Held, at: number, nextAttemptAt: number, statusCode?: number): DeliveryOutcome {
  const error = statusCode ? `HTTP ${statusCode}` : 'connect ECONNREFUSED'
  return { kind: 'retry', id: w.id, webhookId: w.webhookId, lease: w.lease, at, nextAttemptAt, error, durationMs: 34, ...(statusCode !== undefined ? { statusCode } : {}) }
}

function failed (w: Held, at: number, statusCode = 500): DeliveryOutcome {
  return { kind: 'failed', id: w.id, webhookId: w.webhookId, lease: w.lease, at, statusCode, error: `HTTP ${statusCode}`, durationMs: 56 }
}

function gone (w: Held, at: number): DeliveryOutcome {
  return { kind: 'gone', id: w.id, webhookId: w.webhookId, lease: w.lease, at, statusCode: 410, durationMs: 7 }
}

function deferred (w: Held, nextAttemptAt: number): DeliveryOutcome {
  return { kind: 'deferred', id: w.id, webhookId: w.webhookId, lease: w.lease, nextAttemptAt }
}

function parked (w: Held, owner: string, leaseUntil: number): DeliveryOutcome {
  return { kind: 'parked', id: w.id, webhookId: w.webhookId, lease: w.lease, owner, leaseUntil }
}

/** Work without its token, to compare work handed out twice. */
const untokened = ({ lease: _lease, ...rest }: DeliveryWork): Omit<DeliveryWork, 'lease'> => rest

export function deliveryContract (name: string, make: MakeStore): void {
  describe(`${name} store: deliveries`, () => {
    let made: MadeStore | undefined
    let store: Store
    /** The token each delivery was last handed out under (every claim of the cases goes through `store`). */
    let tokens: Map<string, number>

    /** The store, remembering the token of every piece of work it hands out, for workFor(). */
    function remembering (inner: Store): Store {
      const remember = (work: DeliveryWork[]): DeliveryWork[] => {
        for (const w of work) tokens.set(w.id, w.lease)
        return work
      }
      return new Proxy(inner, {
        get (target, key, receiver) {
          const value = Reflect.get(target, key, receiver)
          if (key === 'routeEvents') return async (req: LeaseRequest) => { const r = await target.routeEvents(req); remember(r.work); return r }
          if (key === 'claimDeliveries' || key === 'unparkDeliveries') return async (req: any) => remember(await (target[key] as any).call(target, req))
          return typeof value === 'function' ? value.bind(target) : value
        },
      })
    }

    beforeEach(async () => {
      made = await make()
      tokens = new Map()
      store = remembering(made.store)
    })

    afterEach(async () => {
      await made?.cleanup()
      made = undefined
    })

    async function newAccount (): Promise<AccountRecord> {
      const account: AccountRecord = {
        id: newId('acct'), email: `dlv-${unique()}@example.test`, passwordHash: 'scrypt$x', plan: 'pro', createdAt: iso(T),
      }
      assert.equal(await store.createAccount(account), 'created')
      return account
    }

    async function newHook (account: AccountRecord, overrides: Partial<WebhookRecord> = {}): Promise<WebhookRecord> {
      const hook: WebhookRecord = {
        id: newId('wh'),
        accountId: account.id,
        url: `https://hooks.example.test/${unique()}`,
        events: ['email.sent', 'email.delivered'],
        secret: `whsec_${unique()}`,
        previousSecret: null,
        previousSecretExpiresAt: null,
        status: 'enabled',
        rateLimit: null,
        createdAt: iso(T),
        updatedAt: iso(T),
        ...overrides,
      }
      assert.equal(await store.insertWebhook(hook, 100), 'created')
      return hook
    }

    /** An event record at `at` (its id carries that time, so ids sort like the times). */
    function makeEvent (account: AccountRecord, at: number, type: EventType = 'email.sent'): EventRecord {
      const e = { id: newId('evt', at), accountId: account.id, emailId: newId('em', at), type, recipient: `to-${unique()}@example.test`, occurredAt: iso(at) }
      return { ...e, payload: eventPayload(e, type === 'email.clicked' ? { url: 'https://example.test/a?b=c&d=é' } : undefined) }
    }

    async function addEvents (account: AccountRecord, times: number[], type: EventType = 'email.sent'): Promise<EventRecord[]> {
      const events = times.map((at) => makeEvent(account, at, type))
      await store.insertEvents(events)
      return events
    }

    /** The one delivery of `event` for `hook`, as the store shows it. */
    async function find (hook: WebhookRecord, event: EventRecord): Promise<DeliveryRecord> {
      const d = await store.findDelivery(hook.accountId, hook.id, deliveryId(event.id, hook.id))
      assert.ok(d, `a delivery of ${event.id} for ${hook.id}`)
      return d
    }

    async function statusOf (hook: WebhookRecord, event: EventRecord): Promise<DeliveryStatus> {
      return (await find(hook, event)).status
    }

    async function allDeliveries (hook: WebhookRecord, status?: DeliveryStatus): Promise<DeliveryRecord[]> {
      const page = await store.listDeliveries(hook.accountId, hook.id, { limit: 1000, ...(status ? { status } : {}) })
      assert.equal(page.nextCursor, null)
      return page.items
    }

    /** The delivery of `event` for `hook`, under the token it was last handed out with. */
    function workFor (hook: WebhookRecord, event: EventRecord): Held {
      const id = deliveryId(event.id, hook.id)
      return { id, webhookId: hook.id, lease: tokens.get(id) ?? 0 }
    }

    // Routing

    test('routeEvents makes one delivery per enabled, subscribed, live webhook of the event\'s account, leased to the owner', async () => {
      const a = await newAccount()
      const b = await newAccount()
      const both = await newHook(a)
      const sentOnly = await newHook(a, { events: ['email.sent'] })
      const deliveredOnly = await newHook(a, { events: ['email.delivered'] })
      const disabled = await newHook(a)
      assert.ok(await store.updateWebhook(a.id, disabled.id, { status: 'disabled' }, iso(T)))
      const autoDisabled = await newHook(a, { status: 'auto_disabled' })
      const deleted = await newHook(a)
      assert.equal(await store.deleteWebhook(a.id, deleted.id, iso(T)), true)
      const unsubscribed = await newHook(a)
      assert.ok(await store.updateWebhook(a.id, unsubscribed.id, { events: ['email.opened'] }, iso(T)))
      const otherAccount = await newHook(b)

      const [e] = await addEvents(a, [T])
      const now = T + 10
      const routed = await store.routeEvents(lease(now, { leaseUntil: now + 5000 }))
      assert.equal(routed.events, 1)
      assert.deepEqual(sortedIds(routed.work), [deliveryId(e!.id, both.id), deliveryId(e!.id, sentOnly.id)].sort())
      for (const hook of [both, sentOnly]) {
        const w = routed.work.find((x) => x.webhookId === hook.id)
        assert.ok(w && Number.isInteger(w.lease), 'work carries its lease token')
        assert.deepEqual(w, {
          id: deliveryId(e!.id, hook.id), webhookId: hook.id, url: hook.url, secrets: [hook.secret], event: 'email.sent',
          payload: e!.payload, attempts: 0, pushbacks: 0, rateLimit: null, eventAt: T, lease: w.lease,
        } satisfies DeliveryWork)
        assert.deepEqual(await find(hook, e!), {
          id: deliveryId(e!.id, hook.id), webhookId: hook.id, eventId: e!.id, event: 'email.sent', emailId: e!.emailId,
          status: 'pending', attempts: 0, lastAttemptAt: null, nextAttemptAt: null /* leased: in flight */, lastStatusCode: null,
          lastError: null, lastDurationMs: null, createdAt: iso(now),
        } satisfies DeliveryRecord)
      }
      for (const hook of [deliveredOnly, disabled, autoDisabled, unsubscribed]) {
        assert.deepEqual(await allDeliveries(hook), [], `no delivery for ${hook.id}`)
        assert.equal(await store.findDelivery(a.id, hook.id, deliveryId(e!.id, hook.id)), null)
      }
      assert.equal(await store.findDelivery(a.id, deleted.id, deliveryId(e!.id, deleted.id)), null)
      assert.deepEqual(await allDeliveries(otherAccount), [])

      // The event is routed: routing again finds nothing, and no lease is handed out twice.
      assert.deepEqual(await store.routeEvents(lease(now + 1)), { events: 0, work: [] })
    })

    test('routeEvents takes unrouted events oldest first, up to limit, each once; an event with no webhook is routed too', async () => {
      const a = await newAccount()
      const lonely = await newAccount()
      const hook = await newHook(a)
      const events = await addEvents(a, [T, T + 1, T + 2])
      const [e1, e2, e3] = events as [EventRecord, EventRecord, EventRecord]

      const first = await store.routeEvents(lease(T + 10, { limit: 2 }))
      assert.equal(first.events, 2)
      assert.deepEqual(sortedIds(first.work), [workFor(hook, e1).id, workFor(hook, e2).id].sort())

      const [alone] = await addEvents(lonely, [T + 3])
      const second = await store.routeEvents(lease(T + 11, { limit: 2 }))
      assert.equal(second.events, 2)
      assert.deepEqual(ids(second.work), [workFor(hook, e3).id])

      assert.deepEqual(await store.routeEvents(lease(T + 12)), { events: 0, work: [] })
      assert.deepEqual(ids(await allDeliveries(hook)), [e3, e2, e1].map((e) => workFor(hook, e).id))
      assert.equal((await store.deliveryStats(T + 12)).unroutedEvents, 0, `${alone!.id} was routed although no webhook wanted it`)
    })

    test('routeEvents hands the payload over byte for byte', async () => {
      const a = await newAccount()
      await newHook(a, { events: ['email.clicked'] })
      const [e] = await addEvents(a, [T], 'email.clicked')
      assert.match(e!.payload, /é/)
      const { work } = await store.routeEvents(lease(T))
      assert.equal(work.length, 1)
      assert.equal(work[0]!.payload, e!.payload)
      assert.equal(work[0]!.event, 'email.clicked')
      const [again] = await store.claimDeliveries(lease(T + DAY))
      assert.equal(again!.payload, e!.payload)
    })

    test('concurrent routeEvents calls never make a delivery twice', async () => {
      const a = await newAccount()
      const hooks = [await newHook(a), await newHook(a), await newHook(a)]
      const events = await addEvents(a, Array.from({ length: 30 }, (_, i) => T + i))
      const results = await Promise.all(['n1', 'n2', 'n3', 'n4'].map((owner, i) =>
        store.routeEvents(lease(T + 100, { owner, limit: 5 + i * 3 }))))
      let more = await store.routeEvents(lease(T + 101))
      while (more.events > 0) {
        results.push(more)
        more = await store.routeEvents(lease(T + 101))
      }
      const work = results.flatMap((r) => r.work)
      const expected = events.flatMap((e) => hooks.map((h) => deliveryId(e.id, h.id))).sort()
      assert.deepEqual(sortedIds(work), expected)
      assert.equal(results.reduce((n, r) => n + r.events, 0), events.length)
    })

    // Leases and claiming

    test('routed work is leased: not claimable before the lease expires, claimable after, then leased again', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e] = await addEvents(a, [T])
      const { work } = await store.routeEvents(lease(T, { leaseUntil: T + 1000 }))
      assert.equal(work.length, 1)

      assert.deepEqual(await store.claimDeliveries(lease(T + 999, { owner: 'node-b' })), [])
      assert.deepEqual(await store.claimDeliveries({ ...lease(T + 999, { owner: 'node-b' }), webhookId: hook.id }), [])
      const claimed = await store.claimDeliveries(lease(T + 1001, { owner: 'node-b', leaseUntil: T + 2000 }))
      assert.deepEqual(claimed.map(untokened), work.map(untokened), 'the same work, attempts still 0')
      assert.ok(claimed[0]!.lease > work[0]!.lease, 'under a fresh token')
      assert.deepEqual(await store.claimDeliveries(lease(T + 1500, { owner: 'node-c' })), [])
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + 2001, { owner: 'node-c' }))), [workFor(hook, e!).id])
    })

    test('claimed work carries both secrets during a rotation and only the current one after it', async () => {
      const a = await newAccount()
      const hook = await newHook(a, { previousSecret: 'whsec_previous', previousSecretExpiresAt: iso(T + 5000) })
      await addEvents(a, [T])
      const { work } = await store.routeEvents(lease(T, { leaseUntil: T + 1000 }))
      assert.deepEqual([...work[0]!.secrets].sort(), [hook.secret, 'whsec_previous'].sort())
      const during = await store.claimDeliveries(lease(T + 4000, { leaseUntil: T + 4500 }))
      assert.deepEqual([...during[0]!.secrets].sort(), [hook.secret, 'whsec_previous'].sort())
      const after = await store.claimDeliveries(lease(T + 6000))
      assert.deepEqual(after[0]!.secrets, [hook.secret])
      assert.equal(after[0]!.url, hook.url)
    })

    test('claimDeliveries hands out due deliveries earliest first, up to limit, only of webhookId when given', async () => {
      const a = await newAccount()
      const h1 = await newHook(a)
      const h2 = await newHook(a)
      const [e1, e2, e3] = await addEvents(a, [T, T + 1, T + 2]) as [EventRecord, EventRecord, EventRecord]
      await store.routeEvents(lease(T + 10))
      // Due times: h1: e1 +300, e2 +100, e3 +200; h2: e1 +150, e2 +5000 (not due), e3 +250.
      await store.recordOutcomes([
        deferred(workFor(h1, e1), T + 300), deferred(workFor(h1, e2), T + 100), deferred(workFor(h1, e3), T + 200),
        deferred(workFor(h2, e1), T + 150), deferred(workFor(h2, e2), T + 5000), deferred(workFor(h2, e3), T + 250),
      ], { now: T + 20, ...HEALTHY })

      const onlyH2 = await store.claimDeliveries({ ...lease(T + 1000, { limit: 10 }), webhookId: h2.id })
      assert.deepEqual(ids(onlyH2), [workFor(h2, e1).id, workFor(h2, e3).id])
      assert.ok(onlyH2.every((w) => w.webhookId === h2.id && w.url === h2.url))

      const firstTwo = await store.claimDeliveries(lease(T + 1000, { limit: 2 }))
      assert.deepEqual(ids(firstTwo), [workFor(h1, e2).id, workFor(h1, e3).id])
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + 1000, { limit: 2 }))), [workFor(h1, e1).id])
      assert.deepEqual(await store.claimDeliveries(lease(T + 1000, { limit: 2 })), [])
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + 5000))), [workFor(h2, e2).id])
    })

    test('concurrent claims never lease one delivery twice', async () => {
      const a = await newAccount()
      const hooks = [await newHook(a), await newHook(a)]
      const events = await addEvents(a, Array.from({ length: 20 }, (_, i) => T + i))
      await store.routeEvents(lease(T + 100, { owner: 'router' }))
      await store.releaseLeases('router', T + 200)
      const claims = await Promise.all(Array.from({ length: 5 }, (_, i) =>
        store.claimDeliveries(lease(T + 300, { owner: `node-${i}`, limit: 10 }))))
      let rest = await store.claimDeliveries(lease(T + 300, { owner: 'last', limit: 1000 }))
      const all = [...claims.flat(), ...rest]
      assert.ok(claims.every((c) => c.length <= 10))
      assert.deepEqual(sortedIds(all), events.flatMap((e) => hooks.map((h) => deliveryId(e.id, h.id))).sort())
      rest = await store.claimDeliveries(lease(T + 300, { owner: 'late', limit: 1000 }))
      assert.deepEqual(rest, [])
    })

    test('claimDeliveries cancels deliveries whose webhook was disabled, auto-disabled or deleted meanwhile', async () => {
      const a = await newAccount()
      const keep = await newHook(a)
      const disabled = await newHook(a)
      const autoDisabled = await newHook(a)
      const deleted = await newHook(a)
      const [e] = await addEvents(a, [T])
      await store.routeEvents(lease(T, { leaseUntil: T + 1000 }))
      assert.ok(await store.updateWebhook(a.id, disabled.id, { status: 'disabled' }, iso(T + 1)))
      assert.ok(await store.updateWebhook(a.id, autoDisabled.id, { status: 'auto_disabled' }, iso(T + 1)))
      assert.equal(await store.deleteWebhook(a.id, deleted.id, iso(T + 1)), true)

      assert.deepEqual(await store.claimDeliveries({ ...lease(T + 2000), webhookId: disabled.id }), [])
      assert.equal(await statusOf(disabled, e!), 'cancelled')
      const claimed = await store.claimDeliveries(lease(T + 2000))
      assert.deepEqual(ids(claimed), [workFor(keep, e!).id])
      for (const hook of [disabled, autoDisabled, deleted]) {
        const d = await find(hook, e!)
        assert.equal(d.status, 'cancelled')
        assert.equal(d.nextAttemptAt, null)
        assert.equal(d.attempts, 0)
      }
      // Re-enabling does not bring cancelled deliveries back by itself.
      assert.ok(await store.updateWebhook(a.id, disabled.id, { status: 'enabled' }, iso(T + 3)))
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + DAY))), [workFor(keep, e!).id])
      assert.equal(await statusOf(disabled, e!), 'cancelled')
    })

    test('claimDeliveries cancels a delivery made due again (test delivery, hand retry) for a webhook that is not enabled', async () => {
      const a = await newAccount()
      const paused = await newHook(a, { status: 'auto_disabled' })
      const doomed = await newHook(a)
      const [e] = await addEvents(a, [T])
      await store.routeEvents(lease(T, { leaseUntil: T + 30_000 }))
      assert.deepEqual(await allDeliveries(paused), [], 'not routed to a webhook that is not enabled')

      const probeId = newId('dlv', T + 1)
      assert.equal((await store.insertTestDelivery(makeEvent(a, T + 1), paused.id, probeId, T + 10)).status, 'pending')
      assert.deepEqual(await store.claimDeliveries(lease(T + 10)), [])
      assert.equal((await store.findDelivery(a.id, paused.id, probeId))?.status, 'cancelled')

      // Deleted while its delivery is in flight; a hand retry afterwards must not hand it out either.
      assert.equal(await store.deleteWebhook(a.id, doomed.id, iso(T + 40)), true)
      await store.retryDelivery(a.id, doomed.id, workFor(doomed, e!).id, T + 50)
      assert.deepEqual(await store.claimDeliveries(lease(T + 50)), [])
      assert.deepEqual(await store.claimDeliveries(lease(T + DAY)), [])
      const d = await store.findDelivery(a.id, doomed.id, workFor(doomed, e!).id)
      assert.ok(d, 'the delivery of a deleted webhook is kept, for its history')
      assert.equal(d.status, 'cancelled')
    })

    test('renewLeases extends only the listed leases the owner holds', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e3] = await addEvents(a, [T, T + 2]) as [EventRecord, EventRecord]
      await store.routeEvents(lease(T, { owner: 'node-a', leaseUntil: T + 1000 }))
      const [e2] = await addEvents(a, [T + 3])
      await store.routeEvents(lease(T + 3, { owner: 'node-b', leaseUntil: T + 1000 }))

      // node-a still holds e1 in memory; it dropped e3 (never listed). e2 is node-b's: listing it does nothing.
      await store.renewLeases('node-a', [workFor(hook, e1).id, workFor(hook, e2!).id], T + 5000)
      assert.deepEqual(sortedIds(await store.claimDeliveries(lease(T + 2000, { owner: 'node-c' }))), [workFor(hook, e2!).id, workFor(hook, e3).id].sort())
      assert.deepEqual(await store.claimDeliveries(lease(T + 4999, { owner: 'node-c', leaseUntil: T + 10_000 })), [])
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + 5001, { owner: 'node-c' }))), [workFor(hook, e1).id])
      await store.renewLeases('nobody', [workFor(hook, e1).id], T + DAY)
      await store.renewLeases('node-a', [], T + DAY)
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + 40_000, { owner: 'node-d' }))).sort(), [e1, e2!, e3].map((e) => workFor(hook, e).id).sort(),
        'node-c\'s leases were not extended by anyone else')
    })

    test('releaseLeases makes the owner\'s deliveries due at once for any node, and leaves others\' leases alone', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1] = await addEvents(a, [T])
      await store.routeEvents(lease(T, { owner: 'node-a', leaseUntil: T + 60_000 }))
      const [e2] = await addEvents(a, [T + 1])
      await store.routeEvents(lease(T + 1, { owner: 'node-b', leaseUntil: T + 60_000 }))

      await store.releaseLeases('node-a', T + 50)
      const d1 = await find(hook, e1!)
      assert.equal(d1.status, 'pending')
      assert.equal(d1.nextAttemptAt, iso(T + 50))
      assert.equal((await find(hook, e2!)).nextAttemptAt, null, 'still leased by node-b')
      assert.deepEqual(await store.claimDeliveries(lease(T + 49, { owner: 'node-c' })), [])
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + 50, { owner: 'node-c' }))), [workFor(hook, e1!).id])
    })

    // Fencing and parking (the rule is stated in src/store/deliveries.ts)

    test('lease loss: after the lease expires another owner claims the delivery under a new token', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e] = await addEvents(a, [T])
      const [first] = (await store.routeEvents(lease(T, { owner: 'node-a', leaseUntil: T + 1000 }))).work
      assert.deepEqual(await store.claimDeliveries(lease(T + 999, { owner: 'node-b' })), [], 'node-a still holds it')
      const [taken] = await store.claimDeliveries(lease(T + 1000, { owner: 'node-b', leaseUntil: T + 5000 }))
      assert.equal(taken!.id, workFor(hook, e!).id)
      assert.ok(taken!.lease > first!.lease, `a new token (${first!.lease} → ${taken!.lease})`)
      const [third] = await store.claimDeliveries(lease(T + 5000, { owner: 'node-c' }))
      assert.ok(third!.lease > taken!.lease, 'every claim a fresh one')
    })

    test('stale outcomes: the first owner\'s outcomes after a takeover change nothing, not status, attempts, lease or health', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e2] = await addEvents(a, [T, T + 1]) as [EventRecord, EventRecord]
      const routed = (await store.routeEvents(lease(T, { owner: 'node-a', leaseUntil: T + 1000 }))).work
      const old = (e: EventRecord) => routed.find((w) => w.id === workFor(hook, e).id)!
      // node-a stalls past its leases; node-b takes both over.
      const taken = await store.claimDeliveries(lease(T + 1000, { owner: 'node-b', leaseUntil: T + 60_000 }))
      assert.equal(taken.length, 2)
      const before = [await find(hook, e1), await find(hook, e2)]

      // node-a wakes up and writes what it had: a retry, a deferral, a parking, a success, a 410.
      const r = await store.recordOutcomes([
        retry(old(e1), T + 1100, T + 1200, 500), deferred(old(e1), T + 1200), parked(old(e2), 'node-a', T + 1300),
        succeeded(old(e2), T + 1100), gone(old(e1), T + 1150),
      ], { now: T + 1200, autoDisableMs: 1 })
      assert.deepEqual(r, { stale: 5 })
      assert.deepEqual([await find(hook, e1), await find(hook, e2)], before, 'status, attempts, times: unchanged')
      assert.equal((await store.findWebhook(a.id, hook.id))?.status, 'enabled', 'stale failures and a stale 410 do not touch its health')
      assert.deepEqual(await store.claimDeliveries(lease(T + 1300, { owner: 'node-c' })), [], 'node-b\'s leases stand: nothing was released or re-timed')
      assert.deepEqual(await store.unparkDeliveries({ owner: 'node-a', webhookId: hook.id, now: T + 1300, leaseUntil: T + 2000, limit: 10 }), [])

      // node-b's own outcomes apply.
      const mine = await store.recordOutcomes([succeeded(workFor(hook, e1), T + 1400), retry(workFor(hook, e2), T + 1400, T + 9000, 502)], { now: T + 1400, ...HEALTHY })
      assert.deepEqual(mine, { stale: 0 })
      assert.deepEqual([(await find(hook, e1)).status, (await find(hook, e1)).attempts], ['succeeded', 1])
      assert.deepEqual([(await find(hook, e2)).status, (await find(hook, e2)).attempts, (await find(hook, e2)).nextAttemptAt], ['retrying', 1, iso(T + 9000)])
    })

    test('an outcome written twice applies once', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e] = await addEvents(a, [T])
      const [w] = (await store.routeEvents(lease(T))).work
      const outcome = retry(w!, T + 100, T + 5000, 500)
      assert.deepEqual(await store.recordOutcomes([outcome], { now: T + 100, ...HEALTHY }), { stale: 0 })
      assert.deepEqual(await store.recordOutcomes([outcome], { now: T + 100, ...HEALTHY }), { stale: 1 })
      const d = await find(hook, e!)
      assert.equal(d.attempts, 1)
      assert.equal(d.nextAttemptAt, iso(T + 5000))
    })

    test('parking: a parked delivery is not claimable by anyone until its lease expires or its owner unparks it', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const other = await newHook(a)
      const [e1, e2, e3] = await addEvents(a, [T, T + 1, T + 2]) as [EventRecord, EventRecord, EventRecord]
      await store.routeEvents(lease(T, { owner: 'node-a', leaseUntil: T + 1000 }))
      // The actor of `hook` is full: node-a parks two of them until T + 30 s; renewing never extends them.
      await store.recordOutcomes([parked(workFor(hook, e1), 'node-a', T + 30_000), parked(workFor(hook, e2), 'node-a', T + 30_000)], { now: T + 10, ...HEALTHY })
      await store.renewLeases('node-a', [workFor(hook, e1).id, workFor(hook, e2).id, workFor(hook, e3).id, ...[e1, e2, e3].map((e) => workFor(other, e).id)], T + 60_000)

      assert.deepEqual(await store.claimDeliveries(lease(T + 29_999, { owner: 'node-b' })), [], 'leased (e3, other: renewed) or parked')
      assert.deepEqual(await store.claimDeliveries({ ...lease(T + 29_999, { owner: 'node-b' }), webhookId: hook.id }), [])
      assert.deepEqual(await store.unparkDeliveries({ owner: 'node-b', webhookId: hook.id, now: T + 100, leaseUntil: T + 2000, limit: 10 }), [], 'not node-b\'s to unpark')
      assert.deepEqual(await store.unparkDeliveries({ owner: 'node-a', webhookId: other.id, now: T + 100, leaseUntil: T + 2000, limit: 10 }), [])
      assert.equal((await find(hook, e1)).status, 'pending')
      assert.equal((await find(hook, e1)).nextAttemptAt, null, 'leased: no next attempt shown')

      // node-a pages one back in (oldest first), under a fresh token; the other stays parked.
      const [back] = await store.unparkDeliveries({ owner: 'node-a', webhookId: hook.id, now: T + 100, leaseUntil: T + 2000, limit: 1 })
      assert.equal(back!.id, workFor(hook, e1).id)
      assert.equal(back!.url, hook.url)
      assert.equal(back!.payload, e1.payload)
      assert.equal(back!.attempts, 0)
      // Unparked, it is an ordinary lease: due for anyone once it runs out (T + 2000), unless renewed.
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + 2000, { owner: 'node-b' }))), [workFor(hook, e1).id])
      // The one left parked is due for anyone when its lease runs out.
      assert.deepEqual(await store.claimDeliveries(lease(T + 29_999, { owner: 'node-c' })), [])
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + 30_000, { owner: 'node-c' }))), [workFor(hook, e2).id])
      assert.deepEqual(await store.unparkDeliveries({ owner: 'node-a', webhookId: hook.id, now: T + 30_001, leaseUntil: T + 40_000, limit: 10 }), [], 'taken over: no longer node-a\'s')
    })

    test('saturation: routing parks a saturated webhook\'s new deliveries, leased to the router, and hands out the rest', async () => {
      const a = await newAccount()
      const busy = await newHook(a)
      const calm = await newHook(a)
      const [e1, e2] = await addEvents(a, [T, T + 1]) as [EventRecord, EventRecord]
      const routed = await store.routeEvents(lease(T, { owner: 'node-a', leaseUntil: T + 5000, saturated: [busy.id] }))
      assert.equal(routed.events, 2)
      assert.deepEqual(sortedIds(routed.work), [workFor(calm, e1).id, workFor(calm, e2).id].sort())
      assert.equal((await find(busy, e1)).status, 'pending')
      assert.deepEqual(await store.claimDeliveries(lease(T + 4999, { owner: 'node-b' })), [], 'parked: nobody claims them meanwhile')
      const paged = await store.unparkDeliveries({ owner: 'node-a', webhookId: busy.id, now: T + 10, leaseUntil: T + 5000, limit: 10 })
      assert.deepEqual(ids(paged), [workFor(busy, e1).id, workFor(busy, e2).id], 'oldest first')
      assert.ok(paged.every((w) => w.webhookId === busy.id && w.secrets[0] === busy.secret))
      assert.deepEqual(await store.unparkDeliveries({ owner: 'node-a', webhookId: busy.id, now: T + 10, leaseUntil: T + 5000, limit: 10 }), [])
      // Their outcomes apply under the unparked tokens.
      assert.deepEqual(await store.recordOutcomes(paged.map((w) => succeeded(w, T + 20)), { now: T + 20, ...HEALTHY }), { stale: 0 })
      assert.equal((await find(busy, e2)).status, 'succeeded')
    })

    test('releaseLeases gives back parked deliveries too, and outcomes of released leases are stale', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e2] = await addEvents(a, [T, T + 1]) as [EventRecord, EventRecord]
      await store.routeEvents(lease(T, { owner: 'node-a', leaseUntil: T + 60_000, saturated: [hook.id] }))
      const [e3] = await addEvents(a, [T + 2])
      await store.routeEvents(lease(T + 2, { owner: 'node-a', leaseUntil: T + 60_000 }))
      const held = workFor(hook, e3!)
      await store.releaseLeases('node-a', T + 100)
      assert.deepEqual(sortedIds(await store.claimDeliveries(lease(T + 100, { owner: 'node-b' }))), [e1, e2, e3!].map((e) => workFor(hook, e).id).sort())
      assert.deepEqual(await store.recordOutcomes([succeeded(held, T + 200)], { now: T + 200, ...HEALTHY }), { stale: 1 })
    })

    // Outcomes

    test('a succeeded outcome: attempts + 1, status, code, duration, no next attempt; never handed out again', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e] = await addEvents(a, [T])
      const [w] = (await store.routeEvents(lease(T))).work
      await store.recordOutcomes([succeeded(w!, T + 100, 204)], { now: T + 110, ...HEALTHY })
      assert.deepEqual(await find(hook, e!), {
        id: w!.id, webhookId: hook.id, eventId: e!.id, event: 'email.sent', emailId: e!.emailId, status: 'succeeded',
        attempts: 1, lastAttemptAt: iso(T + 100), nextAttemptAt: null, lastStatusCode: 204, lastError: null,
        lastDurationMs: 12, createdAt: iso(T),
      } satisfies DeliveryRecord)
      assert.deepEqual(await store.claimDeliveries(lease(T + 365 * DAY)), [])
    })

    test('a retry outcome: status retrying, due at the given time and claimable then with its attempts', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e] = await addEvents(a, [T])
      const [w] = (await store.routeEvents(lease(T))).work
      await store.recordOutcomes([retry(w!, T + 100, T + 5000, 503)], { now: T + 110, ...HEALTHY })
      const d = await find(hook, e!)
      assert.equal(d.status, 'retrying')
      assert.equal(d.attempts, 1)
      assert.equal(d.nextAttemptAt, iso(T + 5000))
      assert.equal(d.lastAttemptAt, iso(T + 100))
      assert.equal(d.lastStatusCode, 503)
      assert.equal(d.lastError, 'HTTP 503')
      assert.equal(d.lastDurationMs, 34)

      assert.deepEqual(await store.claimDeliveries(lease(T + 4999)), [])
      const [again] = await store.claimDeliveries(lease(T + 5000, { owner: 'node-b' }))
      assert.deepEqual(untokened(again!), { ...untokened(w!), attempts: 1 })
      assert.equal((await find(hook, e!)).nextAttemptAt, null, 'leased again: in flight')

      // A network error: no status code.
      await store.recordOutcomes([retry(again!, T + 5100, T + 9000)], { now: T + 5100, ...HEALTHY })
      const d2 = await find(hook, e!)
      assert.equal(d2.status, 'retrying')
      assert.equal(d2.attempts, 2)
      assert.equal(d2.lastStatusCode, null)
      assert.equal(d2.lastError, 'connect ECONNREFUSED')
      assert.equal(d2.nextAttemptAt, iso(T + 9000))
    })

    test('a pushback retry counts as an attempt and as a pushback; claimed work carries both, and the webhook\'s rateLimit', async () => {
      const a = await newAccount()
      const hook = await newHook(a, { rateLimit: 50 })
      const [e] = await addEvents(a, [T])
      const [w] = (await store.routeEvents(lease(T))).work
      assert.equal(w!.rateLimit, 50)
      await store.recordOutcomes([{ ...retry(w!, T + 100, T + 200, 429), pushback: true } as DeliveryOutcome], { now: T + 110, ...HEALTHY })
      const d = await find(hook, e!)
      assert.equal(d.status, 'retrying')
      assert.equal(d.attempts, 1)
      assert.equal(d.lastStatusCode, 429)
      const [again] = await store.claimDeliveries(lease(T + 200))
      assert.equal(again!.attempts, 1)
      assert.equal(again!.pushbacks, 1)
      assert.equal(again!.rateLimit, 50)
      await store.recordOutcomes([retry(again!, T + 300, T + 5000, 500)], { now: T + 300, ...HEALTHY })
      const [third] = await store.claimDeliveries(lease(T + 5000))
      assert.equal(third!.attempts, 2)
      assert.equal(third!.pushbacks, 1, 'a plain failure is no pushback')
    })

    test('redriveDeliveries: the webhook\'s live deliveries waiting for later are due now; leased, parked, final and other webhooks\' are not touched', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const other = await newHook(a)
      await addEvents(a, [T, T + 1, T + 2, T + 3, T + 4])
      const work = (await store.routeEvents(lease(T))).work
      const mine = work.filter((w) => w.webhookId === hook.id)
      const theirs = work.filter((w) => w.webhookId === other.id)
      const [retrying, deferredOne, failedOne, leased, parkedOne] = mine
      await store.recordOutcomes([
        retry(retrying!, T + 10, T + 3_600_000, 503),
        deferred(deferredOne!, T + 600_000),
        failed(failedOne!, T + 10),
        parked(parkedOne!, 'node-a', T + 30 * SECOND),
        ...theirs.map((w) => retry(w, T + 10, T + 3_600_000, 503)),
      ], { now: T + 10, ...HEALTHY })
      assert.equal(await store.redriveDeliveries(hook.id, T + 20), 2)
      const due = await store.claimDeliveries(lease(T + 20, { owner: 'node-b' }))
      assert.deepEqual(sortedIds(due), [retrying!.id, deferredOne!.id].sort(), 'only the waiting ones of that webhook, due now')
      assert.equal((await store.findDelivery(a.id, hook.id, failedOne!.id))!.status, 'failed', 'failed stays failed (recover brings it back)')
      assert.equal((await store.findDelivery(a.id, hook.id, leased!.id))!.nextAttemptAt, null, 'the leased one is still in flight')
      assert.deepEqual(await store.unparkDeliveries({ owner: 'node-a', webhookId: hook.id, now: T + 20, leaseUntil: T + 60 * SECOND, limit: 10 }).then(ids), [parkedOne!.id])
      assert.equal(await store.redriveDeliveries(hook.id, T + 30), 0, 'nothing left waiting')
    })

    test('a failed outcome: status failed, attempts + 1, no next attempt, the webhook stays enabled', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e2] = await addEvents(a, [T, T + 1]) as [EventRecord, EventRecord]
      await store.routeEvents(lease(T))
      await store.recordOutcomes([retry(workFor(hook, e1), T + 100, T + 200, 500)], { now: T + 100, ...HEALTHY })
      await store.claimDeliveries(lease(T + 200))
      await store.recordOutcomes([failed(workFor(hook, e1), T + 300, 502)], { now: T + 300, ...HEALTHY })
      const d = await find(hook, e1)
      assert.equal(d.status, 'failed')
      assert.equal(d.attempts, 2)
      assert.equal(d.nextAttemptAt, null)
      assert.equal(d.lastStatusCode, 502)
      assert.equal(d.lastError, 'HTTP 502')
      assert.equal(d.lastDurationMs, 56)
      assert.equal(d.lastAttemptAt, iso(T + 300))
      assert.equal((await store.findWebhook(a.id, hook.id))?.status, 'enabled')
      assert.equal(await statusOf(hook, e2), 'pending', 'the other delivery is untouched')
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + DAY))), [workFor(hook, e2).id])
    })

    test('a gone outcome: the delivery fails, the webhook is auto-disabled and its other live deliveries are cancelled', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const other = await newHook(a)
      const [e1, e2, e3] = await addEvents(a, [T, T + 1, T + 2]) as [EventRecord, EventRecord, EventRecord]
      await store.routeEvents(lease(T))
      await store.recordOutcomes([retry(workFor(hook, e3), T + 100, T + 50_000, 500)], { now: T + 100, ...HEALTHY })
      // e1 answered 410; e2 is still in flight; e3 waits for its retry.
      await store.recordOutcomes([gone(workFor(hook, e1), T + 200)], { now: T + 210, ...HEALTHY })

      const d1 = await find(hook, e1)
      assert.equal(d1.status, 'failed')
      assert.equal(d1.attempts, 1)
      assert.equal(d1.lastStatusCode, 410)
      assert.equal(d1.nextAttemptAt, null)
      assert.equal((await store.findWebhook(a.id, hook.id))?.status, 'auto_disabled')
      assert.equal(await statusOf(hook, e2), 'cancelled')
      assert.equal(await statusOf(hook, e3), 'cancelled')
      assert.equal((await find(hook, e3)).nextAttemptAt, null)
      assert.equal((await store.findWebhook(a.id, other.id))?.status, 'enabled')
      for (const e of [e1, e2, e3]) assert.equal(await statusOf(other, e), 'pending')
      assert.deepEqual(sortedIds(await store.claimDeliveries(lease(T + DAY))), [e1, e2, e3].map((e) => workFor(other, e).id).sort())
    })

    test('a deferred outcome: attempts and status unchanged, due at the given time', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e2] = await addEvents(a, [T, T + 1]) as [EventRecord, EventRecord]
      await store.routeEvents(lease(T))
      await store.recordOutcomes([retry(workFor(hook, e2), T + 10, T + 20, 500)], { now: T + 10, ...HEALTHY })
      await store.claimDeliveries(lease(T + 20))
      await store.recordOutcomes([deferred(workFor(hook, e1), T + 3000), deferred(workFor(hook, e2), T + 4000)], { now: T + 30, ...HEALTHY })
      const d1 = await find(hook, e1)
      assert.equal(d1.status, 'pending')
      assert.equal(d1.attempts, 0)
      assert.equal(d1.lastAttemptAt, null)
      assert.equal(d1.nextAttemptAt, iso(T + 3000))
      const d2 = await find(hook, e2)
      assert.equal(d2.status, 'retrying')
      assert.equal(d2.attempts, 1)
      assert.equal(d2.nextAttemptAt, iso(T + 4000))
      assert.deepEqual(await store.claimDeliveries(lease(T + 2999)), [])
      assert.deepEqual(ids(await store.claimDeliveries(lease(T + 3000))), [workFor(hook, e1).id])
      const [w2] = await store.claimDeliveries(lease(T + 4000))
      assert.equal(w2!.id, workFor(hook, e2).id)
      assert.equal(w2!.attempts, 1)
    })

    test('a webhook failing without a success for autoDisableMs is auto-disabled and its live deliveries cancelled', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const events = await addEvents(a, [T, T + 1, T + 2, T + 3, T + 4])
      const [e1, e2, e3, e4, e5] = events as [EventRecord, EventRecord, EventRecord, EventRecord, EventRecord]
      await store.routeEvents(lease(T))
      const opts = (now: number) => ({ now, autoDisableMs: 10_000 })

      await store.recordOutcomes([retry(workFor(hook, e1), T + 1000, T + 60_000, 500)], opts(T + 1000))
      await store.recordOutcomes([failed(workFor(hook, e2), T + 6000)], opts(T + 6000))
      assert.equal((await store.findWebhook(a.id, hook.id))?.status, 'enabled', '5 s of failing out of 10')
      await store.recordOutcomes([retry(workFor(hook, e3), T + 12_000, T + 60_000, 500)], opts(T + 12_000))

      assert.equal((await store.findWebhook(a.id, hook.id))?.status, 'auto_disabled')
      assert.equal(await statusOf(hook, e1), 'cancelled', 'retrying: cancelled')
      assert.equal(await statusOf(hook, e2), 'failed', 'already final: unchanged')
      assert.equal(await statusOf(hook, e3), 'cancelled')
      assert.equal(await statusOf(hook, e4), 'cancelled', 'pending (in flight): cancelled')
      assert.equal(await statusOf(hook, e5), 'cancelled')
      assert.deepEqual(await store.claimDeliveries(lease(T + DAY)), [])
    })

    test('a success clears the failing streak', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const events = await addEvents(a, [T, T + 1, T + 2, T + 3, T + 4])
      const [e1, e2, e3, e4, e5] = events as [EventRecord, EventRecord, EventRecord, EventRecord, EventRecord]
      await store.routeEvents(lease(T))
      const opts = (now: number) => ({ now, autoDisableMs: 10_000 })

      await store.recordOutcomes([retry(workFor(hook, e1), T + 1000, T + 60_000, 500)], opts(T + 1000))
      await store.recordOutcomes([succeeded(workFor(hook, e2), T + 8000)], opts(T + 8000))
      await store.recordOutcomes([retry(workFor(hook, e3), T + 12_000, T + 60_000, 500)], opts(T + 12_000))
      await store.recordOutcomes([failed(workFor(hook, e4), T + 20_000)], opts(T + 20_000))
      assert.equal((await store.findWebhook(a.id, hook.id))?.status, 'enabled', 'failing for 8 s since the success')
      assert.equal(await statusOf(hook, e1), 'retrying')
      assert.equal(await statusOf(hook, e3), 'retrying')

      await store.recordOutcomes([retry(workFor(hook, e5), T + 23_000, T + 60_000, 500)], opts(T + 23_000))
      assert.equal((await store.findWebhook(a.id, hook.id))?.status, 'auto_disabled', 'failing for 11 s since the success')
      assert.equal(await statusOf(hook, e1), 'cancelled')
    })

    test('an outcome of a delivery cancelled while in flight is recorded: a success succeeds, a failure stays cancelled', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e2, e3] = await addEvents(a, [T, T + 1, T + 2]) as [EventRecord, EventRecord, EventRecord]
      await store.routeEvents(lease(T, { leaseUntil: T + 1000 }))
      // Disabled while all three are in flight; e3's lease has even run out and a claim met it.
      assert.ok(await store.updateWebhook(a.id, hook.id, { status: 'disabled' }, iso(T + 10)))
      assert.deepEqual(await store.claimDeliveries(lease(T + 2000)), [])
      for (const e of [e1, e2, e3]) assert.equal(await statusOf(hook, e), 'cancelled')
      assert.ok(await store.updateWebhook(a.id, hook.id, { status: 'enabled' }, iso(T + 2001)))

      // Their attempts come back: each is recorded, under the token it was made with.
      const r = await store.recordOutcomes([
        retry(workFor(hook, e1), T + 2100, T + 2200, 500), succeeded(workFor(hook, e2), T + 2150, 201), deferred(workFor(hook, e3), T + 2300),
      ], { now: T + 2200, ...HEALTHY })
      assert.deepEqual(r, { stale: 0 })
      const d1 = await find(hook, e1)
      assert.equal(d1.status, 'cancelled', 'a failure is not retried')
      assert.equal(d1.attempts, 1)
      assert.equal(d1.lastAttemptAt, iso(T + 2100))
      assert.equal(d1.lastStatusCode, 500)
      assert.equal(d1.lastError, 'HTTP 500')
      assert.equal(d1.lastDurationMs, 34)
      assert.equal(d1.nextAttemptAt, null)
      const d2 = await find(hook, e2)
      assert.equal(d2.status, 'succeeded', 'it was delivered')
      assert.equal(d2.attempts, 1)
      assert.equal(d2.lastStatusCode, 201)
      assert.equal(d2.lastError, null)
      const d3 = await find(hook, e3)
      assert.equal(d3.status, 'cancelled', 'a deferral is no attempt')
      assert.equal(d3.attempts, 0)
      assert.equal(d3.nextAttemptAt, null)
      assert.deepEqual(await store.claimDeliveries(lease(T + DAY)), [])

      // The same outcomes again change nothing: the lease they were made under has ended.
      const again = await store.recordOutcomes([failed(workFor(hook, e1), T + 2400), succeeded(workFor(hook, e1), T + 2400)], { now: T + 2400, ...HEALTHY })
      assert.deepEqual(again, { stale: 2 })
      assert.deepEqual(await find(hook, e1), d1)
    })

    test('a 410 among deliveries in flight: it fails with 410, the others are cancelled and still record their own 410', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e2, e3] = await addEvents(a, [T, T + 1, T + 2]) as [EventRecord, EventRecord, EventRecord]
      await store.routeEvents(lease(T))
      await store.recordOutcomes([gone(workFor(hook, e1), T + 100)], { now: T + 100, ...HEALTHY })
      assert.equal((await store.findWebhook(a.id, hook.id))?.status, 'auto_disabled')
      for (const e of [e2, e3]) assert.equal(await statusOf(hook, e), 'cancelled')
      // e2 and e3 had been POSTed too; their answers come in afterwards, in two batches.
      assert.deepEqual(await store.recordOutcomes([gone(workFor(hook, e2), T + 150)], { now: T + 150, ...HEALTHY }), { stale: 0 })
      assert.deepEqual(await store.recordOutcomes([failed(workFor(hook, e3), T + 160, 503)], { now: T + 160, ...HEALTHY }), { stale: 0 })
      const [d1, d2, d3] = [await find(hook, e1), await find(hook, e2), await find(hook, e3)]
      assert.deepEqual([d1.status, d1.attempts, d1.lastStatusCode], ['failed', 1, 410])
      assert.deepEqual([d2.status, d2.attempts, d2.lastStatusCode, d2.lastAttemptAt], ['cancelled', 1, 410, iso(T + 150)])
      assert.deepEqual([d3.status, d3.attempts, d3.lastStatusCode], ['cancelled', 1, 503])
    })

    // The transition table (src/domain/delivery-transition.ts), row by row: each outcome of a delivery
    // live or cancelled while in flight leaves it as the table says, and its lease ends or holds as it says.
    for (const kind of OUTCOME_KINDS) {
      for (const before of BEFORE) {
        test(`transition: ${kind} of a ${before} delivery`, async () => {
          const a = await newAccount()
          const hook = await newHook(a)
          const [e] = await addEvents(a, [T]) as [EventRecord]
          await store.routeEvents(lease(T))
          if (before === 'cancelled') {
            assert.ok(await store.updateWebhook(a.id, hook.id, { status: 'disabled' }, iso(T + 10)))
            assert.equal(await statusOf(hook, e), 'cancelled')
          }
          const w = workFor(hook, e)
          const outcome: DeliveryOutcome = kind === 'succeeded' ? succeeded(w, T + 100)
            : kind === 'retry' ? retry(w, T + 100, T + 5_000, 500)
              : kind === 'failed' ? failed(w, T + 100)
                : kind === 'gone' ? gone(w, T + 100)
                  : kind === 'deferred' ? deferred(w, T + 5_000)
                    : kind === 'parked' ? parked(w, 'node-a', T + 9_000)
                      : { kind: 'leased', id: w.id, webhookId: w.webhookId, lease: w.lease, owner: 'node-a', leaseUntil: T + 9_000 }
          const was = await find(hook, e)
          const t = transition(before, kind)
          const r = await store.recordOutcomes([outcome], { now: T + 200, ...HEALTHY })
          const d = await find(hook, e)
          if (t === null) {
            assert.deepEqual(r, { stale: 1 }, 'the outcome does not apply to a stored delivery')
            assert.deepEqual(d, was, 'and changes nothing')
            return
          }
          assert.deepEqual(r, { stale: 0 })
          const status = t.status === 'same' ? was.status : t.status
          assert.equal(d.status, status)
          assert.equal(d.attempts, t.attempt ? 1 : 0)
          assert.equal(d.lastAttemptAt, t.attempt ? iso(T + 100) : null)
          // The log shows a next attempt only for a live delivery no node holds.
          const live = status === 'pending' || status === 'retrying'
          assert.equal(d.nextAttemptAt, live && t.lease === 'ended' && t.next === 'nextAttemptAt' ? iso(T + 5_000) : null)
          if (t.lease === 'parked') {
            assert.deepEqual(await store.claimDeliveries(lease(T + 8_000, { owner: 'node-b' })), [], 'parked: nobody claims it before its lease ends')
            assert.deepEqual(ids(await store.unparkDeliveries({ owner: 'node-a', webhookId: hook.id, now: T + 8_000, leaseUntil: T + 20_000, limit: 10 })), [w.id])
          } else {
            // The lease ended: another outcome under the same token is stale.
            assert.deepEqual(await store.recordOutcomes([deferred(w, T + 300)], { now: T + 300, ...HEALTHY }), { stale: 1 })
            const due = t.next === 'nextAttemptAt' && live
            assert.deepEqual(ids(await store.claimDeliveries(lease(T + 4_000, { owner: 'node-b' }))), [], 'not due before its next attempt')
            assert.deepEqual(ids(await store.claimDeliveries(lease(T + 6_000, { owner: 'node-b' }))), due ? [w.id] : [])
          }
        })
      }
    }

    test('recordOutcomes with no outcomes is a no-op, and an outcome for an unknown delivery is ignored', async () => {
      await store.recordOutcomes([], { now: T, ...HEALTHY })
      const a = await newAccount()
      const hook = await newHook(a)
      assert.deepEqual(await store.recordOutcomes([succeeded({ id: deliveryId(newId('evt', T), hook.id), webhookId: hook.id, lease: 1 }, T)], { now: T, ...HEALTHY }), { stale: 1 })
      assert.deepEqual(await allDeliveries(hook), [])
    })

    // The delivery log

    test('listDeliveries: newest first, status filter, cursor pages that cover everything once; other accounts see nothing', async () => {
      const a = await newAccount()
      const b = await newAccount()
      const hook = await newHook(a)
      const otherHook = await newHook(a)
      const events = await addEvents(a, Array.from({ length: 7 }, (_, i) => T + i * 1000))
      await store.routeEvents(lease(T + 10_000))
      const d = (i: number) => workFor(hook, events[i]!)
      await store.recordOutcomes([succeeded(d(1), T + 11_000), succeeded(d(4), T + 11_000), failed(d(2), T + 11_000)], { now: T + 11_000, ...HEALTHY })
      const newestFirst = [6, 5, 4, 3, 2, 1, 0].map((i) => d(i).id)

      async function pages (limit: number, status?: DeliveryStatus): Promise<{ seen: string[]; sizes: number[] }> {
        const seen: string[] = []
        const sizes: number[] = []
        let cursor: string | undefined
        for (let n = 0; n < 20; n++) {
          const page = await store.listDeliveries(a.id, hook.id, { limit, ...(status ? { status } : {}), ...(cursor !== undefined ? { cursor } : {}) })
          seen.push(...ids(page.items))
          sizes.push(page.items.length)
          if (page.nextCursor === null) return { seen, sizes }
          cursor = page.nextCursor
        }
        assert.fail('the cursor never ran out')
      }

      assert.deepEqual(await pages(3), { seen: newestFirst, sizes: [3, 3, 1] })
      assert.deepEqual((await pages(7)).sizes, [7])
      assert.deepEqual((await pages(1)).seen, newestFirst)
      assert.deepEqual((await pages(1, 'succeeded')).seen, [d(4).id, d(1).id])
      assert.deepEqual((await pages(10, 'failed')).seen, [d(2).id])
      assert.deepEqual((await pages(2, 'pending')).seen, [d(6).id, d(5).id, d(3).id, d(0).id])
      assert.deepEqual((await pages(2, 'cancelled')).seen, [])
      const [first] = (await store.listDeliveries(a.id, hook.id, { limit: 1 })).items
      assert.equal(first!.webhookId, hook.id)
      assert.equal(first!.eventId, events[6]!.id)

      assert.equal((await allDeliveries(otherHook)).length, 7, 'the other webhook has its own seven')
      assert.deepEqual((await store.listDeliveries(b.id, hook.id, { limit: 10 })).items, [])
      assert.equal(await store.findDelivery(b.id, hook.id, d(0).id), null)
      assert.equal(await store.findDelivery(a.id, otherHook.id, d(0).id), null)
      assert.equal(await store.retryDelivery(b.id, hook.id, d(2).id, T + 20_000), null)
      assert.equal(await statusOf(hook, events[2]!), 'failed')
    })

    test('findDelivery: the record, or null when absent', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e] = await addEvents(a, [T])
      await store.routeEvents(lease(T))
      assert.equal((await store.findDelivery(a.id, hook.id, workFor(hook, e!).id))?.eventId, e!.id)
      assert.equal(await store.findDelivery(a.id, hook.id, deliveryId(newId('evt', T), hook.id)), null)
      assert.equal(await store.findDelivery(a.id, hook.id, 'dlv_nope'), null)
    })

    test('retryDelivery makes a final delivery pending and due now; null when absent', async () => {
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e2] = await addEvents(a, [T, T + 1]) as [EventRecord, EventRecord]
      await store.routeEvents(lease(T))
      await store.recordOutcomes([failed(workFor(hook, e1), T + 100), succeeded(workFor(hook, e2), T + 100)], { now: T + 100, ...HEALTHY })

      const r = await store.retryDelivery(a.id, hook.id, workFor(hook, e1).id, T + 5000)
      assert.ok(r)
      assert.equal(r.status, 'pending')
      assert.equal(r.nextAttemptAt, iso(T + 5000))
      assert.equal(r.attempts, 1)
      assert.equal(r.lastStatusCode, 500)
      assert.deepEqual(await find(hook, e1), r)
      assert.equal((await store.retryDelivery(a.id, hook.id, workFor(hook, e2).id, T + 5000))?.status, 'pending', 'whatever its state')

      assert.deepEqual(await store.claimDeliveries(lease(T + 4999)), [])
      const claimed = await store.claimDeliveries(lease(T + 5000))
      assert.deepEqual(sortedIds(claimed), [workFor(hook, e1).id, workFor(hook, e2).id].sort())
      assert.ok(claimed.every((w) => w.attempts === 1))
      assert.equal(await store.retryDelivery(a.id, hook.id, deliveryId(newId('evt', T), hook.id), T + 5000), null)
    })

    test('requeueFailed / countFailed: failed and cancelled deliveries created in [since, until), in chunks', async () => {
      const a = await newAccount()
      const b = await newAccount()
      const hook = await newHook(a)
      // One delivery created (routed) at each of T, T+100 … T+500.
      const events: EventRecord[] = []
      for (let i = 0; i < 6; i++) {
        events.push(...await addEvents(a, [T + i]))
        await store.routeEvents(lease(T + i * 100, { leaseUntil: T + 1000 }))
      }
      const d = (i: number) => workFor(hook, events[i]!)
      await store.recordOutcomes([failed(d(0), T + 600), failed(d(1), T + 600), failed(d(2), T + 600), succeeded(d(4), T + 600), failed(d(5), T + 600)],
        { now: T + 600, ...HEALTHY })
      // d(3) is cancelled: its webhook was disabled while it was in flight.
      assert.ok(await store.updateWebhook(a.id, hook.id, { status: 'disabled' }, iso(T + 700)))
      assert.deepEqual(await store.claimDeliveries(lease(T + 2000)), [])
      assert.equal(await statusOf(hook, events[3]!), 'cancelled')
      assert.ok(await store.updateWebhook(a.id, hook.id, { status: 'enabled' }, iso(T + 2100)))

      const window = { since: T + 100, until: T + 500 } // d(1), d(2), d(3); not d(0), not d(5) (until is excluded)
      assert.equal(await store.countFailed(a.id, hook.id, window), 3)
      assert.equal(await store.countFailed(b.id, hook.id, window), 0)
      assert.equal(await store.requeueFailed(b.id, hook.id, window, T + 3000, 10), 0)
      assert.equal(await store.countFailed(a.id, hook.id, { since: T, until: T + 600 }), 5)

      assert.equal(await store.requeueFailed(a.id, hook.id, window, T + 3000, 2), 2)
      assert.equal(await store.countFailed(a.id, hook.id, window), 1)
      assert.equal(await store.requeueFailed(a.id, hook.id, window, T + 3000, 2), 1)
      assert.equal(await store.requeueFailed(a.id, hook.id, window, T + 3000, 2), 0)
      assert.equal(await store.countFailed(a.id, hook.id, window), 0)

      for (const i of [1, 2, 3]) {
        const r = await find(hook, events[i]!)
        assert.equal(r.status, 'pending')
        assert.equal(r.nextAttemptAt, iso(T + 3000))
      }
      assert.equal(await statusOf(hook, events[0]!), 'failed')
      assert.equal(await statusOf(hook, events[5]!), 'failed')
      assert.equal(await statusOf(hook, events[4]!), 'succeeded')
      assert.deepEqual(await store.claimDeliveries(lease(T + 2999)), [])
      assert.deepEqual(sortedIds(await store.claimDeliveries(lease(T + 3000))), [d(1).id, d(2).id, d(3).id].sort())
    })

    test('insertTestDelivery: a delivery for that webhook only, due now; its event is never routed to others', async () => {
      const a = await newAccount()
      const target = await newHook(a)
      const bystander = await newHook(a)
      const e = makeEvent(a, T)
      const id = newId('dlv', T)
      const r = await store.insertTestDelivery(e, target.id, id, T + 10)
      assert.deepEqual(r, {
        id, webhookId: target.id, eventId: e.id, event: 'email.sent', emailId: e.emailId, status: 'pending', attempts: 0,
        lastAttemptAt: null, nextAttemptAt: iso(T + 10), lastStatusCode: null, lastError: null, lastDurationMs: null, createdAt: iso(T + 10),
      } satisfies DeliveryRecord)
      assert.deepEqual(await store.findDelivery(a.id, target.id, id), r)
      assert.deepEqual(await store.routeEvents(lease(T + 10)), { events: 0, work: [] })
      assert.deepEqual(await store.claimDeliveries(lease(T + 9)), [])
      const claimed = await store.claimDeliveries(lease(T + 10))
      assert.deepEqual(claimed.map(untokened), [{
        id, webhookId: target.id, url: target.url, secrets: [target.secret], event: 'email.sent', payload: e.payload, attempts: 0, pushbacks: 0, rateLimit: null, eventAt: T,
      } satisfies Omit<DeliveryWork, 'lease'>])
      assert.deepEqual(await allDeliveries(bystander), [])
    })

    // Webhook filters and replay (src/domain/webhook-filter.ts, src/domain/replay.ts)

    /** A sent email and its event of `type` at `at`, stored in one write as a send stores them. */
    async function sentEmail (account: AccountRecord, at: number, from: string, tags: Array<{ name: string; value: string }>): Promise<EventRecord> {
      const to = `to-${unique()}@example.test`
      const email: EmailRecord = {
        id: newId('em', at), accountId: account.id, from, to: [to], cc: [], bcc: [], replyTo: [], subject: 'Hi', html: null, text: 'Hi',
        headers: {}, tags, suppressed: [], recipients: [{ address: to, state: 'pending' }], status: 'queued', attempts: 0,
        nextAttemptAt: iso(at), leaseOwner: null, leaseExpiresAt: null, leaseToken: 0, lastError: null, createdAt: iso(at), updatedAt: iso(at),
      }
      const base = { id: newId('evt', at), emailId: email.id, type: 'email.sent' as const, recipient: to, occurredAt: iso(at) }
      const event: EventRecord = { ...base, accountId: account.id, payload: eventPayload(base) }
      assert.equal((await store.acceptEmails({ emails: [email], events: [event] })).outcome, 'accepted')
      return event
    }

    /** Received mail at `recipients` and its email.received event. */
    async function receivedMail (account: AccountRecord, at: number, recipients: string[]): Promise<EventRecord> {
      const id = newId('rcv', at)
      const message: ReceivedRecord = {
        id, accountId: account.id, domainId: newId('dom', at), recipients, mailFrom: 'a@sender.example', from: 'a@sender.example', to: recipients, cc: [],
        subject: 'hello', text: 'hi', textTruncated: false, html: null, htmlTruncated: false, headers: [], messageId: null, inReplyTo: null, attachments: [],
        authentication: { spf: 'none', dkim: 'none', dmarc: 'none', arc: null }, size: 10, createdAt: iso(at),
      }
      const base = { id: newId('evt', at), emailId: id, type: 'email.received' as const, recipient: recipients[0]!, occurredAt: iso(at) }
      const event: EventRecord = { ...base, accountId: account.id, payload: eventPayload(base, { id }) }
      assert.equal(await store.insertReceived({ message, raw: Buffer.from('raw message'), contents: [], event, limitBytes: 1_000_000 }), 'recorded')
      return event
    }

    test('routing applies each webhook\'s filter to the event\'s email: its From domain and tags, received mail by its recipients', async () => {
      const a = await newAccount()
      const events: EventType[] = ['email.sent', 'email.received']
      const all = await newHook(a, { events })
      const shop = await newHook(a, { events, filter: { domains: ['shop.example'], tags: [] } })
      const receipts = await newHook(a, { events, filter: { domains: [], tags: [{ name: 'kind', value: 'receipt' }, { name: 'tenant' }] } })
      const both = await newHook(a, { events, filter: { domains: ['shop.example'], tags: [{ name: 'kind', value: 'receipt' }] } })
      const broken = await newHook(a, { events })
      assert.deepEqual((await store.findWebhook(a.id, receipts.id))?.filter, receipts.filter, 'the filter is stored as given')
      // A filter changed by a patch; null removes one.
      assert.deepEqual((await store.updateWebhook(a.id, broken.id, { filter: { domains: ['nowhere.example'], tags: [] } }, iso(T)))?.filter,
        { domains: ['nowhere.example'], tags: [] })
      const cleared = await store.updateWebhook(a.id, all.id, { filter: null }, iso(T))
      assert.equal(cleared?.filter ?? null, null)
      assert.deepEqual(cleared, await store.findWebhook(a.id, all.id), 'what update returns is what find returns')

      const receipt = await sentEmail(a, T, 'Shop <orders@SHOP.example>', [{ name: 'kind', value: 'receipt' }])
      const news = await sentEmail(a, T + 1, 'news@shop.example', [{ name: 'kind', value: 'news' }])
      const tenant = await sentEmail(a, T + 2, 'a@other.example', [{ name: 'tenant', value: 't1' }])
      const mail = await receivedMail(a, T + 3, ['support@help.example', 'sales@shop.example'])
      const [orphan] = await addEvents(a, [T + 4]) // its email is not in the store
      // An event that carries its route (as every event of a sent email is made) is matched on it, email or none.
      const carried = { ...makeEvent(a, T + 5), route: eventRoute('orders@shop.example', [{ name: 'tenant', value: 't2' }]) }
      await store.insertEvents([carried])
      const expected = new Map([
        [all.id, [receipt, news, tenant, mail, orphan!, carried]],
        [shop.id, [receipt, news, mail, carried]],
        [receipts.id, [receipt, tenant, carried]],
        [both.id, [receipt]],
        [broken.id, []],
      ])
      const want = [...expected].flatMap(([hook, es]) => es.map((e) => deliveryId(e.id, hook))).sort()
      if (store.readEvents !== undefined) {
        // Written once: the first attempts read are the filtered ones.
        const got = await store.readEvents(lease(T + 10, { owner: 'reader' }))
        assert.deepEqual(sortedIds(got.work), want)
        await store.releaseLeases('reader', T + 10)
      }
      const routed = await store.routeEvents(lease(T + 10))
      assert.equal(routed.events, 6)
      assert.deepEqual(sortedIds(routed.work), want)
    })

    test('replay: a window of event times is a range of the webhook\'s deliveries, paged in id order; final ones become due, leased ones are left', async () => {
      const a = await newAccount()
      const b = await newAccount()
      const hook = await newHook(a)
      const other = await newHook(a)
      // Events at T, T+1 … T+5: each makes a delivery for both webhooks.
      const events = await addEvents(a, [T, T + 1, T + 2, T + 3, T + 4, T + 5])
      await store.routeEvents(lease(T + 10, { leaseUntil: T + 10 * DAY }))
      const d = (i: number) => workFor(hook, events[i]!)
      await store.recordOutcomes([succeeded(d(0), T + 11), succeeded(d(1), T + 11), failed(d(2), T + 11), retry(d(3), T + 11, T + DAY)], { now: T + 11, ...HEALTHY })
      // d(4) is still leased (in flight); d(5) succeeded too, but its event is past the window's end.
      await store.recordOutcomes([succeeded(d(5), T + 11)], { now: T + 11, ...HEALTHY })

      const window = { since: T, until: T + 5, types: null }
      assert.equal(await store.countInRange(a.id, hook.id, window), 5)
      assert.equal(await store.countInRange(b.id, hook.id, window), 0, 'another account counts nothing')
      assert.equal(await store.countInRange(a.id, hook.id, { ...window, types: ['email.delivered'] }), 0)
      assert.equal(await store.anyLiveInRange(hook.id, { since: T, until: T + 2, types: null }), false)
      assert.equal(await store.anyLiveInRange(hook.id, window), true, 'd(3) waits for a retry, d(4) is in flight')

      const first = await store.replayPage(a.id, hook.id, window, null, T + 100, 2)
      assert.deepEqual(first, { read: 2, last: d(1).id })
      const second = await store.replayPage(a.id, hook.id, window, first.last, T + 100, 2)
      assert.deepEqual(second, { read: 2, last: d(3).id })
      const third = await store.replayPage(a.id, hook.id, window, second.last, T + 100, 2)
      assert.deepEqual(third, { read: 1, last: d(4).id })
      assert.deepEqual(await store.replayPage(a.id, hook.id, window, third.last, T + 100, 2), { read: 0, last: null })

      for (const i of [0, 1, 2]) {
        const r = await find(hook, events[i]!)
        assert.equal(r.status, 'pending', `d(${i}) is pending again`)
        assert.equal(r.nextAttemptAt, iso(T + 100))
        assert.equal(r.attempts, 1, 'its attempts are kept: the next one is appended')
      }
      assert.equal((await find(hook, events[3]!)).nextAttemptAt, iso(T + 100), 'a retry waiting for later is due now')
      assert.equal((await find(hook, events[3]!)).status, 'retrying')
      assert.equal(await statusOf(hook, events[5]!), 'succeeded', 'past the window: untouched')
      assert.equal(await statusOf(other, events[0]!), 'pending', 'another webhook\'s deliveries: untouched (still leased from routing)')
      assert.equal(await store.anyLiveInRange(hook.id, { since: T, until: T + 2, types: null }), true)
      // Claimed again as themselves, with the attempts they had; d(4) stays with its attempt under way.
      const claimed = await store.claimDeliveries({ ...lease(T + 100), webhookId: hook.id })
      assert.deepEqual(sortedIds(claimed), [d(0).id, d(1).id, d(2).id, d(3).id].sort())
      assert.equal(claimed.find((w) => w.id === d(0).id)?.attempts, 1)
      await store.recordOutcomes(claimed.map((w) => succeeded({ id: w.id, webhookId: w.webhookId, lease: w.lease }, T + 101)), { now: T + 101, ...HEALTHY })
      assert.equal((await find(hook, events[0]!)).attempts, 2)
      assert.equal(await store.anyLiveInRange(hook.id, { since: T, until: T + 4, types: null }), false)

      // The replay of the webhook is kept on it (for the one-at-a-time rule).
      const state = { since: iso(T), until: iso(T + 5), types: null, startedAt: iso(T + 100) }
      assert.equal(await store.setWebhookReplay(a.id, hook.id, state), true)
      assert.equal(await store.setWebhookReplay(b.id, hook.id, state), false)
      const read = await store.findWebhook(a.id, hook.id)
      assert.deepEqual(read?.replay, state)
      assert.equal(read?.updatedAt, hook.updatedAt, 'a replay is not a change of the webhook\'s settings')
    })

    // Operations

    test('deliveryStats counts pending, retrying, unrouted events and the oldest event not yet delivered', async () => {
      assert.deepEqual(await store.deliveryStats(T), { pending: 0, retrying: 0, unroutedEvents: 0, oldestPendingAt: null })
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e2, e3] = await addEvents(a, [T, T + 10, T + 20]) as [EventRecord, EventRecord, EventRecord]
      assert.deepEqual(await store.deliveryStats(T + 30), { pending: 0, retrying: 0, unroutedEvents: 3, oldestPendingAt: T })

      await store.routeEvents(lease(T + 30, { limit: 2 }))
      assert.deepEqual(await store.deliveryStats(T + 30), { pending: 2, retrying: 0, unroutedEvents: 1, oldestPendingAt: T })
      await store.recordOutcomes([retry(workFor(hook, e1), T + 40, T + 45, 500)], { now: T + 40, ...HEALTHY })
      assert.deepEqual(await store.deliveryStats(T + 40), { pending: 1, retrying: 1, unroutedEvents: 1, oldestPendingAt: T })
      assert.deepEqual(ids(await store.claimDeliveries({ ...lease(T + 45), webhookId: hook.id })), [workFor(hook, e1).id])
      assert.deepEqual(await store.deliveryStats(T + 45), { pending: 1, retrying: 1, unroutedEvents: 1, oldestPendingAt: T })
      await store.recordOutcomes([succeeded(workFor(hook, e1), T + 50)], { now: T + 50, ...HEALTHY })
      assert.deepEqual(await store.deliveryStats(T + 50), { pending: 1, retrying: 0, unroutedEvents: 1, oldestPendingAt: T + 10 })
      await store.recordOutcomes([failed(workFor(hook, e2), T + 60)], { now: T + 60, ...HEALTHY })
      assert.deepEqual(await store.deliveryStats(T + 60), { pending: 0, retrying: 0, unroutedEvents: 1, oldestPendingAt: T + 20 })
      await store.routeEvents(lease(T + 70))
      assert.deepEqual(await store.deliveryStats(T + 70), { pending: 1, retrying: 0, unroutedEvents: 0, oldestPendingAt: T + 20 })
      await store.recordOutcomes([succeeded(workFor(hook, e3), T + 80)], { now: T + 80, ...HEALTHY })
      assert.deepEqual(await store.deliveryStats(T + 80), { pending: 0, retrying: 0, unroutedEvents: 0, oldestPendingAt: null })
    })

    test('pruneDeliveries deletes only final deliveries last changed before `before`, up to limit', async () => {
      const a = await newAccount()
      const hook = await newHook(a, { events: ['email.sent'] })
      const doomed = await newHook(a, { events: ['email.delivered'] })
      const events = await addEvents(a, [T, T + 1, T + 2, T + 3, T + 4])
      const [delivered] = await addEvents(a, [T + 5], 'email.delivered')
      await store.routeEvents(lease(T, { leaseUntil: T + DAY }))
      const d = (i: number) => workFor(hook, events[i]!)
      await store.recordOutcomes([succeeded(d(0), T + 100), failed(d(1), T + 100), retry(d(2), T + 100, T + DAY, 500)], { now: T + 100, ...HEALTHY })
      await store.recordOutcomes([succeeded(d(3), T + 5000)], { now: T + 5000, ...HEALTHY })
      // d(4) stays pending (leased); the delivered-event one is cancelled at T + 300.
      assert.equal(await store.deleteWebhook(a.id, doomed.id, iso(T + 200)), true)
      await store.releaseLeases('node-a', T + 250)
      assert.deepEqual(await store.claimDeliveries({ ...lease(T + 300, { owner: 'node-b' }), webhookId: doomed.id }), [])
      assert.equal((await find(doomed, delivered!)).status, 'cancelled')

      assert.equal(await store.pruneDeliveries(T + 1000, 2), 2)
      assert.equal(await store.pruneDeliveries(T + 1000, 2), 1)
      assert.equal(await store.pruneDeliveries(T + 1000, 2), 0)
      for (const i of [0, 1]) assert.equal(await store.findDelivery(a.id, hook.id, d(i).id), null)
      assert.equal(await store.findDelivery(a.id, doomed.id, workFor(doomed, delivered!).id), null)
      assert.equal(await statusOf(hook, events[2]!), 'retrying')
      assert.equal(await statusOf(hook, events[3]!), 'succeeded')
      assert.equal(await statusOf(hook, events[4]!), 'pending')
      assert.equal(await store.pruneDeliveries(T + 5001, 10), 1)
      assert.equal((await allDeliveries(hook)).length, 2)
    })

    test('pruneEvents deletes only routed events older than `before` that no delivery needs, up to limit', async () => {
      const a = await newAccount()
      const quiet = await newAccount() // no webhooks: its events are routed to nobody
      const hook = await newHook(a)
      const [a1, a2] = await addEvents(a, [T, T + 1]) as [EventRecord, EventRecord]
      const [q1, q2, young] = await addEvents(quiet, [T + 2, T + 3, T + 10_000]) as [EventRecord, EventRecord, EventRecord]
      await store.routeEvents(lease(T + 20_000))
      const [unrouted] = await addEvents(quiet, [T + 4])
      await store.recordOutcomes([succeeded(workFor(hook, a1), T + 20_100), retry(workFor(hook, a2), T + 20_100, T + DAY, 500)],
        { now: T + 20_100, ...HEALTHY })
      assert.equal(await store.pruneDeliveries(T + 20_200, 10), 1)
      const probe = makeEvent(a, T + 5)
      await store.insertTestDelivery(probe, hook.id, newId('dlv', T + 5), T + 20_300)

      const stored = async (e: EventRecord): Promise<boolean> =>
        (await store.listEmailEvents(e.accountId, e.emailId)).some((x) => x.id === e.id)

      assert.equal(await store.pruneEvents(T + 5000, 2), 2)
      assert.equal(await store.pruneEvents(T + 5000, 2), 1)
      assert.equal(await store.pruneEvents(T + 5000, 2), 0)
      for (const e of [a1, q1, q2]) assert.equal(await stored(e), false, `${e.id} pruned`)
      assert.equal(await stored(a2), true, 'its delivery still needs it')
      assert.equal(await stored(probe), true, 'its test delivery still needs it')
      assert.equal(await stored(unrouted!), true, 'not routed yet')
      assert.equal(await stored(young), true, 'not old enough')
      // The delivery that needs a2 still works.
      const claimed = await store.claimDeliveries(lease(T + DAY))
      assert.equal(claimed.find((w) => w.id === workFor(hook, a2).id)?.payload, a2.payload)
    })

    // Written once (readEvents, where the adapter has it): first attempts are held in memory and their row
    // is made with their outcome; the routing lease and the durable cursor keep that safe.

    /** readEvents, or a skip where the adapter routes into the store instead. */
    function reader (t: { skip: (why: string) => void }): NonNullable<Store['readEvents']> | undefined {
      if (store.readEvents === undefined) {
        t.skip(`${name} routes first attempts into the store (no readEvents)`)
        return undefined
      }
      return store.readEvents.bind(store)
    }

    /** A first attempt's outcome names its origin. */
    const first = (o: DeliveryOutcome, w: DeliveryWork): DeliveryOutcome => ({ ...o, origin: w.origin! })

    test('readEvents hands out first attempts and stores nothing; one node reads at a time', async (t) => {
      const read = reader(t)
      if (!read) return
      const a = await newAccount()
      const [h1, h2] = [await newHook(a), await newHook(a, { events: ['email.delivered'] })]
      const [e1, e2] = await addEvents(a, [T, T + 1]) as [EventRecord, EventRecord]
      const got = await read(lease(T + 10, { owner: 'node-a' }))
      assert.equal(got.events, 2)
      assert.ok(got.routing)
      assert.deepEqual(sortedIds(got.work), [deliveryId(e1.id, h1.id), deliveryId(e2.id, h1.id)].sort(), 'only the webhook subscribing to email.sent')
      for (const w of got.work) {
        assert.equal(w.lease, 0)
        assert.equal(w.attempts, 0)
        assert.equal(w.origin?.router, got.routing.token)
        assert.equal(w.payload, w.origin?.eventId === e1.id ? e1.payload : e2.payload)
      }
      assert.deepEqual(await allDeliveries(h1), [], 'no row until an outcome')
      assert.deepEqual(await allDeliveries(h2), [])
      assert.deepEqual(await read(lease(T + 11, { owner: 'node-a', routing: got.routing })), { events: 0, work: [], routing: got.routing }, 'read once')
      assert.deepEqual(await read(lease(T + 12, { owner: 'node-b' })), { events: 0, work: [], routing: null }, 'node A holds the routing lease')
      assert.equal((await store.deliveryStats(T + 12)).unroutedEvents, 2, 'the durable cursor has not moved')
    })

    test('a first attempt\'s outcome makes its row as the outcome leaves it; routed moves the durable cursor in the same write', async (t) => {
      const read = reader(t)
      if (!read) return
      const a = await newAccount()
      const hook = await newHook(a)
      const events = await addEvents(a, [T, T + 1, T + 2, T + 3, T + 4])
      const got = await read(lease(T + 10, { owner: 'node-a' }))
      const w = (e: EventRecord) => got.work.find((x) => x.origin?.eventId === e.id)!
      const [ok, again, dead, later, waits] = events as [EventRecord, EventRecord, EventRecord, EventRecord, EventRecord]
      const r = await store.recordOutcomes([
        first(succeeded(w(ok), T + 20), w(ok)),
        first(retry(w(again), T + 20, T + 5000, 503), w(again)),
        first(failed(w(dead), T + 20), w(dead)),
        first(deferred(w(later), T + 100), w(later)),
        first(parked(w(waits), 'node-a', T + 30_000), w(waits)),
      ], { now: T + 20, ...HEALTHY, routed: { owner: 'node-a', token: got.routing!.token, through: got.routing!.through } })
      assert.deepEqual(r, { stale: 0 })
      const d = async (e: EventRecord) => { const x = await find(hook, e); return { status: x.status, attempts: x.attempts, code: x.lastStatusCode } }
      assert.deepEqual(await d(ok), { status: 'succeeded', attempts: 1, code: 200 })
      assert.deepEqual(await d(again), { status: 'retrying', attempts: 1, code: 503 })
      assert.deepEqual(await d(dead), { status: 'failed', attempts: 1, code: 500 })
      assert.deepEqual(await d(later), { status: 'pending', attempts: 0, code: null })
      assert.deepEqual(await d(waits), { status: 'pending', attempts: 0, code: null })
      assert.equal((await find(hook, ok)).createdAt, iso(T + 10), 'created when it was read')
      // The retry and the deferral are due like any stored delivery; the parked one only for its owner.
      assert.deepEqual(sortedIds(await store.claimDeliveries(lease(T + 6000, { owner: 'node-b' }))), [w(again).id, w(later).id].sort())
      assert.deepEqual(ids(await store.unparkDeliveries({ owner: 'node-a', webhookId: hook.id, now: T + 6000, leaseUntil: T + 9000, limit: 10 })), [w(waits).id])
      // The cursor moved: a node taking the lease over later reads nothing again.
      assert.equal((await store.deliveryStats(T + 6000)).unroutedEvents, 0)
      await store.releaseLeases('node-a', T + 7000)
      assert.deepEqual((await read(lease(T + 7001, { owner: 'node-b' }))).work, [])
    })

    test('a node that lost the routing lease: its first-attempt outcomes are stale, the new holder reads again what was not stored', async (t) => {
      const read = reader(t)
      if (!read) return
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e2, e3] = await addEvents(a, [T, T + 1, T + 2]) as [EventRecord, EventRecord, EventRecord]
      const mine = await read(lease(T + 10, { owner: 'node-a', leaseUntil: T + 1000 }))
      const w = (e: EventRecord) => mine.work.find((x) => x.origin?.eventId === e.id)!
      // e1's outcome lands in time (without moving the cursor); then node A stalls past its lease.
      await store.recordOutcomes([first(succeeded(w(e1), T + 20), w(e1))], { now: T + 20, ...HEALTHY })
      assert.equal(await store.renewRouting!('node-a', mine.routing!.token, T + 1500), true, 'renewed while held')
      const theirs = await read(lease(T + 2000, { owner: 'node-b' }))
      assert.ok(theirs.routing)
      assert.notEqual(theirs.routing.token, mine.routing!.token)
      assert.deepEqual(sortedIds(theirs.work), [w(e2).id, w(e3).id].sort(), 'from the durable cursor, skipping what was stored')
      // Node A comes back: nothing of its first attempts applies any more, and its cursor does not move.
      const late = await store.recordOutcomes([first(failed(w(e2), T + 2100), w(e2))],
        { now: T + 2100, ...HEALTHY, routed: { owner: 'node-a', token: mine.routing!.token, through: mine.routing!.through } })
      assert.deepEqual(late, { stale: 1 })
      assert.equal(await store.renewRouting!('node-a', mine.routing!.token, T + 9000), false, 'lost')
      assert.equal(await store.findDelivery(a.id, hook.id, w(e2).id), null, 'no row from the stale outcome')
      assert.equal((await store.deliveryStats(T + 2100)).unroutedEvents, 3, 'the cursor stays where it was')
      const w2 = theirs.work.find((x) => x.id === w(e2).id)!
      assert.deepEqual(await store.recordOutcomes([first(succeeded(w2, T + 2200), w2)], { now: T + 2200, ...HEALTHY }), { stale: 0 })
      assert.equal(await statusOf(hook, e2), 'succeeded')
    })

    test('a first attempt whose webhook was disabled meanwhile: a success is recorded, a failure leaves it cancelled', async (t) => {
      const read = reader(t)
      if (!read) return
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1, e2, e3] = await addEvents(a, [T, T + 1, T + 2]) as [EventRecord, EventRecord, EventRecord]
      const got = await read(lease(T + 10))
      const w = (e: EventRecord) => got.work.find((x) => x.origin?.eventId === e.id)!
      assert.ok(await store.updateWebhook(a.id, hook.id, { status: 'disabled' }, iso(T + 15)))
      await store.recordOutcomes([
        first(succeeded(w(e1), T + 20), w(e1)), first(retry(w(e2), T + 20, T + 5000, 500), w(e2)), first(deferred(w(e3), T + 30), w(e3)),
      ], { now: T + 20, ...HEALTHY })
      assert.equal(await statusOf(hook, e1), 'succeeded')
      assert.equal(await statusOf(hook, e2), 'cancelled')
      assert.equal(await statusOf(hook, e3), 'cancelled')
      assert.deepEqual(await store.claimDeliveries(lease(T + DAY)), [], 'nothing is due for a disabled webhook')
    })

    test('a slow first attempt is stored leased while in flight; its answer then updates it under token 1', async (t) => {
      const read = reader(t)
      if (!read) return
      const a = await newAccount()
      const hook = await newHook(a)
      const [e1] = await addEvents(a, [T]) as [EventRecord]
      const got = await read(lease(T + 10, { owner: 'node-a' }))
      const w = got.work[0]!
      const leased: DeliveryOutcome = { kind: 'leased', id: w.id, webhookId: w.webhookId, lease: 0, origin: w.origin!, owner: 'node-a', leaseUntil: T + 5000 }
      assert.deepEqual(await store.recordOutcomes([leased], { now: T + 2000, ...HEALTHY, routed: { owner: 'node-a', token: got.routing!.token, through: got.routing!.through } }), { stale: 0 })
      const row = await find(hook, e1)
      assert.deepEqual({ status: row.status, attempts: row.attempts, next: row.nextAttemptAt }, { status: 'pending', attempts: 0, next: null }, 'leased: in flight')
      assert.deepEqual(await store.claimDeliveries(lease(T + 4000, { owner: 'node-b' })), [], 'not due for others while the lease holds')
      await store.renewLeases('node-a', [w.id], T + 9000)
      assert.deepEqual(await store.claimDeliveries(lease(T + 6000, { owner: 'node-b' })), [], 'renewed like any lease')
      assert.deepEqual(await store.recordOutcomes([succeeded({ id: w.id, webhookId: w.webhookId, lease: 1 }, T + 6500)], { now: T + 6500, ...HEALTHY }), { stale: 0 })
      assert.deepEqual({ status: (await find(hook, e1)).status, attempts: (await find(hook, e1)).attempts }, { status: 'succeeded', attempts: 1 })
      assert.equal((await store.deliveryStats(T + 7000)).unroutedEvents, 0)
      // 'leased' names a first attempt only: for a stored delivery it is stale.
      assert.deepEqual(await store.recordOutcomes([{ kind: 'leased', id: w.id, webhookId: w.webhookId, lease: 2, owner: 'node-a', leaseUntil: T + DAY }], { now: T + 7000, ...HEALTHY }), { stale: 1 })
    })

    test('a node that lost its position takes its own lease again at once, under a new token, from the durable cursor', async (t) => {
      const read = reader(t)
      if (!read) return
      const a = await newAccount()
      await newHook(a)
      await addEvents(a, [T])
      const first = await read(lease(T + 10, { owner: 'node-a' }))
      const again = await read(lease(T + 20, { owner: 'node-a' }))
      assert.ok(again.routing)
      assert.notEqual(again.routing.token, first.routing!.token)
      assert.deepEqual(ids(again.work), ids(first.work), 'read again: it was never stored')
      assert.deepEqual(await read(lease(T + 30, { owner: 'node-b' })), { events: 0, work: [], routing: null }, 'still node A\'s')
    })

    test('releaseLeases gives the routing lease back: another node reads at once', async (t) => {
      const read = reader(t)
      if (!read) return
      const a = await newAccount()
      await newHook(a)
      await addEvents(a, [T])
      const mine = await read(lease(T + 10, { owner: 'node-a' }))
      assert.equal(mine.work.length, 1)
      await store.releaseLeases('node-a', T + 20)
      const theirs = await read(lease(T + 21, { owner: 'node-b' }))
      assert.deepEqual(ids(theirs.work), ids(mine.work), 'read again: it was never stored')
    })
  })
}
