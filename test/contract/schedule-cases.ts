// Scheduled sends, the sender's metadata and tracking choices in the Store contract (src/store/emails.ts
// rescheduleEmail, cancelEmail, nextDueAt, listEmails' tag filter; src/store/types.ts setDomainTracking).
// Called from storeContract(), so every adapter runs these.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { eventPayload } from '../../src/domain/events.js'
import { newId, type IdPrefix } from '../../src/domain/ids.js'
import type { EmailRecord } from '../../src/store/emails.js'
import type { AccountRecord, DomainRecord, Store } from '../../src/store/types.js'

const unique = (): string => randomBytes(6).toString('hex')
const iso = (ms: number): string => new Date(ms).toISOString()
const DAY = 86_400_000
let clock = Date.now()
const nextId = (prefix: IdPrefix): string => newId(prefix, ++clock)

function scheduled (accountId: string, at: number, overrides: Partial<EmailRecord> = {}): EmailRecord {
  const now = iso(Date.now())
  const to = `s-${unique()}@example.test`
  return {
    id: nextId('em'), accountId, from: 'Sender <sender@example.test>', to: [to], cc: [], bcc: [], replyTo: [], subject: 'Later',
    html: null, text: 'later', headers: {}, tags: [{ name: 'kind', value: 'reminder' }], suppressed: [],
    recipients: [{ address: to, state: 'pending' }], status: 'scheduled', attempts: 0, nextAttemptAt: iso(at),
    leaseOwner: null, leaseExpiresAt: null, leaseToken: 0, lastError: null, createdAt: now, updatedAt: now,
    scheduledAt: iso(at), metadata: { orderId: 'ord_1' }, tracking: { opens: false, clicks: true }, unsubscribe: false,
    ...overrides,
  }
}

