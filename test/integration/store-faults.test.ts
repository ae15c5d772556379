// Resource faults on real parts: a real full filesystem (a 3 MB tmpfs filled to ENOSPC) under a real svc,
// and a real read-only database (svc running as an unprivileged user on a database file it may not
// write). What a user sees: 503 unavailable with Retry-After (never a 202 for what was not stored, never
// a 500), /readyz 503 naming the reason, the fault logged once, nothing half-written, and svc back on
// its own when the disk has room again.
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { chmodSync, closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, unlinkSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { describe, test, type TestContext } from 'node:test'
import Database from 'better-sqlite3'
import pino from 'pino'
import { startServerProcess, type ServerProcess } from '../helpers/process.js'
import { sender } from '../helpers/sending.js'
import { Client, PASSWORD, errorOf, signedUp, startServer, tempDir, uniqueEmail, type Response } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

const basic = { to: 'someone@example.com', subject: 'Hello', html: '<p>Hi</p>' }

/** A fresh tmpfs of `size`, unmounted with the test (lazily: svc may still hold its files). Null where mount is not allowed. */
function tmpfs (t: TestContext, size = '3m'): string | null {
  if (process.platform !== 'linux' || process.getuid?.() !== 0) return null
  const dir = mkdtempSync(join(tmpdir(), 'svc-faults-'))
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'pipe' })
  } catch {
    rmSync(dir, { recursive: true, force: true })
    return null
  }
  t.after(() => {
    try { execFileSync('umount', ['-l', dir], { stdio: 'pipe' }) } catch { /* already gone */ }
    rmSync(dir, { recursive: true, force: true })
  })
  return dir
}

/** Writes a filler file until the filesystem says ENOSPC, down to the last page. */
function fill (file: string): void {
  const fd = openSync(file, 'w')
  try {
    for (const size of [256 * 1024, 4096, 512]) {
      const chunk = Buffer.alloc(size, 0x55)
      for (;;) {
        try {
          writeSync(fd, chunk)
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOSPC') break
          throw err
        }
      }
    }
  } finally {
    closeSync(fd)
  }
}

