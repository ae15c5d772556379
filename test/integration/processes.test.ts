// The compiled entry points as an operator runs them: the server and the CLI as child processes on a
// real data directory.
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import path from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { describeStore } from '../../src/cli.js'
import { SERVER_FILE, startServerProcess } from '../helpers/process.js'
import { PASSWORD, startServer, tempDir, TEST_SECRET, uniqueEmail } from '../helpers/server.js'


const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url))

function cli (args: string[], env: Record<string, string>, input = '') {
  const r = spawnSync(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8', input })
  return { code: r.status, out: r.stdout, err: r.stderr }
}

describe('server process', () => {
  test('a bad variable stops the start with one line naming it, exit code 1', () => {
    const r = spawnSync(process.execPath, [SERVER_FILE], { env: { PATH: process.env.PATH ?? '', PORT: 'eighty', DATA_DIR: '/nonexistent' }, encoding: 'utf8' })
    assert.equal(r.status, 1)
    assert.equal(r.stderr.trim(), 'svc: configuration: PORT must be a TCP port number from 0 to 65535 (got "eighty")')
  })

  test('starts on the embedded store, serves, and exits 0 on SIGTERM', async (t) => {
    const { process: child, url, output } = await startServerProcess(t, { DATA_DIR: tempDir(t) })
    const res = await fetch(url + '/readyz')
    assert.equal(res.status, 200)
    assert.equal((await res.json() as { status: string }).status, 'ready')
    child.kill('SIGTERM')
    const [code] = await once(child, 'exit')
    assert.equal(code, 0)
    const lines = output().trim().split('\n').map((l) => JSON.parse(l) as { msg: string })
    assert.ok(lines.some((l) => l.msg.includes('sandbox transport')), 'warns that no email leaves the machine')
    assert.equal(lines.at(-1)?.msg, 'stopped')
  })
})

describe('cli', () => {
  test('moves an account to Pro, and the running service applies the new limits at once', async (t) => {
    const server = await startServer(t)
    const env = { DATA_DIR: server.dataDir, SVC_SECRET: TEST_SECRET }
    const email = uniqueEmail('cli')
    const client = server.client()
    await client.post('/api/auth/signup', { email, password: PASSWORD })
    for (let i = 0; i < 3; i++) assert.equal((await client.post('/api/keys', { name: `k${i}` })).status, 201)
    assert.equal((await client.post('/api/keys', { name: 'k4' })).status, 403)

    const r = cli(['plan', 'set', email.toUpperCase(), 'pro'], env)
    assert.equal(r.code, 0, r.err)
    assert.match(r.out, /now on the Pro plan \(10 API keys, 10 webhooks\)/)
    assert.equal((await client.post('/api/keys', { name: 'k4' })).status, 201)
    assert.equal((await client.get('/api/account')).body.data.plan, 'pro')
  })

  test('account create makes an account that can log in; a second one with that email is refused', async (t) => {
    const server = await startServer(t)
    const env = { DATA_DIR: server.dataDir, SVC_SECRET: TEST_SECRET }
    const email = uniqueEmail('ops')
    const made = cli(['account', 'create', email, '--plan', 'pro', '--password-stdin'], env, PASSWORD + '\n')
    assert.equal(made.code, 0, made.err)
    assert.match(made.out, /created account acct_\w+ .* on the Pro plan/)
    assert.equal(made.out.includes(PASSWORD), false, 'a given password is not printed back')
    const login = await server.client().post('/api/auth/login', { email, password: PASSWORD })
    assert.equal(login.status, 200)
    assert.equal(login.body.data.plan, 'pro')
    const again = cli(['account', 'create', email], env)
    assert.equal(again.code, 1)
    assert.match(again.err, /already exists/)
  })

  test('a CLI run without the server\'s DATA_DIR names the directory it looked in and creates nothing there', (t) => {
    const parent = tempDir(t)
    const dataDir = path.join(parent, 'data')
    for (const args of [['plan', 'set', 'you@example.test', 'pro'], ['account', 'show', 'you@example.test']]) {
      const r = cli(args, { DATA_DIR: dataDir })
      assert.equal(r.code, 1)
      assert.equal(r.err.trim(), `svc: no svc store in ${dataDir} (DATA_DIR): run the CLI with the server's DATA_DIR, or from the directory the server runs in`)
    }
    assert.equal(existsSync(dataDir), false, 'no empty store and no secret were made')
  })

  test('a MongoDB store is named without its credentials', () => {
    assert.equal(describeStore({ dataDir: './data', mongodbUri: 'mongodb://svc:s3cr%40t@db1:27017,db2:27017/svc?authSource=admin&tls=true' }),
      'the MongoDB store at mongodb://db1:27017,db2:27017/svc (MONGODB_URI)')
    assert.equal(describeStore({ dataDir: './data', mongodbUri: 'mongodb+srv://svc:p@ss@cluster0.example.net/' }),
      'the MongoDB store at mongodb+srv://cluster0.example.net/ (MONGODB_URI)')
    assert.equal(describeStore({ dataDir: '/var/lib/svc', mongodbUri: undefined }), 'the SQLite store in /var/lib/svc (DATA_DIR)')
  })

  test('clear errors: unknown account (exit 1), unknown plan and unknown command (exit 2)', (t) => {
    const env = { DATA_DIR: tempDir(t), SVC_SECRET: TEST_SECRET }
    assert.equal(cli(['migrate'], env).code, 0)
    const missing = cli(['plan', 'set', 'nobody@example.test', 'pro'], env)
    assert.equal(missing.code, 1)
    assert.equal(missing.err.trim(), `svc: no account with email nobody@example.test in the SQLite store in ${env.DATA_DIR} (DATA_DIR); ` +
      "the CLI must see the server's DATA_DIR or MONGODB_URI")
    const plan = cli(['plan', 'set', 'nobody@example.test', 'gold'], env)
    assert.equal(plan.code, 2)
    assert.match(plan.err, /unknown plan "gold" \(plans: free, pro\)/)
    const unknown = cli(['frobnicate'], env)
    assert.equal(unknown.code, 2)
    assert.match(unknown.err, /unknown command/)
  })
})
