// The sending service's rules for scheduled sends, with a fake clock over a real SQLite store: the
// schedule checked against the clock after the Idempotency-Key (a replay after the time has passed
// answers as the first one did), no hand-off of a scheduled email at acceptance, moves and cancels by the
// clock, and a cancel's recipients given back to the day they were counted in.
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, test, type TestContext } from 'node:test'
import { createEmailService, requestHash, type LocalIntake } from '../../src/app/emails.js'
import { isAppError } from '../../src/errors.js'
import type { ApiKeyRecord } from '../../src/store/types.js'
import { openSqliteStore } from '../../src/store/sqlite/index.js'

const T0 = Date.parse('2026-11-27T12:00:00.000Z')
const DAY = 86_400_000

async function setup (t: TestContext, quotas = false) {
  const dir = mkdtempSync(join(tmpdir(), 'svc-scheduled-unit-'))
  const store = openSqliteStore({ dataDir: dir })
  t.after(async () => { await store.close(); rmSync(dir, { recursive: true, force: true }) })
  let now = T0
  const clock = { now: () => now }
  const accountId = 'acct_scheduled'
  await store.createAccount({ id: accountId, email: 'a@example.test', passwordHash: 'x', plan: 'free', createdAt: new Date(T0).toISOString() })
  const emails = createEmailService({
    store, clock, mailFrom: 'svc <no-reply@example.test>', scheduleHorizonDays: 7,
    quotas: quotas ? { free: { day: 10, month: 100 }, pro: { day: null, month: null } } : null,
  })
  const key: ApiKeyRecord = {
    id: 'key_1', accountId, name: 'k', keyHash: 'h', keyPrefix: 'svc_sk_x', createdAt: new Date(T0).toISOString(), lastUsedAt: null, revokedAt: null, permission: 'full_access',
  }
  return { store, emails, key, accountId, advance: (ms: number) => { now += ms }, now: () => now }
}

/** What the service answered, or the code it refused with. */
async function code (p: Promise<unknown>): Promise<string> {
  try {
    await p
    return 'ok'
  } catch (err) {
    if (isAppError(err)) return err.code
    throw err
  }
}

describe('scheduled sends in the sending service', () => {
  test('the schedule is judged by the clock after the key: a replay once the time has passed answers the first 202', async (t) => {
    const { emails, key, advance } = await setup(t)
    const body = { to: 'r@example.test', subject: 'S', text: 'x', scheduledAt: new Date(T0 + 60_000).toISOString() }
    const idempotency = { key: 'k-1', requestHash: requestHash('POST /api/send', body) }
    const first = await emails.send(key, [body], { batch: false, idempotency })
    assert.equal(first.status, 202)
    advance(120_000)
    const again = await emails.send(key, [body], { batch: false, idempotency })
    assert.equal(again.replayed, true)
    assert.equal(again.body, first.body)
    assert.equal(await code(emails.send(key, [body], { batch: false })), 'invalid_schedule', 'without the key the same body is now in the past')
  })

  test('a scheduled email is never offered to the mailer at acceptance; the emails sent at once in its batch are', async (t) => {
    const { emails, key } = await setup(t)
    const offers: number[] = []
    const taken: string[][] = []
    const intake: LocalIntake = {
      offer: (count) => { offers.push(count); return { owner: 'me', leaseUntil: T0 + 30_000, count } },
      take: (promised, got) => { if (promised > 0) taken.push(got.map((e) => e.subject)) },
    }
    emails.handOffTo(intake)
    const later = new Date(T0 + 60_000).toISOString()
    await emails.send(key, [{ to: 'r@example.test', subject: 'later', text: 'x', scheduledAt: later }], { batch: false })
    assert.deepEqual(offers, [], 'nothing to offer')
    await emails.send(key, [
      { to: 'r@example.test', subject: 'now', text: 'x' },
      { to: 'r@example.test', subject: 'later too', text: 'x', scheduledAt: later },
    ], { batch: true })
    assert.deepEqual(offers, [1])
    assert.deepEqual(taken, [['now']])
  })

  test('moves and cancels follow the clock: the horizon, the past, its time come', async (t) => {
    const { emails, key, accountId, advance } = await setup(t)
    const sent = JSON.parse((await emails.send(key, [{ to: 'r@example.test', subject: 'S', text: 'x', scheduledAt: new Date(T0 + 60_000).toISOString() }], { batch: false })).body)
    const id: string = sent.data.id
    const heard: number[] = []
    emails.onScheduled((at) => heard.push(at))
    assert.equal(await code(emails.reschedule(accountId, id, new Date(T0 + 8 * DAY).toISOString())), 'invalid_schedule')
    assert.equal(await code(emails.reschedule(accountId, id, new Date(T0 - 1).toISOString())), 'invalid_schedule')
    const moved = await emails.reschedule(accountId, id, new Date(T0 + 90_000).toISOString())
    assert.equal(moved.scheduledAt, new Date(T0 + 90_000).toISOString())
    assert.deepEqual(heard, [T0 + 90_000], 'the mailer hears the new time')
    assert.equal(await code(emails.reschedule('acct_other', id, new Date(T0 + 90_000).toISOString())), 'not_found')
    advance(90_000)
    assert.equal(await code(emails.cancel(accountId, id)), 'email_not_scheduled', 'its time has come')
    assert.equal(await code(emails.reschedule(accountId, id, new Date(T0 + DAY).toISOString())), 'email_not_scheduled')
  })

  test('a cancel gives the recipients back to the day they were counted in, and a second cancel answers the same', async (t) => {
    const { emails, key, accountId, store } = await setup(t, true)
    const body = { to: ['a@example.test', 'b@example.test'], subject: 'S', text: 'x', scheduledAt: new Date(T0 + DAY).toISOString() }
    const id: string = JSON.parse((await emails.send(key, [body], { batch: false })).body).data.id
    const day = 'd:2026-11-27'
    assert.deepEqual(await store.readSendUsage(accountId, [day, 'm:2026-11']), { [day]: 2, 'm:2026-11': 2 })
    const canceled = await emails.cancel(accountId, id)
    assert.equal(canceled.status, 'canceled')
    assert.deepEqual(await store.readSendUsage(accountId, [day, 'm:2026-11']), { [day]: 0, 'm:2026-11': 0 })
    assert.equal((await emails.cancel(accountId, id)).status, 'canceled')
    assert.deepEqual(await store.readSendUsage(accountId, [day]), { [day]: 0 }, 'given back once')
    assert.deepEqual((await store.listEmailEvents(accountId, id)).map((e) => e.type), ['email.sent', 'email.sent'], 'no event after the cancel')
  })
})
