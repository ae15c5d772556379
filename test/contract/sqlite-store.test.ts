// The Store contract against the embedded SQLite adapter (a real file in a temporary directory), then
// what only SQLite promises: WAL, migrations that run once, a file shared by two processes (the CLI and
// the server), and group commit that isolates a failing write.
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { newId } from '../../src/domain/ids.js'
import Database from 'better-sqlite3'
import { migrate, openSqliteStore, type SqliteStore } from '../../src/store/sqlite/index.js'
import { migrations } from '../../src/store/sqlite/migrations.js'
import type { AccountRecord, ApiKeyRecord, WebhookRecord } from '../../src/store/types.js'
import type { RoutingPosition } from '../../src/store/deliveries.js'
import { eventPayload, type EventRecord } from '../../src/domain/events.js'
import { storeContract, type MadeStore } from './store-contract.js'
import { deliveryContract } from './delivery-contract.js'

async function makeSqlite (): Promise<MadeStore & { dir: string; open(): SqliteStore }> {
  const dir = await mkdtemp(join(tmpdir(), 'svc-sqlite-'))
  const opened: SqliteStore[] = []
  const open = (): SqliteStore => {
    const s = openSqliteStore({ dataDir: dir })
    opened.push(s)
    return s
  }
  return {
    dir,
    open,
    store: open(),
    reopen: async () => open(),
    cleanup: async () => {
      for (const s of opened) await s.close()
      await rm(dir, { recursive: true, force: true })
    },
  }
}

storeContract('sqlite', makeSqlite)
deliveryContract('sqlite', makeSqlite)

let seq = 0
let clock = Date.now() // increasing ids, so that "newest first" is deterministic
const stamp = (): string => `${Date.now()}-${++seq}`
const iso = (): string => new Date().toISOString()

function account (): AccountRecord {
  return { id: newId('acct'), email: `sqlite-${stamp()}@example.test`, passwordHash: 'h', plan: 'free', createdAt: iso() }
}

function key (accountId: string, overrides: Partial<ApiKeyRecord> = {}): ApiKeyRecord {
  return {
    id: newId('key', ++clock), accountId, name: 'k', keyHash: `hash-${stamp()}`, keyPrefix: 'svc_x',
    createdAt: iso(), lastUsedAt: null, revokedAt: null, permission: 'full_access', ...overrides,
  }
}

