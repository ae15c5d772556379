// A webhook receiver on 127.0.0.1:0, as a customer would write one: it verifies every signature with the
// seed's algorithm (recomputed here with node:crypto, independently of src/), records what it got, and
// answers as each test scripts it. The Standard Webhooks headers are checked with the specification's own
// library (`standardwebhooks`), as a receiver that uses it would.
import { createHmac, timingSafeEqual } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { TestContext } from 'node:test'
import { Webhook } from 'standardwebhooks'
import { waitFor } from './wait.js'

export interface Received {
  path: string
  headers: http.IncomingHttpHeaders
  raw: string
  body: any
  deliveryId: string
  event: string
  /** Which of the given secrets produced a matching v1 entry. */
  validFor: string[]
  /** Which of the given secrets `standardwebhooks`' Webhook.verify accepts the delivery with. */
  standardValidFor: string[]
}

export type Script = (req: Received, n: number, res: http.ServerResponse) => void

/** Checks `t=<ts>,v1=<hex>[,v1=<hex>…]` over `${t}.${raw}`; returns the secrets that match. */
export function seedVerify (header: string | undefined, raw: string, secrets: string[]): string[] {
  if (!header) return []
  const parts = header.split(',').map((p) => p.split('=') as [string, string])
  const t = parts.find(([k]) => k === 't')?.[1]
  if (!t || !/^\d+$/.test(t)) return []
  const given = parts.filter(([k]) => k === 'v1').map(([, v]) => Buffer.from(v))
  return secrets.filter((secret) => {
    const expected = Buffer.from(createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${t}.${raw}`).digest('hex'))
    return given.some((v) => v.length === expected.length && timingSafeEqual(v, expected))
  })
}

/** The secrets with which the `standardwebhooks` package verifies the delivery (its headers and raw body). */
export function standardVerify (headers: http.IncomingHttpHeaders, raw: string, secrets: string[]): string[] {
  const given: Record<string, string> = {}
  for (const name of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
    const value = headers[name]
    if (typeof value === 'string') given[name] = value
  }
  return secrets.filter((secret) => {
    try {
      new Webhook(secret).verify(raw, given)
      return true
    } catch {
      return false
    }
  })
}

export class Receiver {
  readonly received: Received[] = []
  secrets: string[] = []
  private readonly counts = new Map<string, number>()
  private readonly waiters: Array<() => void> = []
  private readonly hanging = new Set<http.ServerResponse>()

  constructor (readonly server: http.Server, private readonly scripts: Record<string, Script>) {}

  get port (): number { return (this.server.address() as AddressInfo).port }
  url (path: string, host = '127.0.0.1'): string { return `http://${host}:${this.port}${path}` }
  on (path: string): Received[] { return this.received.filter((r) => r.path === path) }

  handle (req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8')
      const path = (req.url ?? '/').split('?')[0]!
      let body: unknown
      try { body = JSON.parse(raw) } catch { body = undefined }
      const got: Received = {
        path, headers: req.headers, raw, body,
        deliveryId: String(req.headers['x-svc-delivery'] ?? ''),
        event: String(req.headers['x-svc-event'] ?? ''),
        validFor: seedVerify(req.headers['x-svc-signature'] as string | undefined, raw, this.secrets),
        standardValidFor: standardVerify(req.headers, raw, this.secrets),
      }
      this.received.push(got)
      const n = (this.counts.get(path) ?? 0) + 1
      this.counts.set(path, n)
      const script = this.scripts[path]
      if (script) script(got, n, res)
      else { res.statusCode = 200; res.end('ok') }
      for (const wake of this.waiters.splice(0)) wake()
    })
  }

  /** Holds the response open until the receiver closes: a receiver that never answers. */
  hang (res: http.ServerResponse): void {
    this.hanging.add(res)
  }

  /** Waits until `predicate` holds, re-checking on every request (and every 50 ms); fails after `ms`. */
  async until (predicate: () => boolean, what: string, ms = 20_000): Promise<void> {
    const deadline = Date.now() + ms
    while (!predicate()) {
      if (Date.now() > deadline) throw new Error(`receiver: timed out waiting for ${what} (got ${this.received.length} requests)`)
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 50)
        this.waiters.push(() => { clearTimeout(timer); resolve() })
      })
    }
  }

  async close (): Promise<void> {
    for (const res of this.hanging) res.destroy()
    this.server.closeAllConnections()
    await new Promise((resolve) => this.server.close(resolve))
  }
}

export async function startReceiver (t: Pick<TestContext, 'after'>, scripts: Record<string, Script> = {}): Promise<Receiver> {
  const server = http.createServer((req, res) => receiver.handle(req, res))
  const receiver = new Receiver(server, scripts)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => receiver.close())
  return receiver
}

/** Polls `check` until it returns a value (not undefined); for store state the receiver cannot see. */
export async function eventually<T> (check: () => Promise<T | undefined>, what: string, ms = 20_000): Promise<T> {
  // The one polling loop is test/helpers/wait.ts's; this keeps the argument order its callers use.
  return await waitFor(what, async () => {
    const value = await check()
    return value === undefined ? undefined : { value }
  }, { timeoutMs: ms, intervalMs: 25 }).then((r) => r.value)
}
