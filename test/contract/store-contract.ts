// The Store contract suite: every promise src/store/types.ts makes, written once against the interface.
// Each adapter's test file calls storeContract() with a factory, then adds tests for its own backend.
// Every test makes its own accounts (unique ids and emails), so no test depends on another one's data.
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { newId, type IdPrefix } from '../../src/domain/ids.js'
import type { AccountRecord, ApiKeyRecord, SessionRecord, Store, WebhookRecord } from '../../src/store/types.js'
import { emailStoreCases } from './email-store-cases.js'
import { emailListCases } from './email-list-cases.js'
import { scheduleCases } from './schedule-cases.js'
import { receivedCases } from './received-cases.js'
import { templateCases } from './template-cases.js'
import { attachmentCases } from './attachment-cases.js'
import { accountCreationCases } from './account-creation-cases.js'

export interface MadeStore {
  store: Store
  /** Closes every store opened on this data (reopened ones included) and removes the data. */
  cleanup(): Promise<void>
  /** Opens another store on the same data (the first one may already be closed). */
  reopen(): Promise<Store>
}

export type MakeStore = () => Promise<MadeStore>

// Ids made by newId sort by their millisecond; a clock that moves forward on every call gives strictly
// increasing ids, so "newest first" can be checked without sleeping.
let clock = Date.now()
const nextId = (prefix: IdPrefix): string => newId(prefix, ++clock)
const unique = (): string => randomBytes(6).toString('hex')
const iso = (ms = Date.now()): string => new Date(ms).toISOString()
const HOUR = 3_600_000

function makeAccount (overrides: Partial<AccountRecord> = {}): AccountRecord {
  return {
    id: nextId('acct'),
    email: `user-${unique()}@example.test`,
    passwordHash: `scrypt$${unique()}`,
    plan: 'free',
    createdAt: iso(),
    ...overrides,
  }
}

function makeKey (accountId: string, overrides: Partial<ApiKeyRecord> = {}): ApiKeyRecord {
  return {
    id: nextId('key'),
    accountId,
    name: `key ${unique()}`,
    keyHash: `hash-${unique()}${unique()}`,
    keyPrefix: `svc_${unique().slice(0, 6)}`,
    createdAt: iso(),
    lastUsedAt: null,
    revokedAt: null,
    permission: 'full_access',
    ...overrides,
  }
}

function makeWebhook (accountId: string, overrides: Partial<WebhookRecord> = {}): WebhookRecord {
  const now = iso()
  return {
    id: nextId('wh'),
    accountId,
    url: `https://hooks.example.test/${unique()}`,
    events: ['email.sent', 'email.delivered'],
    secret: `whsec_${unique()}`,
    previousSecret: null,
    previousSecretExpiresAt: null,
    status: 'enabled',
    rateLimit: null,
    createdAt: now,
    updatedAt: now,
    ...overrides,
  }
}

function makeSession (accountId: string, overrides: Partial<SessionRecord> = {}): SessionRecord {
  return {
    tokenHash: `session-${unique()}${unique()}`,
    accountId,
    createdAt: iso(),
    expiresAt: iso(Date.now() + 24 * HOUR),
    ...overrides,
  }
}

function tally (results: string[]): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const r of results) counts[r] = (counts[r] ?? 0) + 1
  return counts
}