/** Rows per table, read through a separate read-only connection: what is really in the database file. */
function counts (dbFile: string): Record<string, number> {
  const db = new Database(dbFile, { readonly: true, fileMustExist: true })
  try {
    const out: Record<string, number> = {}
    for (const table of ['accounts', 'api_keys', 'emails', 'events', 'idempotency_keys']) {
      const exists = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(table)
      if (exists) out[table] = (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n
    }
    return out
  } finally {
    db.close()
  }
}

/** Checkpoints the WAL into the database file and truncates it to nothing (retried while another checkpoint runs). */
async function emptyWal (dbFile: string): Promise<void> {
  const db = new Database(dbFile, { fileMustExist: true })
  try {
    await waitFor('the WAL to be truncated', () => (db.pragma('wal_checkpoint(TRUNCATE)') as Array<{ busy: number }>)[0]!.busy === 0)
  } finally {
    db.close()
  }
}

function assertUnavailable (res: Response, what: string): void {
  assert.equal(res.status, 503, `${what}: ${res.status} ${res.text}`)
  assert.equal(errorOf(res).code, 'unavailable', what)
  assert.match(String(res.headers['retry-after']), /^[1-9][0-9]*$/, `${what}: Retry-After`)
}

describe('a full disk', () => {
  test('sends, key creation and signup answer 503 with Retry-After, /readyz is 503, logged once; svc recovers by itself when space comes back', async (t) => {
    const mnt = tmpfs(t)
    if (mnt === null) return t.skip('skipped: mounting a tmpfs is not allowed here (needs Linux and root); the full-disk test did not run')
    const lines: Array<{ level: number; msg: string; [k: string]: unknown }> = []
    const stream = new Writable({
      write (chunk: Buffer, _enc, done) {
        for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line))
        done()
      },
    })
    const dataDir = join(mnt, 'data')
    const server = await startServer(t, { dataDir, deps: { logger: pino({ level: 'info' }, stream) } })
    const s = await sender(server)
    const other = await signedUp(server)
    const dbFile = join(dataDir, 'svc.db')
    const before = counts(dbFile)

    // The WAL emptied first: a WAL whose pages have all been checkpointed starts over from its beginning,
    // so a write may land in space the file already holds, and then it rightly succeeds.
    await emptyWal(dbFile)
    const filler = join(mnt, 'filler')
    fill(filler)

    const sent = await s.send(basic, { 'idempotency-key': 'during-the-fault' })
    assertUnavailable(sent, 'a send')
    assert.match(errorOf(sent).message, /no effect/)
    assertUnavailable(await other.client.post('/api/keys', { name: 'more' }), 'key creation')
    const newcomer = uniqueEmail('newcomer')
    assertUnavailable(await server.client().post('/api/auth/signup', { email: newcomer, password: PASSWORD }), 'signup')
    const ready = await server.client().get('/readyz')
    assertUnavailable(ready, '/readyz')
    assert.match(errorOf(ready).message, /disk is full/)
    assert.match(errorOf(ready).message, /SQLITE_FULL/)
    // Reads still work for everyone.
    assert.equal((await other.client.get('/api/keys')).status, 200)

    for (let i = 0; i < 20; i++) assertUnavailable(await s.send(basic), `send ${i}`)
    const faultLines = lines.filter((l) => l.msg.startsWith('store cannot write'))
    assert.equal(faultLines.length, 1, 'the fault is logged once, not per request')
    assert.equal(faultLines[0]!.fault, 'disk_full')
    assert.equal(lines.filter((l) => l.msg === 'request failed').length, 0, 'no error line per request')
    assert.ok(lines.filter((l) => l.msg === 'request' && l.status === 503).length >= 23, 'each request still has its access line')

    // Nothing half-written: the database holds exactly what it held before the disk filled.
    assert.deepEqual(counts(dbFile), before)

    unlinkSync(filler)
    const back = await waitFor('/readyz to be ready again without a restart', async () => {
      const res = await server.client().get('/readyz')
      return res.status === 200 ? res : false
    })
    assert.equal(back.body.status, 'ready')
    assert.equal(lines.filter((l) => l.msg.startsWith('store can write again')).length, 1, 'the recovery is logged once')
    assert.equal(lines.filter((l) => l.msg.startsWith('store cannot write')).length, 1)

    // The same Idempotency-Key is new: the refused send left nothing behind.
    const again = await s.send(basic, { 'idempotency-key': 'during-the-fault' })
    assert.equal(again.status, 202, again.text)
    assert.equal((await s.settled(again.body.data.id)).status, 'delivered')
    assert.equal((await other.client.post('/api/keys', { name: 'more' })).status, 201)
    assert.equal((await server.client().post('/api/auth/signup', { email: newcomer, password: PASSWORD })).status, 201, 'the refused signup left no account')
    const after = counts(dbFile)
    assert.equal(after.emails, before.emails! + 1)
    assert.equal(after.api_keys, before.api_keys! + 1)
    assert.equal(after.accounts, before.accounts! + 1)
  })
})

/**
 * svc as a child process that file permissions apply to: root without the capabilities that let it
 * ignore them (setpriv drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH). It stays root, so it can still
 * reach the compiled server wherever the checkout is, however private its directories.
 */
function startWithoutOverride (t: TestContext, dataDir: string): Promise<ServerProcess> {
  return startServerProcess(t, { DATA_DIR: dataDir }, ['setpriv', '--inh-caps=-all', '--bounding-set=-dac_override,-dac_read_search', '--'])
}

async function stop (svc: ServerProcess): Promise<void> {
  svc.process.kill('SIGTERM')
  const [code] = await once(svc.process, 'exit')
  assert.equal(code, 0, svc.output())
}