describe('sqlite store: adapter-specific', () => {
  let made: Awaited<ReturnType<typeof makeSqlite>>
  let store: SqliteStore

  before(async () => {
    made = await makeSqlite()
    store = made.store as SqliteStore
  })

  after(async () => {
    await made?.cleanup()
  })

  test('runs in WAL mode with foreign keys on; commits with synchronous=NORMAL (the write queue fsyncs the WAL itself)', () => {
    assert.equal(store.db.pragma('journal_mode', { simple: true }), 'wal')
    assert.equal(store.db.pragma('synchronous', { simple: true }), 1)
    assert.equal(store.db.pragma('foreign_keys', { simple: true }), 1)
  })

  test('reopening the same directory keeps the data and does not re-run migrations', async () => {
    const own = await makeSqlite()
    try {
      const first = own.store as SqliteStore
      assert.equal(first.db.pragma('user_version', { simple: true }), migrations.length)
      const a = account()
      assert.equal(await first.createAccount(a), 'created')
      await first.close()

      const second = own.open()
      assert.equal(second.db.pragma('user_version', { simple: true }), migrations.length)
      assert.deepEqual(await second.findAccountById(a.id), a)
      // Re-running a migration would fail on CREATE TABLE of an existing table; a no-op does not.
      assert.doesNotThrow(() => migrate(second.db))
      assert.equal(second.db.pragma('user_version', { simple: true }), migrations.length)
    } finally {
      await own.cleanup()
    }
  })

  test('two processes on one file: a claim reads whole rows for what it did not accept, and the state from the row for what it did, whoever worked on it meanwhile', async () => {
    const own = await makeSqlite()
    try {
      const api = own.store as SqliteStore
      const worker = own.open()
      const a = account()
      assert.equal(await api.createAccount(a), 'created')
      const t = Date.now() + 900 * 86_400_000
      const at = new Date(t - 5).toISOString()
      const mk = (n: number) => ({
        id: newId('em', t - 100 + n), accountId: a.id, from: 'Shop <shop@example.test>', to: [`r${n}@example.test`], cc: [], bcc: [], replyTo: [],
        subject: `s${n}`, html: `<p>${n}</p>`, text: null, headers: { 'X-N': String(n) }, tags: [], suppressed: [],
        recipients: [{ address: `r${n}@example.test`, state: 'pending' as const }], status: 'queued' as const, attempts: 0,
        nextAttemptAt: new Date(t - 10 + n).toISOString(), leaseOwner: null, leaseExpiresAt: null, leaseToken: 0, lastError: null, createdAt: at, updatedAt: at,
      })
      const [e1, e2] = [mk(1), mk(2)]
      assert.deepEqual(await api.acceptEmails({ emails: [e1, e2], events: [] }), { outcome: 'accepted' })
      const iso = (ms: number) => new Date(ms).toISOString()

      // The other process accepted nothing: it reads e1 whole, and defers it.
      const [w1] = await worker.claimDueEmails({ owner: 'worker', dueBy: iso(t), now: t, leaseUntil: t + 60_000, limit: 1 })
      assert.equal(w1?.id, e1.id)
      assert.deepEqual(w1, await worker.findEmail(a.id, e1.id))
      assert.equal(await worker.recordEmailAttempt({
        emailId: e1.id, owner: 'worker', leaseToken: w1.leaseToken, recipients: w1.recipients, status: 'deferred', attempts: 1,
        nextAttemptAt: iso(t + 1000), lastError: '451 later', at: iso(t), events: [], suppressions: [],
      }), true)

      // The accepting process claims both later: e2 as it accepted it; e1 (still held from its
      // acceptance) with the state the other process left: one attempt, its error, a newer token.
      const mine = await api.claimDueEmails({ owner: 'api', dueBy: iso(t + 2000), now: t + 2000, leaseUntil: t + 60_000, limit: 10 })
      assert.deepEqual(mine.map((e) => e.id).sort(), [e1.id, e2.id].sort())
      for (const e of mine) assert.deepEqual(e, await api.findEmail(a.id, e.id), `${e.id} as stored`)
      const again1 = mine.find((e) => e.id === e1.id)!
      assert.equal(again1.attempts, 1)
      assert.equal(again1.lastError, '451 later')
      assert.equal(again1.leaseToken, 2)
    } finally {
      await own.cleanup()
    }
  })

  test('upgrading to the routing cursor routes what was unrouted, and nothing routed before or marked as a test event', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'svc-sqlite-v4-'))
    try {
      // A database as version 4 left it: events marked routed one by one.
      const old = new Database(join(dir, 'svc.db'))
      old.pragma('journal_mode = WAL')
      for (const m of migrations.slice(0, 4)) old.exec(m)
      old.pragma('user_version = 4')
      const insert = old.prepare(`INSERT INTO events (id, account_id, email_id, type, recipient, occurred_at, payload, routed)
                                  VALUES (?, 'acct_x', 'em_x', 'email.sent', 'a@example.test', ?, '{}', ?)`)
      const at = new Date().toISOString()
      for (const [id, routed] of [['evt_1', 1], ['evt_2', 0], ['evt_3', 1], ['evt_4', 0], ['evt_5', 1]] as const) insert.run(id, at, routed)
      old.close()

      const store = openSqliteStore({ dataDir: dir })
      try {
        const now = Date.now()
        assert.equal((await store.deliveryStats()).unroutedEvents, 2)
        const first = await store.routeEvents({ owner: 'n', now, leaseUntil: now + 1000, limit: 10 })
        assert.equal(first.events, 2, 'evt_2 and evt_4')
        assert.equal((await store.routeEvents({ owner: 'n', now, leaseUntil: now + 1000, limit: 10 })).events, 0, 'each once')
        assert.equal((await store.deliveryStats()).unroutedEvents, 0)
      } finally {
        await store.close()
      }
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  test('upgrading to key permissions makes every existing key full_access', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'svc-sqlite-perm-'))
    try {
      const at = migrations.findIndex((m) => m.includes('ADD COLUMN permission'))
      assert.ok(at > 0)
      const old = new Database(join(dir, 'svc.db'))
      old.pragma('journal_mode = WAL')
      for (const m of migrations.slice(0, at)) old.exec(m)
      old.pragma(`user_version = ${at}`)
      old.prepare(`INSERT INTO accounts (id, email, password_hash, plan, created_at) VALUES ('acct_old', 'old@example.test', 'h', 'free', ?)`).run(iso())
      old.prepare(`INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, created_at) VALUES ('key_old', 'acct_old', 'old', 'hash-old', 'svc_sk_old', ?)`).run(iso())
      old.close()
      const store = openSqliteStore({ dataDir: dir })
      try {
        assert.equal((await store.findApiKeyByHash('hash-old'))?.permission, 'full_access')
      } finally {
        await store.close()
      }
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  test('upgrading to leases in ms releases the email leases held in ISO text; the email is due again at once', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'svc-sqlite-lease-ms-'))
    try {
      const at = migrations.findIndex((m) => m.includes('ADD COLUMN lease_expires_at INTEGER'))
      assert.ok(at > 0)
      const old = new Database(join(dir, 'svc.db'))
      old.pragma('journal_mode = WAL')
      for (const m of migrations.slice(0, at)) old.exec(m)
      old.pragma(`user_version = ${at}`)
      const then = new Date(Date.now() - 60_000).toISOString()
      const until = new Date(Date.now() + 3_600_000).toISOString()
      old.prepare(`INSERT INTO accounts (id, email, password_hash, plan, created_at) VALUES ('acct_lease', 'lease@example.test', 'h', 'free', ?)`).run(then)
      old.prepare(`INSERT INTO emails (id, account_id, from_address, to_addresses, cc_addresses, bcc_addresses, reply_to, subject, text, headers,
                     tags, suppressed, recipients, status, attempts, next_attempt_at, lease_owner, lease_expires_at, lease_token, created_at, updated_at)
                   VALUES ('em_lease', 'acct_lease', 'me@example.test', '["you@example.test"]', '[]', '[]', '[]', 'Hi', 'hi', '{}', '[]', '[]',
                     '[{"address":"you@example.test","state":"pending"}]', 'queued', 0, ?, 'old-node', ?, 1, ?, ?)`).run(then, until, then, then)
      old.close()

      const store = openSqliteStore({ dataDir: dir })
      try {
        const e = await store.findEmail('acct_lease', 'em_lease')
        assert.equal(e?.leaseOwner, null)
        assert.equal(e?.leaseExpiresAt, null)
        const now = Date.now()
        const claimed = await store.claimDueEmails({ owner: 'new-node', dueBy: new Date(now).toISOString(), now, leaseUntil: now + 60_000, limit: 10 })
        assert.deepEqual(claimed.map((c) => [c.id, c.leaseOwner, c.leaseExpiresAt, c.leaseToken]), [['em_lease', 'new-node', now + 60_000, 2]])
      } finally {
        await store.close()
      }
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  test('refuses to open a database whose schema is newer than this build', async () => {
    const own = await makeSqlite()
    try {
      const s = own.store as SqliteStore
      s.db.pragma(`user_version = ${migrations.length + 1}`)
      await s.close()
      assert.throws(() => own.open(), /newer than this svc knows/)
    } finally {
      await own.cleanup()
    }
  })

  test("a second store on the same file sees the first one's writes", async () => {
    const other = made.open()
    const a = account()
    assert.equal(await store.createAccount(a), 'created')
    assert.deepEqual(await other.findAccountById(a.id), a)
    const k = key(a.id)
    assert.equal(await other.insertApiKey(k, 3), 'created')
    assert.deepEqual(await store.findApiKeyByHash(k.keyHash), k)
    assert.equal(await other.createAccount({ ...account(), email: a.email }), 'email_taken')
  })

  test('the revocation count grows with each revocation made through either store on the file, and only then', async () => {
    const other = made.open()
    const a = account()
    assert.equal(await store.createAccount(a), 'created')
    const k = key(a.id)
    assert.equal(await store.insertApiKey(k, 3), 'created')
    const before = store.apiKeyRevocations()
    assert.equal(other.apiKeyRevocations(), before)
    await other.touchApiKeys([{ id: k.id, lastUsedAt: iso() }])
    assert.equal(store.apiKeyRevocations(), before, 'other writes leave it alone')
    assert.notEqual(await other.revokeApiKey(a.id, k.id, iso()), null)
    assert.equal(store.apiKeyRevocations(), before + 1, 'seen by the store that did not revoke')
    await other.revokeApiKey(a.id, k.id, iso())
    assert.equal(store.apiKeyRevocations(), before + 1, 'revoking a revoked key changes nothing')
  })

  test('the limit holds across two stores on the same file', async () => {
    const other = made.open()
    const a = account()
    assert.equal(await store.createAccount(a), 'created')
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? store : other).insertApiKey(key(a.id), 3)))
    assert.equal(results.filter((r) => r === 'created').length, 3)
    assert.equal(await other.countActiveApiKeys(a.id), 3)
  })

  test('a failing write in a group commit rejects only its own promise; the others in the same tick commit', async () => {
    const a = account()
    assert.equal(await store.createAccount(a), 'created')
    const k1 = key(a.id)
    const dupId = key(a.id, { id: k1.id })
    const k3 = key(a.id)
    const dupHash = key(a.id, { keyHash: k3.keyHash })
    const k5 = key(a.id)
    const b = account()
    const bDupId = { ...account(), id: b.id }
    // All issued in one tick: one transaction, one savepoint each.
    const settled = await Promise.allSettled([
      store.insertApiKey(k1, 10),
      store.insertApiKey(dupId, 10),
      store.insertApiKey(k3, 10),
      store.insertApiKey(dupHash, 10),
      store.insertApiKey(k5, 10),
      store.createAccount(b),
      store.createAccount(bDupId),
      store.insertApiKey(key(newId('acct')), 10), // no such account: the foreign key refuses it
    ])
    assert.deepEqual(settled.map((s) => s.status), ['fulfilled', 'rejected', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled', 'rejected', 'rejected'])
    assert.deepEqual(settled.filter((s) => s.status === 'fulfilled').map((s) => s.value), ['created', 'created', 'created', 'created'])
    assert.deepEqual((await store.listApiKeys(a.id)).map((k) => k.id), [k5.id, k3.id, k1.id])
    assert.deepEqual(await store.findAccountById(b.id), b)
    assert.equal(await store.findAccountByEmail(bDupId.email), null)
    assert.equal(await store.countActiveApiKeys(a.id), 3)
  })

  test('with an engine listening, events from this store and another one on the file are each read once, in seq order', async () => {
    // The reading store holds the rows it just wrote for the engine (recent-events.ts); a row another
    // process wrote in between is a gap it must not skip.
    const own = await makeSqlite()
    try {
      const mine = own.store as SqliteStore
      const other = own.open()
      const stop = mine.subscribe(() => {})
      const a = account()
      assert.equal(await mine.createAccount(a), 'created')
      const now = Date.now()
      const hook: WebhookRecord = {
        id: newId('wh'), accountId: a.id, url: 'https://hooks.example.test/a', events: ['email.sent'], secret: 'whsec_test',
        previousSecret: null, previousSecretExpiresAt: null, status: 'enabled', rateLimit: null, createdAt: iso(), updatedAt: iso(),
      }
      assert.equal(await mine.insertWebhook(hook, 100), 'created')
      const event = (n: number): EventRecord => {
        const e = { id: newId('evt', now + n), accountId: a.id, emailId: newId('em', now + n), type: 'email.sent' as const, recipient: `r${n}@example.test`, occurredAt: new Date(now + n).toISOString() }
        return { ...e, payload: eventPayload(e) }
      }
      const events = Array.from({ length: 7 }, (_, i) => event(i))
      await mine.insertEvents(events.slice(0, 2))
      await other.insertEvents(events.slice(2, 3))
      await mine.insertEvents(events.slice(3, 5))
      await other.insertEvents(events.slice(5, 6))
      await mine.insertEvents(events.slice(6))
      const read: Array<{ id: string; payload: string }> = []
      let routing: RoutingPosition | undefined
      for (let i = 0; i < 20; i++) {
        const got = await mine.readEvents({ owner: 'node-a', now, leaseUntil: now + 60_000, limit: 2, ...(routing ? { routing } : {}) })
        assert.ok(got.routing)
        routing = got.routing
        if (got.events === 0) break
        for (const w of got.work) read.push({ id: w.origin!.eventId, payload: w.payload })
      }
      assert.deepEqual(read, events.map((e) => ({ id: e.id, payload: e.payload })), 'every event once, in the order written')
      stop()
    } finally {
      await own.cleanup()
    }
  })

  test('a write issued just before close is committed by close', async () => {
    const own = await makeSqlite()
    try {
      const a = account()
      const pending = own.store.createAccount(a)
      await own.store.close()
      assert.equal(await pending, 'created')
      assert.deepEqual(await own.open().findAccountById(a.id), a)
    } finally {
      await own.cleanup()
    }
  })
})
