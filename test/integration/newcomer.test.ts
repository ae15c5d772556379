// The traps a newcomer following the README fell into (issue 15), each tried the way they met it.
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { freePort } from '../helpers/ports.js'
import { startServerProcess } from '../helpers/process.js'
import { sender, timeline } from '../helpers/sending.js'
import { errorOf, PASSWORD, startServer, tempDir, uniqueEmail } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')

/**
 * The server on a port that was free a moment ago. Another process may take it in between (the port is
 * freed before the server binds it): then the server exits saying so, and another port is tried.
 */
async function startOnFreePort (t: Parameters<typeof startServerProcess>[0], env: Record<string, string>) {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort()
    try {
      return { port, ...await startServerProcess(t, { ...env, PORT: String(port) }) }
    } catch (err) {
      if (attempt >= 5 || !String(err).includes('EADDRINUSE')) throw err
    }
  }
}

describe('the browser origin in development', () => {
  test('a browser on http://127.0.0.1:PORT, as the server prints, or on localhost:PORT is accepted; another origin is told which are', async (t) => {
    const server = await startServer(t, { env: { PORT: '3000' } })
    const client = server.client()
    for (const origin of ['http://127.0.0.1:3000', 'http://localhost:3000']) {
      const signup = await client.post('/api/auth/signup', { email: uniqueEmail('origin'), password: PASSWORD }, { origin })
      assert.equal(signup.status, 201, `${origin}: ${signup.text}`)
      const key = await client.post('/api/keys', { name: 'from the browser' }, { origin })
      assert.equal(key.status, 201, `${origin}: ${key.text}`)
    }
    const evil = await client.post('/api/keys', { name: 'csrf' }, { origin: 'https://evil.example' })
    assert.equal(evil.status, 403)
    assert.equal(errorOf(evil).code, 'forbidden_origin')
    assert.match(errorOf(evil).message, /must come from http:\/\/127\.0\.0\.1:3000 or http:\/\/localhost:3000 or http:\/\/\[::1\]:3000 \(PUBLIC_URL\)/)
    assert.doesNotMatch(errorOf(evil).message, /evil/, 'what the request sent is not echoed')
  })

  test('the server process prints the URL that PUBLIC_URL defaults to, and a browser there can sign up', async (t) => {
    const { port, url, output } = await startOnFreePort(t, { DATA_DIR: tempDir(t) })
    assert.equal(url, `http://127.0.0.1:${port}`)
    const ready = await waitFor('the ready line', () => output().split('\n').find((l) => l.includes('svc is ready')))
    assert.equal(JSON.parse(ready).publicUrl, url)
    const res = await fetch(`${url}/api/auth/signup`, {
      method: 'POST', headers: { 'content-type': 'application/json', origin: url }, body: JSON.stringify({ email: uniqueEmail('b'), password: PASSWORD }),
    })
    assert.equal(res.status, 201)
    assert.doesNotMatch(output(), /PUBLIC_URL is/, 'no warning in development')
  })

  test('production without PUBLIC_URL starts, with one warning naming the variable', async (t) => {
    const { output } = await startServerProcess(t, { DATA_DIR: tempDir(t), NODE_ENV: 'production' })
    const warnings = output().trim().split('\n').map((l) => JSON.parse(l) as { level: number; msg: string }).filter((l) => l.msg.startsWith('PUBLIC_URL'))
    assert.equal(warnings.length, 1)
    assert.equal(warnings[0]!.level, 40)
    assert.match(warnings[0]!.msg, /^PUBLIC_URL is not set: tracking and unsubscribe links .* set PUBLIC_URL to the address users reach svc at/)
  })
})

