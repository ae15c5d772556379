import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import {
  createLocalCeilingCounts, createLoginGuard, createLoginThrottle, failedBefore, LOCAL_CEILING_ENTRIES, type CeilingCounter, type LoginAttempt,
} from '../../src/domain/login-throttle.js'

describe('login throttle (per account and client address)', () => {
  test('the free failures bring the first wait, each further one doubles it, up to the longest', () => {
    let now = 1_000_000
    const throttle = createLoginThrottle({ clock: { now: () => now }, freeFailures: 3, baseDelayMs: 1000, maxDelayMs: 8000 })
    const waits: number[] = []
    for (let i = 0; i < 8; i++) {
      now += throttle.waitMs('a@example.com', '10.0.0.1') // the guesser waits as told, then fails again
      waits.push(throttle.failed('a@example.com', '10.0.0.1'))
    }
    assert.deepEqual(waits, [0, 0, 1000, 2000, 4000, 8000, 8000, 8000])
    assert.equal(throttle.waitMs('a@example.com', '10.0.0.1'), 8000)
    // The owner elsewhere, and another account from the guesser's address, are not held back.
    assert.equal(throttle.waitMs('a@example.com', '10.0.0.2'), 0)
    assert.equal(throttle.waitMs('b@example.com', '10.0.0.1'), 0)
  })

  test('a success clears the count; a long quiet starts afresh', () => {
    let now = 0
    const throttle = createLoginThrottle({ clock: { now: () => now }, freeFailures: 2, forgetAfterMs: 60_000 })
    throttle.failed('a', 'x')
    assert.ok(throttle.failed('a', 'x') > 0)
    throttle.succeeded('a', 'x')
    assert.equal(throttle.waitMs('a', 'x'), 0)
    assert.equal(throttle.failed('a', 'x'), 0, 'counting starts again')
    now += 61_000
    assert.equal(throttle.failed('a', 'x'), 0, 'forgotten after the quiet')
  })

  test('the map is bounded and forgets the pair heard from least recently', () => {
    const throttle = createLoginThrottle({ clock: { now: () => 0 }, freeFailures: 1, maxEntries: 3 })
    for (const address of ['1', '2', '3']) throttle.failed('a', address)
    throttle.failed('a', '1') // heard again: now the most recent
    throttle.failed('a', '4')
    assert.equal(throttle.size, 3)
    assert.equal(throttle.waitMs('a', '2'), 0, 'the oldest went')
    assert.ok(throttle.waitMs('a', '1') > 0 && throttle.waitMs('a', '3') > 0)
  })
})

/**
 * The ceiling's counts as a rate-limit store keeps them, keyed by the count, the guard's window number and
 * the account, on the fake clock. `aligned`: windows aligned on the epoch (the shared store);
 * `first-hit`: a key's window starts at its first hit (@fastify/rate-limit's in-memory store). The guard
 * must count exactly over either. Shared by every guard given it (nodes sharing a store).
 */
function fakeCounts (clock: { now(): number }, windowMs = 60_000, kind: 'aligned' | 'first-hit' = 'aligned') {
  const counts = new Map<string, { start: number; hits: number }>()
  return {
    counter: (account: string): CeilingCounter => async (which, window) => {
      const now = clock.now()
      const key = `${which}:${window}:${account}`
      const c = counts.get(key)
      const start = kind === 'aligned' ? Math.floor(now / windowMs) * windowMs : c === undefined || c.start + windowMs <= now ? now : c.start
      const hits = c !== undefined && c.start === start ? c.hits + 1 : 1
      counts.set(key, { start, hits })
      return { hits }
    },
  }
}

