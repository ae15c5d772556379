// The dashboard's reads of the Store contract (src/store/emails.ts): listEmails and countEvents. Called
// from storeContract(), so every adapter runs these.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { eventPayload, type EventRecord, type EventType } from '../../src/domain/events.js'
import { newId } from '../../src/domain/ids.js'
import type { EmailRecord, EmailStatus } from '../../src/store/emails.js'
import type { AccountRecord, Store, WebhookRecord } from '../../src/store/types.js'

const unique = (): string => randomBytes(6).toString('hex')
const iso = (ms: number): string => new Date(ms).toISOString()
const DAY = 86_400_000
// A fixed moment: every email here has nextAttemptAt null, so none is ever due for another test's mail queue.
const T = Date.parse('2031-03-10T12:00:00.000Z')

function email (accountId: string, at: number, to: string, status: EmailStatus = 'queued', cc: string[] = []): EmailRecord {
  return {
    id: newId('em', at), accountId, from: 'Sender <sender@example.test>', to: [`Someone <${to}>`], cc, bcc: [], replyTo: [],
    subject: `Hello ${to}`, html: '<p>Hi</p>', text: null, headers: {}, tags: [], suppressed: [],
    recipients: [to, ...cc].map((address) => ({ address, state: 'pending' as const })),
    status, attempts: 0, nextAttemptAt: null, leaseOwner: null, leaseExpiresAt: null, leaseToken: 0, lastError: null,
    createdAt: iso(at), updatedAt: iso(at),
  }
}

function event (accountId: string, emailId: string, type: EventType, at: number): EventRecord {
  const base = { id: newId('evt', at), emailId, type, recipient: 'r@example.test', occurredAt: iso(at) }
  return { ...base, accountId, payload: eventPayload(base) }
}

