// The webhook sender against real sockets on loopback: a node:http receiver that checks every signature
// the way a subscriber would, and raw TCP listeners for what must never (or must) be connected to.
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { createHmac, timingSafeEqual } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from 'node:net'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { MessageChannel } from 'node:worker_threads'
import { Piscina } from 'piscina'
import type { AttachJob, DeliverWorkerData, DispatcherMessage, WorkerMessage } from '../../workers/deliver.js'
import { packTasks, unpackResults } from '../../src/delivery/wire.js'
import { createHttpSender, MAX_READ_BYTES, parseRetryAfter, type DeliveryResult, type DeliveryTask, type SenderOptions } from '../../src/delivery/http-sender.js'
import { waitFor } from '../helpers/wait.js'
import { verifySignature } from '../../src/delivery/signature.js'
import type { Resolver } from '../../src/domain/webhook-url.js'
import { newWebhookSecret } from '../../src/domain/secrets.js'
import { Webhook } from 'standardwebhooks'

const SECRET = 'whsec_integration_secret'

interface Received {
  path: string
  headers: IncomingMessage['headers']
  body: string
  /** verifySignature() from the library, with the one secret the test expects. */
  verified: boolean
  /** The seed's algorithm recomputed here with node:crypto, for every v1 entry, per secret. */
  independentlyVerified: Record<string, boolean>
}

/** Recomputes the seed's v1 for `secret`: hex HMAC-SHA256 over "<t>.<body bytes>", keyed with the secret's UTF-8 bytes. */
function independentCheck (header: string, body: Buffer, secret: string): boolean {
  const parts = header.split(',').map((p) => p.split('='))
  const t = parts.find(([k]) => k === 't')?.[1]
  if (!t) return false
  const expected = createHmac('sha256', Buffer.from(secret, 'utf8'))
    .update(Buffer.concat([Buffer.from(`${t}.`, 'utf8'), body]))
    .digest()
  return parts.filter(([k]) => k === 'v1').some(([, hex]) => {
    const given = Buffer.from(hex ?? '', 'hex')
    return given.length === expected.length && timingSafeEqual(given, expected) && hex === hex?.toLowerCase()
  })
}

type Route = (req: IncomingMessage, res: ServerResponse) => void

