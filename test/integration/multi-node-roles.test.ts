// Several svc processes on one SQLite data directory, as an operator runs them: SVC_ROLES splits the API
// from the mailer and the delivery engine, and RATE_LIMIT_STORE=store makes rate limits hold across
// processes. Compiled server, child processes, real sockets, a receiver that verifies every signature.
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { describe, test } from 'node:test'
import { SERVER_FILE, startServerProcess } from '../helpers/process.js'
import { startReceiver } from '../helpers/receiver.js'
import { Client, PASSWORD, uniqueEmail } from '../helpers/server.js'
import { sharedStore } from '../helpers/shared-store.js'

const API_ONLY = { SVC_ROLES: 'api' }
const WORKER = { SVC_ROLES: 'mailer, delivery' }

/** A fresh account on `url` with an API key; the session client and the key. */
async function account (url: string, email = uniqueEmail('nodes')) {
  const client = new Client(url)
  const signup = await client.post('/api/auth/signup', { email, password: PASSWORD })
  assert.equal(signup.status, 201, signup.text)
  const created = await client.post('/api/keys', { name: 'sending' })
  assert.equal(created.status, 201, created.text)
  return { client, email, key: created.body.data.key as string }
}

function startFails (env: Record<string, string>) {
  const r = spawnSync(process.execPath, [SERVER_FILE], { env: { PATH: process.env.PATH ?? '', DATA_DIR: '/nonexistent', ...env }, encoding: 'utf8' })
  return { code: r.status, stderr: r.stderr.trim() }
}

