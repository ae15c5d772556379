// Replay: the window's rules (src/domain/replay.ts) with a fake clock, how a window becomes a range of
// delivery ids, and the one-at-a-time rule of src/app/replay.ts with a fake store.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { AppError } from '../../src/errors.js'
import { deliveryId, newId } from '../../src/domain/ids.js'
import { REPLAY_MAX_SPAN_MS, deliveryIdAt, rangeOfState, replayRange, replayState, replayStateOf, type ReplayRange, type ReplayState } from '../../src/domain/replay.js'
import { createReplayer } from '../../src/app/replay.js'
import type { WebhookRecord } from '../../src/store/types.js'
import { waitFor } from '../helpers/wait.js'

/** Lets the background pages run to their end (a fake store answers at once). */
async function settle (): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve))
}

const NOW = Date.parse('2026-11-27T12:00:00.000Z')
const HOUR = 3_600_000
const DAY = 24 * HOUR

function problemsOf (r: ReturnType<typeof replayRange>): string[] {
  return 'problems' in r ? r.problems.map((p) => `${p.path}: ${p.message}`) : []
}

describe('the replay window', () => {
  test('since before until, until at most now, at most 7 days; until defaults to now', () => {
    assert.deepEqual(replayRange({ since: NOW - DAY }, NOW), { range: { since: NOW - DAY, until: NOW, types: null } })
    assert.deepEqual(replayRange({ since: NOW - REPLAY_MAX_SPAN_MS, until: NOW }, NOW), { range: { since: NOW - REPLAY_MAX_SPAN_MS, until: NOW, types: null } })
    assert.deepEqual(problemsOf(replayRange({ since: NOW - REPLAY_MAX_SPAN_MS - 1, until: NOW }, NOW)), [
      'body.since: must be at most 7 days before until; replay a longer time in parts',
    ])
    assert.deepEqual(problemsOf(replayRange({ since: NOW - HOUR, until: NOW + 1 }, NOW)), ['body.until: must not be later than now'])
    assert.deepEqual(problemsOf(replayRange({ since: NOW, until: NOW }, NOW)), ['body.since: must be before until'])
    assert.deepEqual(problemsOf(replayRange({ since: NOW + DAY, until: NOW + HOUR }, NOW)), [
      'body.until: must not be later than now', 'body.since: must be before until',
    ])
    assert.deepEqual(problemsOf(replayRange({ since: NOW + 1 }, NOW)), ['body.since: must be before until'], 'since in the future, until defaulted')
  })

  test('the same request later is judged by the clock of then', () => {
    const request = { since: NOW - DAY, until: NOW + HOUR }
    assert.equal(problemsOf(replayRange(request, NOW)).length, 1)
    assert.deepEqual(replayRange(request, NOW + HOUR), { range: { since: NOW - DAY, until: NOW + HOUR, types: null } })
  })

  test('event types: deduplicated; none or an empty list is every type', () => {
    assert.deepEqual((replayRange({ since: NOW - HOUR, events: ['email.sent', 'email.sent', 'email.bounced'] }, NOW) as { range: ReplayRange }).range.types,
      ['email.sent', 'email.bounced'])
    assert.equal((replayRange({ since: NOW - HOUR, events: [] }, NOW) as { range: ReplayRange }).range.types, null)
  })

  test('a window of event times is the range of their delivery ids', () => {
    const webhook = newId('wh')
    const idOf = (ms: number) => deliveryId(newId('evt', ms), webhook)
    const since = NOW - DAY
    const inside = (id: string) => id >= deliveryIdAt(since) && id < deliveryIdAt(NOW)
    assert.equal(inside(idOf(since)), true, 'since is inclusive')
    assert.equal(inside(idOf(NOW - 1)), true)
    assert.equal(inside(idOf(NOW)), false, 'until is exclusive')
    assert.equal(inside(idOf(since - 1)), false)
    assert.equal(deliveryIdAt(-5), 'dlv_000000000000')
    assert.equal(deliveryIdAt(2 ** 60), 'dlv_ffffffffffff')
  })

  test('a stored replay reads back; anything else is none', () => {
    const state = replayState({ since: NOW - DAY, until: NOW, types: ['email.sent'] }, NOW)
    assert.deepEqual(replayStateOf(JSON.stringify(state)), state)
    assert.deepEqual(rangeOfState(state), { since: NOW - DAY, until: NOW, types: ['email.sent'] })
    for (const bad of [null, undefined, '{', '[]', '{"since":1}', 42]) assert.equal(replayStateOf(bad), null)
    assert.equal(rangeOfState({ ...state, since: 'yesterday' }), null)
  })
})

