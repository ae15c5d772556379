// Backup and restore of the SQLite store as an operator runs them: the compiled CLI as a child process,
// beside a real svc process that serves sends the whole time; the backup restored into a fresh directory
// and served by another svc process, checked through the API with the same key, session and webhook.
import assert from 'node:assert/strict'
import { execFile, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readdirSync, readFileSync, statSync, truncateSync, writeFileSync, copyFileSync, mkdirSync } from 'node:fs'
import path from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import Database from 'better-sqlite3'
import { secretCheckValue } from '../../src/domain/secret-check.js'
import { migrations } from '../../src/store/sqlite/migrations.js'
import { openSqliteStore } from '../../src/store/sqlite/index.js'
import { SERVER_FILE, startServerProcess } from '../helpers/process.js'
import { startReceiver } from '../helpers/receiver.js'
import { Client, PASSWORD, tempDir, TEST_SECRET, uniqueEmail } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url))
const ENV = { PATH: process.env.PATH ?? '', SVC_SECRET: TEST_SECRET }

interface CliResult { code: number; out: string; err: string }

/** The CLI as a child process, without blocking this process (the load keeps running meanwhile). */
function cli (args: string[], env: Record<string, string>): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...ENV, ...env } }, (err, out, errText) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 1
      resolve({ code, out, err: errText })
    })
  })
}

function cliSync (args: string[], env: Record<string, string>): CliResult {
  const r = spawnSync(process.execPath, [CLI, ...args], { env: { ...ENV, ...env }, encoding: 'utf8' })
  return { code: r.status ?? 1, out: r.stdout, err: r.stderr }
}

function emailIdsIn (file: string): Set<string> {
  const db = new Database(file, { readonly: true, fileMustExist: true })
  try {
    return new Set(db.prepare('SELECT id FROM emails').pluck().all() as string[])
  } finally {
    db.close()
  }
}