export function emailListCases (store: () => Store): void {
  async function newAccount (): Promise<AccountRecord> {
    const a: AccountRecord = { id: newId('acct', Date.now()), email: `list-${unique()}@example.test`, passwordHash: 'h', plan: 'free', createdAt: iso(T) }
    assert.equal(await store().createAccount(a), 'created')
    return a
  }

  test('listEmails: newest first (ties by id), filtered by status, recipient and window, paged by (createdAt, id)', async () => {
    const a = await newAccount()
    const other = await newAccount()
    const emails = [
      email(a.id, T, 'ann@example.test', 'delivered'),
      email(a.id, T + 1000, 'bob@example.test', 'bounced'),
      email(a.id, T + 1000, 'ann@example.test', 'delivered', ['carol@example.test']),
      email(a.id, T + 2000, 'bob@example.test', 'delivered'),
      email(a.id, T + DAY, 'ann@example.test', 'queued'),
    ]
    // Same createdAt for two emails: the id orders them.
    assert.deepEqual(await store().acceptEmails({ emails, events: [] }), { outcome: 'accepted' })
    await store().acceptEmails({ emails: [email(other.id, T + 500, 'ann@example.test', 'delivered')], events: [] })
    const ids = (list: Array<{ id: string }>) => list.map((e) => e.id)
    const byNewest = [...emails].sort((x, y) => (x.createdAt === y.createdAt ? (x.id < y.id ? 1 : -1) : x.createdAt < y.createdAt ? 1 : -1))

    const all = await store().listEmails(a.id, { limit: 100 })
    assert.deepEqual(ids(all), ids(byNewest))
    const first = all.find((e) => e.id === emails[2]!.id)!
    assert.deepEqual(first, {
      id: emails[2]!.id, from: emails[2]!.from, to: emails[2]!.to, subject: emails[2]!.subject, status: 'delivered',
      createdAt: emails[2]!.createdAt, updatedAt: emails[2]!.updatedAt, scheduledAt: null,
    })

    assert.deepEqual(ids(await store().listEmails(a.id, { limit: 100, status: 'delivered' })),
      ids(byNewest.filter((e) => e.status === 'delivered')))
    // A recipient in cc counts; another account's email never shows.
    assert.deepEqual(ids(await store().listEmails(a.id, { limit: 100, to: 'carol@example.test' })), [emails[2]!.id])
    assert.deepEqual(ids(await store().listEmails(a.id, { limit: 100, to: 'ann@example.test', status: 'delivered' })),
      ids(byNewest.filter((e) => e.status === 'delivered' && e.recipients[0]!.address === 'ann@example.test')))
    assert.deepEqual(await store().listEmails(a.id, { limit: 100, to: 'nobody@example.test' }), [])
    // since is inclusive, until exclusive.
    assert.deepEqual(ids(await store().listEmails(a.id, { limit: 100, since: iso(T + 1000), until: iso(T + 2000) })),
      ids(byNewest.filter((e) => e.createdAt === iso(T + 1000))))

    // Pages of two, each email exactly once, in order.
    const seen: string[] = []
    let after: { createdAt: string; id: string } | undefined
    for (;;) {
      const page = await store().listEmails(a.id, { limit: 2, ...(after ? { after } : {}) })
      seen.push(...ids(page))
      if (page.length < 2) break
      const last = page.at(-1)!
      after = { createdAt: last.createdAt, id: last.id }
    }
    assert.deepEqual(seen, ids(byNewest))
  })

  test('listEmails by an event the email had: a complaint on a delivered email finds it, with the other filters and the page size', async () => {
    const a = await newAccount()
    const other = await newAccount()
    const plain = email(a.id, T, 'ann@example.test', 'delivered')
    const complained = email(a.id, T + 1000, 'bob@example.test', 'delivered')
    const complainedToo = email(a.id, T + 2000, 'carol@example.test', 'delivered')
    const theirs = email(other.id, T + 500, 'ann@example.test', 'delivered')
    assert.deepEqual(await store().acceptEmails({
      emails: [plain, complained, complainedToo],
      events: [event(a.id, plain.id, 'email.delivered', T + 10), event(a.id, complained.id, 'email.delivered', T + 1010),
        event(a.id, complained.id, 'email.complained', T + 1020), event(a.id, complainedToo.id, 'email.complained', T + 2020)],
    }), { outcome: 'accepted' })
    await store().acceptEmails({ emails: [theirs], events: [event(other.id, theirs.id, 'email.complained', T + 510)] })
    const ids = (list: Array<{ id: string }>) => list.map((e) => e.id)
    assert.deepEqual(ids(await store().listEmails(a.id, { event: 'email.complained', limit: 10 })), [complainedToo.id, complained.id])
    assert.deepEqual(ids(await store().listEmails(a.id, { event: 'email.complained', limit: 1 })), [complainedToo.id])
    assert.deepEqual(ids(await store().listEmails(a.id, { event: 'email.complained', to: 'bob@example.test', limit: 10 })), [complained.id])
    assert.deepEqual(ids(await store().listEmails(a.id, { event: 'email.delivered', status: 'delivered', limit: 10 })), [complained.id, plain.id])
    assert.deepEqual(ids(await store().listEmails(a.id, { event: 'email.bounced', limit: 10 })), [])
  })

  test('listEmails binds operator-like filters as plain values', async () => {
    const a = await newAccount()
    await store().acceptEmails({ emails: [email(a.id, T, 'x@example.test')], events: [] })
    assert.deepEqual(await store().listEmails(a.id, { limit: 10, to: "x@example.test' OR '1'='1" }), [])
    assert.deepEqual(await store().listEmails(a.id, { limit: 10, to: '{"$ne":null}' }), [])
  })

  test('countEvents counts per UTC day and type in [since, until), per account, without test events', async () => {
    const a = await newAccount()
    const other = await newAccount()
    const e = email(a.id, T, 'ann@example.test')
    const day1 = Date.parse('2031-03-10T00:00:00.000Z')
    const day2 = day1 + DAY
    const events = [
      event(a.id, e.id, 'email.sent', day1 + 5),
      event(a.id, e.id, 'email.sent', day1 + 6),
      event(a.id, e.id, 'email.delivered', day1 + 7),
      event(a.id, e.id, 'email.sent', day2 + 1),
      event(a.id, e.id, 'email.bounced', day2 + 2),
      event(a.id, e.id, 'email.sent', day2 + DAY), // at `until`: out
      event(a.id, e.id, 'email.sent', day1 - 1), // before `since`: out
    ]
    await store().acceptEmails({ emails: [e], events })
    await store().insertEvents([event(other.id, 'em_other', 'email.sent', day1 + 10)])
    // A test event of the account's webhook.
    const hook: WebhookRecord = {
      id: newId('wh', T), accountId: a.id, url: 'https://hooks.example.test/x', events: ['email.sent'], secret: 'whsec_x',
      previousSecret: null, previousSecretExpiresAt: null, status: 'enabled', createdAt: iso(T), updatedAt: iso(T),
    }
    assert.equal(await store().insertWebhook(hook, 10), 'created')
    const probe = event(a.id, newId('em', T), 'email.sent', day1 + 20)
    await store().insertTestDelivery(probe, hook.id, newId('dlv', T), day1 + 20)
    assert.equal(await store().deleteWebhook(a.id, hook.id, iso(day1 + 30)), true) // its delivery is cancelled, never handed out

    const counts = await store().countEvents(a.id, { since: iso(day1), until: iso(day2 + DAY) })
    const sorted = counts.map((c) => `${c.day} ${c.type} ${c.count}`).sort()
    assert.deepEqual(sorted, [
      '2031-03-10 email.delivered 1',
      '2031-03-10 email.sent 2',
      '2031-03-11 email.bounced 1',
      '2031-03-11 email.sent 1',
    ])
    assert.deepEqual(await store().countEvents(a.id, { since: iso(day2 + DAY), until: iso(day2 + 2 * DAY) }),
      [{ day: '2031-03-12', type: 'email.sent', count: 1 }])
    assert.deepEqual(await store().countEvents(a.id, { since: iso(day2 + 2 * DAY), until: iso(day2 + 3 * DAY) }), [])
  })
}
