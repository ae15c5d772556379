// "A 202 means it is on disk": the compiled server as a child process, relaying to a real SMTP server,
// killed with SIGKILL while sends are in flight and restarted on the same data directory. Every accepted
// email must reach the relay after the restart, and none twice.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { killProcess, startServerProcess } from '../helpers/process.js'
import { Client, PASSWORD, tempDir, uniqueEmail } from '../helpers/server.js'
import { header, startSmtpSink } from '../helpers/smtp-sink.js'
import { waitFor } from '../helpers/wait.js'

test('SIGKILL during a burst of sends: after a restart every accepted email is delivered exactly once', async (t) => {
  const sink = await startSmtpSink()
  const dataDir = tempDir(t)
  // The dead process's emails are taken again when their leases run out (short here: 2 s).
  const env = { DATA_DIR: dataDir, SMTP_URL: sink.url, MAIL_LEASE_SECONDS: '2' }
  let child = await startServerProcess(t, env)
  t.after(() => sink.close())

  const client = new Client(child.url)
  assert.equal((await client.post('/api/auth/signup', { email: uniqueEmail('crash'), password: PASSWORD })).status, 201)
  const key: string = (await client.post('/api/keys', { name: 'k' })).body.data.key
  const send = (c: Client, i: number) =>
    c.post('/api/send', { to: `reader${i}@example.net`, subject: `Message ${i}`, text: `body ${i}` }, { 'x-api-key': key })
  const status = async (c: Client, id: string) => (await c.get(`/api/emails/${id}`, { 'x-api-key': key })).body?.data?.status

  // Some emails go out completely before the crash: they must not go out again after it.
  const early: string[] = []
  for (let i = 0; i < 5; i++) {
    const res = await send(client, i)
    assert.equal(res.status, 202)
    early.push(res.body.data.id)
  }
  for (const id of early) await waitFor(`early email ${id} delivered`, async () => (await status(client, id)) === 'delivered')

  // Then the relay stops answering DATA, a burst is accepted, and the process dies mid-send.
  sink.hold()
  const burst = await Promise.all(Array.from({ length: 30 }, (_, i) => send(client, 100 + i)))
  assert.deepEqual([...new Set(burst.map((r) => r.status))], [202])
  await waitFor('the relay to be holding messages in flight', () => sink.held() > 0)
  await killProcess(child.process)
  // A relay drops a message whose connection died before its 250; wait until it has seen every close.
  await waitFor('the relay to see the connections close', () => sink.connections() === 0)
  sink.release()
  assert.equal(sink.received.length, early.length, 'nothing of the burst was acknowledged before the crash')

  child = await startServerProcess(t, env)
  const after = new Client(child.url)
  const accepted = [...early, ...burst.map((r) => r.body.data.id as string)]
  for (const id of accepted) await waitFor(`email ${id} delivered after the restart`, async () => (await status(after, id)) === 'delivered')

  const ids = sink.received.map((m) => /^<(em_[0-9a-f]+)@/.exec(header(m.raw, 'Message-ID') ?? '')?.[1])
  const counts = new Map<string, number>()
  for (const id of ids) counts.set(String(id), (counts.get(String(id)) ?? 0) + 1)
  assert.deepEqual([...counts.keys()].sort(), accepted.slice().sort(), 'every accepted email reached the relay')
  assert.deepEqual([...counts.entries()].filter(([, n]) => n > 1), [], 'and none twice')
})