describe('backup under load, restored elsewhere', () => {
  test('a backup taken while svc serves a stream of sends holds every send accepted before it began and none after it ended; restored into a fresh directory, the same key, session, emails and webhook work', async (t) => {
    const dir = tempDir(t)
    const liveDir = path.join(dir, 'live')
    const receiver = await startReceiver(t)
    const live = await startServerProcess(t, { DATA_DIR: liveDir, NODE_ID: 'live', DELIVERY_THREADS: '1' })

    const owner = new Client(live.url)
    const email = uniqueEmail('backup')
    assert.equal((await owner.post('/api/auth/signup', { email, password: PASSWORD })).status, 201)
    const created = await owner.post('/api/keys', { name: 'sending' })
    assert.equal(created.status, 201, created.text)
    const key = created.body.data.key as string
    const hook = await owner.post('/api/webhooks', { url: receiver.url('/hook'), events: ['email.sent', 'email.delivered'] })
    assert.equal(hook.status, 201, hook.text)
    const secret = hook.body.data.secret as string
    receiver.secrets.push(secret)

    // The load: three senders, each sending one email after another until told to stop. Every accepted
    // send is recorded with the moment its 202 arrived.
    const accepted: Array<{ id: string; at: number }> = []
    let stop = false
    const failures: string[] = []
    const sendLoop = async (n: number) => {
      const c = new Client(live.url)
      for (let i = 0; !stop; i++) {
        const res = await c.post('/api/send', { to: 'someone@example.com', subject: `load ${n}.${i}`, text: 'hello' }, { 'x-api-key': key })
        if (res.status === 202) accepted.push({ id: res.body.data.id as string, at: performance.now() })
        else failures.push(`${res.status} ${res.text}`)
      }
    }
    const loops = [0, 1, 2].map(sendLoop)
    await waitFor('30 sends accepted before the backup', () => accepted.length >= 30)

    const backupFile = path.join(dir, 'svc-backup.db')
    const began = performance.now()
    const before = accepted.length
    const made = await cli(['backup', backupFile], { DATA_DIR: liveDir })
    const ended = performance.now()
    const during = accepted.filter((a) => a.at > began && a.at < ended).length
    // A few more after the backup ended, to show the backup did not take them.
    await waitFor('5 sends accepted after the backup', () => accepted.filter((a) => a.at > ended).length >= 5)
    stop = true
    await Promise.all(loops)
    assert.deepEqual(failures, [], 'no send failed while the backup ran')
    assert.equal(made.code, 0, made.err)
    assert.match(made.out, /^backed up the SQLite store in .* to .*svc-backup\.db \(\d+ bytes, schema version \d+\); integrity check ok$/m)
    t.diagnostic(`sends accepted: ${before} before the backup, ${during} while the CLI ran, ${accepted.length} in all`)
    assert.equal(statSync(backupFile).mode & 0o777, 0o600, 'the backup is readable by its owner only')
    assert.deepEqual(readdirSync(dir).sort(), ['live', 'svc-backup.db'], 'no partial file left beside it')

    // One commit's state: a prefix of the stream.
    const inBackup = emailIdsIn(backupFile)
    const missing = accepted.filter((a) => a.at < began).filter((a) => !inBackup.has(a.id))
    assert.deepEqual(missing, [], 'every send accepted before the backup began is in it')
    const late = accepted.filter((a) => a.at > ended).filter((a) => inBackup.has(a.id))
    assert.deepEqual(late, [], 'no send accepted after the backup ended is in it')

    // Restoring over the live directory is refused, and changes nothing there.
    const over = await cli(['restore', backupFile], { DATA_DIR: liveDir })
    assert.equal(over.code, 1)
    assert.match(over.err, /\(DATA_DIR\) is not empty \(.*svc\.db.*\): restore only into an empty directory/)
    assert.equal((await new Client(live.url).get(`/api/emails/${accepted[0]!.id}`, { 'x-api-key': key })).status, 200)

    // The live server goes away; the backup is restored into a fresh directory and served there.
    live.process.kill('SIGKILL')
    const restoredDir = path.join(dir, 'restored')
    const restored = await cli(['restore', backupFile], { DATA_DIR: restoredDir })
    assert.equal(restored.code, 0, restored.err)
    assert.match(restored.out, new RegExp(`^1 accounts, 1 active API keys, 1 webhooks, ${inBackup.size} emails$`, 'm'))
    assert.deepEqual(readdirSync(restoredDir), ['svc.db'])
    // The live process's leases went with it: the restored store holds none, so what it was mailing and
    // delivering is taken at once, not when each lease runs out.
    const held = new Database(path.join(restoredDir, 'svc.db'), { readonly: true, fileMustExist: true })
    try {
      const leased = (sql: string) => held.prepare(sql).pluck().get() as number
      assert.equal(leased('SELECT count(*) FROM emails WHERE lease_owner IS NOT NULL'), 0)
      assert.equal(leased('SELECT count(*) FROM deliveries WHERE lease_owner IS NOT NULL'), 0)
      assert.equal(leased('SELECT count(*) FROM routing WHERE router_owner IS NOT NULL'), 0)
    } finally {
      held.close()
    }
    const next = await startServerProcess(t, { DATA_DIR: restoredDir, NODE_ID: 'restored', DELIVERY_THREADS: '1' })

    // The same session cookie and API key.
    const sameOwner = new Client(next.url)
    sameOwner.cookie = owner.cookie
    const me = await sameOwner.get('/api/account')
    assert.equal(me.status, 200, me.text)
    assert.equal(me.body.data.email, email)
    const api = new Client(next.url)
    // Every email in the backup is there, and reaches a final state (the ones still queued when the
    // backup was taken are mailed by the restored server).
    for (const id of [...inBackup].slice(0, 20)) {
      await waitFor(`restored email ${id} delivered`, async () => {
        const res = await api.get(`/api/emails/${id}`, { 'x-api-key': key })
        assert.equal(res.status, 200, res.text)
        return res.body.data.status === 'delivered'
      })
    }
    const listed = await api.get('/api/emails?limit=100', { 'x-api-key': key })
    assert.equal(listed.status, 200)
    for (const e of listed.body.data as Array<{ id: string }>) assert.ok(inBackup.has(e.id), `${e.id} comes from the backup`)

    // A new send with the same key reaches the same webhook, signed with the same secret.
    const fresh = await api.post('/api/send', { to: 'someone@example.com', subject: 'after restore', text: 'hi' }, { 'x-api-key': key })
    assert.equal(fresh.status, 202, fresh.text)
    const freshId = fresh.body.data.id as string
    // (It queues behind the events of the restored emails, which the restored server delivers too.)
    await receiver.until(() => receiver.on('/hook').some((r) => r.body?.emailId === freshId && r.event === 'email.delivered'),
      'email.delivered of the send after the restore', 120_000)
    for (const r of receiver.on('/hook').filter((r) => r.body?.emailId === freshId)) assert.deepEqual(r.validFor, [secret])
    const hooks = await sameOwner.get('/api/webhooks')
    assert.deepEqual((hooks.body.data as Array<{ id: string }>).map((h) => h.id), [hook.body.data.id])
  })
})