export function storeContract (name: string, make: MakeStore): void {
  describe(`${name} store`, () => {
    let made: MadeStore
    let store: Store

    before(async () => {
      made = await make()
      store = made.store
    })

    after(async () => {
      await made?.cleanup()
    })

    async function newAccount (overrides: Partial<AccountRecord> = {}): Promise<AccountRecord> {
      const account = makeAccount(overrides)
      assert.equal(await store.createAccount(account), 'created')
      return account
    }

    test('ping resolves', async () => {
      await store.ping()
    })

    // Accounts

    test('createAccount stores the account; it is found by id and by email', async () => {
      const account = makeAccount()
      assert.equal(await store.createAccount(account), 'created')
      assert.deepEqual(await store.findAccountById(account.id), account)
      assert.deepEqual(await store.findAccountByEmail(account.email), account)
    })

    test("createAccount answers 'email_taken' for an existing email and changes nothing", async () => {
      const first = await newAccount()
      const second = makeAccount({ email: first.email, plan: 'pro' })
      assert.equal(await store.createAccount(second), 'email_taken')
      assert.equal(await store.findAccountById(second.id), null)
      assert.deepEqual(await store.findAccountByEmail(first.email), first)
    })

    test("createAccount with onlyIfFirst answers 'not_first' once any account exists, and stores nothing", async () => {
      await newAccount()
      const late = makeAccount()
      assert.equal(await store.createAccount(late, { onlyIfFirst: true }), 'not_first')
      assert.equal(await store.findAccountById(late.id), null)
    })

    test('setAccountPassword replaces the hash; deleteAccountSessions ends every session of the account but the one kept', async () => {
      const a = await newAccount()
      const other = await newAccount()
      assert.equal(await store.setAccountPassword(a.id, 'scrypt$new'), true)
      assert.equal((await store.findAccountById(a.id))?.passwordHash, 'scrypt$new')
      assert.equal(await store.setAccountPassword(nextId('acct'), 'x'), false)
      const session = (accountId: string): SessionRecord => ({ tokenHash: `t-${unique()}`, accountId, createdAt: iso(), expiresAt: iso(Date.now() + HOUR) })
      const [keep, s2, s3, theirs] = [session(a.id), session(a.id), session(a.id), session(other.id)]
      for (const s of [keep, s2, s3, theirs]) await store.createSession(s)
      assert.equal(await store.deleteAccountSessions(a.id, keep.tokenHash), 2)
      assert.notEqual(await store.findSession(keep.tokenHash), null)
      assert.equal(await store.findSession(s2.tokenHash), null)
      assert.notEqual(await store.findSession(theirs.tokenHash), null, "another account's sessions stay")
      assert.equal(await store.deleteAccountSessions(a.id, null), 1)
      assert.equal(await store.findSession(keep.tokenHash), null)
    })

    test('findAccountById and findAccountByEmail return null when absent', async () => {
      assert.equal(await store.findAccountById(nextId('acct')), null)
      assert.equal(await store.findAccountByEmail(`nobody-${unique()}@example.test`), null)
    })

    test('setAccountPlan changes only the plan and returns true; false for an unknown account', async () => {
      const account = await newAccount()
      assert.equal(await store.setAccountPlan(account.id, 'pro'), true)
      assert.deepEqual(await store.findAccountById(account.id), { ...account, plan: 'pro' })
      assert.equal(await store.setAccountPlan(account.id, 'pro'), true, 'setting the same plan again still finds the account')
      assert.equal(await store.setAccountPlan(nextId('acct'), 'pro'), false)
    })

    // Sessions

    test('sessions: create, find, extend, delete', async () => {
      const account = await newAccount()
      const session = makeSession(account.id)
      await store.createSession(session)
      assert.deepEqual(await store.findSession(session.tokenHash), session)

      const later = iso(Date.now() + 48 * HOUR)
      await store.extendSession(session.tokenHash, later)
      assert.deepEqual(await store.findSession(session.tokenHash), { ...session, expiresAt: later })

      await store.deleteSession(session.tokenHash)
      assert.equal(await store.findSession(session.tokenHash), null)
    })

    test('sessions: absent ones are null; extending or deleting them resolves and creates nothing', async () => {
      const tokenHash = `session-${unique()}`
      assert.equal(await store.findSession(tokenHash), null)
      await store.extendSession(tokenHash, iso(Date.now() + HOUR))
      await store.deleteSession(tokenHash)
      assert.equal(await store.findSession(tokenHash), null)
    })

    test('deleteExpiredSessions removes only the sessions that expired before now and counts them', async () => {
      // deleteExpiredSessions is store-wide: clear what other tests left (everything before `now`) first.
      // `now` lies in the future so that no background expiry (a TTL index) races with this test.
      const now = Date.now() + 30 * 24 * HOUR
      await store.deleteExpiredSessions(iso(now))
      const account = await newAccount()
      const expired = [makeSession(account.id, { expiresAt: iso(now - 2 * HOUR) }), makeSession(account.id, { expiresAt: iso(now - 1) })]
      const live = [makeSession(account.id, { expiresAt: iso(now + 1) }), makeSession(account.id, { expiresAt: iso(now + HOUR) })]
      for (const s of [...expired, ...live]) await store.createSession(s)

      assert.equal(await store.deleteExpiredSessions(iso(now)), 2)
      for (const s of expired) assert.equal(await store.findSession(s.tokenHash), null)
      for (const s of live) assert.deepEqual(await store.findSession(s.tokenHash), s)
      assert.equal(await store.deleteExpiredSessions(iso(now)), 0, 'nothing left to remove')
    })

    // API keys

    test('insertApiKey stores the key; findApiKeyByHash finds it, null for an unknown hash', async () => {
      const account = await newAccount()
      const key = makeKey(account.id)
      assert.equal(await store.insertApiKey(key, 3), 'created')
      assert.deepEqual(await store.findApiKeyByHash(key.keyHash), key)
      assert.equal(await store.countActiveApiKeys(account.id), 1)
      assert.equal(await store.findApiKeyByHash(`hash-${unique()}`), null)
    })

    test('an API key keeps its permission: found by hash, listed and revoked with it', async () => {
      const account = await newAccount()
      const sending = makeKey(account.id, { permission: 'sending_access' })
      const full = makeKey(account.id)
      assert.equal(await store.insertApiKey(sending, 3), 'created')
      assert.equal(await store.insertApiKey(full, 3), 'created')
      assert.equal((await store.findApiKeyByHash(sending.keyHash))?.permission, 'sending_access')
      assert.equal((await store.findApiKeyByHash(full.keyHash))?.permission, 'full_access')
      const listed = new Map((await store.listApiKeys(account.id)).map((k) => [k.id, k.permission]))
      assert.deepEqual(Object.fromEntries(listed), { [sending.id]: 'sending_access', [full.id]: 'full_access' })
      assert.equal((await store.revokeApiKey(account.id, sending.id, iso()))?.permission, 'sending_access')
    })

    test('insertApiKey counts only active keys against the limit', async () => {
      const account = await newAccount()
      const keys = [makeKey(account.id), makeKey(account.id), makeKey(account.id)]
      for (const k of keys) assert.equal(await store.insertApiKey(k, 3), 'created')
      const refused = makeKey(account.id)
      assert.equal(await store.insertApiKey(refused, 3), 'limit_reached')
      assert.equal(await store.findApiKeyByHash(refused.keyHash), null, 'a refused key is not stored')

      assert.notEqual(await store.revokeApiKey(account.id, keys[1]!.id, iso()), null)
      assert.equal(await store.countActiveApiKeys(account.id), 2)
      assert.equal(await store.insertApiKey(makeKey(account.id), 3), 'created', 'a revoked key frees its slot')
      assert.equal(await store.insertApiKey(makeKey(account.id), 3), 'limit_reached')
      assert.equal(await store.countActiveApiKeys(account.id), 3)
      assert.equal((await store.listApiKeys(account.id)).length, 4)
    })

    test('insertApiKey: limits are per account', async () => {
      const a = await newAccount()
      const b = await newAccount()
      assert.equal(await store.insertApiKey(makeKey(a.id), 1), 'created')
      assert.equal(await store.insertApiKey(makeKey(a.id), 1), 'limit_reached')
      assert.equal(await store.insertApiKey(makeKey(b.id), 1), 'created')
      assert.equal(await store.countActiveApiKeys(b.id), 1)
    })

    test('insertApiKey refuses when the account already has more active keys than the limit (plan lowered)', async () => {
      const account = await newAccount()
      for (let i = 0; i < 3; i++) assert.equal(await store.insertApiKey(makeKey(account.id), 10), 'created')
      assert.equal(await store.insertApiKey(makeKey(account.id), 2), 'limit_reached')
      assert.equal(await store.insertApiKey(makeKey(account.id), 0), 'limit_reached')
      assert.equal(await store.countActiveApiKeys(account.id), 3)
    })

    test('insertApiKey is atomic: 20 concurrent inserts with limit 3 create exactly 3', async () => {
      const account = await newAccount()
      const keys = Array.from({ length: 20 }, () => makeKey(account.id))
      const results = await Promise.all(keys.map((k) => store.insertApiKey(k, 3)))
      assert.deepEqual(tally(results), { created: 3, limit_reached: 17 })
      assert.equal(await store.countActiveApiKeys(account.id), 3)
      const listed = await store.listApiKeys(account.id)
      assert.equal(listed.length, 3)
      const createdIds = keys.filter((_, i) => results[i] === 'created').map((k) => k.id).sort()
      assert.deepEqual(listed.map((k) => k.id).sort(), createdIds)
    })

    test('insertApiKey: a key whose insert fails (duplicate keyHash) rejects and takes no slot', async () => {
      const account = await newAccount()
      const first = makeKey(account.id)
      assert.equal(await store.insertApiKey(first, 2), 'created')
      const clash = makeKey(account.id, { keyHash: first.keyHash })
      await assert.rejects(store.insertApiKey(clash, 2))
      assert.deepEqual(await store.findApiKeyByHash(first.keyHash), first)
      assert.equal(await store.countActiveApiKeys(account.id), 1)
      assert.equal(await store.insertApiKey(makeKey(account.id), 2), 'created', 'the failed insert left its slot free')
      assert.equal(await store.insertApiKey(makeKey(account.id), 2), 'limit_reached')
    })

    test('listApiKeys returns the account\'s keys newest first, revoked included; [] when none', async () => {
      const account = await newAccount()
      const other = await newAccount()
      const [k1, k2, k3] = [makeKey(account.id), makeKey(account.id), makeKey(account.id)]
      // Inserted out of order: the order comes from the ids, not from the insertion.
      for (const k of [k2, k3, k1]) assert.equal(await store.insertApiKey(k, 10), 'created')
      assert.equal(await store.insertApiKey(makeKey(other.id), 10), 'created')
      const revoked = await store.revokeApiKey(account.id, k2.id, iso())
      assert.ok(revoked)

      const listed = await store.listApiKeys(account.id)
      assert.deepEqual(listed.map((k) => k.id), [k3.id, k2.id, k1.id])
      assert.deepEqual(listed[0], k3)
      assert.deepEqual(listed[1], revoked)
      assert.deepEqual(await store.listApiKeys((await newAccount()).id), [])
      assert.deepEqual(await store.listApiKeys(nextId('acct')), [])
    })

    test('revokeApiKey sets revokedAt, is idempotent and keeps the first revocation time', async () => {
      const account = await newAccount()
      const key = makeKey(account.id)
      assert.equal(await store.insertApiKey(key, 2), 'created')
      const at = iso()
      assert.deepEqual(await store.revokeApiKey(account.id, key.id, at), { ...key, revokedAt: at })
      const again = await store.revokeApiKey(account.id, key.id, iso(Date.now() + HOUR))
      assert.deepEqual(again, { ...key, revokedAt: at })
      assert.deepEqual(await store.findApiKeyByHash(key.keyHash), { ...key, revokedAt: at })
      assert.equal(await store.countActiveApiKeys(account.id), 0)
      // A second revocation must not free a second slot: limit 2 still admits exactly 2 more.
      const results = await Promise.all([1, 2, 3].map(() => store.insertApiKey(makeKey(account.id), 2)))
      assert.deepEqual(tally(results), { created: 2, limit_reached: 1 })
    })

    test("revokeApiKey returns null for another account's key (which stays active) and for an unknown id", async () => {
      const owner = await newAccount()
      const intruder = await newAccount()
      const key = makeKey(owner.id)
      assert.equal(await store.insertApiKey(key, 1), 'created')
      assert.equal(await store.revokeApiKey(intruder.id, key.id, iso()), null)
      assert.deepEqual(await store.findApiKeyByHash(key.keyHash), key)
      assert.equal(await store.countActiveApiKeys(owner.id), 1)
      assert.equal(await store.insertApiKey(makeKey(owner.id), 1), 'limit_reached', 'the slot is still taken')
      assert.equal(await store.revokeApiKey(owner.id, nextId('key'), iso()), null)
    })

    test('touchApiKeys records last use, never moves it backwards, and ignores unknown ids', async () => {
      const account = await newAccount()
      const [a, b] = [makeKey(account.id), makeKey(account.id)]
      for (const k of [a, b]) assert.equal(await store.insertApiKey(k, 5), 'created')
      const t0 = Date.now()
      const [t1, t2, t3] = [iso(t0 + 1000), iso(t0 + 2000), iso(t0 + 3000)]

      await store.touchApiKeys([])
      await store.touchApiKeys([{ id: a.id, lastUsedAt: t2 }, { id: nextId('key'), lastUsedAt: t2 }])
      assert.equal((await store.findApiKeyByHash(a.keyHash))?.lastUsedAt, t2)
      assert.equal((await store.findApiKeyByHash(b.keyHash))?.lastUsedAt, null, 'other keys untouched')

      await store.touchApiKeys([{ id: a.id, lastUsedAt: t1 }])
      assert.equal((await store.findApiKeyByHash(a.keyHash))?.lastUsedAt, t2, 'an earlier use does not move it back')

      // Several uses of one key in one batch, in any order: the latest wins.
      await store.touchApiKeys([{ id: a.id, lastUsedAt: t3 }, { id: a.id, lastUsedAt: t1 }, { id: b.id, lastUsedAt: t1 }])
      assert.equal((await store.findApiKeyByHash(a.keyHash))?.lastUsedAt, t3)
      assert.equal((await store.findApiKeyByHash(b.keyHash))?.lastUsedAt, t1)

      const listed = await store.listApiKeys(account.id)
      assert.equal(listed.length, 2, 'unknown ids create nothing')
      assert.deepEqual(listed.find((k) => k.id === a.id), { ...a, lastUsedAt: t3 })
    })

    test('touchApiKeys also records use on a revoked key without un-revoking it', async () => {
      const account = await newAccount()
      const key = makeKey(account.id)
      assert.equal(await store.insertApiKey(key, 1), 'created')
      const at = iso()
      await store.revokeApiKey(account.id, key.id, at)
      const used = iso(Date.now() + 1000)
      await store.touchApiKeys([{ id: key.id, lastUsedAt: used }])
      assert.deepEqual(await store.findApiKeyByHash(key.keyHash), { ...key, revokedAt: at, lastUsedAt: used })
      assert.equal(await store.countActiveApiKeys(account.id), 0)
    })

    // Webhooks

    test('insertWebhook stores the webhook; findWebhook and countWebhooks see it; events round-trip', async () => {
      const account = await newAccount()
      const webhook = makeWebhook(account.id, {
        events: ['email.sent', 'email.delivered', 'email.opened', 'email.clicked', 'email.bounced', 'email.complained', 'email.unsubscribed'],
        previousSecret: 'whsec_old',
        previousSecretExpiresAt: iso(Date.now() + HOUR),
        status: 'auto_disabled',
      })
      assert.equal(await store.insertWebhook(webhook, 5), 'created')
      assert.deepEqual(await store.findWebhook(account.id, webhook.id), webhook)
      assert.equal(await store.countWebhooks(account.id), 1)

      const empty = makeWebhook(account.id, { events: [] })
      assert.equal(await store.insertWebhook(empty, 5), 'created')
      assert.deepEqual(await store.findWebhook(account.id, empty.id), empty)
    })

    test('findWebhook returns null for an unknown id; countWebhooks is 0 for an account without any', async () => {
      const account = await newAccount()
      assert.equal(await store.findWebhook(account.id, nextId('wh')), null)
      assert.equal(await store.countWebhooks(account.id), 0)
      assert.deepEqual(await store.listWebhooks(account.id), [])
    })

    test('insertWebhook counts only webhooks that are not deleted against the limit', async () => {
      const account = await newAccount()
      const hooks = [makeWebhook(account.id), makeWebhook(account.id)]
      for (const w of hooks) assert.equal(await store.insertWebhook(w, 2), 'created')
      const refused = makeWebhook(account.id)
      assert.equal(await store.insertWebhook(refused, 2), 'limit_reached')
      assert.equal(await store.findWebhook(account.id, refused.id), null, 'a refused webhook is not stored')

      assert.equal(await store.deleteWebhook(account.id, hooks[0]!.id, iso()), true)
      assert.equal(await store.countWebhooks(account.id), 1)
      assert.equal(await store.insertWebhook(makeWebhook(account.id), 2), 'created', 'a deleted webhook frees its slot')
      assert.equal(await store.insertWebhook(makeWebhook(account.id), 2), 'limit_reached')
      assert.equal(await store.countWebhooks(account.id), 2)
    })

    test('insertWebhook is atomic: 20 concurrent inserts with limit 3 create exactly 3', async () => {
      const account = await newAccount()
      const hooks = Array.from({ length: 20 }, () => makeWebhook(account.id))
      const results = await Promise.all(hooks.map((w) => store.insertWebhook(w, 3)))
      assert.deepEqual(tally(results), { created: 3, limit_reached: 17 })
      assert.equal(await store.countWebhooks(account.id), 3)
      assert.equal((await store.listWebhooks(account.id)).length, 3)
    })

    test('insertWebhook: a webhook whose insert fails (duplicate id) rejects and takes no slot', async () => {
      const account = await newAccount()
      const first = makeWebhook(account.id)
      assert.equal(await store.insertWebhook(first, 2), 'created')
      await assert.rejects(store.insertWebhook({ ...makeWebhook(account.id), id: first.id }, 2))
      assert.deepEqual(await store.findWebhook(account.id, first.id), first)
      assert.equal(await store.countWebhooks(account.id), 1)
      assert.equal(await store.insertWebhook(makeWebhook(account.id), 2), 'created')
      assert.equal(await store.insertWebhook(makeWebhook(account.id), 2), 'limit_reached')
    })

    test('listWebhooks returns the account\'s webhooks newest first', async () => {
      const account = await newAccount()
      const other = await newAccount()
      const [w1, w2, w3] = [makeWebhook(account.id), makeWebhook(account.id), makeWebhook(account.id)]
      for (const w of [w3, w1, w2]) assert.equal(await store.insertWebhook(w, 10), 'created')
      assert.equal(await store.insertWebhook(makeWebhook(other.id), 10), 'created')
      assert.deepEqual(await store.listWebhooks(account.id), [w3, w2, w1])
    })

    test('a deleted webhook is gone from find, list, update, delete and count', async () => {
      const account = await newAccount()
      const [kept, gone] = [makeWebhook(account.id), makeWebhook(account.id)]
      for (const w of [kept, gone]) assert.equal(await store.insertWebhook(w, 10), 'created')
      assert.equal(await store.deleteWebhook(account.id, gone.id, iso()), true)

      assert.equal(await store.findWebhook(account.id, gone.id), null)
      assert.deepEqual(await store.listWebhooks(account.id), [kept])
      assert.equal(await store.updateWebhook(account.id, gone.id, { url: 'https://hooks.example.test/back' }, iso()), null)
      assert.equal(await store.findWebhook(account.id, gone.id), null, 'an update does not bring it back')
      assert.equal(await store.deleteWebhook(account.id, gone.id, iso()), false)
      assert.equal(await store.countWebhooks(account.id), 1)
      assert.equal(await store.deleteWebhook(account.id, nextId('wh'), iso()), false)
    })

    test('countWebhooksByStatus counts every account\'s webhooks by status, deleted ones left out', async () => {
      const before = await store.countWebhooksByStatus()
      const [a, b] = [await newAccount(), await newAccount()]
      const hooks = [makeWebhook(a.id), makeWebhook(a.id), makeWebhook(b.id), makeWebhook(b.id), makeWebhook(b.id)]
      for (const w of hooks) assert.equal(await store.insertWebhook(w, 10), 'created')
      await store.updateWebhook(a.id, hooks[1]!.id, { status: 'disabled' }, iso())
      await store.updateWebhook(b.id, hooks[2]!.id, { status: 'auto_disabled' }, iso())
      assert.equal(await store.deleteWebhook(b.id, hooks[3]!.id, iso()), true)
      assert.deepEqual(await store.countWebhooksByStatus(), {
        enabled: before.enabled + 2, disabled: before.disabled + 1, auto_disabled: before.auto_disabled + 1,
      })
    })

    test('a second delete does not free a second slot', async () => {
      const account = await newAccount()
      const w = makeWebhook(account.id)
      assert.equal(await store.insertWebhook(w, 2), 'created')
      assert.equal(await store.deleteWebhook(account.id, w.id, iso()), true)
      assert.equal(await store.deleteWebhook(account.id, w.id, iso()), false)
      const results = await Promise.all([1, 2, 3].map(() => store.insertWebhook(makeWebhook(account.id), 2)))
      assert.deepEqual(tally(results), { created: 2, limit_reached: 1 })
    })

    test('updateWebhook applies only the given fields, sets updatedAt, and returns what find returns', async () => {
      const account = await newAccount()
      const w = makeWebhook(account.id)
      assert.equal(await store.insertWebhook(w, 5), 'created')

      const t1 = iso(Date.now() + 1000)
      const afterUrl = await store.updateWebhook(account.id, w.id, { url: 'https://hooks.example.test/new' }, t1)
      assert.deepEqual(afterUrl, { ...w, url: 'https://hooks.example.test/new', updatedAt: t1 })
      assert.deepEqual(await store.findWebhook(account.id, w.id), afterUrl)

      // Rotation: every other field at once, nullable ones set to values.
      const t2 = iso(Date.now() + 2000)
      const rotation = {
        events: ['email.bounced' as const],
        status: 'disabled' as const,
        secret: 'whsec_rotated',
        previousSecret: w.secret,
        previousSecretExpiresAt: iso(Date.now() + 24 * HOUR),
      }
      const rotated = await store.updateWebhook(account.id, w.id, rotation, t2)
      assert.deepEqual(rotated, { ...afterUrl, ...rotation, updatedAt: t2 })
      assert.deepEqual(await store.findWebhook(account.id, w.id), rotated)

      // Fields the patch does not name keep their values, the nullable ones included.
      const t25 = iso(Date.now() + 2500)
      const enabled = await store.updateWebhook(account.id, w.id, { status: 'enabled' }, t25)
      assert.deepEqual(enabled, { ...rotated, status: 'enabled', updatedAt: t25 })
      assert.deepEqual(await store.findWebhook(account.id, w.id), enabled)

      // null clears a nullable field; a key present with the value undefined is "not given".
      const t3 = iso(Date.now() + 3000)
      const cleared = await store.updateWebhook(account.id, w.id,
        { previousSecret: null, previousSecretExpiresAt: null, url: undefined, events: undefined }, t3)
      assert.deepEqual(cleared, { ...enabled, previousSecret: null, previousSecretExpiresAt: null, updatedAt: t3 })

      // An empty patch still sets updatedAt.
      const t4 = iso(Date.now() + 4000)
      assert.deepEqual(await store.updateWebhook(account.id, w.id, {}, t4), { ...cleared, updatedAt: t4 })
      assert.deepEqual(await store.findWebhook(account.id, w.id), { ...cleared, updatedAt: t4 })
      assert.equal(await store.updateWebhook(account.id, nextId('wh'), { status: 'disabled' }, t4), null)
    })

    test("another account's webhook is invisible to find, list, update, delete and count", async () => {
      const owner = await newAccount()
      const intruder = await newAccount()
      const w = makeWebhook(owner.id)
      assert.equal(await store.insertWebhook(w, 5), 'created')

      assert.equal(await store.findWebhook(intruder.id, w.id), null)
      assert.deepEqual(await store.listWebhooks(intruder.id), [])
      assert.equal(await store.countWebhooks(intruder.id), 0)
      assert.equal(await store.updateWebhook(intruder.id, w.id, { url: 'https://evil.example.test/' }, iso()), null)
      assert.equal(await store.deleteWebhook(intruder.id, w.id, iso()), false)
      assert.deepEqual(await store.findWebhook(owner.id, w.id), w, 'unchanged and not deleted')
      assert.equal(await store.countWebhooks(owner.id), 1)
    })

    // Values from requests are data, never query syntax.

    test('strings that look like query operators or SQL round-trip as plain data', async () => {
      const tricky = ['$ne', '$where', '{"$ne":null}', "'; DROP TABLE accounts; --", 'a\u0000b', '$gt.$lt', "\\'\"%_*"]
      const bystander = await newAccount()
      for (const [i, value] of tricky.entries()) {
        const account = makeAccount({ email: `${value}${unique()}@example.test`, passwordHash: value })
        assert.equal(await store.createAccount(account), 'created', `account ${i}`)
        assert.deepEqual(await store.findAccountByEmail(account.email), account)
        assert.deepEqual(await store.findAccountById(account.id), account)
        assert.equal(await store.findAccountByEmail(value), null, 'an operator-like email matches nothing')
        assert.equal(await store.findAccountById(value), null)

        const key = makeKey(account.id, { name: value, keyHash: `${value}${unique()}`, keyPrefix: value })
        assert.equal(await store.insertApiKey(key, 5), 'created')
        assert.deepEqual(await store.findApiKeyByHash(key.keyHash), key)
        assert.equal(await store.findApiKeyByHash(value), null)
        assert.equal(await store.revokeApiKey(account.id, value, iso()), null)
        assert.equal(await store.revokeApiKey(value, key.id, iso()), null)
        assert.deepEqual(await store.listApiKeys(value), [])
        assert.equal(await store.countActiveApiKeys(value), 0)

        const w = makeWebhook(account.id, { url: `https://hooks.example.test/${value}`, secret: value, previousSecret: value })
        assert.equal(await store.insertWebhook(w, 5), 'created')
        assert.deepEqual(await store.findWebhook(account.id, w.id), w)
        assert.equal(await store.findWebhook(value, w.id), null)
        assert.equal(await store.findWebhook(account.id, value), null)
        const updated = await store.updateWebhook(account.id, w.id, { url: value, secret: value }, iso())
        assert.equal(updated?.url, value)
        assert.equal(updated?.secret, value)
        assert.equal(await store.updateWebhook(value, w.id, { url: 'x' }, iso()), null)
        assert.equal(await store.deleteWebhook(value, w.id, iso()), false)
        assert.equal(await store.countWebhooks(value), 0)

        const session = makeSession(account.id, { tokenHash: `${value}${unique()}` })
        await store.createSession(session)
        assert.deepEqual(await store.findSession(session.tokenHash), session)
        assert.equal(await store.findSession(value), null)
        await store.deleteSession(value)
        assert.deepEqual(await store.findSession(session.tokenHash), session)
        assert.equal(await store.setAccountPlan(value, 'pro'), false)
      }
      assert.deepEqual(await store.findAccountById(bystander.id), bystander, 'nothing was dropped or rewritten')
    })

    // The closed-signup rule under concurrency (each case on a store of its own).
    accountCreationCases(make)
    // Sending: emails and the mail queue, idempotency keys, suppressions, tracking events.
    emailStoreCases(() => store, make)
    // The dashboard's reads: the email list and the event counts.
    emailListCases(() => store)
    // Scheduled sends (moved, canceled, looked ahead to), the tag filter, a domain's tracking defaults.
    scheduleCases(() => store)
    // Received mail: the receiving switch, messages with their bytes and event.
    receivedCases(() => store)
    // Templates: heads, versions, races between changes, deletion.
    templateCases(() => store)
    // Attachments: the facts with the email, the bytes once per email, pruned once it is final.
    attachmentCases(() => store)

    // Persistence: the suite's own store stays open, so this test makes (and closes) its own.

    test('data survives close and reopen', async () => {
      const own = await make()
      try {
        const s = own.store
        const account = makeAccount()
        const key = makeKey(account.id)
        const webhook = makeWebhook(account.id)
        const session = makeSession(account.id)
        assert.equal(await s.createAccount(account), 'created')
        assert.equal(await s.insertApiKey(key, 1), 'created')
        assert.equal(await s.insertWebhook(webhook, 1), 'created')
        await s.createSession(session)
        await s.close()

        const reopened = await own.reopen()
        assert.deepEqual(await reopened.findAccountById(account.id), account)
        assert.deepEqual(await reopened.findApiKeyByHash(key.keyHash), key)
        assert.deepEqual(await reopened.findWebhook(account.id, webhook.id), webhook)
        assert.deepEqual(await reopened.findSession(session.tokenHash), session)
        // The limits still hold after a reopen.
        assert.equal(await reopened.insertApiKey(makeKey(account.id), 1), 'limit_reached')
        assert.equal(await reopened.insertWebhook(makeWebhook(account.id), 1), 'limit_reached')
      } finally {
        await own.cleanup()
      }
    })

    // Several nodes: rate-limit counters every node shares, and noticing other processes' writes.

    test('hitRateLimit counts the hits on one key and window from 1, each count once, however concurrent', async () => {
      const key = `rl-${unique()}`
      const windowStart = Math.floor(Date.now() / 1000) * 1000
      const hit = { key, windowStart, windowEnd: windowStart + 1000 }
      const counts = await Promise.all(Array.from({ length: 40 }, () => store.hitRateLimit(hit)))
      assert.deepEqual([...counts].sort((a, b) => a - b), Array.from({ length: 40 }, (_, i) => i + 1))
      assert.equal(await store.hitRateLimit(hit), 41)
      assert.equal(await store.hitRateLimit({ ...hit, key: `${key}-other` }), 1, 'another key counts apart')
    })

    test('hitRateLimit: a later window starts at 1 and counts on from there', async () => {
      const key = `rl-${unique()}`
      const w1 = { key, windowStart: 1_000_000, windowEnd: 1_060_000 }
      const w2 = { key, windowStart: 1_060_000, windowEnd: 1_120_000 }
      assert.equal(await store.hitRateLimit(w1), 1)
      assert.equal(await store.hitRateLimit(w1), 2)
      assert.equal(await store.hitRateLimit(w2), 1)
      assert.equal(await store.hitRateLimit(w2), 2)
    })

    test('hitRateLimit: two stores on the same data (two nodes) share one count', async () => {
      const own = await make()
      try {
        const other = await own.reopen()
        const key = `rl-${unique()}`
        const windowStart = Math.floor(Date.now() / 1000) * 1000
        const hit = { key, windowStart, windowEnd: windowStart + 1000 }
        const counts = await Promise.all(Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? own.store : other).hitRateLimit(hit)))
        assert.deepEqual([...counts].sort((a, b) => a - b), Array.from({ length: 30 }, (_, i) => i + 1), 'no hit counted twice or lost')
      } finally {
        await own.cleanup()
      }
    })

    test('pruneRateLimits removes the windows that have ended and keeps the others', async () => {
      const ended = { key: `rl-${unique()}`, windowStart: 2_000_000, windowEnd: 2_001_000 }
      const open = { key: `rl-${unique()}`, windowStart: 2_000_500, windowEnd: 2_001_500 }
      await store.hitRateLimit(ended)
      await store.hitRateLimit(ended)
      await store.hitRateLimit(open)
      assert.ok(await store.pruneRateLimits(2_001_000) >= 1)
      assert.equal(await store.hitRateLimit(ended), 1, 'the ended window was forgotten')
      assert.equal(await store.hitRateLimit(open), 2, 'the open window was kept')
    })

    test('externalWriteVersion changes on another store\'s write to the same data, not on this one\'s own', async (t) => {
      const own = await make()
      try {
        const first = await own.store.externalWriteVersion()
        if (first === null) {
          t.skip(`the ${name} store has no write version; other nodes' writes are found by polling`)
          return
        }
        await own.store.createAccount(makeAccount())
        assert.equal(await own.store.externalWriteVersion(), first, 'its own writes do not count')
        const other = await own.reopen()
        await other.createAccount(makeAccount())
        assert.notEqual(await own.store.externalWriteVersion(), first, 'another store\'s write changed it')
      } finally {
        await own.cleanup()
      }
    })

    test('the secret check value: none at first; the first one kept is kept, across stores on the same data', async () => {
      const own = await make()
      try {
        assert.equal(await own.store.secretCheck(), null)
        // Two at once (two processes starting on a new store): one value is kept, and both are told it.
        const [x, y] = await Promise.all([own.store.initSecretCheck('v1.first'), own.store.initSecretCheck('v1.second')])
        assert.equal(x, y)
        assert.ok(x === 'v1.first' || x === 'v1.second')
        assert.equal(await own.store.secretCheck(), x)
        assert.equal(await own.store.initSecretCheck('v1.later'), x, 'a later value does not replace it')
        const other = await own.reopen()
        assert.equal(await other.secretCheck(), x)
        assert.equal(await other.initSecretCheck('v1.other'), x)
      } finally {
        await own.cleanup()
      }
    })
  })
}
