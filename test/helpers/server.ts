// Test fixtures: the real app on 127.0.0.1:0 over a real SQLite file in a fresh temp directory, and a
// small HTTP client with a cookie jar. Everything is torn down with the test (t.after).
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { TestContext } from 'node:test'
import http from 'node:http'
import { loadConfig, type Config } from '../../config/index.js'
import type { App } from '../../src/http/build-app.js'
import { createService, type Service, type ServiceDeps } from '../../src/service.js'
import { openSqliteStore } from '../../src/store/sqlite/index.js'
import type { Store } from '../../src/store/types.js'

export const TEST_SECRET = 'test-secret-0123456789-abcdefghijklmnop'

export function tempDir (t: Pick<TestContext, 'after'>, prefix = 'svc-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

export function testConfig (env: Record<string, string> = {}, overrides: Partial<Config> = {}): Config {
  return { ...loadConfig({ SVC_SECRET: TEST_SECRET, LOG_LEVEL: 'silent', ...env }), ...overrides }
}

export interface TestServer {
  url: string
  app: App
  service: Service
  store: Store
  config: Config
  dataDir: string
  client(opts?: ClientOptions): Client
}

export async function startServer (
  t: Pick<TestContext, 'after'>,
  opts: { env?: Record<string, string>; config?: Partial<Config>; deps?: Partial<ServiceDeps>; dataDir?: string; beforeListen?: (app: App) => void; port?: number } = {},
): Promise<TestServer> {
  const dataDir = opts.dataDir ?? tempDir(t)
  const config = testConfig({ DATA_DIR: dataDir, ...opts.env }, opts.config)
  const store = opts.deps?.store ?? openSqliteStore({ dataDir })
  const service = await createService(config, { ...opts.deps, store })
  const { app } = service
  opts.beforeListen?.(app)
  await service.start()
  await app.listen({ port: opts.port ?? 0, host: '127.0.0.1' })
  const address = app.server.address()
  if (!address || typeof address !== 'object') throw new Error('no address')
  const url = `http://127.0.0.1:${address.port}`
  t.after(async () => {
    await service.stop()
    await store.close()
  })
  return { url, app, service, store, config, dataDir, client: (o) => new Client(url, o) }
}

export interface Response<T = any> {
  status: number
  headers: Record<string, string | string[] | undefined>
  text: string
  body: T
}

export interface ClientOptions {
  /** Source address on the loopback range (127.0.0.2, …), to look like another client. */
  localAddress?: string
}

/** An HTTP client over real sockets that keeps the svc_session cookie like a browser would. */
type Method = 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE'

function send (url: string, method: Method, headers: Record<string, string>, body: string | undefined, localAddress?: string) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }>((resolve, reject) => {
    const req = http.request(url, { method, headers, ...(localAddress ? { localAddress } : {}) }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

export class Client {
  cookie: string | undefined

  constructor (readonly base: string, private readonly opts: ClientOptions = {}) {}

  async request<T = any> (method: Method, path: string, options: { json?: unknown; body?: string; headers?: Record<string, string> } = {}): Promise<Response<T>> {
    const headers: Record<string, string> = { ...options.headers }
    let body = options.body
    if (options.json !== undefined) {
      body = JSON.stringify(options.json)
      headers['content-type'] ??= 'application/json'
    }
    if (this.cookie && headers.cookie === undefined) headers.cookie = this.cookie
    const res = await send(this.base + path, method, headers, body, this.opts.localAddress)
    const text = res.text
    const setCookie = res.headers['set-cookie']
    for (const line of Array.isArray(setCookie) ? setCookie : setCookie ? [setCookie] : []) {
      const [pair] = line.split(';')
      const [name, value] = pair!.split('=')
      if (name === 'svc_session') this.cookie = value ? `svc_session=${value}` : undefined
    }
    let parsed: any
    try { parsed = text ? JSON.parse(text) : undefined } catch { parsed = undefined }
    return { status: res.status, headers: res.headers, text, body: parsed }
  }

  get<T = any> (path: string, headers?: Record<string, string>) { return this.request<T>('GET', path, headers ? { headers } : {}) }
  post<T = any> (path: string, json?: unknown, headers?: Record<string, string>) {
    return this.request<T>('POST', path, { json: json ?? {}, ...(headers ? { headers } : {}) })
  }
  patch<T = any> (path: string, json: unknown, headers?: Record<string, string>) { return this.request<T>('PATCH', path, { json, ...(headers ? { headers } : {}) }) }
  delete<T = any> (path: string, headers?: Record<string, string>) { return this.request<T>('DELETE', path, headers ? { headers } : {}) }
}

let counter = 0
export function uniqueEmail (label = 'user'): string {
  counter += 1
  return `${label}-${process.pid}-${counter}@example.test`
}

export const PASSWORD = 'correct horse battery'

/** A new account with a live session on a fresh client. */
export async function signedUp (server: TestServer, email = uniqueEmail()): Promise<{ client: Client; email: string; id: string }> {
  const client = server.client()
  const res = await client.post('/api/auth/signup', { email, password: PASSWORD })
  if (res.status !== 201) throw new Error(`signup failed: ${res.status} ${res.text}`)
  return { client, email, id: res.body.data.id }
}

/** Asserts the API.md error envelope and returns it. */
export function errorOf (res: Response): { code: string; message: string; details?: Array<{ path: string; message: string }> } {
  if (res.body?.success !== false || typeof res.body?.error?.code !== 'string') {
    throw new Error(`expected an error envelope, got ${res.status} ${res.text}`)
  }
  return res.body.error
}