describe('roles (SVC_ROLES)', () => {
  test('a bad role or rate-limit store stops the start with one line naming the variable', () => {
    const roles = startFails({ SVC_ROLES: 'api,web' })
    assert.equal(roles.code, 1)
    assert.equal(roles.stderr, 'svc: configuration: SVC_ROLES must be a comma-separated list of the roles this process runs, ' +
      'from api, mailer, delivery (default all three) (got "api,web")')
    const store = startFails({ RATE_LIMIT_STORE: 'redis' })
    assert.equal(store.code, 1)
    assert.match(store.stderr, /^svc: configuration: RATE_LIMIT_STORE must be one of memory .* \(got "redis"\)$/)
    assert.equal(store.stderr.split('\n').length, 1)
  })

  test('an API-only process and a mailer+delivery process on one data directory: each serves its part, and a send accepted by one is mailed and delivered by the other', async (t) => {
    const store = sharedStore(t)
    const receiver = await startReceiver(t)
    const api = await startServerProcess(t, { ...store, NODE_ID: 'api-1', ...API_ONLY })
    const worker = await startServerProcess(t, { ...store, NODE_ID: 'worker-1', ...WORKER, DELIVERY_THREADS: '1' })

    // The worker serves the operations endpoints only: every API route is the 404 envelope.
    const workerClient = new Client(worker.url)
    for (const path of ['/api/account', '/api/emails/em_0', '/openapi.json', '/docs']) {
      const res = await workerClient.get(path)
      assert.equal(res.status, 404, path)
      assert.deepEqual(res.body, { success: false, error: { code: 'not_found', message: 'No such route' } })
    }
    const sendToWorker = await workerClient.post('/api/send', { to: 'someone@example.com', subject: 'x', text: 'x' })
    assert.equal(sendToWorker.status, 404)
    assert.equal((await workerClient.get('/healthz')).status, 200)
    const workerReady = await workerClient.get('/readyz')
    assert.equal(workerReady.status, 200)
    assert.deepEqual(workerReady.body.checks, { store: 'ok', delivery: 'ok', mail: 'ok' })
    const metrics = await workerClient.get('/metrics')
    assert.equal(metrics.status, 200)
    assert.match(metrics.text, /svc_mail_recipient_outcomes_total|svc_http_request_duration_seconds/)

    // The API process checks only what it runs.
    const apiReady = await new Client(api.url).get('/readyz')
    assert.equal(apiReady.status, 200)
    assert.deepEqual(apiReady.body.checks, { store: 'ok' })

    const { client, key } = await account(api.url)
    const hook = await client.post('/api/webhooks', { url: receiver.url('/hook'), events: ['email.sent', 'email.delivered'] })
    assert.equal(hook.status, 201, hook.text)
    receiver.secrets.push(hook.body.data.secret)

    // Sent one after the other: how long each event takes to reach the receiver through the other
    // process (reported, not asserted: no timed tests).
    const sender = new Client(api.url)
    const latencies: number[] = []
    const ids: string[] = []
    for (let i = 0; i < 20; i++) {
      const sentAt = performance.now()
      const res = await sender.post('/api/send', { to: 'someone@example.com', subject: `n${i}`, text: 'hi' }, { 'x-api-key': key })
      assert.equal(res.status, 202, res.text)
      const id = res.body.data.id as string
      ids.push(id)
      await receiver.until(() => receiver.on('/hook').some((r) => r.body?.emailId === id && r.event === 'email.sent'), `email.sent of ${id}`)
      latencies.push(performance.now() - sentAt)
    }
    await receiver.until(() => ids.every((id) => receiver.on('/hook').some((r) => r.body?.emailId === id && r.event === 'email.delivered')),
      'every email mailed by the worker (email.delivered)')
    for (const r of receiver.on('/hook')) assert.deepEqual(r.validFor, [hook.body.data.secret], 'signed with the webhook secret')
    latencies.sort((a, b) => a - b)
    t.diagnostic(`202 → email.sent webhook through another process: median ${latencies[10]!.toFixed(1)} ms, max ${latencies.at(-1)!.toFixed(1)} ms`)

    // The API process sent nothing itself: the worker's mailer did (its metric counts the outcomes).
    const apiMetrics = await new Client(api.url).get('/metrics')
    assert.doesNotMatch(apiMetrics.text, /svc_mail_recipient_outcomes_total\{outcome="delivered"\}/)
    assert.match((await workerClient.get('/metrics')).text, /svc_mail_recipient_outcomes_total\{outcome="delivered"\} 20/)
  })

  test('a key revoked through one process is refused by another on its very next request, though that process had just accepted it', async (t) => {
    const shared = sharedStore(t)
    const a = await startServerProcess(t, { ...shared, NODE_ID: 'a', ...API_ONLY })
    const b = await startServerProcess(t, { ...shared, NODE_ID: 'b', ...API_ONLY })
    const { client, key } = await account(a.url)
    const [listed] = (await client.get('/api/keys')).body.data as Array<{ id: string }>
    const onA = new Client(a.url)
    const onB = new Client(b.url)
    const send = (c: Client, k: string) => c.post('/api/send', { to: 'someone@example.com', subject: 's', text: 't' }, { 'x-api-key': k })
    // Used on both processes first, so that each has checked (and may remember) the key.
    for (let i = 0; i < 3; i++) assert.equal((await send(onA, key)).status, 202)
    assert.equal((await send(onB, key)).status, 202)

    // Revoked through B, with the owner's session (the session is in the shared store).
    const owner = new Client(b.url)
    owner.cookie = client.cookie
    const revoked = await owner.delete(`/api/keys/${listed!.id}`)
    assert.equal(revoked.status, 200, revoked.text)

    const afterA = await send(onA, key)
    assert.equal(afterA.status, 401, afterA.text)
    assert.equal(afterA.body.error.code, 'invalid_api_key')
    assert.equal((await send(onB, key)).status, 401)
    // The refused sends stored nothing: the four accepted before are all there is.
    assert.equal((await client.get('/api/emails')).body.data.length, 4)
    // A key made after the revocation works on both.
    const fresh = await client.post('/api/keys', { name: 'next' })
    assert.equal(fresh.status, 201, fresh.text)
    assert.equal((await send(onA, fresh.body.data.key)).status, 202)
    assert.equal((await send(onB, fresh.body.data.key)).status, 202)
  })
})