describe('restore refuses what it cannot trust, and changes nothing', () => {
  /** A store in `dir` with one account (its password generated), closed. */
  async function storeWithAccount (dir: string, email: string) {
    const r = await cli(['account', 'create', email], { DATA_DIR: dir })
    assert.equal(r.code, 0, r.err)
  }

  test('a file that is not SQLite, a truncated backup, another SQLite database, a newer schema, a live database with its WAL beside it', async (t) => {
    const dir = tempDir(t)
    const source = path.join(dir, 'source')
    await storeWithAccount(source, uniqueEmail('restore'))
    const good = path.join(dir, 'good.db')
    assert.equal((await cli(['backup', good], { DATA_DIR: source })).code, 0)

    const junk = path.join(dir, 'junk.db')
    writeFileSync(junk, 'this is not a database\n'.repeat(500))
    const truncated = path.join(dir, 'truncated.db')
    copyFileSync(good, truncated)
    truncateSync(truncated, Math.floor(statSync(good).size / 2))
    const other = path.join(dir, 'other.db')
    const o = new Database(other)
    o.exec('CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)')
    o.close()
    const newer = path.join(dir, 'newer.db')
    copyFileSync(good, newer)
    const n = new Database(newer)
    n.pragma(`user_version = ${migrations.length + 1}`)
    n.close()
    // An open store: svc.db with its -wal beside it (the CLI must not take a live file as a backup).
    const liveDir = path.join(dir, 'live')
    const held = openSqliteStore({ dataDir: liveDir })
    t.after(() => held.close())
    const liveFile = path.join(liveDir, 'svc.db')

    const cases: Array<[string, RegExp]> = [
      [junk, /is not an SQLite database/],
      [truncated, /is not an SQLite database|failed its integrity check/],
      [other, /is an SQLite database, but not svc's/],
      [newer, new RegExp(`has schema version ${migrations.length + 1}, newer than this svc knows \\(${migrations.length}\\)`)],
      [liveFile, /has a svc\.db-wal beside it: it is a live database/],
      [path.join(dir, 'absent.db'), /is not a file/],
    ]
    for (const [file, message] of cases) {
      const target = path.join(dir, `into-${path.basename(file)}`)
      const r = cliSync(['restore', file], { DATA_DIR: target })
      assert.equal(r.code, 1, `${file}: ${r.out}`)
      assert.match(r.err, message, file)
      assert.deepEqual(existsSync(target) ? readdirSync(target) : [], [], `${file}: nothing left in DATA_DIR`)
    }
  })

  test('an older schema is migrated to this svc\'s and its accounts kept', async (t) => {
    const dir = tempDir(t)
    const old = path.join(dir, 'old.db')
    const db = new Database(old)
    const at = 5
    for (let v = 0; v < at; v++) db.exec(migrations[v]!)
    db.pragma(`user_version = ${at}`)
    db.prepare("INSERT INTO accounts (id, email, password_hash, plan, created_at) VALUES ('acct_old', 'old@example.test', 'x', 'pro', '2025-01-01T00:00:00.000Z')").run()
    db.pragma('journal_mode = DELETE')
    db.close()

    const target = path.join(dir, 'data')
    const r = cliSync(['restore', old], { DATA_DIR: target })
    assert.equal(r.code, 0, r.err)
    assert.match(r.out, new RegExp(`\\(schema version ${at}, migrated to ${migrations.length}\\); integrity check ok`))
    assert.match(r.out, /^1 accounts, 0 active API keys, 0 webhooks, 0 emails$/m)
    const shown = cliSync(['account', 'show', 'old@example.test'], { DATA_DIR: target })
    assert.equal(shown.code, 0, shown.err)
    assert.match(shown.out, /acct_old old@example\.test plan=pro/)
    assert.equal(readFileSync(old).length > 0, true, 'the backup file itself is left as it was')
  })

  test('backup never overwrites a file, and says so when there is no store', async (t) => {
    const dir = tempDir(t)
    const source = path.join(dir, 'source')
    await storeWithAccount(source, uniqueEmail('backup'))
    const existing = path.join(dir, 'existing.db')
    writeFileSync(existing, 'keep me')
    const again = cliSync(['backup', existing], { DATA_DIR: source })
    assert.equal(again.code, 1)
    assert.match(again.err, /already exists: a backup never overwrites a file/)
    assert.equal(readFileSync(existing, 'utf8'), 'keep me')

    const empty = path.join(dir, 'empty')
    mkdirSync(empty)
    const none = cliSync(['backup', path.join(dir, 'none.db')], { DATA_DIR: empty })
    assert.equal(none.code, 1)
    assert.match(none.err, /no svc store in .*empty \(DATA_DIR\): nothing to back up/)
    assert.equal(existsSync(path.join(dir, 'none.db')), false)
    assert.deepEqual(readdirSync(empty), [], 'no store created by asking for a backup')

    const mongo = cliSync(['backup', path.join(dir, 'm.db')], { MONGODB_URI: 'mongodb://user:pw@db.example.test/svc' })
    assert.equal(mongo.code, 1)
    assert.match(mongo.err, /backup is for the SQLite store; the MongoDB store at mongodb:\/\/db\.example\.test\/svc \(MONGODB_URI\) is backed up with mongodump/)
    assert.doesNotMatch(mongo.err, /pw/)
  })
})

describe('a store under another secret', () => {
  const A = TEST_SECRET
  const B = 'another-secret-0123456789-abcdefghijklmnop'
  const REFUSED = /was written under another secret than this svc's \(from SVC_SECRET\): set SVC_SECRET \(or, without it, DATA_DIR\/secret\) to the secret it was written with/

  /** The server on `env` when it exits by itself (a refused start); its exit code and its stderr. */
  function refusedStart (env: Record<string, string>): { code: number | null; err: string } {
    const r = spawnSync(process.execPath, [SERVER_FILE], { env: { PATH: process.env.PATH ?? '', PORT: '0', LOG_LEVEL: 'warn', ...env }, encoding: 'utf8', timeout: 20_000 })
    return { code: r.status, err: r.stderr }
  }

  function noSecretIn (text: string): void {
    for (const s of [A, B]) assert.equal(text.includes(s), false, 'no secret in the message')
    assert.doesNotMatch(text, /v1\.[A-Za-z0-9_-]{43}/, 'no check value in the message')
  }

  test('a store written under A is refused under B with one line naming SVC_SECRET, by the server and the CLI; under A it starts', async (t) => {
    const dir = path.join(tempDir(t), 'data')
    const email = uniqueEmail('secret')
    assert.equal((await cli(['account', 'create', email], { DATA_DIR: dir, SVC_SECRET: A })).code, 0)

    const server = refusedStart({ DATA_DIR: dir, SVC_SECRET: B })
    assert.notEqual(server.code, 0)
    assert.equal(server.err.trim().split('\n').length, 1, server.err)
    assert.match(server.err, new RegExp(`^svc: failed to start: the SQLite store in ${dir} \\(DATA_DIR\\) ` + REFUSED.source))
    noSecretIn(server.err)

    const shown = cliSync(['account', 'show', email], { DATA_DIR: dir, SVC_SECRET: B })
    assert.equal(shown.code, 1)
    assert.match(shown.err, REFUSED)
    noSecretIn(shown.err)

    const live = await startServerProcess(t, { DATA_DIR: dir, SVC_SECRET: A })
    assert.equal((await fetch(live.url + '/readyz')).status, 200)
  })

  test('a store that has no check value yet (made before svc kept one) starts, and is checked from then on', async (t) => {
    const dir = path.join(tempDir(t), 'data')
    assert.equal((await cli(['migrate'], { DATA_DIR: dir, SVC_SECRET: A })).code, 0)
    const db = new Database(path.join(dir, 'svc.db'))
    db.prepare('DELETE FROM meta').run()
    db.close()

    const first = await startServerProcess(t, { DATA_DIR: dir, SVC_SECRET: A })
    await waitFor('the check value written', () => first.output().includes('the store now keeps a check value of this secret'))
    first.process.kill('SIGTERM')
    await once(first.process, 'exit')
    const stored = new Database(path.join(dir, 'svc.db'), { readonly: true })
    assert.equal(stored.prepare("SELECT value FROM meta WHERE name = 'secret_check'").pluck().get(), secretCheckValue(A))
    stored.close()

    assert.match(refusedStart({ DATA_DIR: dir, SVC_SECRET: B }).err, REFUSED)
  })

  test('restore: a backup made under A is refused into a DATA_DIR under B, and left nowhere; under A, or B with --force, it is restored', async (t) => {
    const dir = tempDir(t)
    const source = path.join(dir, 'source')
    assert.equal((await cli(['account', 'create', uniqueEmail('restore')], { DATA_DIR: source, SVC_SECRET: A })).code, 0)
    const file = path.join(dir, 'backup.db')
    assert.equal((await cli(['backup', file], { DATA_DIR: source, SVC_SECRET: A })).code, 0)

    const underB = path.join(dir, 'under-b')
    const refused = cliSync(['restore', file], { DATA_DIR: underB, SVC_SECRET: B })
    assert.equal(refused.code, 1)
    assert.match(refused.err, new RegExp(`^svc: the backup ${file} ` + REFUSED.source + '; or add --force'))
    noSecretIn(refused.err)
    assert.deepEqual(existsSync(underB) ? readdirSync(underB) : [], [], 'nothing left in DATA_DIR')

    const underA = path.join(dir, 'under-a')
    const restored = cliSync(['restore', file], { DATA_DIR: underA, SVC_SECRET: A })
    assert.equal(restored.code, 0, restored.err)
    assert.match(restored.out, /^the backup was written under this svc's secret \(SVC_SECRET\): start svc with it$/m)

    const forced = cliSync(['restore', file, '--force'], { DATA_DIR: underB, SVC_SECRET: B })
    assert.equal(forced.code, 0, forced.err)
    assert.match(forced.out, /^warning: restored with --force under another secret than the backup's \(SVC_SECRET\): its 0 active API keys/m)
    const live = await startServerProcess(t, { DATA_DIR: underB, SVC_SECRET: B })
    assert.equal((await fetch(live.url + '/readyz')).status, 200)
  })

  test('restore without SVC_SECRET: refused until the old DATA_DIR/secret is in place, then checked against it', async (t) => {
    const dir = tempDir(t)
    const source = path.join(dir, 'source')
    assert.equal((await cli(['migrate'], { DATA_DIR: source, SVC_SECRET: '' })).code, 0)
    const file = path.join(dir, 'backup.db')
    assert.equal((await cli(['backup', file], { DATA_DIR: source, SVC_SECRET: '' })).code, 0)

    const target = path.join(dir, 'target')
    const none = cliSync(['restore', file], { DATA_DIR: target, SVC_SECRET: '' })
    assert.equal(none.code, 1)
    assert.match(none.err, new RegExp(`was written under a secret, and neither SVC_SECRET nor ${path.join(target, 'secret')} is here to check it against`))
    assert.deepEqual(existsSync(target) ? readdirSync(target) : [], [])

    mkdirSync(target, { recursive: true })
    writeFileSync(path.join(target, 'secret'), B + '\n', { mode: 0o600 })
    const wrong = cliSync(['restore', file], { DATA_DIR: target, SVC_SECRET: '' })
    assert.equal(wrong.code, 1)
    assert.match(wrong.err, new RegExp(`than this svc's \\(from ${path.join(target, 'secret')}, as SVC_SECRET is not set\\)`))
    assert.deepEqual(readdirSync(target), ['secret'], 'the secret left as it was, nothing else')

    copyFileSync(path.join(source, 'secret'), path.join(target, 'secret'))
    const right = cliSync(['restore', file], { DATA_DIR: target, SVC_SECRET: '' })
    assert.equal(right.code, 0, right.err)
    assert.match(right.out, /under this svc's secret \(DATA_DIR\/secret\)/)
    assert.deepEqual(readdirSync(target).sort(), ['secret', 'svc.db'])
  })
})