export function scheduleCases (getStore: () => Store): void {
  async function newAccount (): Promise<AccountRecord> {
    const a: AccountRecord = { id: nextId('acct'), email: `sched-${unique()}@example.test`, passwordHash: 'h', plan: 'free', createdAt: iso(Date.now()) }
    assert.equal(await getStore().createAccount(a), 'created')
    return a
  }
  async function accept (e: EmailRecord): Promise<EmailRecord> {
    const base = { id: nextId('evt'), emailId: e.id, type: 'email.sent' as const, recipient: e.recipients[0]!.address, occurredAt: e.createdAt }
    const events = [{ ...base, accountId: e.accountId, payload: eventPayload(base) }]
    assert.deepEqual(await getStore().acceptEmails({ emails: [e], events }), { outcome: 'accepted' })
    return e
  }

  test('a scheduled email keeps its time, metadata and choices, exactly as stored, operator-like strings included', async () => {
    const store = getStore()
    const a = await newAccount()
    const e = await accept(scheduled(a.id, Date.now() + 7 * DAY, { metadata: { $gt: '', 'a-b': '{"$ne":null}', x_1: "'; DROP TABLE emails; --" } }))
    assert.deepEqual(await store.findEmail(a.id, e.id), e)
    assert.deepEqual(await store.findEmailById(e.id), e)
  })

  test('rescheduleEmail and cancelEmail: only while scheduled, not due and not leased; null for an unknown or another account\'s email', async () => {
    const store = getStore()
    const a = await newAccount()
    const b = await newAccount()
    // Far ahead, so that no claim of another test reaches these.
    const t = Date.now() + 3000 * DAY
    const e = await accept(scheduled(a.id, t + 60_000))
    const now = iso(t)

    const moved = await store.rescheduleEmail({ accountId: a.id, id: e.id, scheduledAt: iso(t + 120_000), now })
    assert.ok(moved !== null && moved !== 'not_scheduled')
    assert.equal(moved.scheduledAt, iso(t + 120_000))
    assert.equal(moved.nextAttemptAt, iso(t + 120_000))
    assert.equal(moved.status, 'scheduled')
    assert.equal(moved.updatedAt, now)
    assert.deepEqual(await store.findEmail(a.id, e.id), moved)
    assert.equal(await store.rescheduleEmail({ accountId: b.id, id: e.id, scheduledAt: iso(t + 1), now }), null)
    assert.equal(await store.cancelEmail({ accountId: b.id, id: e.id, now }), null)
    assert.equal(await store.rescheduleEmail({ accountId: a.id, id: 'em_unknown', scheduledAt: iso(t + 1), now }), null)

    // Its time came: neither, even before a claim took it.
    assert.equal(await store.rescheduleEmail({ accountId: a.id, id: e.id, scheduledAt: iso(t + DAY), now: iso(t + 120_000) }), 'not_scheduled')
    assert.equal(await store.cancelEmail({ accountId: a.id, id: e.id, now: iso(t + 120_001) }), 'not_scheduled')
    // Leased (a node's clock ahead claimed it): neither, whatever this node's clock says.
    const claimed = await store.claimDueEmails({ owner: 'ahead', dueBy: iso(t + 120_000), now: t + 120_000, leaseUntil: t + 180_000, limit: 100 })
    assert.ok(claimed.some((c) => c.id === e.id))
    assert.equal(await store.cancelEmail({ accountId: a.id, id: e.id, now }), 'not_scheduled')
    assert.equal(await store.rescheduleEmail({ accountId: a.id, id: e.id, scheduledAt: iso(t + DAY), now }), 'not_scheduled')
  })

  test('a canceled email is never claimed; the cancel gives the recipients back to the periods named, never below 0', async () => {
    const store = getStore()
    const a = await newAccount()
    const t = Date.now() + 3100 * DAY
    const periods = [{ period: 'd:2030-01-01', limit: 100 }, { period: 'm:2030-01', limit: 1000 }]
    const e = scheduled(a.id, t + 60_000, {
      recipients: [{ address: 'one@example.test', state: 'pending' }, { address: 'two@example.test', state: 'pending' }],
    })
    assert.deepEqual(await store.acceptEmails({ emails: [e], events: [], quota: { accountId: a.id, recipients: 2, periods } }), { outcome: 'accepted' })
    const other = scheduled(a.id, t + 60_000)
    assert.deepEqual(await store.acceptEmails({ emails: [other], events: [], quota: { accountId: a.id, recipients: 1, periods } }), { outcome: 'accepted' })
    assert.deepEqual(await store.readSendUsage(a.id, ['d:2030-01-01', 'm:2030-01']), { 'd:2030-01-01': 3, 'm:2030-01': 3 })

    const canceled = await store.cancelEmail({ accountId: a.id, id: e.id, now: iso(t), refund: { recipients: 2, periods: ['d:2030-01-01', 'm:2030-01'] } })
    assert.ok(canceled !== null && canceled !== 'not_scheduled')
    assert.equal(canceled.status, 'canceled')
    assert.equal(canceled.nextAttemptAt, null)
    assert.deepEqual(await store.readSendUsage(a.id, ['d:2030-01-01', 'm:2030-01']), { 'd:2030-01-01': 1, 'm:2030-01': 1 })
    assert.equal(await store.cancelEmail({ accountId: a.id, id: e.id, now: iso(t), refund: { recipients: 2, periods: ['d:2030-01-01'] } }), 'not_scheduled',
      'a second cancel changes nothing, and refunds nothing')
    assert.deepEqual(await store.readSendUsage(a.id, ['d:2030-01-01']), { 'd:2030-01-01': 1 })
    // A refund larger than the count (quotas turned on after the send): 0, not below.
    const third = await accept(scheduled(a.id, t + 60_000))
    await store.cancelEmail({ accountId: a.id, id: third.id, now: iso(t), refund: { recipients: 5, periods: ['d:2030-01-01'] } })
    assert.deepEqual(await store.readSendUsage(a.id, ['d:2030-01-01']), { 'd:2030-01-01': 0 })

    const due = await store.claimDueEmails({ owner: 'later', dueBy: iso(t + 2 * DAY), now: t + 2 * DAY, leaseUntil: t + 3 * DAY, limit: 1000 })
    assert.ok(!due.some((d) => d.id === e.id || d.id === third.id), 'canceled emails are never claimed')
    assert.ok(due.some((d) => d.id === other.id), 'the other one is')
  })

  test('nextDueAt: the earliest due time after now, whatever is scheduled behind it; null when nothing is', async () => {
    const store = getStore()
    const a = await newAccount()
    // Past every other test's times.
    const t = Date.now() + 9000 * DAY
    const later = await accept(scheduled(a.id, t + 5000))
    await accept(scheduled(a.id, t + 9000))
    assert.equal(await store.nextDueAt!(iso(t)), later.nextAttemptAt)
    assert.equal(await store.nextDueAt!(iso(t + 5000)), iso(t + 9000), 'strictly after now')
    assert.equal(await store.nextDueAt!(iso(t + 9000)), null)
  })

  test('listEmails filters by a tag\'s name, or by its name and value', async () => {
    const store = getStore()
    const a = await newAccount()
    const t = Date.now()
    const winter = await accept(scheduled(a.id, t + DAY, { tags: [{ name: 'campaign', value: 'winter' }, { name: 'kind', value: 'news' }] }))
    const summer = await accept(scheduled(a.id, t + DAY, { tags: [{ name: 'campaign', value: 'summer' }] }))
    await accept(scheduled(a.id, t + DAY, { tags: [{ name: 'kind', value: 'campaign' }] }))
    const ids = async (tag: { name: string; value?: string }) => (await store.listEmails(a.id, { limit: 10, tag })).map((e) => e.id).sort()
    assert.deepEqual(await ids({ name: 'campaign' }), [winter.id, summer.id].sort())
    assert.deepEqual(await ids({ name: 'campaign', value: 'winter' }), [winter.id])
    assert.deepEqual(await ids({ name: 'campaign', value: 'news' }), [], 'the name and the value of one tag')
    assert.deepEqual(await ids({ name: 'Campaign' }), [], 'as written, case included')
    const [summary] = await store.listEmails(a.id, { limit: 1, tag: { name: 'campaign', value: 'winter' }, status: 'scheduled' })
    assert.equal(summary?.scheduledAt, winter.scheduledAt)
  })

  test('setDomainTracking sets what it is given and keeps the rest; null for another account\'s domain', async () => {
    const store = getStore()
    const a = await newAccount()
    const b = await newAccount()
    const at = iso(Date.now())
    const d: DomainRecord = {
      id: nextId('dom'), accountId: a.id, name: `t-${unique()}.example`, selector: 'svc0', publicKey: 'p', privateKey: 'sealed', status: 'pending',
      records: { dkim: 'pending', return_path: 'pending', spf: 'pending', dmarc: 'pending', receiving: 'pending' },
      createdAt: at, updatedAt: at, lastCheckedAt: null, verifiedAt: null, receiving: false,
    }
    assert.equal(await store.insertDomain(d, 10), 'created')
    assert.deepEqual((await store.findDomain(a.id, d.id))?.tracking, { opens: null, clicks: null }, 'never set')
    assert.deepEqual((await store.setDomainTracking(a.id, d.id, { clicks: false }, at))?.tracking, { opens: null, clicks: false })
    assert.deepEqual((await store.setDomainTracking(a.id, d.id, { opens: true }, at))?.tracking, { opens: true, clicks: false })
    assert.deepEqual((await store.findDomainByName(a.id, d.name))?.tracking, { opens: true, clicks: false })
    assert.equal(await store.setDomainTracking(b.id, d.id, { opens: false }, at), null)
    assert.deepEqual((await store.findDomain(a.id, d.id))?.tracking, { opens: true, clicks: false })
  })
}