async function startReceiver (routes: Record<string, Route>, secrets: string[] = [SECRET]) {
  const received: Received[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const raw = Buffer.concat(chunks)
      const body = raw.toString('utf8')
      const header = String(req.headers['x-svc-signature'] ?? '')
      received.push({
        path: req.url ?? '',
        headers: req.headers,
        body,
        verified: verifySignature(header, body, secrets[0] ?? ''),
        independentlyVerified: Object.fromEntries(secrets.map((s) => [s, independentCheck(header, raw, s)])),
      })
      const route = routes[req.url ?? ''] ?? ((_q, r) => { r.statusCode = 404; r.end() })
      route(req, res)
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  assert.ok(address && typeof address === 'object')
  return {
    received,
    port: address.port,
    url: (path: string) => `http://127.0.0.1:${address.port}${path}`,
    async close () {
      server.closeAllConnections()
      server.close()
      await once(server, 'close')
    },
  }
}

/** A bare TCP listener that records every connection and the first bytes sent on it, then hangs up. */
async function startTcpListener () {
  const connections: Buffer[] = []
  const sockets = new Set<Socket>()
  const server: TcpServer = createTcpServer((socket) => {
    sockets.add(socket)
    const index = connections.push(Buffer.alloc(0)) - 1
    socket.on('data', (chunk: Buffer) => {
      connections[index] = Buffer.concat([connections[index] ?? Buffer.alloc(0), chunk])
      socket.destroy()
    })
    socket.on('error', () => {})
    socket.on('close', () => sockets.delete(socket))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  assert.ok(address && typeof address === 'object')
  return {
    connections,
    port: address.port,
    async close () {
      for (const s of sockets) s.destroy()
      server.close()
      await once(server, 'close')
    },
  }
}


let seq = 0
function task (url: string, overrides: Partial<DeliveryTask> = {}): DeliveryTask {
  seq += 1
  return {
    deliveryId: `dlv_${seq}`,
    webhookId: 'wh_1',
    url,
    event: 'email.delivered',
    body: JSON.stringify({ type: 'email.delivered', eventId: `evt_${seq}`, emailId: 'em_1', to: 'zoë@example.com', timestamp: '2025-01-01T00:00:00.000Z' }),
    secrets: [SECRET],
    ...overrides,
  }
}

const devOptions: SenderOptions = { timeoutMs: 2000, maxResponseBytes: 1024, production: false, allowedCidrs: '' }

async function sendOne (options: SenderOptions, t: DeliveryTask): Promise<DeliveryResult> {
  const sender = createHttpSender(options)
  try {
    const results = await sender.send([t])
    assert.equal(results.length, 1)
    const [result] = results
    assert.ok(result)
    assert.equal(result.deliveryId, t.deliveryId)
    return result
  } finally {
    await sender.close()
  }
}

const hang: Route = () => {}

/** What the scripted slow and endless answers did, by path: how much they wrote, whether the client hung up first. */
const writes = new Map<ServerResponse, { written: number; finished: boolean; closedEarly: boolean }>()
const lastWrite = (res: ServerResponse) => {
  const w = { written: 0, finished: false, closedEarly: false }
  writes.set(res, w)
  res.on('close', () => { if (!w.finished) w.closedEarly = true })
  return w
}

/** The status at once, then a 20-byte body one byte every 300 ms (6 s in all). */
function drip (res: ServerResponse, status: number): void {
  const w = lastWrite(res)
  res.writeHead(status, { 'content-type': 'text/plain', 'content-length': '20' })
  res.flushHeaders()
  const timer = setInterval(() => {
    if (res.destroyed) { clearInterval(timer); return }
    res.write('x')
    w.written += 1
    if (w.written === 20) {
      clearInterval(timer)
      w.finished = true
      res.end()
    }
  }, 300)
  res.on('close', () => clearInterval(timer))
}

/** A body that never ends, written as fast as the client reads it. */
function endless (res: ServerResponse, status: number): void {
  const w = lastWrite(res)
  res.writeHead(status, { 'content-type': 'text/plain' })
  const chunk = Buffer.alloc(16 * 1024, 'z')
  const write = (): void => {
    while (!res.destroyed) {
      w.written += chunk.length
      if (!res.write(chunk)) { res.once('drain', write); return }
    }
  }
  write()
}

describe('http sender', () => {
  let receiver: Awaited<ReturnType<typeof startReceiver>>
  before(async () => {
    receiver = await startReceiver({
      '/ok': (_req, res) => { res.statusCode = 204; res.end() },
      '/created': (_req, res) => { res.statusCode = 201; res.end('{"ok":true}') },
      '/fail': (_req, res) => { res.statusCode = 500; res.end('database is down') },
      '/redirect': (_req, res) => { res.statusCode = 302; res.setHeader('location', receiver.url('/target')); res.end() },
      '/target': (_req, res) => { res.statusCode = 200; res.end() },
      '/hang': hang,
      '/stall-body': (_req, res) => { res.writeHead(200); res.write('partial') },
      '/gone': (_req, res) => { res.statusCode = 410; res.end() },
      '/slow-down': (_req, res) => { res.statusCode = 429; res.setHeader('retry-after', '7'); res.end() },
      '/unavailable-until': (_req, res) => {
        res.statusCode = 503
        res.setHeader('retry-after', new Date(Date.now() + 120_000).toUTCString())
        res.end()
      },
      '/drip': (_req, res) => drip(res, 200),
      '/drip-gone': (_req, res) => drip(res, 410),
      '/endless': (_req, res) => endless(res, 200),
      '/huge-failure': (_req, res) => {
        res.statusCode = 500
        const chunk = Buffer.alloc(64 * 1024, 'y')
        let left = 10 * 1024 * 1024
        const write = (): void => {
          while (left > 0) {
            left -= chunk.length
            if (!res.write(chunk)) { res.once('drain', write); return }
          }
          res.end()
        }
        res.on('close', () => { left = 0 })
        write()
      },
      '/huge': (req, res) => {
        res.statusCode = req.headers['x-svc-event'] === 'email.bounced' ? 500 : 200
        const chunk = Buffer.alloc(64 * 1024, 'x')
        let left = 5 * 1024 * 1024
        const write = (): void => {
          while (left > 0) {
            left -= chunk.length
            if (!res.write(chunk)) { res.once('drain', write); return }
          }
          res.end()
        }
        write()
      },
    })
  })
  after(async () => { await receiver.close() })

  const receivedFor = (t: DeliveryTask): Received[] =>
    receiver.received.filter((r) => r.headers['x-svc-delivery'] === t.deliveryId)

  test('a 2xx is delivered, with the documented headers and a signature the receiver can verify', async () => {
    const t = task(receiver.url('/ok'))
    const started = performance.now()
    const result = await sendOne(devOptions, t)
    const elapsed = performance.now() - started
    assert.equal(result.outcome, 'delivered')
    assert.equal(result.status, 204)
    assert.equal(result.error, undefined)
    // The log's duration is the request's: a real number, and no longer than the call that made it.
    assert.ok(Number.isFinite(result.durationMs) && result.durationMs >= 0 && result.durationMs <= elapsed + 1, `durationMs ${result.durationMs} within the call's ${elapsed} ms`)

    const [got] = receivedFor(t)
    assert.ok(got, 'the receiver got the delivery')
    assert.equal(got.body, t.body, 'the body arrives byte for byte')
    assert.equal(got.headers['content-type'], 'application/json')
    assert.equal(got.headers['x-svc-event'], 'email.delivered')
    assert.equal(got.headers['x-svc-delivery'], t.deliveryId)
    assert.match(String(got.headers['user-agent']), /^svc-webhooks\//)
    assert.match(String(got.headers['x-svc-signature']), /^t=\d+,v1=[0-9a-f]{64}$/)
    assert.equal(got.verified, true)
    assert.equal(got.independentlyVerified[SECRET], true)
  })

  test('every 2xx counts as delivered', async () => {
    const result = await sendOne(devOptions, task(receiver.url('/created')))
    assert.deepEqual({ outcome: result.outcome, status: result.status, error: result.error }, { outcome: 'delivered', status: 201, error: undefined })
  })

  test('a 500 is retried, with the status and the receiver\'s answer', async () => {
    const result = await sendOne(devOptions, task(receiver.url('/fail')))
    assert.equal(result.outcome, 'retry')
    assert.equal(result.status, 500)
    assert.equal(result.error, 'receiver answered 500: database is down', "the receiver's answer is in the log")
  })

  test('a redirect is not followed and is retried', async () => {
    const before = receiver.received.filter((r) => r.path === '/target').length
    const result = await sendOne(devOptions, task(receiver.url('/redirect')))
    assert.equal(result.outcome, 'retry')
    assert.equal(result.status, 302)
    assert.equal(result.error, 'redirect not followed (3xx)')
    assert.equal(receiver.received.filter((r) => r.path === '/target').length, before, 'the Location target is never requested')
  })

  test('a receiver that never answers times out and is retried', async () => {
    const t = task(receiver.url('/hang'))
    const result = await sendOne({ ...devOptions, timeoutMs: 200 }, t)
    assert.equal(result.outcome, 'retry')
    assert.equal(result.error, 'timeout after 200 ms: no complete answer')
    assert.equal(result.status, undefined)
    assert.equal(receivedFor(t).length, 1, 'the request did reach the receiver')
  })

  test('a 2xx whose body never finishes is a timeout, not a delivery', async () => {
    const result = await sendOne({ ...devOptions, timeoutMs: 200 }, task(receiver.url('/stall-body')))
    assert.equal(result.outcome, 'retry')
    assert.equal(result.error, 'timeout after 200 ms: no complete answer')
    assert.equal(result.status, 200)
  })

  test('a 2xx that drips its body past the deadline fails at the deadline, and the connection is closed', async () => {
    // 200 at once, then one byte every 300 ms: each gap is short, the whole answer takes 6 s.
    const t = task(receiver.url('/drip'))
    const result = await sendOne({ ...devOptions, timeoutMs: 1000 }, t)
    assert.equal(result.outcome, 'retry', 'a slow drip is not a delivery')
    assert.equal(result.status, 200)
    assert.equal(result.error, 'timeout after 1000 ms: no complete answer')
    const w = [...writes.values()].at(-1)
    assert.ok(w)
    await waitFor('the receiver to see the connection closed', () => w.closedEarly)
    assert.ok(w.written < 20, `the body was cut short (${w.written} of 20 bytes sent)`)
  })

  test('a failure status that drips its body counts by its status at the deadline', async () => {
    const result = await sendOne({ ...devOptions, timeoutMs: 1000 }, task(receiver.url('/drip-gone')))
    assert.equal(result.outcome, 'gone')
    assert.equal(result.status, 410)
    assert.match(result.error ?? '', /^receiver answered 410 Gone(: x+)?$/)
  })

  test('an attempt still waiting for a socket at its deadline times out and is never sent', async () => {
    // One socket: the second request queues behind the first, which never gets an answer.
    const sender = createHttpSender({ ...devOptions, timeoutMs: 300, connections: 1 })
    try {
      const first = task(receiver.url('/hang'))
      const second = task(receiver.url('/ok'))
      const pending = sender.send([first, second])
      // Both deadlines pass while this thread is busy, so one sweep finds both past them: the socket the
      // first one holds is never free for the second before its deadline. (Otherwise the second, started
      // a moment later, may rightly go out in the moment it has left once the first is aborted.)
      const busyUntil = performance.now() + 400
      while (performance.now() < busyUntil) { /* the thread is busy */ }
      const results = await pending
      assert.deepEqual(results.map((r) => [r.outcome, r.error]), [
        ['retry', 'timeout after 300 ms: no complete answer'],
        ['retry', 'timeout after 300 ms: no complete answer'],
      ])
      const [next] = await sender.send([task(receiver.url('/ok'))])
      assert.equal(next?.outcome, 'delivered', 'the sender works afterwards')
      assert.equal(receivedFor(second).length, 0, 'what was answered as a timeout was not sent afterwards')
    } finally {
      await sender.close()
    }
  })

  test('a 2xx with an endless body is delivered once the read cap is reached, without reading it all', async () => {
    const sender = createHttpSender({ ...devOptions, timeoutMs: 30_000, connections: 1 })
    try {
      const [result] = await sender.send([task(receiver.url('/endless'))])
      assert.equal(result?.outcome, 'delivered')
      assert.equal(result?.status, 200)
      const w = [...writes.values()].at(-1)
      assert.ok(w)
      await waitFor('the receiver to see the connection closed (not reused mid-body)', () => w.closedEarly)
      const [next] = await sender.send([task(receiver.url('/created'))])
      assert.equal(next?.outcome, 'delivered', 'the single pooled connection was replaced')
    } finally {
      await sender.close()
    }
  })

  test('a 500 with a 10 MiB body is retried with a short error, and only the cap is read', async () => {
    const sender = createHttpSender({ ...devOptions, timeoutMs: 30_000, connections: 1 })
    try {
      const [result] = await sender.send([task(receiver.url('/huge-failure'))])
      assert.equal(result?.outcome, 'retry')
      assert.equal(result?.status, 500)
      // maxResponseBytes (1024) of the answer are kept, and the log gets its first 200 characters.
      assert.equal(result?.error, `receiver answered 500: ${'y'.repeat(200)}`)
      assert.ok(MAX_READ_BYTES < 10 * 1024 * 1024)
      const [next] = await sender.send([task(receiver.url('/created'))])
      assert.equal(next?.outcome, 'delivered')
    } finally {
      await sender.close()
    }
  })

  test('410 Gone is reported as gone', async () => {
    const result = await sendOne(devOptions, task(receiver.url('/gone')))
    assert.equal(result.outcome, 'gone')
    assert.equal(result.status, 410)
  })

  test('429 with Retry-After in seconds gives retryAfterMs', async () => {
    const result = await sendOne(devOptions, task(receiver.url('/slow-down')))
    assert.equal(result.outcome, 'retry')
    assert.equal(result.status, 429)
    assert.equal(result.retryAfterMs, 7000)
  })

  test('503 with Retry-After as an HTTP date gives the time until then', async () => {
    const result = await sendOne(devOptions, task(receiver.url('/unavailable-until')))
    assert.equal(result.outcome, 'retry')
    assert.equal(result.status, 503)
    assert.ok(result.retryAfterMs !== undefined && result.retryAfterMs > 60_000 && result.retryAfterMs <= 120_000, String(result.retryAfterMs))
  })

  test('Retry-After parsing: seconds, HTTP dates, past dates and garbage', () => {
    const now = Date.parse('2025-01-01T00:00:00Z')
    assert.equal(parseRetryAfter('120', now), 120_000)
    assert.equal(parseRetryAfter('Wed, 01 Jan 2025 00:00:30 GMT', now), 30_000)
    assert.equal(parseRetryAfter('Tue, 31 Dec 2024 23:00:00 GMT', now), 0)
    assert.equal(parseRetryAfter('soon', now), undefined)
    assert.equal(parseRetryAfter('-5', now), undefined)
    assert.equal(parseRetryAfter(undefined, now), undefined)
  })

  test('with two live secrets the header has two v1 entries, each valid for its secret', async () => {
    const oldSecret = 'whsec_old_one'
    const rotating = await startReceiver({ '/ok': (_req, res) => { res.end() } }, [SECRET, oldSecret])
    try {
      const t = task(rotating.url('/ok'), { secrets: [SECRET, oldSecret] })
      const result = await sendOne(devOptions, t)
      assert.equal(result.outcome, 'delivered')
      const [got] = rotating.received
      assert.ok(got)
      assert.match(String(got.headers['x-svc-signature']), /^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/)
      assert.equal(verifySignature(String(got.headers['x-svc-signature']), got.body, SECRET), true)
      assert.equal(verifySignature(String(got.headers['x-svc-signature']), got.body, oldSecret), true)
      assert.deepEqual(got.independentlyVerified, { [SECRET]: true, [oldSecret]: true })
    } finally {
      await rotating.close()
    }
  })

  test('Standard Webhooks headers: webhook-id, the same timestamp, one v1 per secret that standardwebhooks verifies', async () => {
    const current = newWebhookSecret()
    const previous = newWebhookSecret()
    const handMade = 'whsec_not base64!'
    const standard = await startReceiver({ '/ok': (_req, res) => { res.end() } }, [current, previous, handMade])
    try {
      const t = task(standard.url('/ok'), { secrets: [current, previous, handMade] })
      assert.equal((await sendOne(devOptions, t)).outcome, 'delivered')
      const only = task(standard.url('/ok'), { secrets: [handMade] })
      assert.equal((await sendOne(devOptions, only)).outcome, 'delivered')
      const [got, unsigned] = standard.received
      assert.ok(got && unsigned)
      assert.equal(got.headers['webhook-id'], t.deliveryId)
      assert.equal(got.headers['webhook-timestamp'], /^t=(\d+),/.exec(String(got.headers['x-svc-signature']))![1])
      assert.match(String(got.headers['webhook-signature']), /^v1,[A-Za-z0-9+/]{43}= v1,[A-Za-z0-9+/]{43}=$/, 'no entry for the hand-made secret')
      const headers = got.headers as Record<string, string>
      assert.deepEqual(new Webhook(current).verify(got.body, headers), JSON.parse(t.body))
      assert.deepEqual(new Webhook(previous).verify(got.body, headers), JSON.parse(t.body))
      assert.throws(() => new Webhook(newWebhookSecret()).verify(got.body, headers), /No matching signature/)
      assert.deepEqual(got.independentlyVerified, { [current]: true, [previous]: true, [handMade]: true }, 'the seed scheme signs with every secret')
      // No decodable secret: the seed signature alone, and no webhook-signature rather than an empty one.
      assert.equal(unsigned.headers['webhook-signature'], undefined)
      assert.equal(unsigned.headers['webhook-id'], only.deliveryId)
      assert.deepEqual(unsigned.independentlyVerified[handMade], true)
    } finally {
      await standard.close()
    }
  })

  test('a huge response body is capped, and the sender keeps working afterwards', async () => {
    const sender = createHttpSender({ ...devOptions, maxResponseBytes: 100, connections: 1 })
    try {
      const [big] = await sender.send([task(receiver.url('/huge'))])
      assert.equal(big?.outcome, 'delivered')
      const [bigFailure] = await sender.send([task(receiver.url('/huge'), { event: 'email.bounced' })])
      assert.equal(bigFailure?.error, `receiver answered 500: ${'x'.repeat(100)}`, 'only maxResponseBytes of the answer is read')
      const [next] = await sender.send([task(receiver.url('/created'))])
      assert.equal(next?.outcome, 'delivered', 'the single pooled connection was not left stuck')
    } finally {
      await sender.close()
    }
  })

  test('a batch is sent concurrently and yields one result per task, in order', async () => {
    const sender = createHttpSender({ ...devOptions, timeoutMs: 300 })
    try {
      const batch = [task(receiver.url('/hang')), task(receiver.url('/ok')), task(receiver.url('/fail')), task(receiver.url('/gone')), task('not a url')]
      const results = await sender.send(batch)
      assert.deepEqual(results.map((r) => r.deliveryId), batch.map((t) => t.deliveryId))
      assert.deepEqual(results.map((r) => r.outcome), ['retry', 'delivered', 'retry', 'gone', 'retry'])
      assert.equal(results[0]?.error, 'timeout after 300 ms: no complete answer')
      assert.match(results[4]?.error ?? '', /absolute URL/)
    } finally {
      await sender.close()
    }
  })

  test('a refused connection is retried with a short error, no stack', async () => {
    const closed = await startTcpListener()
    const port = closed.port
    await closed.close()
    const result = await sendOne(devOptions, task(`http://127.0.0.1:${port}/`))
    assert.equal(result.outcome, 'retry')
    assert.equal(result.error, 'connection refused (ECONNREFUSED)')
  })

  test('a delivery without a secret is not sent unsigned', async () => {
    const t = task(receiver.url('/ok'), { secrets: [] })
    const result = await sendOne(devOptions, t)
    assert.equal(result.outcome, 'retry')
    assert.match(result.error ?? '', /signing secret/)
    assert.equal(receivedFor(t).length, 0)
  })

  test('development uses an injected resolver and connects to what it returned', async () => {
    const resolver: Resolver = async (name) => (name === 'receiver.test' ? [{ address: '127.0.0.1', family: 4 }] : [])
    const t = task(`http://receiver.test:${receiver.port}/ok`)
    const result = await sendOne({ ...devOptions, resolver }, t)
    assert.equal(result.outcome, 'delivered')
    assert.equal(receivedFor(t)[0]?.headers.host, `receiver.test:${receiver.port}`)
  })
})

describe('http sender in production (SSRF guard at connect time)', () => {
  let listener: Awaited<ReturnType<typeof startTcpListener>>
  before(async () => { listener = await startTcpListener() })
  after(async () => { await listener.close() })

  const loopbackResolver: Resolver = async (name) => {
    if (name === 'hooks.example.test') return [{ address: '127.0.0.1', family: 4 }]
    if (name === 'mixed.example.test') return [{ address: '127.0.0.1', family: 4 }, { address: '10.0.0.1', family: 4 }]
    throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${name}`), { code: 'ENOTFOUND' })
  }
  const prodOptions: SenderOptions = { timeoutMs: 2000, maxResponseBytes: 1024, production: true, allowedCidrs: '', resolver: loopbackResolver }

  test('a name resolving to loopback is refused and nothing is connected to', async () => {
    const seen = listener.connections.length
    const result = await sendOne(prodOptions, task(`https://hooks.example.test:${listener.port}/hook`))
    assert.equal(result.outcome, 'retry')
    assert.equal(result.error, 'blocked: webhook URL resolves to a loopback address')
    assert.equal(listener.connections.length, seen, 'no TCP connection was opened')
  })

  test('a literal loopback host is refused without connecting', async () => {
    const seen = listener.connections.length
    for (const host of ['127.0.0.1', '127.1', '[::ffff:127.0.0.1]']) {
      const result = await sendOne(prodOptions, task(`https://${host}:${listener.port}/hook`))
      assert.equal(result.outcome, 'retry')
      assert.equal(result.error, 'blocked: webhook URL points to a loopback address', host)
    }
    assert.equal(listener.connections.length, seen)
  })

  test('plain http is refused in production', async () => {
    const seen = listener.connections.length
    const result = await sendOne({ ...prodOptions, allowedCidrs: '127.0.0.0/8' }, task(`http://hooks.example.test:${listener.port}/hook`))
    assert.equal(result.outcome, 'retry')
    assert.equal(result.error, 'blocked: webhook URL must use https')
    assert.equal(listener.connections.length, seen)
  })

  test('a name that does not resolve is retried with the DNS failure', async () => {
    const result = await sendOne(prodOptions, task(`https://nowhere.example.test:${listener.port}/`))
    assert.equal(result.outcome, 'retry')
    assert.equal(result.error, 'webhook URL host nowhere.example.test does not resolve (ENOTFOUND)')
  })

  test('every resolved address is judged: an allowed one beside a private one is still refused', async () => {
    const seen = listener.connections.length
    const result = await sendOne({ ...prodOptions, allowedCidrs: '127.0.0.0/8' }, task(`https://mixed.example.test:${listener.port}/`))
    assert.equal(result.error, 'blocked: webhook URL resolves to a private address')
    assert.equal(listener.connections.length, seen)
  })

  test('an allowed CIDR lets the connection through to the checked address, with the name as TLS server name', async () => {
    const seen = listener.connections.length
    const result = await sendOne({ ...prodOptions, allowedCidrs: '127.0.0.0/8' }, task(`https://hooks.example.test:${listener.port}/hook`))
    // The listener speaks no TLS, so the handshake fails; what matters is that it was reached.
    assert.equal(result.outcome, 'retry')
    assert.doesNotMatch(result.error ?? '', /blocked/)
    assert.equal(listener.connections.length, seen + 1, 'one connection reached the allowed address')
    const hello = listener.connections[seen]
    assert.ok(hello && hello[0] === 0x16, 'the first bytes are a TLS handshake record')
    assert.ok(hello.includes(Buffer.from('hooks.example.test')), 'SNI carries the host name, not the address')
  })
})

describe('deliver worker through Piscina', () => {
  test('an attached worker thread signs and delivers batches the receiver verifies, until its port closes', async () => {
    const receiver = await startReceiver({ '/ok': (_req, res) => { res.statusCode = 200; res.end('thanks') } })
    const filename = fileURLToPath(new URL('../../workers/deliver.js', import.meta.url))
    const workerData: DeliverWorkerData = { window: 8, timeoutMs: 2000, maxResponseBytes: 64, production: false, allowedCidrs: '' }
    const pool = new Piscina<AttachJob, number>({ filename, workerData, minThreads: 1, maxThreads: 1 })
    try {
      const first = [task(receiver.url('/ok')), task(receiver.url('/ok'))]
      const second = [task(receiver.url('/ok'))]
      // The engine's path: one attach task hands over a port; batches go over it, results stream back.
      const { port1, port2 } = new MessageChannel()
      const messages: WorkerMessage[] = []
      const results: DeliveryResult[] = []
      const all = new Promise<void>((resolve) => {
        port1.on('message', (message: WorkerMessage) => {
          messages.push(message)
          if (message.type === 'results') results.push(...unpackResults(message.results))
          if (results.length === first.length + second.length) resolve()
        })
      })
      const attached = pool.run({ port: port2 }, { transferList: [port2] })
      port1.postMessage({ type: 'send', groups: packTasks(first) } satisfies DispatcherMessage)
      port1.postMessage({ type: 'send', groups: packTasks(second) } satisfies DispatcherMessage)
      await all
      assert.equal(messages[0]?.type, 'ready', 'the thread says it is listening before any result')
      port1.close()
      assert.equal(await attached, 3, 'the attach task ends when the port closes, counting what it attempted')
      const batch = [...first, ...second]
      results.sort((a, b) => batch.findIndex((t) => t.deliveryId === a.deliveryId) - batch.findIndex((t) => t.deliveryId === b.deliveryId))
      assert.deepEqual(results.map((r) => [r.deliveryId, r.outcome, r.status]), batch.map((t) => [t.deliveryId, 'delivered', 200]))
      assert.equal(receiver.received.length, 3)
      for (const got of receiver.received) {
        assert.equal(got.verified, true)
        assert.equal(got.independentlyVerified[SECRET], true)
      }
    } finally {
      await pool.destroy()
      await receiver.close()
    }
  })

  test('in a worker thread, a slow-drip receiver fails at the deadline and the next delivery goes out', async () => {
    const receiver = await startReceiver({ '/drip': (_req, res) => drip(res, 200), '/ok': (_req, res) => { res.end() } })
    const filename = fileURLToPath(new URL('../../workers/deliver.js', import.meta.url))
    const workerData: DeliverWorkerData = { window: 1, timeoutMs: 1000, maxResponseBytes: 64, production: false, allowedCidrs: '' }
    const pool = new Piscina<AttachJob, number>({ filename, workerData, minThreads: 1, maxThreads: 1 })
    try {
      const { port1, port2 } = new MessageChannel()
      const results: DeliveryResult[] = []
      let wake = () => {}
      port1.on('message', (message: WorkerMessage) => {
        if (message.type === 'results') results.push(...unpackResults(message.results))
        wake()
      })
      const until = (n: number) => new Promise<void>((resolve) => {
        wake = () => { if (results.length >= n) resolve() }
        wake()
      })
      const attached = pool.run({ port: port2 }, { transferList: [port2] })
      const slow = task(receiver.url('/drip'), { webhookId: 'wh_drip' })
      port1.postMessage({ type: 'send', groups: packTasks([slow]) } satisfies DispatcherMessage)
      await until(1)
      assert.deepEqual(results.map((r) => [r.deliveryId, r.outcome, r.status, r.error]),
        [[slow.deliveryId, 'retry', 200, 'timeout after 1000 ms: no complete answer']])
      const next = task(receiver.url('/ok'), { webhookId: 'wh_drip' })
      port1.postMessage({ type: 'send', groups: packTasks([next]) } satisfies DispatcherMessage)
      await until(2)
      assert.equal(results[1]?.outcome, 'delivered')
      port1.close()
      assert.equal(await attached, 2)
    } finally {
      await pool.destroy()
      await receiver.close()
    }
  })
})
