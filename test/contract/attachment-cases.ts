// Attachments in the Store contract (src/store/emails.ts): the facts with the email, the bytes once per
// email beside it, nothing kept of a send that was not written, and the bytes pruned once the email is
// final and old enough. Called from storeContract(), so every adapter runs these.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { eventPayload, type EventRecord } from '../../src/domain/events.js'
import { newId } from '../../src/domain/ids.js'
import type { AttachmentMeta } from '../../src/domain/attachments.js'
import type { AttachmentContent, EmailRecord } from '../../src/store/emails.js'
import type { AccountRecord, Store } from '../../src/store/types.js'

const unique = (): string => randomBytes(6).toString('hex')
const iso = (ms: number): string => new Date(ms).toISOString()
let clock = Date.parse('2031-08-01T00:00:00.000Z')

async function account (store: Store): Promise<AccountRecord> {
  const a: AccountRecord = { id: newId('acct', ++clock), email: `att-${unique()}@example.test`, passwordHash: 'x', plan: 'free', createdAt: iso(clock) }
  assert.equal(await store.createAccount(a), 'created')
  return a
}

function facts (files: Buffer[]): AttachmentMeta[] {
  return files.map((f, i) => ({
    filename: `file-${i}.bin`, contentType: 'application/octet-stream', size: f.length,
    sha256: createHash('sha256').update(f).digest('hex'), ...(i === 1 ? { contentId: 'logo' } : {}),
  }))
}

function email (accountId: string, files: Buffer[], at: number): EmailRecord {
  const to = `to-${unique()}@example.test`
  return {
    id: newId('em', ++clock), accountId, from: 'a@example.test', to: [to], cc: [], bcc: [], replyTo: [], subject: 'Files',
    html: null, text: 'x', headers: {}, tags: [], suppressed: [], recipients: [{ address: to, state: 'pending' }],
    status: 'queued', attempts: 0, nextAttemptAt: iso(at), leaseOwner: null, leaseExpiresAt: null, leaseToken: 0, lastError: null,
    createdAt: iso(at), updatedAt: iso(at), ...(files.length > 0 ? { attachments: facts(files) } : {}),
  }
}

const contents = (e: EmailRecord, files: Buffer[]): AttachmentContent[] => files.map((content, part) => ({ emailId: e.id, part, content }))

function sent (e: EmailRecord, at: number): EventRecord {
  const base = { id: newId('evt', at), emailId: e.id, type: 'email.sent' as const, recipient: e.recipients[0]!.address, occurredAt: iso(at) }
  return { ...base, accountId: e.accountId, payload: eventPayload(base) }
}

export function attachmentCases (getStore: () => Store): void {
  test('attachments: the facts come back with the email (find, claim), the bytes in order, once per email', async () => {
    const store = getStore()
    const a = await account(store)
    const files = [randomBytes(70_000), randomBytes(300), Buffer.alloc(0)]
    const at = Date.now() - 60_000
    const e = email(a.id, files, at)
    const plain = email(a.id, [], at)
    assert.deepEqual(await store.acceptEmails({ emails: [e, plain], events: [sent(e, at), sent(plain, at)], attachments: contents(e, files) }), { outcome: 'accepted' })
    assert.deepEqual((await store.findEmail(a.id, e.id))?.attachments, facts(files))
    assert.equal((await store.findEmail(a.id, plain.id))?.attachments, undefined, 'an email without files has none')
    assert.deepEqual(await store.readEmailAttachments(e.id), files)
    assert.equal(await store.readEmailAttachments(plain.id), null)
    const now = Date.now()
    const claimed = await store.claimDueEmails({ owner: `n-${unique()}`, dueBy: iso(now), now, leaseUntil: now + 60_000, limit: 1000 })
    assert.deepEqual(claimed.find((c) => c.id === e.id)?.attachments, facts(files))
    await store.releaseEmailLeases(claimed[0]!.leaseOwner!)
  })

  test('attachments: a send refused by its idempotency key keeps no bytes', async () => {
    const store = getStore()
    const a = await account(store)
    const at = Date.now()
    const key = { accountId: a.id, key: `k-${unique()}`, requestHash: 'h', responseStatus: 202, responseBody: '{}', createdAt: iso(at), expiresAt: iso(at + 86_400_000) }
    const first = email(a.id, [randomBytes(10)], at)
    assert.equal((await store.acceptEmails({ emails: [first], events: [sent(first, at)], idempotency: key, attachments: contents(first, [randomBytes(10)]) })).outcome, 'accepted')
    const files = [randomBytes(20)]
    const again = email(a.id, files, at)
    assert.equal((await store.acceptEmails({ emails: [again], events: [sent(again, at)], idempotency: key, attachments: contents(again, files) })).outcome, 'duplicate')
    assert.equal(await store.readEmailAttachments(again.id), null)
  })

  test('attachments: pruning drops the bytes of final emails older than the cut, keeps the rest and every email\'s facts', async () => {
    const store = getStore()
    const a = await account(store)
    const long = Date.now() - 3 * 86_400_000
    const make = async (at: number) => {
      const files = [randomBytes(100)]
      const e = email(a.id, files, at)
      assert.equal((await store.acceptEmails({ emails: [e], events: [sent(e, at)], attachments: contents(e, files) })).outcome, 'accepted')
      return e
    }
    const finish = async (e: EmailRecord, at: number) => {
      const owner = `n-${unique()}`
      const now = Date.now()
      const claimed = await store.claimDueEmails({ owner, dueBy: iso(now), now, leaseUntil: now + 60_000, limit: 1000 })
      const mine = claimed.find((c) => c.id === e.id)!
      for (const c of claimed) if (c.id !== e.id) await store.releaseEmailLeases(owner, [{ id: c.id, leaseToken: c.leaseToken }])
      assert.equal(await store.recordEmailAttempt({
        emailId: e.id, owner, leaseToken: mine.leaseToken, recipients: e.recipients.map((r) => ({ ...r, state: 'delivered' as const })),
        status: 'delivered', attempts: 1, nextAttemptAt: null, lastError: null, at: iso(at), events: [], suppressions: [],
      }), true)
    }
    const oldFinal = await make(long)
    await finish(oldFinal, long + 1000)
    const recentFinal = await make(long)
    await finish(recentFinal, Date.now())
    const pending = await make(long)
    const cut = iso(Date.now() - 86_400_000)
    let dropped = 0
    for (let n = await store.pruneAttachmentContents(cut, 100); n > 0; n = await store.pruneAttachmentContents(cut, 100)) dropped += n
    assert.ok(dropped >= 1)
    assert.equal(await store.readEmailAttachments(oldFinal.id), null, 'final before the cut: dropped')
    assert.equal((await store.readEmailAttachments(recentFinal.id))?.length, 1, 'final after the cut: kept')
    assert.equal((await store.readEmailAttachments(pending.id))?.length, 1, 'still to be sent: kept')
    assert.equal((await store.findEmail(a.id, oldFinal.id))?.attachments?.length, 1, 'the facts stay')
  })
}
