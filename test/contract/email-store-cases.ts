// The sending part of the Store contract (src/store/emails.ts): emails and the mail queue, idempotency
// keys, suppressions and tracking events. Called from storeContract(), so every adapter runs these.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { eventPayload, type EventRecord, type EventType } from '../../src/domain/events.js'
import { newId, type IdPrefix } from '../../src/domain/ids.js'
import type { EmailAttempt, EmailLease, EmailRecord, IdempotencyRecord, SuppressionRecord } from '../../src/store/emails.js'
import type { AccountRecord, Store } from '../../src/store/types.js'
import type { MakeStore } from './store-contract.js'

let clock = Date.now()
const nextId = (prefix: IdPrefix): string => newId(prefix, ++clock)
const unique = (): string => randomBytes(6).toString('hex')
const iso = (ms = Date.now()): string => new Date(ms).toISOString()
const MINUTE = 60_000
const DAY = 86_400_000

function account (): AccountRecord {
  return { id: nextId('acct'), email: `mail-${unique()}@example.test`, passwordHash: 'h', plan: 'free', createdAt: iso() }
}

function email (accountId: string, overrides: Partial<EmailRecord> = {}): EmailRecord {
  const at = iso()
  const to = `to-${unique()}@example.test`
  return {
    id: nextId('em'),
    accountId,
    from: 'Sender <sender@example.test>',
    to: [`Someone <${to}>`],
    cc: [],
    bcc: [],
    replyTo: [],
    subject: 'Hello',
    html: '<p>Hi</p>',
    text: null,
    headers: { 'X-Campaign': 'spring' },
    tags: [{ name: 'kind', value: 'welcome' }],
    suppressed: [],
    recipients: [{ address: to, state: 'pending' }],
    status: 'queued',
    attempts: 0,
    nextAttemptAt: at,
    leaseOwner: null,
    leaseExpiresAt: null,
    leaseToken: 0,
    lastError: null,
    createdAt: at,
    updatedAt: at,
    scheduledAt: null,
    metadata: {},
    tracking: { opens: true, clicks: true },
    unsubscribe: true,
    ...overrides,
  }
}

function event (accountId: string, emailId: string, type: EventType, recipient: string, at = Date.now()): EventRecord {
  const base = { id: newId('evt', at), emailId, type, recipient, occurredAt: iso(at) }
  return { ...base, accountId, payload: eventPayload(base) }
}

function sentEvents (e: EmailRecord): EventRecord[] {
  return e.recipients.map((r) => event(e.accountId, e.id, 'email.sent', r.address))
}

function key (accountId: string, overrides: Partial<IdempotencyRecord> = {}): IdempotencyRecord {
  const now = Date.now()
  return {
    accountId,
    key: `key-${unique()}`,
    requestHash: `hash-${unique()}`,
    responseStatus: 202,
    responseBody: JSON.stringify({ success: true, data: { id: 'em_x' }, message: 'ok' }),
    createdAt: iso(now),
    expiresAt: iso(now + DAY),
    ...overrides,
  }
}

function suppression (accountId: string, overrides: Partial<SuppressionRecord> = {}): SuppressionRecord {
  return { accountId, email: `s-${unique()}@example.test`, reason: 'manual', createdAt: iso(), ...overrides }
}

