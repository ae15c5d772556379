// Issue 11 item 5: the delivery log records every attempt made, whatever happens to the webhook meanwhile.
// One receiver answers 410 Gone while fourteen others fail at once in their own ways (500s, resets, slow
// answers); the 410 disables its webhook and cancels what it still had pending, including deliveries
// already POSTed whose answers arrive afterwards. Each of those must still show its attempt and its 410.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { signedUp, startServer, type Client } from '../helpers/server.js'
import { emitEvents as emit, webhookTo as webhook } from '../helpers/deliveries.js'
import { eventually, startReceiver, type Script } from '../helpers/receiver.js'

/** The whole delivery log of a webhook, through the API, every page. */
async function fullLog (client: Client, webhookId: string): Promise<any[]> {
  const all: any[] = []
  let cursor: string | null = null
  do {
    const res: any = await client.get(`/api/webhooks/${webhookId}/deliveries?limit=100${cursor ? `&cursor=${cursor}` : ''}`)
    assert.equal(res.status, 200, res.text)
    all.push(...res.body.data)
    cursor = res.body.nextCursor
  } while (cursor)
  return all
}

describe('the delivery log under concurrent faults', () => {
  test('a 410 among fourteen faulty receivers: every attempt made shows in the log with its status code', async (t) => {
    const slow = (status: number, ms: number): Script => (_r, _n, res) => { setTimeout(() => { res.statusCode = status; res.end() }, ms) }
    const scripts: Record<string, Script> = {
      // Slow enough that many of its deliveries are in flight when the first 410 disables the webhook.
      '/gone': slow(410, 30),
    }
    const faulty: string[] = []
    // Each faulty receiver fails its first 40 requests in its own way, then recovers (so the test ends).
    const faultyFor = (i: number): Script => {
      const fail: Script = i % 3 === 0
        ? (_r, _n, res) => { res.statusCode = 500; res.end('no') }
        : i % 3 === 1
          ? (_r, _n, res) => { res.socket?.destroy() }
          : slow(503, 40 + i * 5)
      return (r, n, res) => (n <= 40 ? fail(r, n, res) : slow(200, i * 2)(r, n, res))
    }
    for (let i = 0; i < 14; i++) {
      const path = `/faulty-${i}`
      faulty.push(path)
      scripts[path] = faultyFor(i)
    }
    const receiver = await startReceiver(t, scripts)
    // A short breaker cooldown, so that the faulty receivers run through their retries in seconds.
    const server = await startServer(t, {
      env: { DELIVERY_RETRY_SCHEDULE: '30ms,30ms', DELIVERY_THREADS: '2', DELIVERY_WINDOW: '32' },
      deps: { engine: { breaker: { cooldownMs: 20, maxCooldownMs: 40 } } },
    })

    // Three accounts of five webhooks each (the free plan's limit): the 410 receiver and fourteen faulty ones.
    const accounts = [await signedUp(server), await signedUp(server), await signedUp(server)]
    const paths = ['/gone', ...faulty]
    const hooks = new Map<string, { id: string; client: Client }>()
    for (const [i, path] of paths.entries()) {
      const account = accounts[Math.floor(i / 5)]!
      hooks.set(path, { ...(await webhook(account.client, receiver, path)), client: account.client })
    }
    for (let round = 0; round < 3; round++) {
      for (const account of accounts) await emit(server, account.id, 50)
    }

    const gone = hooks.get('/gone')!
    await eventually(async () => {
      const w = await gone.client.get(`/api/webhooks/${gone.id}`)
      return w.body.data.status === 'auto_disabled' ? true : undefined
    }, 'the 410 to disable its webhook')
    // Then the engine stops: it lets every request in flight finish and writes every outcome, so from
    // here every attempt the receivers saw has had its chance to be recorded.
    await server.service.engine.stop()
    const logs = new Map<string, any[]>()
    for (const [path, hook] of hooks) logs.set(path, await fullLog(hook.client, hook.id))

    const goneLog = new Map(logs.get('/gone')!.map((d) => [d.id, d]))
    assert.equal(goneLog.size, 150)
    const attempted = new Set(receiver.on('/gone').map((r) => r.deliveryId))
    assert.ok(attempted.size > 1, `several deliveries were POSTed to the 410 receiver (${attempted.size})`)
    const wrong = [...attempted].map((id) => goneLog.get(id)).filter((d) => !(d && d.attempts >= 1 && d.lastStatusCode === 410 && d.lastAttemptAt !== null))
    assert.deepEqual(wrong, [], 'every delivery answered 410 shows its attempt and the 410')
    const failed410 = [...goneLog.values()].filter((d) => d.status === 'failed' && d.lastStatusCode === 410)
    assert.ok(failed410.length >= 1, 'the delivery whose 410 disabled the webhook is failed with 410')
    for (const d of goneLog.values()) {
      assert.ok(d.status === 'failed' || d.status === 'cancelled', `no delivery to a gone receiver succeeded (${d.status})`)
      if (!attempted.has(d.id)) assert.equal(d.attempts, 0, 'no attempt is recorded that was not made')
    }

    for (const [path, entries] of logs) {
      const received = new Map<string, number>()
      for (const r of receiver.on(path)) received.set(r.deliveryId, (received.get(r.deliveryId) ?? 0) + 1)
      for (const d of entries) {
        // A delivery with no attempt has no attempt's details; one the receiver got shows it.
        if (d.attempts === 0) {
          assert.equal(d.lastStatusCode, null, `${path}: attempts 0 with a status code`)
          assert.equal(d.lastAttemptAt, null, `${path}: attempts 0 with a last attempt time`)
          assert.equal(received.has(d.id), false, `${path}: ${d.id} reached the receiver but shows no attempt`)
        }
      }
    }
  })
})