describe('a read-only database', () => {
  test('writes answer 503 with Retry-After and /readyz is 503 from the start; after the fix and a restart, svc serves again', async (t) => {
    if (process.platform !== 'linux' || process.getuid?.() !== 0 || spawnSync('setpriv', ['--version']).status !== 0) {
      return t.skip('skipped: needs Linux, root and setpriv (util-linux) to run svc without the right to ignore file permissions; the read-only test did not run')
    }
    // Linux refuses to remount a filesystem read-only while a process holds files on it open for
    // writing (EBUSY), so a database cannot become read-only under a running svc that way. What happens
    // in practice is a database file svc may not write (restored from a backup with the wrong owner, a
    // read-only volume): SQLite then opens it read-only, reads work, every write fails.
    const dataDir = tempDir(t)
    let svc = await startWithoutOverride(t, dataDir)
    const client = new Client(svc.url)
    const signup = await client.post('/api/auth/signup', { email: uniqueEmail('ro'), password: PASSWORD })
    assert.equal(signup.status, 201, signup.text)
    const key = await client.post('/api/keys', { name: 'sending' })
    assert.equal(key.status, 201, key.text)
    await stop(svc)

    const dbFile = join(dataDir, 'svc.db')
    chmodSync(dbFile, 0o444)
    const before = counts(dbFile)
    svc = await startWithoutOverride(t, dataDir)
    const c = new Client(svc.url)
    c.cookie = client.cookie
    const api = (path: string) => c.post(path, basic, { 'x-api-key': key.body.data.key })

    // Before any request writes: the first readiness check probes a write and finds out.
    const ready = await c.get('/readyz')
    assertUnavailable(ready, '/readyz')
    assert.match(errorOf(ready).message, /read-only/)
    assert.match(errorOf(ready).message, /SQLITE_READONLY/)
    // Reads work.
    assert.equal((await c.get('/api/keys')).status, 200)
    for (let i = 0; i < 20; i++) assertUnavailable(await api('/api/send'), `send ${i}`)
    assertUnavailable(await c.post('/api/keys', { name: 'more' }), 'key creation')
    assertUnavailable(await new Client(svc.url).post('/api/auth/signup', { email: uniqueEmail('ro'), password: PASSWORD }), 'signup')
    const logged = svc.output().trim().split('\n').map((l) => JSON.parse(l) as { msg: string; fault?: string })
    const faultLines = logged.filter((l) => l.msg.startsWith('store cannot write'))
    assert.equal(faultLines.length, 1, 'logged once')
    assert.equal(faultLines[0]!.fault, 'read_only')
    assert.equal(logged.filter((l) => l.msg === 'request failed').length, 0)
    assert.deepEqual(counts(dbFile), before, 'nothing half-written')

    // SQLite keeps a connection it opened read-only read-only: fixing the file is not enough, svc says so
    // until it is restarted (the README's "Operating it" says the same).
    // SQLite made the -wal and -shm files with the database file's mode: the fix is on all three.
    for (const name of readdirSync(dataDir)) if (name.startsWith('svc.db')) chmodSync(join(dataDir, name), 0o644)
    await stop(svc)
    svc = await startWithoutOverride(t, dataDir)
    const fixed = new Client(svc.url)
    assert.equal((await fixed.get('/readyz')).status, 200)
    const sent = await fixed.post('/api/send', basic, { 'x-api-key': key.body.data.key })
    assert.equal(sent.status, 202, sent.text)
    await waitFor('the email to be delivered', async () => {
      const res = await fixed.get(`/api/emails/${sent.body.data.id}`, { 'x-api-key': key.body.data.key })
      return res.body?.data?.status === 'delivered'
    })
  })
})

describe('the write queue under a full disk', () => {
  test('a batch that hits the fault fails whole: no write of it is kept, none resolves', async (t) => {
    const mnt = tmpfs(t, '1m')
    if (mnt === null) return t.skip('skipped: mounting a tmpfs is not allowed here (needs Linux and root)')
    mkdirSync(join(mnt, 'q'))
    const { openSqliteStore } = await import('../../src/store/sqlite/index.js')
    const store = openSqliteStore({ dataDir: join(mnt, 'q') })
    t.after(() => store.close())
    fill(join(mnt, 'filler'))
    const accounts = Array.from({ length: 30 }, (_, i) => ({
      id: `acc_${String(i).padStart(26, '0')}`, email: uniqueEmail('batch'), passwordHash: 'x'.repeat(2000), plan: 'free' as const, createdAt: new Date().toISOString(),
    }))
    // Asked for in one turn of the event loop: one batch, one transaction.
    const results = await Promise.allSettled(accounts.map((a) => store.createAccount(a)))
    assert.ok(results.every((r) => r.status === 'rejected'), `every write of the batch fails: ${results.map((r) => r.status).join(',')}`)
    assert.equal(store.health.current().state, 'unwritable')
    unlinkSync(join(mnt, 'filler'))
    for (const a of accounts) assert.equal(await store.findAccountById(a.id), null)
  })
})
