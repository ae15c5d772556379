// SQLite's migration to one received message per transaction (src/store/sqlite/migrations.ts, the one
// that makes received_usage): a database holding messages kept before it opens with each account's
// running total computed from them, its messages listing their one recipient, found by it, and freed
// by a delete.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { newId } from '../../src/domain/ids.js'
import { openSqliteStore } from '../../src/store/sqlite/index.js'
import { migrations } from '../../src/store/sqlite/migrations.js'

test('upgrading: each account\'s received total is the sum of the sizes it kept; old messages list their recipient', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'svc-sqlite-received-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  const at = migrations.findIndex((m) => m.includes('CREATE TABLE received_usage'))
  assert.ok(at > 0)
  const old = new Database(join(dir, 'svc.db'))
  old.pragma('journal_mode = WAL')
  for (const m of migrations.slice(0, at)) old.exec(m)
  old.pragma(`user_version = ${at}`)
  const now = new Date().toISOString()
  const account = old.prepare('INSERT INTO accounts (id, email, password_hash, plan, created_at) VALUES (?, ?, \'h\', \'free\', ?)')
  const received = old.prepare('INSERT INTO received (id, account_id, domain_id, recipient, size, created_at, message) VALUES (?, ?, \'dom_x\', ?, ?, ?, ?)')
  const content = old.prepare('INSERT INTO received_contents (received_id, part, content) VALUES (?, \'raw\', ?)')
  // The message JSON as it was written then: no `recipients`.
  const json = JSON.stringify({ mailFrom: '', from: 'a@x', to: [], cc: [], subject: 's', text: null, textTruncated: false, html: null, htmlTruncated: false, headers: [], messageId: null, inReplyTo: null, attachments: [], authentication: { spf: 'none', dkim: 'none', dmarc: 'none', arc: null } })
  account.run('acct_a', 'a@example.test', now)
  account.run('acct_b', 'b@example.test', now)
  account.run('acct_c', 'c@example.test', now)
  const ids = [newId('rcv'), newId('rcv'), newId('rcv')]
  received.run(ids[0], 'acct_a', 'sales@d.example', 1000, now, json)
  received.run(ids[1], 'acct_a', 'info@d.example', 2500, now, json)
  received.run(ids[2], 'acct_b', 'sales@d.example', 70, now, json)
  for (const id of ids) content.run(id, Buffer.from('x'))
  old.close()

  const store = openSqliteStore({ dataDir: dir })
  try {
    assert.equal(await store.receivedBytes('acct_a'), 3500)
    assert.equal(await store.receivedBytes('acct_b'), 70)
    assert.equal(await store.receivedBytes('acct_c'), 0)
    assert.deepEqual((await store.findReceived('acct_a', ids[1]!))?.recipients, ['info@d.example'])
    assert.deepEqual((await store.listReceived('acct_a', { limit: 10, to: 'sales@d.example' })).map((m) => m.id), [ids[0]])
    assert.equal((await store.deleteReceived('acct_a', ids[1]!))?.size, 2500)
    assert.equal(await store.receivedBytes('acct_a'), 1000)
    assert.equal(await store.readReceivedRaw('acct_a', ids[1]!), null)
  } finally {
    await store.close()
  }
})