describe('the sandbox transport in development', () => {
  test('writes each email to DATA_DIR/sandbox, whose tracked link and unsubscribe link work in a browser', async (t) => {
    const server = await startServer(t)
    const s = await sender(server)
    const sent = await s.send({ to: 'alice@example.test', subject: 'Try me', html: '<p>Read <a href="https://example.com/post">the post</a></p>' })
    assert.equal(sent.status, 202, sent.text)
    const id: string = sent.body.data.id
    await s.settled(id)
    const dir = path.join(server.dataDir, 'sandbox')
    // Written off the send's path, a moment after it.
    await waitFor('the sandbox files', () => { try { return readdirSync(dir).length === 2 } catch { return false } })
    assert.deepEqual(readdirSync(dir).sort(), [`${id}.eml`, `${id}.html`])
    const eml = readFileSync(path.join(dir, `${id}.eml`), 'utf8')
    assert.match(eml, /^Subject: Try me$/m)
    assert.match(eml, /^To: alice@example\.test$/m)
    assert.match(eml, /^List-Unsubscribe:\s+<http:\/\/127\.0\.0\.1:3000\/t\/u\/[\w.-]+>/m)

    // What a developer does: open the .html in a browser (PUBLIC_URL is this server), click the link,
    // then follow the banner's unsubscribe link and press its button.
    const html = readFileSync(path.join(dir, `${id}.html`), 'utf8')
    const here = (u: string) => server.url + new URL(u).pathname
    const click = /<a href="(http:\/\/127\.0\.0\.1:3000\/t\/c\/[^"]+)">the post<\/a>/.exec(html)?.[1]
    assert.ok(click, html)
    const clicked = await fetch(here(click), { redirect: 'manual' })
    assert.equal(clicked.status, 302)
    assert.equal(clicked.headers.get('location'), 'https://example.com/post')
    const unsubscribe = /<a href="(http:\/\/127\.0\.0\.1:3000\/t\/u\/[^"]+)">its unsubscribe link<\/a>/.exec(html)?.[1]
    assert.ok(unsubscribe, html)
    assert.equal((await fetch(here(unsubscribe))).status, 200)
    const done = await fetch(here(unsubscribe), { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'List-Unsubscribe=One-Click' })
    assert.equal(done.status, 200)
    const events = await waitFor('the click and the unsubscribe', async () => {
      const list = timeline((await s.email(id)).body.data)
      return list.includes('email.clicked alice@example.test') && list.includes('email.unsubscribed alice@example.test') ? list : false
    })
    assert.ok(events.includes('email.sent alice@example.test'))
  })
})

describe('the README\'s first session with curl', () => {
  // (The walk is curl in bash: where either is missing, the test says so and is skipped.)
  const missing = ['bash', 'curl'].filter((c) => spawnSync('sh', ['-c', `command -v ${c}`]).status !== 0)
  const skip = missing.length > 0 ? `${missing.join(' and ')} not installed: the README's curl session is not run` : false
  test('runs as written, from the README itself: the key of step 2 sends in step 4, and the receiver of step 3 prints the delivery', { skip }, async (t) => {
    const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8')
    const section = readme.slice(readme.indexOf('## A first session with curl'))
    const walk = /```sh\n([\s\S]*?)```/.exec(section)?.[1]
    assert.ok(walk, 'the walk is a sh block under its heading')
    assert.match(walk, /^B=http:\/\/127\.0\.0\.1:3000$/m)
    assert.match(walk, /listen\(4000\)/)
    const server = await startServer(t)
    // The receiver's port was free a moment ago; if another process took it meanwhile, the walk's receiver
    // says EADDRINUSE and the walk runs again on another port (a new account: the walk signs up afresh).
    let code = -1
    let out = ''
    let err = ''
    for (let attempt = 1; attempt <= 3; attempt++) {
      const receiverPort = await freePort()
      // The same commands, at this test's ports (tests never take fixed ones).
      const script = walk.replaceAll('http://127.0.0.1:3000', server.url).replaceAll('4000', String(receiverPort))
        .replaceAll('you@example.com', `you-${attempt}@example.com`)
      const dir = tempDir(t)
      const shell = spawn('bash', ['-c', script], { cwd: dir, detached: true, stdio: ['ignore', 'pipe', 'pipe'] })
      // The walk leaves its receiver running in the background (as in a terminal): its group goes with the test.
      t.after(() => { try { process.kill(-shell.pid!, 'SIGTERM') } catch {} })
      out = ''
      err = ''
      shell.stdout.on('data', (d: Buffer) => { out += d.toString() })
      shell.stderr.on('data', (d: Buffer) => { err += d.toString() })
      ;[code] = await once(shell, 'exit') as [number]
      if (!err.includes('EADDRINUSE')) break
      try { process.kill(-shell.pid!, 'SIGTERM') } catch {}
    }
    assert.equal(code, 0, `the walk failed:\n${out}\n${err}`)
    assert.equal(err, '', 'nothing on stderr')
    assert.doesNotMatch(out, /"success":false/, `no command was refused:\n${out}`)
    assert.match(out, /"status":"revoked"/)
    assert.match(out, /"email.sent"/, 'the timeline of the email sent with the key of step 2')
    const printed = await waitFor(() => `the receiver to print the delivery:\n${out}`, () => /email\.delivered \{.*"to":"delivered@simulator\.test"/m.exec(out)?.[0] ?? false)
    assert.ok(printed)
  })
})
