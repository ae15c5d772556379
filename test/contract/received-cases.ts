// Received mail in the Store contract (src/store/received.ts): the receiving switch on domains, and the
// messages with their bytes and event. Called from storeContract(), so every adapter runs these.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { eventPayload, type EventRecord } from '../../src/domain/events.js'
import { newId } from '../../src/domain/ids.js'
import type { ReceivedRecord } from '../../src/store/received.js'
import type { AccountRecord, DomainRecord, Store } from '../../src/store/types.js'

const unique = (): string => randomBytes(6).toString('hex')
const iso = (ms: number): string => new Date(ms).toISOString()
let clock = Date.parse('2031-05-01T00:00:00.000Z')

async function account (store: Store): Promise<AccountRecord> {
  const a: AccountRecord = { id: newId('acct', ++clock), email: `rcv-${unique()}@example.test`, passwordHash: 'x', plan: 'free', createdAt: iso(clock) }
  assert.equal(await store.createAccount(a), 'created')
  return a
}

async function domain (store: Store, accountId: string, name: string, status: DomainRecord['status'] = 'verified'): Promise<DomainRecord> {
  const d: DomainRecord = {
    id: newId('dom', ++clock), accountId, name, selector: 'svc0', publicKey: 'p', privateKey: 'sealed', status,
    records: { dkim: status === 'verified' ? 'verified' : 'pending', return_path: 'pending', spf: 'pending', dmarc: 'pending', receiving: 'pending' },
    createdAt: iso(clock), updatedAt: iso(clock), lastCheckedAt: null, verifiedAt: status === 'verified' ? iso(clock) : null, receiving: false,
  }
  assert.equal(await store.insertDomain(d, 10), 'created')
  return d
}

function message (accountId: string, domainId: string, recipient: string | string[], at: number, size: number): ReceivedRecord {
  const recipients = Array.isArray(recipient) ? recipient : [recipient]
  return {
    id: newId('rcv', at), accountId, domainId, recipients, mailFrom: 'a@sender.example', from: 'A <a@sender.example>', to: recipients, cc: [],
    subject: `hello ${unique()}`, text: 'hi', textTruncated: false, html: null, htmlTruncated: false, headers: [{ name: 'Subject', value: 'hello' }],
    messageId: '<m@sender.example>', inReplyTo: null, attachments: [{ id: 'att_1', filename: 'a.bin', contentType: 'application/octet-stream', size: 3 }],
    authentication: { spf: 'pass', dkim: 'pass', dmarc: 'pass', arc: null }, size, createdAt: iso(at),
  }
}

function event (m: ReceivedRecord): EventRecord {
  const base = { id: newId('evt', Date.parse(m.createdAt)), emailId: m.id, type: 'email.received' as const, recipient: m.recipients[0]!, occurredAt: m.createdAt }
  return { ...base, accountId: m.accountId, payload: eventPayload(base, { id: m.id }) }
}