/** `store()` answers the suite's store (set in its before hook); `make` opens a fresh one. */
export function emailStoreCases (store: () => Store, make: MakeStore): void {
  async function newAccount (): Promise<AccountRecord> {
    const a = account()
    assert.equal(await store().createAccount(a), 'created')
    return a
  }

  /**
   * Leases every email due before `t` (other tests' included) far beyond any moment a test uses, so that a
   * test working at moment `t` sees only its own emails.
   */
  async function sweepBefore (t: number): Promise<void> {
    await store().claimDueEmails({ owner: `sweeper-${unique()}`, dueBy: iso(t), now: t, leaseUntil: t + 10_000 * DAY, limit: 100_000 })
  }

  /** An email stored with its email.sent events. */
  async function accepted (accountId: string, overrides: Partial<EmailRecord> = {}): Promise<EmailRecord> {
    const e = email(accountId, overrides)
    assert.deepEqual(await store().acceptEmails({ emails: [e], events: sentEvents(e) }), { outcome: 'accepted' })
    return e
  }

  test('acceptEmails stores the emails and their events; findEmail and listEmailEvents see them', async () => {
    const a = await newAccount()
    const e1 = email(a.id, {
      to: ['a@example.test', '"Doe, Jane" <jane@example.test>'], bcc: ['b@example.test'], html: null, text: 'plain',
      recipients: [{ address: 'a@example.test', state: 'pending' }, { address: 'jane@example.test', state: 'pending' },
        { address: 'b@example.test', state: 'pending' }],
      suppressed: ['gone@example.test'], headers: { 'X-A.b$c': 'dotted $name' },
    })
    const e2 = email(a.id)
    const events = [...sentEvents(e1), ...sentEvents(e2)]
    assert.deepEqual(await store().acceptEmails({ emails: [e1, e2], events }), { outcome: 'accepted' })
    assert.deepEqual(await store().findEmail(a.id, e1.id), e1)
    assert.deepEqual(await store().findEmail(a.id, e2.id), e2)
    assert.deepEqual(await store().listEmailEvents(a.id, e1.id), events.slice(0, 3))
    assert.deepEqual(await store().listEmailEvents(a.id, e2.id), events.slice(3))
  })

  test('acceptEmails with a quota charge: counted in the same write; a send that would pass a limit stores nothing', async () => {
    const a = await newAccount()
    const charge = (recipients: number) => ({ accountId: a.id, recipients, periods: [{ period: 'd:2026-01-02', limit: 3 }, { period: 'm:2026-01', limit: 100 }] })
    const first = email(a.id)
    assert.deepEqual(await store().acceptEmails({ emails: [first], events: sentEvents(first), quota: charge(2) }), { outcome: 'accepted' })
    const over = email(a.id)
    assert.deepEqual(await store().acceptEmails({ emails: [over], events: sentEvents(over), quota: charge(2) }), { outcome: 'quota_exceeded', period: 'd:2026-01-02' })
    assert.equal(await store().findEmail(a.id, over.id), null, 'nothing of the refused send')
    assert.deepEqual(await store().readSendUsage(a.id, ['d:2026-01-02', 'm:2026-01', 'd:2026-01-03']), { 'd:2026-01-02': 2, 'm:2026-01': 2, 'd:2026-01-03': 0 })
    const last = email(a.id)
    assert.deepEqual(await store().acceptEmails({ emails: [last], events: sentEvents(last), quota: charge(1) }), { outcome: 'accepted' })
    assert.deepEqual(await store().readSendUsage(a.id, ['d:2026-01-02', 'm:2026-01']), { 'd:2026-01-02': 3, 'm:2026-01': 3 })
  })

  test("findEmail is null for an unknown id and for another account's email", async () => {
    const owner = await newAccount()
    const other = await newAccount()
    const e = await accepted(owner.id)
    assert.equal(await store().findEmail(other.id, e.id), null)
    assert.equal(await store().findEmail(owner.id, nextId('em')), null)
  })

  test('acceptEmails with a key: a second write with that key stores nothing and returns the first record', async () => {
    const a = await newAccount()
    const first = email(a.id)
    const k = key(a.id)
    assert.deepEqual(await store().acceptEmails({ emails: [first], events: sentEvents(first), idempotency: k }), { outcome: 'accepted' })
    assert.deepEqual(await store().findIdempotencyKey(a.id, k.key, iso()), k)

    const second = email(a.id)
    const again = key(a.id, { key: k.key, requestHash: 'another body', responseBody: '{}' })
    assert.deepEqual(await store().acceptEmails({ emails: [second], events: sentEvents(second), idempotency: again }),
      { outcome: 'duplicate', existing: k })
    assert.equal(await store().findEmail(a.id, second.id), null)
    assert.deepEqual(await store().listEmailEvents(a.id, second.id), [])

    // Keys are per account.
    const b = await newAccount()
    const third = email(b.id)
    assert.deepEqual(await store().acceptEmails({ emails: [third], events: sentEvents(third), idempotency: key(b.id, { key: k.key }) }),
      { outcome: 'accepted' })
  })

  test('acceptEmails with a key is atomic: 20 concurrent writes with one key store exactly one email', async () => {
    const a = await newAccount()
    const k = key(a.id)
    const emails = Array.from({ length: 20 }, () => email(a.id))
    const results = await Promise.all(emails.map((e, i) =>
      store().acceptEmails({ emails: [e], events: sentEvents(e), idempotency: { ...k, responseBody: String(i) } })))
    const winners = results.flatMap((r, i) => (r.outcome === 'accepted' ? [i] : []))
    assert.equal(winners.length, 1)
    for (const r of results) if (r.outcome === 'duplicate') assert.equal(r.existing.responseBody, String(winners[0]))
    const stored = await Promise.all(emails.map((e) => store().findEmail(a.id, e.id)))
    assert.equal(stored.filter((e) => e !== null).length, 1)
  })

  test('an expired key is absent, can be taken again, and is pruned', async () => {
    const a = await newAccount()
    const now = Date.now()
    const old = key(a.id, { createdAt: iso(now - 2 * DAY), expiresAt: iso(now - DAY) })
    const live = key(a.id)
    const e1 = email(a.id)
    const e2 = email(a.id)
    await store().acceptEmails({ emails: [e1], events: [], idempotency: old })
    await store().acceptEmails({ emails: [e2], events: [], idempotency: live })
    assert.equal(await store().findIdempotencyKey(a.id, old.key, iso(now)), null)
    assert.deepEqual(await store().findIdempotencyKey(a.id, live.key, iso(now)), live)

    const retaken = key(a.id, { key: old.key })
    const e3 = email(a.id)
    assert.deepEqual(await store().acceptEmails({ emails: [e3], events: [], idempotency: retaken }), { outcome: 'accepted' })
    assert.deepEqual(await store().findIdempotencyKey(a.id, old.key, iso(now)), retaken)
    assert.ok(await store().findEmail(a.id, e3.id))

    // Pruning is store-wide: everything that expired before a far future moment goes, live or not now.
    const later = iso(now + 2 * DAY)
    assert.ok(await store().pruneIdempotencyKeys(later) >= 2)
    assert.equal(await store().findIdempotencyKey(a.id, live.key, iso(now)), null)
    assert.equal(await store().pruneIdempotencyKeys(later), 0)
    assert.ok(await store().findEmail(a.id, e1.id), 'pruning a key never touches its emails')
  })

  test('claimDueEmails leases due emails only, earliest first, up to the limit, to one claimer at a time', async () => {
    const a = await newAccount()
    // Far in the future, so that no other test's emails are due: this test owns that moment.
    const t = Date.now() + 400 * DAY
    const late = await accepted(a.id, { nextAttemptAt: iso(t - 1000) })
    const early = await accepted(a.id, { nextAttemptAt: iso(t - 2000) })
    const notYet = await accepted(a.id, { nextAttemptAt: iso(t + 1000) })
    const done = await accepted(a.id, { nextAttemptAt: null, status: 'delivered' })
    await sweepBefore(t - 3000)

    const first = await store().claimDueEmails({ owner: 'node-a', dueBy: iso(t), now: t, leaseUntil: t + MINUTE, limit: 1 })
    assert.deepEqual(first.map((e) => e.id), [early.id])
    assert.equal(first[0]!.leaseOwner, 'node-a')
    assert.equal(first[0]!.leaseExpiresAt, t + MINUTE)
    const rest = await store().claimDueEmails({ owner: 'node-b', dueBy: iso(t), now: t, leaseUntil: t + MINUTE, limit: 10 })
    assert.ok(rest.some((e) => e.id === late.id))
    for (const e of [early, notYet, done]) assert.ok(!rest.some((r) => r.id === e.id), 'leased, not due or finished: not handed out')

    // An expired lease makes the email due again, for anyone.
    const after = await store().claimDueEmails({ owner: 'node-c', dueBy: iso(t + 2 * MINUTE), now: t + 2 * MINUTE, leaseUntil: t + 3 * MINUTE, limit: 10 })
    assert.ok(after.some((e) => e.id === early.id))
    assert.ok(after.some((e) => e.id === notYet.id))
    assert.equal((await store().findEmail(a.id, early.id))?.leaseOwner, 'node-c')
  })

  test('a claimed email is exactly what the store holds once claimed: on its first claim, and on a retry\'s', async () => {
    const a = await newAccount()
    const t = Date.now() + 450 * DAY
    const rich = await accepted(a.id, {
      nextAttemptAt: iso(t - 3), cc: ['Copy <copy@example.test>'], bcc: ['blind@example.test'], replyTo: ['reply@example.test'],
      html: '<p>Hi <a href="https://example.com/x">x</a></p>', text: 'Hi', headers: { 'X-Campaign': 'spring', 'X-Other': 'yes' },
      tags: [{ name: 'kind', value: 'welcome' }, { name: 'wave', value: '2' }], suppressed: ['gone@example.test'],
    })
    const plain = await accepted(a.id, { nextAttemptAt: iso(t - 2), html: null, text: 'plain' })
    await sweepBefore(t - 10)
    const claimed = await store().claimDueEmails({ owner: 'node-a', dueBy: iso(t), now: t, leaseUntil: t + MINUTE, limit: 10 })
    assert.deepEqual(claimed.map((e) => e.id), [rich.id, plain.id])
    for (const c of claimed) assert.deepEqual(c, await store().findEmail(a.id, c.id), `${c.id} as stored`)

    // Deferred, then claimed again: the retry's claim reads the state the attempt left.
    const first = claimed[0]!
    const deferred = {
      emailId: first.id, owner: 'node-a', leaseToken: first.leaseToken,
      recipients: first.recipients.map((r) => ({ ...r, state: 'pending' as const })), status: 'deferred' as const, attempts: 1,
      nextAttemptAt: iso(t + MINUTE), lastError: '451 later', at: iso(t + 1), events: [], suppressions: [],
    }
    assert.equal(await store().recordEmailAttempt(deferred), true)
    // (The other one's lease has run out by then too: it is due again, as it was.)
    const retried = await store().claimDueEmails({ owner: 'node-b', dueBy: iso(t + 2 * MINUTE), now: t + 2 * MINUTE, leaseUntil: t + 3 * MINUTE, limit: 10 })
    assert.deepEqual(retried.map((e) => e.id).sort(), [rich.id, plain.id].sort())
    for (const c of retried) assert.deepEqual(c, await store().findEmail(a.id, c.id), `${c.id} as stored`)
    const again = retried.find((e) => e.id === first.id)!
    assert.equal(again.attempts, 1)
    assert.equal(again.lastError, '451 later')
    assert.equal(again.leaseOwner, 'node-b')
  })

  test('recordEmailAttempt applies state, events and suppressions for the lease holder only', async () => {
    const a = await newAccount()
    const t = Date.now() + 500 * DAY
    const e = await accepted(a.id, {
      nextAttemptAt: iso(t - 1),
      to: ['ok@example.test', 'bad@example.test', 'later@example.test', 'kept@example.test'],
      recipients: ['ok', 'bad', 'later', 'kept'].map((n) => ({ address: `${n}@example.test`, state: 'pending' as const })),
    })
    await store().addSuppression(suppression(a.id, { email: 'kept@example.test', reason: 'unsubscribed' }))
    const claimed = await store().claimDueEmails({ owner: 'node-a', dueBy: iso(t), now: t, leaseUntil: t + MINUTE, limit: 100 })
    const mine = claimed.find((c) => c.id === e.id)
    assert.equal(mine?.leaseToken, e.leaseToken + 1, 'a claim gives a fresh token')

    const at = iso(t + 1000)
    const events = [event(a.id, e.id, 'email.delivered', 'ok@example.test'), event(a.id, e.id, 'email.bounced', 'bad@example.test')]
    const attempt = {
      emailId: e.id,
      owner: 'node-a',
      leaseToken: mine.leaseToken,
      recipients: [
        { address: 'ok@example.test', state: 'delivered' as const }, { address: 'bad@example.test', state: 'bounced' as const },
        { address: 'later@example.test', state: 'pending' as const }, { address: 'kept@example.test', state: 'bounced' as const },
      ],
      status: 'deferred' as const,
      attempts: 1,
      nextAttemptAt: iso(t + MINUTE),
      lastError: '451 try later',
      at,
      events,
      suppressions: [
        suppression(a.id, { email: 'bad@example.test', reason: 'bounced', createdAt: at }),
        suppression(a.id, { email: 'kept@example.test', reason: 'bounced', createdAt: at }),
      ],
    }
    assert.equal(await store().recordEmailAttempt({ ...attempt, owner: 'node-b' }), false, 'not the lease holder')
    assert.deepEqual((await store().listEmailEvents(a.id, e.id)).map((x) => x.type), ['email.sent', 'email.sent', 'email.sent', 'email.sent'],
      'nothing but the email.sent events')
    assert.deepEqual(await store().findSuppressions(a.id, ['bad@example.test']), [])

    assert.equal(await store().recordEmailAttempt(attempt), true)
    const after = await store().findEmail(a.id, e.id)
    assert.deepEqual(after, {
      ...e, recipients: attempt.recipients, status: 'deferred', attempts: 1, nextAttemptAt: iso(t + MINUTE),
      lastError: '451 try later', updatedAt: at, leaseOwner: null, leaseExpiresAt: null, leaseToken: mine.leaseToken,
    })
    const stored = await store().listEmailEvents(a.id, e.id)
    assert.deepEqual(stored.slice(-2), events)
    const sup = await store().findSuppressions(a.id, ['bad@example.test', 'kept@example.test'])
    assert.deepEqual(sup.map((s) => [s.email, s.reason]).sort(), [['bad@example.test', 'bounced'], ['kept@example.test', 'unsubscribed']],
      'a new address is suppressed; an existing suppression keeps its first reason')
    assert.equal(await store().recordEmailAttempt(attempt), false, 'the lease is gone with the first write')
  })

  test('releaseEmailLeases frees only that owner\'s leases; the emails are due again at once', async () => {
    const a = await newAccount()
    const t = Date.now() + 600 * DAY
    const mine = await accepted(a.id, { nextAttemptAt: iso(t - 2) })
    const theirs = await accepted(a.id, { nextAttemptAt: iso(t - 1) })
    await sweepBefore(t - 10)
    const [first] = await store().claimDueEmails({ owner: 'crashed-node', dueBy: iso(t), now: t, leaseUntil: t + MINUTE, limit: 1 })
    const [second] = await store().claimDueEmails({ owner: 'live-node', dueBy: iso(t), now: t, leaseUntil: t + MINUTE, limit: 1 })
    assert.deepEqual([first?.id, second?.id], [mine.id, theirs.id])

    assert.equal(await store().releaseEmailLeases('crashed-node'), 1)
    assert.equal(await store().releaseEmailLeases('crashed-node'), 0)
    assert.equal((await store().findEmail(a.id, theirs.id))?.leaseOwner, 'live-node')
    const again = await store().claimDueEmails({ owner: 'restarted-node', dueBy: iso(t), now: t, leaseUntil: t + MINUTE, limit: 10 })
    assert.deepEqual(again.map((e) => e.id), [mine.id])
  })

  /** An attempt that delivers every recipient of `e`, made under the claim (`owner`, `leaseToken`). */
  function deliveredAttempt (e: EmailRecord, owner: string, leaseToken: number, at: number): EmailAttempt {
    return {
      emailId: e.id, owner, leaseToken,
      recipients: e.recipients.map((r) => ({ address: r.address, state: 'delivered' as const })),
      status: 'delivered', attempts: e.attempts + 1, nextAttemptAt: null, lastError: null, at: iso(at),
      events: e.recipients.map((r) => event(e.accountId, e.id, 'email.delivered', r.address, at)),
      suppressions: [],
    }
  }

  test('fencing: an expired lease is claimable by another owner, and the stalled claim\'s outcome changes nothing', async () => {
    const a = await newAccount()
    const t = Date.now() + 700 * DAY
    const e = await accepted(a.id, { nextAttemptAt: iso(t - 1) })
    await sweepBefore(t - 10)

    const first = (await store().claimDueEmails({ owner: 'node-a', dueBy: iso(t), now: t, leaseUntil: t + MINUTE, limit: 10 }))
      .find((c) => c.id === e.id)
    assert.ok(first, 'claimed by node-a')
    // node-a stalls past its lease; node-b takes the email over.
    const second = (await store().claimDueEmails({ owner: 'node-b', dueBy: iso(t + 2 * MINUTE), now: t + 2 * MINUTE, leaseUntil: t + 3 * MINUTE, limit: 10 }))
      .find((c) => c.id === e.id)
    assert.ok(second, 'an expired lease is claimable by another owner')
    assert.equal(second.leaseOwner, 'node-b')
    assert.ok(second.leaseToken > first.leaseToken, 'each claim has a fresh token')

    // node-a wakes up and writes its outcome: stale, nothing changes, no event is raised.
    const held = await store().findEmail(a.id, e.id)
    assert.equal(await store().recordEmailAttempt(deliveredAttempt(e, 'node-a', first.leaseToken, t + 2 * MINUTE)), false)
    assert.deepEqual(await store().findEmail(a.id, e.id), held)
    assert.deepEqual((await store().listEmailEvents(a.id, e.id)).map((x) => x.type), ['email.sent'])
    // node-a cannot renew or release what it lost either.
    assert.equal(await store().renewEmailLeases('node-a', [{ id: e.id, leaseToken: first.leaseToken }], t + 9 * MINUTE), 0)
    assert.equal(await store().releaseEmailLeases('node-a', [{ id: e.id, leaseToken: first.leaseToken }]), 0)
    assert.deepEqual(await store().findEmail(a.id, e.id), held)

    // The same owner with an older claim is stale too: node-b releases, claims again, then writes under the old token.
    assert.equal(await store().releaseEmailLeases('node-b', [{ id: e.id, leaseToken: second.leaseToken }]), 1)
    const third = (await store().claimDueEmails({ owner: 'node-b', dueBy: iso(t + 2 * MINUTE), now: t + 2 * MINUTE, leaseUntil: t + 3 * MINUTE, limit: 10 }))
      .find((c) => c.id === e.id)
    assert.ok(third)
    assert.ok(third.leaseToken > second.leaseToken)
    assert.equal(await store().recordEmailAttempt(deliveredAttempt(e, 'node-b', second.leaseToken, t + 2 * MINUTE)), false)
    assert.equal(await store().recordEmailAttempt(deliveredAttempt(e, 'node-b', third.leaseToken, t + 2 * MINUTE)), true)
    const done = await store().findEmail(a.id, e.id)
    assert.equal(done?.status, 'delivered')
    assert.equal(done?.leaseOwner, null)
    assert.deepEqual((await store().listEmailEvents(a.id, e.id)).map((x) => x.type), ['email.sent', 'email.delivered'])
  })

  test('renewEmailLeases extends only the listed leases still held under their token, and never shortens one', async () => {
    const a = await newAccount()
    const t = Date.now() + 800 * DAY
    const e1 = await accepted(a.id, { nextAttemptAt: iso(t - 3) })
    const e2 = await accepted(a.id, { nextAttemptAt: iso(t - 2) })
    const e3 = await accepted(a.id, { nextAttemptAt: iso(t - 1) })
    await sweepBefore(t - 10)
    const claimed = await store().claimDueEmails({ owner: 'node-a', dueBy: iso(t), now: t, leaseUntil: t + MINUTE, limit: 10 })
    assert.deepEqual(claimed.map((c) => c.id), [e1.id, e2.id, e3.id])
    const lease = (e: EmailRecord): EmailLease => ({ id: e.id, leaseToken: claimed.find((c) => c.id === e.id)!.leaseToken })
    const expiry = async (e: EmailRecord) => (await store().findEmail(a.id, e.id))?.leaseExpiresAt

    assert.equal(await store().renewEmailLeases('node-b', [lease(e1)], t + 5 * MINUTE), 0, 'another owner')
    assert.equal(await store().renewEmailLeases('node-a', [{ id: e1.id, leaseToken: lease(e1).leaseToken - 1 }], t + 5 * MINUTE), 0,
      'an older token')
    assert.equal(await expiry(e1), t + MINUTE)

    assert.equal(await store().renewEmailLeases('node-a', [lease(e1), lease(e2)], t + 5 * MINUTE), 2)
    assert.deepEqual([await expiry(e1), await expiry(e2), await expiry(e3)], [t + 5 * MINUTE, t + 5 * MINUTE, t + MINUTE],
      'the unlisted lease of the same owner is left to run out')
    assert.equal(await store().renewEmailLeases('node-a', [lease(e1)], t + 2 * MINUTE), 1)
    assert.equal(await expiry(e1), t + 5 * MINUTE, 'a late renewal does not shorten the lease')

    // Once the first lease has run out, only the email that was not renewed can be taken over.
    const taken = await store().claimDueEmails({ owner: 'node-b', dueBy: iso(t + 2 * MINUTE), now: t + 2 * MINUTE, leaseUntil: t + 3 * MINUTE, limit: 10 })
    assert.deepEqual(taken.map((c) => c.id).filter((id) => [e1.id, e2.id, e3.id].includes(id)), [e3.id])

    // Releasing listed leases frees only those, under their token.
    assert.equal(await store().releaseEmailLeases('node-a', [{ id: e1.id, leaseToken: lease(e1).leaseToken + 1 }]), 0)
    assert.equal(await store().releaseEmailLeases('node-a', [lease(e1)]), 1)
    assert.equal((await store().findEmail(a.id, e1.id))?.leaseOwner, null)
    assert.equal((await store().findEmail(a.id, e2.id))?.leaseOwner, 'node-a')
    assert.equal(await store().renewEmailLeases('node-a', [], t + 9 * MINUTE), 0)
    assert.equal(await store().releaseEmailLeases('node-a', []), 0, 'an empty list releases nothing (not everything)')
    assert.equal((await store().findEmail(a.id, e2.id))?.leaseOwner, 'node-a')
  })

  test('a lease ends at a time in ms: held until that ms, free from it, and renewed as a number, never shortened', async () => {
    const a = await newAccount()
    const t = Date.now() + 850 * DAY
    const e = await accepted(a.id, { nextAttemptAt: iso(t - 1) })
    await sweepBefore(t - 10)
    const claim = async (owner: string, now: number, leaseUntil: number) =>
      (await store().claimDueEmails({ owner, dueBy: iso(now), now, leaseUntil, limit: 10 })).filter((c) => c.id === e.id)

    const [first] = await claim('node-a', t, t + MINUTE)
    assert.ok(first)
    assert.equal(first.leaseExpiresAt, t + MINUTE)
    assert.deepEqual(await claim('node-b', t + MINUTE - 1, t + 2 * MINUTE), [], 'held until the ms its lease ends')
    const [second] = await claim('node-b', t + MINUTE, t + 2 * MINUTE)
    assert.ok(second, 'a claim after the lease ran out takes the email again')
    assert.equal(second.leaseOwner, 'node-b')
    assert.ok(second.leaseToken > first.leaseToken)
    assert.equal(await store().renewEmailLeases('node-a', [{ id: e.id, leaseToken: first.leaseToken }], t + 9 * MINUTE), 0)

    // Compared as numbers, not as text: 10,000,000,000,000 is the later end although its text sorts first.
    const mine = { id: e.id, leaseToken: second.leaseToken }
    const expiry = async () => (await store().findEmail(a.id, e.id))?.leaseExpiresAt
    assert.equal(await store().renewEmailLeases('node-b', [mine], 9_999_999_999_999), 1)
    assert.equal(await expiry(), 9_999_999_999_999)
    assert.equal(await store().renewEmailLeases('node-b', [mine], 10_000_000_000_000), 1)
    assert.equal(await expiry(), 10_000_000_000_000)
    assert.equal(await store().renewEmailLeases('node-b', [mine], 9_999_999_999_999), 1)
    assert.equal(await expiry(), 10_000_000_000_000, 'a renewal never shortens the lease')
    assert.equal(await store().releaseEmailLeases('node-b', [mine]), 1)
  })

  test('suppressions: add keeps the first entry, find and delete are per account', async () => {
    const a = await newAccount()
    const b = await newAccount()
    const s = suppression(a.id, { reason: 'bounced' })
    assert.deepEqual(await store().addSuppression(s), { created: true, record: s })
    assert.deepEqual(await store().addSuppression({ ...s, reason: 'manual', createdAt: iso(Date.now() + 1000) }), { created: false, record: s })
    assert.deepEqual(await store().findSuppressions(a.id, [s.email, 'other@example.test', s.email]), [s])
    assert.deepEqual(await store().findSuppressions(b.id, [s.email]), [])
    assert.deepEqual(await store().findSuppressions(a.id, []), [])
    assert.equal(await store().deleteSuppression(b.id, s.email), false)
    assert.equal(await store().deleteSuppression(a.id, s.email), true)
    assert.equal(await store().deleteSuppression(a.id, s.email), false)
    assert.deepEqual(await store().findSuppressions(a.id, [s.email]), [])
  })

  test('listSuppressions pages newest first (ties by email, descending), each entry exactly once', async () => {
    const a = await newAccount()
    const t = Date.now()
    const list = [
      suppression(a.id, { email: 'a@example.test', createdAt: iso(t - 3000) }),
      suppression(a.id, { email: 'b@example.test', createdAt: iso(t - 1000) }),
      suppression(a.id, { email: 'c@example.test', createdAt: iso(t - 1000) }),
      suppression(a.id, { email: 'd@example.test', createdAt: iso(t - 2000) }),
      suppression(a.id, { email: 'e@example.test', createdAt: iso(t) }),
    ]
    for (const s of list) await store().addSuppression(s)
    await store().addSuppression(suppression((await newAccount()).id))
    const expected = ['e', 'c', 'b', 'd', 'a'].map((n) => `${n}@example.test`)
    assert.deepEqual((await store().listSuppressions(a.id, { limit: 10 })).map((s) => s.email), expected)

    const seen: string[] = []
    let page = await store().listSuppressions(a.id, { limit: 2 })
    while (page.length > 0) {
      seen.push(...page.map((s) => s.email))
      const last = page.at(-1)!
      page = await store().listSuppressions(a.id, { limit: 2, after: { createdAt: last.createdAt, email: last.email } })
    }
    assert.deepEqual(seen, expected)
    assert.deepEqual(await store().listSuppressions(nextId('acct'), { limit: 10 }), [])
    // A page of size 0 is empty (MongoDB's limit(0) would mean "no limit").
    assert.deepEqual(await store().listSuppressions(a.id, { limit: 0 }), [])
  })

  test('recordEngagement appends the event to the email\'s account; null (nothing written) for an unknown email', async () => {
    const a = await newAccount()
    const e = await accepted(a.id)
    const opened = event(a.id, e.id, 'email.opened', e.recipients[0]!.address)
    const { accountId: _, ...engagement } = opened
    assert.deepEqual(await store().recordEngagement(engagement), opened)
    assert.deepEqual((await store().listEmailEvents(a.id, e.id)).at(-1), opened)
    const stray = event(a.id, nextId('em'), 'email.clicked', 'x@example.test')
    const { accountId: __, ...strayEngagement } = stray
    assert.equal(await store().recordEngagement(strayEngagement), null)
    assert.deepEqual(await store().listEmailEvents(a.id, stray.emailId), [])
  })

  test('unsubscribeRecipient suppresses and raises the event once; never for an address already suppressed', async () => {
    const a = await newAccount()
    const e = await accepted(a.id)
    const recipient = e.recipients[0]!.address
    const make = () => {
      const { accountId: _, ...rest } = event(a.id, e.id, 'email.unsubscribed', recipient)
      return rest
    }
    const at = iso()
    const first = make()
    assert.equal(await store().unsubscribeRecipient(first, at), 'unsubscribed')
    assert.equal(await store().unsubscribeRecipient(make(), iso()), 'already_suppressed')
    const events = (await store().listEmailEvents(a.id, e.id)).filter((x) => x.type === 'email.unsubscribed')
    assert.deepEqual(events, [{ ...first, accountId: a.id }])
    assert.deepEqual(await store().findSuppressions(a.id, [recipient]), [{ accountId: a.id, email: recipient, reason: 'unsubscribed', createdAt: at }])

    const manual = await accepted(a.id)
    const m = manual.recipients[0]!.address
    await store().addSuppression(suppression(a.id, { email: m }))
    const { accountId: _, ...ev } = event(a.id, manual.id, 'email.unsubscribed', m)
    assert.equal(await store().unsubscribeRecipient(ev, iso()), 'already_suppressed')
    assert.deepEqual((await store().listEmailEvents(a.id, manual.id)).filter((x) => x.type === 'email.unsubscribed'), [])
    assert.equal((await store().findSuppressions(a.id, [m]))[0]?.reason, 'manual')

    const { accountId: __, ...stray } = event(a.id, nextId('em'), 'email.unsubscribed', 'x@example.test')
    assert.equal(await store().unsubscribeRecipient(stray, iso()), 'no_email')
    assert.deepEqual(await store().findSuppressions(a.id, ['x@example.test']), [])
  })

  test('repairInterruptedWrites finds nothing to do after writes that completed', async () => {
    const a = await newAccount()
    await accepted(a.id)
    assert.equal(typeof await store().repairInterruptedWrites(iso(Date.now() + DAY)), 'number')
    assert.equal(await store().repairInterruptedWrites(iso(Date.now() + DAY)), 0)
  })

  test('sending data with operator-like strings round-trips as plain data', async () => {
    const tricky = ['$ne', '{"$gt":""}', "'; DROP TABLE emails; --", '$where.x']
    const a = await newAccount()
    for (const value of tricky) {
      const e = await accepted(a.id, { subject: value, headers: { [`X-${unique()}`]: value }, tags: [{ name: value, value }] })
      assert.deepEqual(await store().findEmail(a.id, e.id), e)
      assert.equal(await store().findEmail(a.id, value), null)
      assert.equal(await store().findEmail(value, e.id), null)
      const k = key(a.id, { key: value })
      await store().acceptEmails({ emails: [email(a.id)], events: [], idempotency: k })
      assert.deepEqual(await store().findIdempotencyKey(a.id, value, iso()), k)
      assert.equal(await store().findIdempotencyKey(value, value, iso()), null)
      const s = suppression(a.id, { email: value })
      await store().addSuppression(s)
      assert.deepEqual(await store().findSuppressions(a.id, [value]), [s])
      assert.equal(await store().deleteSuppression(value, value), false)
      assert.equal(await store().deleteSuppression(a.id, value), true)
    }
    assert.deepEqual(await store().findSuppressions(a.id, tricky), [])
  })

  test('accepted emails, keys and suppressions survive close and reopen', async () => {
    const own = await make()
    try {
      const a = account()
      assert.equal(await own.store.createAccount(a), 'created')
      const e = email(a.id)
      const k = key(a.id)
      const s = suppression(a.id)
      const events = sentEvents(e)
      await own.store.acceptEmails({ emails: [e], events, idempotency: k })
      await own.store.addSuppression(s)
      await own.store.close()
      const reopened = await own.reopen()
      assert.deepEqual(await reopened.findEmail(a.id, e.id), e)
      assert.deepEqual(await reopened.listEmailEvents(a.id, e.id), events)
      assert.deepEqual(await reopened.findIdempotencyKey(a.id, k.key, iso()), k)
      assert.deepEqual(await reopened.findSuppressions(a.id, [s.email]), [s])
    } finally {
      await own.cleanup()
    }
  })
}
