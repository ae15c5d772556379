// A store write that fails for a moment (a lock timeout, a failover) is retried in memory (p-retry)
// instead of losing the work: the mailer's record of an attempt and the engine's batch of delivery
// outcomes. Real SQLite store whose write fails the first times it is called, real mailer and engine.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createSandboxTransport } from '../../src/mail/sandbox-transport.js'
import { openSqliteStore } from '../../src/store/sqlite/index.js'
import type { Store } from '../../src/store/types.js'
import { eventually, startReceiver } from '../helpers/receiver.js'
import { sender } from '../helpers/sending.js'
import { startServer, tempDir } from '../helpers/server.js'

/** The store's `method` throws a plain error its first `failures` calls; returns how many calls were made. */
function failFirst (store: Store, method: 'recordEmailAttempt' | 'recordOutcomes', failures: number): () => number {
  const real = (store[method] as (...args: unknown[]) => Promise<unknown>).bind(store)
  let calls = 0
  Object.assign(store, {
    [method]: async (...args: unknown[]) => {
      calls += 1
      if (calls <= failures) throw new Error('the store is busy (transient)')
      return real(...args)
    },
  })
  return () => calls
}

describe('transient store write failures', () => {
  test('recording a mail attempt fails twice: it is retried, the email is delivered and sent once', async (t) => {
    const dataDir = tempDir(t)
    const store = openSqliteStore({ dataDir })
    const calls = failFirst(store, 'recordEmailAttempt', 2)
    const transport = createSandboxTransport()
    const server = await startServer(t, { dataDir, deps: { store, transport } })
    const s = await sender(server)

    const res = await s.send({ to: 'reader@example.com', subject: 'Hello', text: 'Hi' })
    assert.equal(res.status, 202, res.text)
    const email = await s.settled(res.body.data.id)
    assert.equal(email.status, 'delivered')
    assert.equal(calls(), 3, 'two failed writes, then the one that stuck')
    assert.equal(transport.sent().filter((m) => m.messageId === res.body.data.id).length, 1, 'the email went out once')
  })

  test('writing delivery outcomes fails twice: the batch is retried and the log says succeeded after one attempt', async (t) => {
    const receiver = await startReceiver(t)
    const dataDir = tempDir(t)
    const store = openSqliteStore({ dataDir })
    const calls = failFirst(store, 'recordOutcomes', 2)
    const transport = createSandboxTransport()
    const server = await startServer(t, { dataDir, env: { DELIVERY_THREADS: '1' }, deps: { store, transport } })
    const s = await sender(server)
    const hook = await s.client.post('/api/webhooks', { url: receiver.url('/hook'), events: ['email.sent'] })
    assert.equal(hook.status, 201, hook.text)
    receiver.secrets.push(hook.body.data.secret)

    const res = await s.send({ to: 'reader@example.com', subject: 'Hello', text: 'Hi' })
    assert.equal(res.status, 202, res.text)
    await receiver.until(() => receiver.on('/hook').length === 1, 'the delivery')
    const entry = await eventually(async () => {
      const log = await s.client.get(`/api/webhooks/${hook.body.data.id}/deliveries`)
      return log.body.data.find((d: { status: string }) => d.status === 'succeeded')
    }, 'success in the log')
    assert.equal(entry.attempts, 1)
    assert.ok(calls() >= 3, 'two failed writes, then the one that stuck')
    await server.service.engine.drained()
    assert.equal(receiver.on('/hook').length, 1, 'delivered once: the outcome was not lost and the work not done again')
  })
})