describe('login guard (the per-address throttle, then the account-wide ceiling on failed logins)', () => {
  function setup (opts: { freeFailures: number; ceiling: number; maxEntries?: number }) {
    const clock = { t: 1_200_000, now () { return this.t } }
    const counts = fakeCounts(clock)
    const guard = createLoginGuard({ clock, windowMs: 60_000, ...opts })
    const attempt = (account: string, address: string) => guard.attempt(account, address, counts.counter(account))
    return { clock, counts, guard, attempt }
  }
  const allowed = async (p: Promise<LoginAttempt>) => {
    const a = await p
    assert.equal(a.allowed, true, JSON.stringify(a))
    return a
  }
  const refused = async (p: Promise<LoginAttempt>) => {
    const a = await p
    assert.equal(a.allowed, false, 'refused')
    return a
  }

  test('failedBefore: tries that did not succeed, from the two counts', () => {
    assert.equal(failedBefore(1, 1), 0, 'the first try')
    assert.equal(failedBefore(4, 4), 3, 'three tries before, none succeeded')
    assert.equal(failedBefore(4, 7), 0, 'three tries before, all succeeded')
    assert.equal(failedBefore(1, 5), 0, 'never below 0 (counts from two windows)')
  })

  test('an address answered by its own wait spends nothing of the ceiling; the owner elsewhere logs in', async () => {
    const { clock, guard, attempt } = setup({ freeFailures: 3, ceiling: 5 })
    for (let i = 0; i < 3; i++) (await allowed(attempt('a', 'guesser'))).failed()
    // A thousand more tries while it waits: each is refused by the address's wait, none is counted.
    for (let i = 0; i < 1000; i++) assert.equal((await refused(attempt('a', 'guesser'))).by, 'address')
    clock.t += 1000 // its wait is over: one more guess, then 2 s
    ;(await allowed(attempt('a', 'guesser'))).failed()
    assert.deepEqual(await refused(attempt('a', 'guesser')), { allowed: false, by: 'address', waitMs: 2000 })
    // 4 failures of 5: the owner's right password does not count, however often.
    for (let i = 0; i < 10; i++) await (await allowed(attempt('a', 'owner'))).succeeded()
    const last = await allowed(attempt('a', 'owner'))
    assert.equal(guard.inFlight, 1)
    await last.abandoned()
    assert.equal(guard.inFlight, 0)
  })

  test('failures from many addresses fill the ceiling; then every address waits for the window to end, the owner too', async () => {
    const { clock, attempt } = setup({ freeFailures: 3, ceiling: 5 })
    // The window is [1 200 000, 1 260 000) on the fake clock.
    for (const address of ['1', '2', '3', '4', '5']) (await allowed(attempt('a', address))).failed()
    clock.t += 20_000
    assert.deepEqual(await refused(attempt('a', 'owner')), { allowed: false, by: 'account', waitMs: 40_000 })
    assert.equal((await refused(attempt('a', '6'))).by, 'account')
    await (await allowed(attempt('b', 'owner'))).succeeded() // another account is not held back
    clock.t += 40_000 // the window ends
    await (await allowed(attempt('a', 'owner'))).succeeded()
  })

  test('an address being throttled is answered by its throttle, before the ceiling', async () => {
    const { attempt } = setup({ freeFailures: 1, ceiling: 2 })
    ;(await allowed(attempt('a', '1'))).failed()
    ;(await allowed(attempt('a', '2'))).failed()
    assert.equal((await refused(attempt('a', '1'))).by, 'address', 'its own wait, not the full ceiling')
    assert.equal((await refused(attempt('a', '3'))).by, 'account')
  })

  test('attempts in flight count as failures until settled: a burst gets no more tries than the same guesses in a row', async () => {
    const { attempt } = setup({ freeFailures: 3, ceiling: 10 })
    const burst = await Promise.all([attempt('a', 'x'), attempt('a', 'x'), attempt('a', 'x'), attempt('a', 'x')])
    assert.deepEqual(burst.map((a) => a.allowed), [true, true, true, false], 'the fourth of a burst waits for the three')
    for (const a of burst) if (a.allowed) a.failed()
    assert.equal((await refused(attempt('a', 'x'))).by, 'address')
    // The ceiling the same way: 9 failures and one try in flight leave no room for another.
    const g = setup({ freeFailures: 100, ceiling: 10 })
    for (let i = 0; i < 9; i++) (await allowed(g.attempt('a', String(i)))).failed()
    const last = await allowed(g.attempt('a', 'p'))
    assert.equal((await refused(g.attempt('a', 'q'))).by, 'account')
    await last.succeeded()
    // The refusal was not a failure; nor is an attempt whose check broke off.
    await (await allowed(g.attempt('a', 'q'))).abandoned()
    ;(await allowed(g.attempt('a', 'q'))).failed()
    assert.equal((await refused(g.attempt('a', 'owner'))).by, 'account')
    assert.equal(g.guard.inFlight, 0)
  })

  test('settling twice changes nothing', async () => {
    const { guard, attempt } = setup({ freeFailures: 5, ceiling: 3 })
    const a = await allowed(attempt('a', 'x'))
    a.failed()
    a.failed()
    await a.succeeded()
    await a.abandoned()
    await (await allowed(attempt('a', 'y'))).succeeded()
    assert.equal(guard.inFlight, 0)
    ;(await allowed(attempt('a', 'z'))).failed()
    ;(await allowed(attempt('a', 'z'))).failed()
    assert.equal((await refused(attempt('a', 'w'))).by, 'account', 'three failures, not two and not four')
  })

  test('nodes sharing the counts share the ceiling: every try reads what all of them counted', async () => {
    const clock = { t: 0, now () { return this.t } }
    const counts = fakeCounts(clock)
    const [a, b] = [createLoginGuard({ clock, windowMs: 60_000, freeFailures: 100, ceiling: 4 }), createLoginGuard({ clock, windowMs: 60_000, freeFailures: 100, ceiling: 4 })]
    const statuses: string[] = []
    for (let i = 0; i < 8; i++) {
      const node = i % 2 === 0 ? a : b
      const attempt = await node.attempt('acct', `addr${i}`, counts.counter('acct'))
      if (attempt.allowed) attempt.failed()
      statuses.push(attempt.allowed ? 'tried' : attempt.by)
    }
    assert.deepEqual(statuses, ['tried', 'tried', 'tried', 'tried', 'account', 'account', 'account', 'account'])
  })

  test('an IPv6 /64 is one address: its addresses share one wait; IPv4 stays the address, IPv4-mapped IPv6 is IPv4', async () => {
    const { attempt } = setup({ freeFailures: 3, ceiling: 1000 })
    // Three failures from three addresses of one /64: the fourth address of it waits as the first would.
    for (const address of ['2001:db8::1', '2001:db8::2', '2001:db8:0:0:ffff::3']) (await allowed(attempt('a', address))).failed()
    const held = await refused(attempt('a', '2001:db8::4'))
    assert.deepEqual(held, { allowed: false, by: 'address', waitMs: 1000 })
    // Another /64, and the owner's IPv4 address, are not held back.
    await (await allowed(attempt('a', '2001:db8:0:1::1'))).succeeded()
    await (await allowed(attempt('a', '192.0.2.9'))).succeeded()
    // IPv4 neighbours are apart; an IPv4-mapped IPv6 address is the IPv4 address it carries.
    for (let i = 0; i < 3; i++) (await allowed(attempt('b', '192.0.2.1'))).failed()
    assert.equal((await refused(attempt('b', '::ffff:192.0.2.1'))).by, 'address')
    await (await allowed(attempt('b', '192.0.2.2'))).succeeded()
  })

  /**
   * Logins one after another across four windows, each password check taking 900 ms, so some start just
   * before a window ends and are answered just after it. Every decision must be what the failures of the
   * attempt's own window say: refused once `ceiling` (2) of them failed, whatever the ones before did.
   */
  async function acrossWindowBoundaries (counter: (clock: { now(): number }) => (account: string) => CeilingCounter) {
    const W = 60_000
    // Per window: [ms into it, the password right?]; 59 300 and later are answered after the window ends.
    const windows: Array<Array<[number, boolean]>> = [
      [[10_000, false], [30_000, true], [59_300, true]],
      [[2_000, false], [20_000, true], [40_000, false], [50_000, true], [59_500, false]],
      [[10_000, false], [59_400, false]],
      [[5_000, true], [15_000, false], [25_000, true], [35_000, false], [45_000, true], [59_600, true]],
      [[1_000, true], [2_000, false], [3_000, true]],
    ]
    const clock = { t: 0, now () { return this.t } }
    const guard = createLoginGuard({ clock, windowMs: W, freeFailures: 1000, ceiling: 2 })
    const counterOf = counter(clock)
    const seen: string[] = []
    const expected: string[] = []
    for (const [n, attempts] of windows.entries()) {
      let failures = 0
      for (const [at, right] of attempts) {
        clock.t = (20 + n) * W + at
        expected.push(failures >= 2 ? 'account' : 'tried')
        const a = await guard.attempt('acct', right ? 'owner' : 'guesser', counterOf('acct'))
        seen.push(a.allowed ? 'tried' : a.by)
        if (!a.allowed) continue
        clock.t += 900
        if (right) {
          await a.succeeded()
        } else {
          a.failed()
          failures += 1
        }
      }
    }
    assert.deepEqual(seen, expected)
  }

  for (const kind of ['aligned', 'first-hit'] as const) {
    test(`both counts share the attempt's window: a login answered just after its window ends changes no later count (${kind} store windows)`, async () => {
      await acrossWindowBoundaries((clock) => fakeCounts(clock, 60_000, kind).counter)
    })
  }

  test('both counts share the attempt\'s window: a login answered just after its window ends changes no later count (this process\'s counts)', async () => {
    await acrossWindowBoundaries(() => {
      const counts = createLocalCeilingCounts()
      return (account) => counts.counter(account)
    })
  })

  test('this process\'s counts: tries at other emails do not flush a full ceiling, up to the bound; memory stays within it', async () => {
    const clock = { t: 1_200_000, now () { return this.t } }
    const counts = createLocalCeilingCounts({ maxEntries: 4 })
    const guard = createLoginGuard({ clock, windowMs: 60_000, freeFailures: 1000, ceiling: 2 })
    const attempt = (account: string, address: string) => guard.attempt(account, address, counts.counter(account))
    for (const address of ['1', '2']) (await allowed(attempt('target', address))).failed()
    // Failed logins at three junk emails: with the target, the four the counts hold.
    for (const junk of ['j1', 'j2', 'j3']) (await allowed(attempt(junk, 'flusher'))).failed()
    assert.equal((await refused(attempt('target', 'owner'))).by, 'account', 'still full')
    // Tried since: the target is again the most recent, so three more junk emails leave it counted too.
    for (const junk of ['j4', 'j5', 'j6']) (await allowed(attempt(junk, 'flusher'))).failed()
    assert.equal((await refused(attempt('target', 'owner'))).by, 'account')
    // Past the bound the email heard from least recently is forgotten: memory never holds more than the bound.
    for (let i = 0; i < 50; i++) (await allowed(attempt(`junk${i}`, 'flusher'))).failed()
    assert.equal(counts.size, 4)
    // A new window starts every email afresh.
    clock.t = 1_260_000
    await (await allowed(attempt('target', 'owner'))).succeeded()
  })

  test(`this process's counts hold ${LOCAL_CEILING_ENTRIES} emails: a full ceiling outlasts tries at ${LOCAL_CEILING_ENTRIES - 1} others in its window`, async () => {
    const clock = { t: 1_200_000, now () { return this.t } }
    const counts = createLocalCeilingCounts()
    const guard = createLoginGuard({ clock, windowMs: 60_000, freeFailures: 1000, ceiling: 2 })
    for (const address of ['1', '2']) (await allowed(guard.attempt('target', address, counts.counter('target')))).failed()
    // A failed login at each other email hits its two counts, as the guard does; the last one after 59 s.
    const window = Math.floor(clock.t / 60_000)
    for (let i = 0; i < LOCAL_CEILING_ENTRIES - 1; i++) {
      const count = counts.counter(`junk${i}@example.com`)
      await count('marks', window)
      await count('tries', window)
    }
    clock.t += 59_000
    assert.equal((await refused(guard.attempt('target', 'owner', counts.counter('target')))).by, 'account')
    assert.equal(counts.size, LOCAL_CEILING_ENTRIES)
  })

  test('a count that cannot be reached fails the attempt, and leaves nothing in flight', async () => {
    const guard = createLoginGuard({ clock: { now: () => 0 }, freeFailures: 3, ceiling: 5 })
    await assert.rejects(guard.attempt('a', 'x', async () => { throw new Error('store down') }), /store down/)
    assert.equal(guard.inFlight, 0)
  })
})