/** A store that keeps replays in memory: the pages it was asked for, and which range still has live deliveries. */
function fakeStore (deliveries: number) {
  const pages: Array<{ after: string | null; limit: number }> = []
  const replays: ReplayState[] = []
  const state = { live: false, hold: null as Promise<void> | null }
  const ids = Array.from({ length: deliveries }, (_, i) => `dlv_${String(i).padStart(28, '0')}`)
  return {
    pages, replays, state,
    async countInRange () { return deliveries },
    async replayPage (_a: string, _w: string, _r: ReplayRange, after: string | null, _now: number, limit: number) {
      pages.push({ after, limit })
      if (state.hold !== null) await state.hold
      const from = after === null ? 0 : ids.indexOf(after) + 1
      const page = ids.slice(from, from + limit)
      if (page.length > 0) state.live = true
      return { read: page.length, last: page.at(-1) ?? null }
    },
    async anyLiveInRange () { return state.live },
    async setWebhookReplay (_a: string, _id: string, replay: ReplayState) { replays.push(replay); return true },
  }
}

function webhook (overrides: Partial<WebhookRecord> = {}): WebhookRecord {
  return {
    id: 'wh_1', accountId: 'acct_1', url: 'https://receiver.example/h', events: ['email.sent'], secret: 's', previousSecret: null,
    previousSecretExpiresAt: null, status: 'enabled', rateLimit: null, filter: null, replay: null, createdAt: '', updatedAt: '', ...overrides,
  }
}

async function refusal (p: Promise<unknown>): Promise<AppError> {
  try {
    await p
  } catch (err) {
    assert.ok(err instanceof AppError, String(err))
    return err
  }
  assert.fail('expected a refusal')
}

describe('one replay per webhook at a time', () => {
  test('pages through the range in order, then the stored range decides', async () => {
    const store = fakeStore(1_050)
    let now = NOW
    const replay = createReplayer({ store, clock: { now: () => now }, pageSize: 500 })
    const answer = await replay(webhook(), { since: NOW - DAY })
    assert.deepEqual(answer, { queued: 1_050, range: { since: NOW - DAY, until: NOW, types: null } })
    assert.deepEqual(store.replays, [replayState(answer.range, NOW)])
    // The pages are written in the background: each starts after the last id of the one before.
    await waitFor('three pages', () => store.pages.length === 3)
    assert.deepEqual(store.pages.map((p) => p.after), [null, 'dlv_' + '499'.padStart(28, '0'), 'dlv_' + '999'.padStart(28, '0')])

    // Its deliveries are still going out: a second replay of the webhook waits, whatever its window.
    now += HOUR
    const stored = webhook({ replay: store.replays[0]! })
    const second = await refusal(replay(stored, { since: NOW - HOUR }))
    assert.equal(second.statusCode, 409)
    assert.equal(second.code, 'operation_in_progress')
    // Every one has an outcome: the next replay starts.
    store.state.live = false
    assert.equal((await replay(stored, { since: NOW - HOUR })).queued, 1_050)
  })

  test('while this process pages through one, another is refused; after it is done, it is not', async () => {
    const store = fakeStore(600)
    let release!: () => void
    store.state.hold = new Promise<void>((resolve) => { release = resolve })
    const replay = createReplayer({ store, clock: { now: () => NOW }, pageSize: 500 })
    await replay(webhook(), { since: NOW - DAY })
    assert.equal((await refusal(replay(webhook(), { since: NOW - DAY }))).code, 'operation_in_progress')
    assert.equal((await replay(webhook({ id: 'wh_2' }), { since: NOW - DAY })).queued, 600, 'another webhook replays meanwhile')
    store.state.hold = null
    release()
    await waitFor('both replays\' second pages', () => store.pages.length === 4)
    await settle()
    store.state.live = false
    assert.equal((await replay(webhook(), { since: NOW - DAY })).queued, 600)
  })

  test('a bad window is a 400 naming the field before anything is read; a webhook not enabled is a 409', async () => {
    const store = fakeStore(10)
    const replay = createReplayer({ store, clock: { now: () => NOW } })
    const bad = await refusal(replay(webhook(), { since: NOW - 8 * DAY, until: NOW }))
    assert.equal(bad.statusCode, 400)
    assert.deepEqual(bad.details?.map((d) => d.path), ['body.since'])
    const future = await refusal(replay(webhook(), { since: NOW - DAY, until: NOW + DAY }))
    assert.deepEqual(future.details?.map((d) => d.path), ['body.until'])
    for (const status of ['disabled', 'auto_disabled'] as const) {
      const off = await refusal(replay(webhook({ status }), { since: NOW - DAY }))
      assert.equal(off.statusCode, 409)
      assert.equal(off.code, 'webhook_not_enabled')
    }
    assert.equal(store.pages.length, 0)
    assert.equal(store.replays.length, 0)
  })

  test('a window with nothing in it answers 0 and leaves no replay to wait for', async () => {
    const store = fakeStore(0)
    const replay = createReplayer({ store, clock: { now: () => NOW } })
    assert.equal((await replay(webhook(), { since: NOW - DAY })).queued, 0)
    assert.equal((await replay(webhook(), { since: NOW - DAY })).queued, 0)
    assert.equal(store.replays.length, 0)
    assert.equal(store.pages.length, 0)
  })
})