describe('shared rate limits (RATE_LIMIT_STORE)', () => {
  /** Login attempts with a wrong password for one email, alternating between the nodes; the statuses. */
  async function attempts (urls: string[], email: string, n: number): Promise<number[]> {
    const statuses: number[] = []
    for (let i = 0; i < n; i++) {
      const res = await new Client(urls[i % urls.length]!).post('/api/auth/login', { email, password: 'wrong password here' })
      statuses.push(res.status)
    }
    return statuses
  }

  const LIMITS = { RATE_LIMIT_LOGIN_PER_EMAIL: '4', RATE_LIMIT_AUTH_PER_MINUTE: '1000' }

  test('store: the per-email login limit holds across two processes on one file; memory: each process counts its own', async (t) => {
    const shared = sharedStore(t)
    const a = await startServerProcess(t, { ...shared, NODE_ID: 'a', RATE_LIMIT_STORE: 'store', ...LIMITS })
    const b = await startServerProcess(t, { ...shared, NODE_ID: 'b', RATE_LIMIT_STORE: 'store', ...LIMITS })
    const { email } = await account(a.url)
    // 15-minute windows aligned on the epoch: the eight attempts fall in one window unless a boundary
    // passes between them, which the assertion allows for by asking again (it cannot happen twice).
    let statuses = await attempts([a.url, b.url], email, 8)
    if (statuses.filter((s) => s === 401).length !== 4) statuses = await attempts([a.url, b.url], email, 8)
    assert.deepEqual(statuses, [401, 401, 401, 401, 429, 429, 429, 429], 'four wrong passwords in all, then refused by both nodes')

    const apart = sharedStore(t)
    const c = await startServerProcess(t, { ...apart, NODE_ID: 'c', RATE_LIMIT_STORE: 'memory', ...LIMITS })
    const d = await startServerProcess(t, { ...apart, NODE_ID: 'd', RATE_LIMIT_STORE: 'memory', ...LIMITS })
    const other = await account(c.url)
    const local = await attempts([c.url, d.url], other.email, 10)
    assert.deepEqual(local, [401, 401, 401, 401, 401, 401, 401, 401, 429, 429], 'in memory, two nodes give the email twice its limit')
  })

  test('store: the per-key API limit holds across two processes on one file', async (t) => {
    const shared = sharedStore(t)
    const env = { ...shared, RATE_LIMIT_STORE: 'store', RATE_LIMIT_API_PER_SECOND: '5', SVC_ROLES: 'api' }
    const a = await startServerProcess(t, { ...env, NODE_ID: 'a' })
    const b = await startServerProcess(t, { ...env, NODE_ID: 'b' })
    const { key } = await account(a.url)
    const clients = [new Client(a.url), new Client(b.url)]
    const burst = async () => {
      // Start just after a second begins, so the twelve requests fall in one 1 s window.
      while (Date.now() % 1000 > 20) await new Promise((resolve) => setTimeout(resolve, 1))
      const second = Math.floor(Date.now() / 1000)
      const res = await Promise.all(Array.from({ length: 12 }, (_, i) =>
        clients[i % 2]!.post('/api/send', { to: 'someone@example.com', subject: 's', text: 't' }, { 'x-api-key': key })))
      return { statuses: res.map((r) => r.status), oneWindow: Math.floor(Date.now() / 1000) === second }
    }
    let got = await burst()
    if (!got.oneWindow) got = await burst()
    assert.ok(got.oneWindow, 'the burst fitted in one second')
    assert.equal(got.statuses.filter((s) => s === 202).length, 5, `five accepted in all: ${got.statuses.join(',')}`)
    assert.equal(got.statuses.filter((s) => s === 429).length, 7)
  })
})