export function receivedCases (getStore: () => Store): void {
  test('receiving switch: only verified domains with receiving on are found by name, across accounts; a change starts the record over', async () => {
    const store = getStore()
    const name = `rcv-${unique()}.example`
    const a = await account(store)
    const b = await account(store)
    const da = await domain(store, a.id, name)
    const db = await domain(store, b.id, name, 'pending')
    assert.deepEqual(await store.findReceivingDomains(name, 5), [])
    const on = await store.setDomainReceiving(a.id, da.id, true, iso(++clock))
    assert.equal(on?.receiving, true)
    assert.equal(on?.records.receiving, 'pending')
    assert.equal((await store.setDomainReceiving(b.id, db.id, true, iso(++clock)))?.receiving, true)
    assert.deepEqual((await store.findReceivingDomains(name, 5)).map((d) => d.id), [da.id], 'the unverified one is not found')
    assert.equal((await store.findDomain(a.id, da.id))?.receiving, true)
    // Another account's id changes nothing.
    assert.equal(await store.setDomainReceiving(b.id, da.id, false, iso(++clock)), null)
    assert.equal((await store.setDomainReceiving(a.id, da.id, false, iso(++clock)))?.receiving, false)
    assert.deepEqual(await store.findReceivingDomains(name, 5), [])
  })

  test('received messages: kept with their bytes and event, newest first, by recipient, within the storage limit, pruned by age', async () => {
    const store = getStore()
    const a = await account(store)
    const other = await account(store)
    const d = await domain(store, a.id, `rcv-${unique()}.example`)
    const raw = randomBytes(1000)
    const att = Buffer.from([0, 255, 7])
    const kept: ReceivedRecord[] = []
    for (const [i, to] of ['x@d.example', 'y@d.example', 'x@d.example'].entries()) {
      const m = message(a.id, d.id, to, ++clock, 1003)
      assert.equal(await store.insertReceived({ message: m, raw: i === 0 ? raw : randomBytes(1000), contents: [{ id: 'att_1', content: att }], event: event(m), limitBytes: 4000 }), 'recorded')
      kept.push(m)
    }
    // A fourth would pass the 4,000 bytes: refused, nothing written.
    const over = message(a.id, d.id, 'x@d.example', ++clock, 1003)
    assert.equal(await store.insertReceived({ message: over, raw, contents: [], event: event(over), limitBytes: 4000 }), 'limit_reached')
    assert.equal(await store.findReceived(a.id, over.id), null)
    assert.equal(await store.receivedBytes(a.id), 3009)
    assert.equal(await store.receivedBytes(other.id), 0)

    assert.deepEqual(await store.findReceived(a.id, kept[0]!.id), kept[0])
    assert.equal(await store.findReceived(other.id, kept[0]!.id), null)
    assert.deepEqual((await store.listReceived(a.id, { limit: 10 })).map((m) => m.id), kept.map((m) => m.id).reverse())
    assert.deepEqual((await store.listReceived(a.id, { limit: 1, before: kept[2]!.id })).map((m) => m.id), [kept[1]!.id])
    assert.deepEqual((await store.listReceived(a.id, { limit: 10, to: 'x@d.example' })).map((m) => m.id), [kept[2]!.id, kept[0]!.id])
    assert.deepEqual(await store.listReceived(other.id, { limit: 10 }), [])
    assert.ok((await store.readReceivedRaw(a.id, kept[0]!.id))?.equals(raw))
    assert.equal(await store.readReceivedRaw(other.id, kept[0]!.id), null)
    assert.ok((await store.readReceivedAttachment(a.id, kept[0]!.id, 'att_1'))?.equals(att))
    assert.equal(await store.readReceivedAttachment(a.id, kept[0]!.id, 'att_2'), null)
    assert.equal(await store.readReceivedAttachment(a.id, kept[0]!.id, 'raw'), null)
    assert.equal(await store.readReceivedAttachment(other.id, kept[0]!.id, 'att_1'), null)
    // The event went in with it, into the outbox.
    assert.deepEqual((await store.listEmailEvents(a.id, kept[0]!.id)).map((e) => e.type), ['email.received'])

    // The two oldest are pruned, one at a time; their bytes go with them.
    assert.equal(await store.pruneReceived(kept[1]!.createdAt, 1), 1)
    assert.equal(await store.pruneReceived(iso(Date.parse(kept[1]!.createdAt) + 1), 10), 1)
    assert.deepEqual((await store.listReceived(a.id, { limit: 10 })).map((m) => m.id), [kept[2]!.id])
    assert.equal(await store.readReceivedRaw(a.id, kept[0]!.id), null)
    assert.equal(await store.readReceivedAttachment(a.id, kept[0]!.id, 'att_1'), null)
    assert.equal(await store.receivedBytes(a.id), 1003)
    assert.equal(await store.pruneReceived(iso(Date.parse(kept[2]!.createdAt) + 1), 10), 1)
  })

  test('one message for several recipients: found by each; the running total follows every insert, delete and prune', async () => {
    const store = getStore()
    const a = await account(store)
    const other = await account(store)
    const d = await domain(store, a.id, `rcv-${unique()}.example`)
    const sumOfKept = async (accountId: string) => (await store.listReceived(accountId, { limit: 100 })).reduce((n, m) => n + m.size, 0)
    const agrees = async (what: string) => assert.equal(await store.receivedBytes(a.id), await sumOfKept(a.id), `the total after ${what} is the sum of the stored sizes`)

    const many = message(a.id, d.id, ['a@d.example', 'b@d.example', 'c@d.example'], ++clock, 700)
    assert.equal(await store.insertReceived({ message: many, raw: randomBytes(700), contents: [], event: event(many), limitBytes: 1000 }), 'recorded')
    assert.deepEqual((await store.findReceived(a.id, many.id))?.recipients, ['a@d.example', 'b@d.example', 'c@d.example'])
    for (const to of ['a@d.example', 'b@d.example', 'c@d.example']) {
      assert.deepEqual((await store.listReceived(a.id, { limit: 10, to })).map((m) => m.id), [many.id], to)
    }
    assert.deepEqual(await store.listReceived(a.id, { limit: 10, to: 'd@d.example' }), [])
    assert.equal(await store.receivedBytes(a.id), 700, 'counted once')
    await agrees('an insert')

    // 700 + 301 passes the limit of 1,000; 300 fits it exactly.
    const over = message(a.id, d.id, 'a@d.example', ++clock, 301)
    assert.equal(await store.insertReceived({ message: over, raw: randomBytes(301), contents: [], event: event(over), limitBytes: 1000 }), 'limit_reached')
    const fits = message(a.id, d.id, 'b@d.example', ++clock, 300)
    assert.equal(await store.insertReceived({ message: fits, raw: randomBytes(300), contents: [{ id: 'att_1', content: Buffer.from('abc') }], event: event(fits), limitBytes: 1000 }), 'recorded')
    assert.equal(await store.receivedBytes(a.id), 1000)
    await agrees('a second insert')

    // A delete: nothing for another account or an unknown id; the owner's frees its bytes and takes them.
    assert.equal(await store.deleteReceived(other.id, many.id), null)
    assert.equal(await store.deleteReceived(a.id, newId('rcv', ++clock)), null)
    assert.equal(await store.receivedBytes(a.id), 1000)
    assert.deepEqual(await store.deleteReceived(a.id, many.id), many)
    assert.equal(await store.deleteReceived(a.id, many.id), null, 'once')
    assert.equal(await store.findReceived(a.id, many.id), null)
    assert.equal(await store.readReceivedRaw(a.id, many.id), null)
    assert.deepEqual(await store.listReceived(a.id, { limit: 10, to: 'a@d.example' }), [])
    assert.equal(await store.receivedBytes(a.id), 300)
    await agrees('a delete')
    assert.ok((await store.readReceivedAttachment(a.id, fits.id, 'att_1'))?.equals(Buffer.from('abc')), 'the other message is untouched')
    // Room again: the one refused before fits now.
    const again = message(a.id, d.id, 'a@d.example', ++clock, 301)
    assert.equal(await store.insertReceived({ message: again, raw: randomBytes(301), contents: [], event: event(again), limitBytes: 1000 }), 'recorded')
    await agrees('an insert after a delete')

    // A prune takes its messages off their accounts' totals, and only theirs.
    const b = message(other.id, d.id, 'x@d.example', ++clock, 50)
    assert.equal(await store.insertReceived({ message: b, raw: randomBytes(50), contents: [], event: event(b), limitBytes: 1000 }), 'recorded')
    assert.equal(await store.pruneReceived(iso(Date.parse(fits.createdAt) + 1), 10), 1)
    assert.equal(await store.receivedBytes(a.id), 301)
    await agrees('a prune')
    assert.equal(await store.receivedBytes(other.id), 50)
    assert.equal(await store.pruneReceived(iso(Date.parse(b.createdAt) + 1), 10), 2)
    assert.equal(await store.receivedBytes(a.id), 0)
    assert.equal(await store.receivedBytes(other.id), 0)
    await agrees('the last prune')
  })
}
