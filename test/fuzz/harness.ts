// The world the fuzz suite plays in: the real app on a real socket over a real SQLite file, two real
// accounts (A and B) with their sessions, keys (one revoked), webhooks pointing at a real receiver,
// deliveries, emails and suppressions; the routes read from the app itself; a way to send a request
// through app.inject() or a raw socket; the checks every answer must pass; and a snapshot of the whole
// store to prove that a refused request changed nothing.
import Database from 'better-sqlite3'
import { createHash, randomBytes } from 'node:crypto'
import net from 'node:net'
import { join } from 'node:path'
import type { TestContext } from 'node:test'
import type { App } from '../../src/http/build-app.js'
import { makeEvent } from '../../src/domain/email-events.js'
import { newId } from '../../src/domain/ids.js'
import { startReceiver, type Receiver } from '../helpers/receiver.js'
import { PASSWORD, startServer, uniqueEmail, type TestServer } from '../helpers/server.js'
import { pctEncode, type AuthChoice, type JsonSchema, type Plan, type RouteInfo } from './arbitraries.js'

// ---------------------------------------------------------------------------------------------------
// Routes, from the app

/**
 * Every method + URL the app serves, parsed from Fastify's own route tree (so a new route is fuzzed
 * without anyone listing it here), with the request schemas of the OpenAPI document that
 * @fastify/swagger builds from each route's TypeBox schema.
 */
export function routesOf (app: App): RouteInfo[] {
  const tree = app.printRoutes({ commonPrefix: false })
  const stack: string[] = []
  const found: Array<{ url: string; methods: string[] }> = []
  for (const line of tree.split('\n')) {
    const m = /^((?:│ {3}| {4})*)[├└]── (.*?)(?: \(([A-Z, ]+)\))?$/.exec(line)
    if (!m) continue
    const depth = m[1]!.length / 4
    stack.length = depth
    let seg = m[2]!
    if (seg === '*' && !(stack.join('').endsWith('/'))) seg = '/*'
    stack.push(seg)
    if (m[3]) found.push({ url: stack.join(''), methods: m[3].split(', ').map((s) => s.trim()) })
  }
  const doc = app.swagger() as { paths: Record<string, Record<string, any>> }
  return found.map(({ url, methods }) => {
    const params = [...url.matchAll(/:([A-Za-z0-9_]+)|\*/g)].map((p) => p[1] ?? '*')
    const openapiPath = url.replace(/:([A-Za-z0-9_]+)/g, '{$1}')
    const ops: RouteInfo['ops'] = {}
    for (const method of methods) {
      const op = doc.paths[openapiPath]?.[method.toLowerCase()] ?? (method === 'HEAD' ? doc.paths[openapiPath]?.get : undefined)
      const parameters: Array<{ in: string; name: string; schema: JsonSchema }> = op?.parameters ?? []
      const security = op?.security?.[0] ? Object.keys(op.security[0])[0] as 'session' | 'apiKey' : 'public'
      // A management route takes the session cookie or a full_access key: both are credentials there.
      const acceptsKey = (op?.security ?? []).some((req: Record<string, unknown>) => 'apiKey' in req)
      ops[method] = {
        body: op?.requestBody?.content?.['application/json']?.schema,
        bodyRequired: op?.requestBody?.required === true,
        query: Object.fromEntries(parameters.filter((p) => p.in === 'query').map((p) => [p.name, p.schema])),
        headers: Object.fromEntries(parameters.filter((p) => p.in === 'header').map((p) => [p.name, p.schema])),
        security,
        acceptsKey,
      }
    }
    return { url, methods, params, ops }
  })
}

// ---------------------------------------------------------------------------------------------------
// Requests and answers

export interface FuzzRequest {
  method: string
  /** The request-target exactly as sent. */
  path: string
  headers: Record<string, string>
  body: string | Buffer | undefined
  via: 'inject' | 'socket'
}

export interface FuzzResponse {
  status: number
  headers: Record<string, string | string[] | undefined>
  text: string
}

/** Sends a request through app.inject(): no socket, the same router, hooks and handlers. */
export async function viaInject (app: App, req: FuzzRequest): Promise<FuzzResponse> {
  const res = await app.inject({
    method: req.method as any,
    url: req.path,
    headers: req.headers,
    ...(req.body !== undefined ? { payload: req.body } : {}),
  })
  return { status: res.statusCode, headers: res.headers as FuzzResponse['headers'], text: res.payload }
}

/**
 * Writes exactly these bytes on a fresh TCP connection and parses every answer that comes back. The
 * connection stays open for writing until the server closes it (a client that half-closes early gets
 * no answer from Node's HTTP server, whatever svc does).
 */
export function rawExchange (port: number, bytes: Buffer | string, { endAfterWrite = false, timeoutMs = 15_000 } = {}): Promise<{ responses: FuzzResponse[]; raw: Buffer }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new Error(`no end of answer within ${timeoutMs} ms; got ${JSON.stringify(Buffer.concat(chunks).toString('latin1').slice(0, 300))}`))
    }, timeoutMs)
    socket.on('data', (c: Buffer) => chunks.push(c))
    socket.on('error', () => { /* a reset after the answer is an ending too */ })
    socket.on('close', () => {
      clearTimeout(timer)
      const raw = Buffer.concat(chunks)
      resolve({ responses: parseResponses(raw), raw })
    })
    socket.write(bytes, () => { if (endAfterWrite) socket.end() })
  })
}

/** HTTP/1.1 responses one after another in `raw` (Content-Length, chunked, or until the end). */
export function parseResponses (raw: Buffer): FuzzResponse[] {
  const out: FuzzResponse[] = []
  let at = 0
  while (at < raw.length) {
    const headEnd = raw.indexOf('\r\n\r\n', at)
    if (headEnd < 0) break
    const head = raw.subarray(at, headEnd).toString('latin1').split('\r\n')
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(head[0] ?? '')
    if (!m) break
    const headers: Record<string, string | string[]> = {}
    for (const line of head.slice(1)) {
      const i = line.indexOf(':')
      if (i < 0) continue
      const k = line.slice(0, i).trim().toLowerCase()
      const v = line.slice(i + 1).trim()
      const prev = headers[k]
      headers[k] = prev === undefined ? v : [prev, v].flat()
    }
    let bodyStart = headEnd + 4
    let body: Buffer
    if (String(headers['transfer-encoding'] ?? '').includes('chunked')) {
      const parts: Buffer[] = []
      for (;;) {
        const lineEnd = raw.indexOf('\r\n', bodyStart)
        if (lineEnd < 0) { bodyStart = raw.length; break }
        const size = parseInt(raw.subarray(bodyStart, lineEnd).toString('latin1'), 16)
        bodyStart = lineEnd + 2
        if (!(size > 0)) { bodyStart += 2; break }
        parts.push(raw.subarray(bodyStart, bodyStart + size))
        bodyStart += size + 2
      }
      body = Buffer.concat(parts)
    } else if (headers['content-length'] !== undefined) {
      const n = Number(headers['content-length'])
      body = raw.subarray(bodyStart, bodyStart + n)
      bodyStart += n
    } else {
      body = raw.subarray(bodyStart)
      bodyStart = raw.length
    }
    out.push({ status: Number(m[1]), headers, text: body.toString('utf8') })
    at = bodyStart
  }
  return out
}

/** Serialises a request as raw HTTP/1.1 bytes (Connection: close, Content-Length for a body). */
export function serialise (req: FuzzRequest, port: number): Buffer {
  const lines = [`${req.method} ${req.path} HTTP/1.1`, `host: 127.0.0.1:${port}`, 'connection: close']
  for (const [k, v] of Object.entries(req.headers)) lines.push(`${k}: ${v}`)
  const body = req.body === undefined ? undefined : Buffer.isBuffer(req.body) ? req.body : Buffer.from(req.body, 'utf8')
  if (body !== undefined) lines.push(`content-length: ${body.length}`)
  const head = Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1')
  return body ? Buffer.concat([head, body]) : head
}

// ---------------------------------------------------------------------------------------------------
// The checks every answer passes

const ENVELOPE_ERROR_KEYS = new Set(['code', 'message', 'details'])

/** Routes whose successful answers are not JSON envelopes by design (README: operations and /t/ links). */
export function isApiRoute (path: string): boolean {
  return path.startsWith('/api/')
}

/** The downloads of received mail (raw message, attachments): a success is the file, an error the envelope. */
function isDownload (path: string): boolean {
  return /^\/api\/received\/[^/]+\/(raw|attachments\/[^/]+)$/.test(path)
}

/**
 * The problems with one answer (empty: none). Every answer: status below 500, an x-request-id. Every
 * answer of an /api/ route and every error answer: the envelope, no stack, no Fastify code, no secret.
 * The one error that is not JSON by design is the HTML page of an invalid /t/ link.
 */
export function problemsOf (req: FuzzRequest, res: FuzzResponse, secrets: string[]): string[] {
  const problems: string[] = []
  if (res.status >= 500) problems.push(`status ${res.status} (no store fault was injected, so no 5xx is allowed)`)
  const rid = res.headers['x-request-id']
  if (typeof rid !== 'string' || rid === '') problems.push('no x-request-id header')
  if (res.text.includes('FST_')) problems.push('a Fastify error code (FST_…) leaks in the body')
  if (/\n\s+at .+[(:]\d+/.test(res.text) || res.text.includes('"stack"')) problems.push('a stack trace leaks in the body')
  for (const s of secrets) if (s.length >= 8 && res.text.includes(s)) problems.push(`a secret is echoed (${s.slice(0, 10)}…)`)
  const path = req.path.split('?')[0]!
  const isTrackingPage = path.startsWith('/t/') && String(res.headers['content-type'] ?? '').startsWith('text/html')
  const wantsEnvelope = req.method !== 'HEAD' && (isApiRoute(path) && !isDownload(path) ? true : res.status >= 400 && !isTrackingPage)
  if (wantsEnvelope) {
    let body: any
    try { body = JSON.parse(res.text) } catch { problems.push(`the body is not JSON: ${JSON.stringify(res.text.slice(0, 160))}`) }
    if (body !== undefined) {
      if (typeof body !== 'object' || body === null || typeof body.success !== 'boolean') {
        problems.push(`not the envelope (no boolean success): ${res.text.slice(0, 160)}`)
      } else if (body.success === false) {
        if (res.status < 400) problems.push(`success:false with status ${res.status}`)
        const e = body.error
        if (typeof e?.code !== 'string' || typeof e?.message !== 'string') problems.push(`error.code / error.message are not strings: ${res.text.slice(0, 160)}`)
        else {
          if (/^FST_|^ERR_/.test(e.code)) problems.push(`error.code is a framework code: ${e.code}`)
          for (const k of Object.keys(e)) if (!ENVELOPE_ERROR_KEYS.has(k)) problems.push(`error has an unexpected key "${k}"`)
          if (e.details !== undefined && !(Array.isArray(e.details) && e.details.every((d: any) => typeof d?.path === 'string' && typeof d?.message === 'string'))) {
            problems.push('error.details is not [{ path, message }]')
          }
        }
        for (const k of Object.keys(body)) if (!['success', 'error'].includes(k)) problems.push(`error envelope has an unexpected key "${k}"`)
      } else {
        if (res.status >= 400) problems.push(`success:true with status ${res.status}`)
        if (!('data' in body) || typeof body.message !== 'string') problems.push('success envelope without data or message')
      }
    }
  }
  return problems
}

// ---------------------------------------------------------------------------------------------------
// Accounts and their things

export interface Account {
  label: 'A' | 'B'
  email: string
  id: string
  cookie: string
  /** A session cookie that was logged out. */
  deadCookie: string
  key: string
  keyId: string
  revokedKey: string
  revokedKeyId: string
  webhookId: string
  webhookSecret: string
  deliveryId: string
  emailId: string
  suppressed: string
  domainId: string
  /** A received message with one attachment (att_1), stored directly: mail reaches it only over SMTP. */
  receivedId: string
  /** A template at version 1, to read, change, preview, send from and delete. */
  templateId: string
}

/** Columns that a refused request may legitimately touch: the last use of a key that authenticated, a session's sliding expiry. */
const VOLATILE: Record<string, string[]> = {
  api_keys: ['last_used_at'],
  sessions: ['expires_at'],
  // The delivery engine renews its routing lease on a timer, whatever the requests do.
  routing: ['router_until'],
}

export class World {
  readonly accounts: { A: Account; B: Account }
  readonly routes: RouteInfo[]
  private readonly db: Database.Database
  /** Credentials the fuzz made up; the server must never echo them either. */
  readonly madeUp: string[] = []

  private constructor (readonly server: TestServer, readonly receiver: Receiver, A: Account, B: Account) {
    this.accounts = { A, B }
    this.routes = routesOf(server.app)
    this.db = new Database(join(server.dataDir, 'svc.db'), { readonly: true, fileMustExist: true })
  }

  static async start (t: Pick<TestContext, 'after'>): Promise<World> {
    const receiver = await startReceiver(t)
    // Domain checks ask DNS_SERVERS: a closed port on loopback, so a fuzzed verify never reaches public DNS.
    // The credential routes are rate limited per address and per email; the fuzz comes from one address
    // and would otherwise test the limiter only (so are the per-account limits and the failed-login delays).
    // The background re-check of sender domains would change their rows between the snapshots that
    // prove a refusal changed nothing: it waits until long after the run.
    const server = await startServer(t, {
      env: {
        RATE_LIMIT_AUTH_PER_MINUTE: '1000000', RATE_LIMIT_LOGIN_PER_EMAIL: '1000000', RATE_LIMIT_LOGIN_FAILURES: '1000000',
        RATE_LIMIT_READS_PER_MINUTE: '1000000', RATE_LIMIT_WRITES_PER_MINUTE: '1000000', RATE_LIMIT_COSTLY_PER_MINUTE: '1000000',
        DNS_SERVERS: '127.0.0.1:9',
      },
      deps: { domainChecker: { tickMs: 24 * 3_600_000 } },
    })
    const A = await World.provision(server, receiver, 'A')
    const B = await World.provision(server, receiver, 'B')
    const world = new World(server, receiver, A, B)
    t.after(() => world.db.close())
    await world.settle()
    return world
  }

  get app (): App { return this.server.app }
  get port (): number { return Number(new URL(this.server.url).port) }
  get hookUrl (): string { return this.receiver.url('/hook') }

  private static async call (server: TestServer, method: string, url: string, opts: { cookie?: string; key?: string; json?: unknown } = {}) {
    const res = await server.app.inject({
      method: method as any,
      url,
      headers: {
        ...(opts.cookie ? { cookie: opts.cookie } : {}),
        ...(opts.key ? { 'x-api-key': opts.key } : {}),
        ...(opts.json !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(opts.json !== undefined ? { payload: JSON.stringify(opts.json) } : {}),
    })
    const setCookie = [res.headers['set-cookie'] ?? []].flat().find((c) => c.startsWith('svc_session=') && !c.startsWith('svc_session=;'))
    return { status: res.statusCode, body: res.json(), cookie: setCookie?.split(';')[0] }
  }

  private static must<T extends { status: number; body: any }> (res: T, status: number, what: string): T {
    if (res.status !== status) throw new Error(`fixture: ${what} answered ${res.status} ${JSON.stringify(res.body)}`)
    return res
  }

  private static async login (server: TestServer, email: string): Promise<string> {
    const res = World.must(await World.call(server, 'POST', '/api/auth/login', { json: { email, password: PASSWORD } }), 200, 'login')
    return res.cookie!
  }

  private static async provision (server: TestServer, receiver: Receiver, label: 'A' | 'B'): Promise<Account> {
    const email = uniqueEmail(`fuzz-${label.toLowerCase()}`)
    const signup = World.must(await World.call(server, 'POST', '/api/auth/signup', { json: { email, password: PASSWORD } }), 201, 'signup')
    const cookie = signup.cookie!
    const dead = await World.login(server, email)
    World.must(await World.call(server, 'POST', '/api/auth/logout', { cookie: dead }), 200, 'logout')
    const key = World.must(await World.call(server, 'POST', '/api/keys', { cookie, json: { name: `${label} key` } }), 201, 'create key').body.data
    const revoked = World.must(await World.call(server, 'POST', '/api/keys', { cookie, json: { name: `${label} revoked` } }), 201, 'create key').body.data
    World.must(await World.call(server, 'DELETE', `/api/keys/${revoked.id}`, { cookie }), 200, 'revoke key')
    // Subscribed to an event the fuzz never causes: deliveries come from test events only, so that a
    // send the fuzz gets accepted does not keep the engine busy.
    const hook = World.must(await World.call(server, 'POST', '/api/webhooks', { cookie, json: { url: receiver.url('/hook'), events: ['email.complained'] } }), 201, 'create webhook').body.data
    receiver.secrets.push(hook.secret)
    const delivery = World.must(await World.call(server, 'POST', `/api/webhooks/${hook.id}/test`, { cookie, json: {} }), 202, 'test delivery').body.data
    const sent = World.must(await World.call(server, 'POST', '/api/send', { key: key.key, json: { to: 'delivered@simulator.test', subject: `fixture ${label}`, text: 'hi' } }), 202, 'send').body.data
    const suppressed = `suppressed-${label.toLowerCase()}@example.test`
    World.must(await World.call(server, 'POST', '/api/suppressions', { cookie, json: { email: suppressed } }), 201, 'suppress')
    const domain = World.must(await World.call(server, 'POST', '/api/domains', { cookie, json: { name: `fuzz-${label.toLowerCase()}.example.test` } }), 201, 'add domain').body.data
    const receivedId = newId('rcv')
    const message = {
      id: receivedId, accountId: signup.body.data.id as string, domainId: domain.id as string, recipients: [`support@${domain.name as string}`], mailFrom: 'a@sender.example',
      from: 'a@sender.example', to: [`support@${domain.name as string}`], cc: [], subject: `fixture ${label}`, text: 'hi', textTruncated: false, html: null,
      htmlTruncated: false, headers: [], messageId: null, inReplyTo: null, attachments: [{ id: 'att_1', filename: 'a.txt', contentType: 'text/plain', size: 2 }],
      authentication: { spf: 'none' as const, dkim: 'none' as const, dmarc: 'none' as const, arc: null }, size: 100, createdAt: new Date().toISOString(),
    }
    // No webhook subscribes to email.received: its event makes no delivery.
    const event = makeEvent({ accountId: message.accountId, emailId: receivedId, type: 'email.received', recipient: message.recipients[0]!, at: Date.now() }, { id: receivedId })
    await server.store.insertReceived({ message, raw: Buffer.from(`From: a@sender.example\r\nSubject: fixture ${label}\r\n\r\nhi\r\n`), contents: [{ id: 'att_1', content: Buffer.from('hi') }], event, limitBytes: Infinity })
    const template = World.must(await World.call(server, 'POST', '/api/templates', { cookie, json: World.template(label) }), 201, 'save template').body.data
    return {
      label, email, id: signup.body.data.id, cookie, deadCookie: dead, key: key.key, keyId: key.id,
      revokedKey: revoked.key, revokedKeyId: revoked.id, webhookId: hook.id, webhookSecret: hook.secret,
      deliveryId: delivery.id, emailId: sent.id, suppressed, domainId: domain.id, receivedId, templateId: template.id,
    }
  }

  /** The fixture template of an account: no variable without a default, so any send or preview of it renders. */
  private static template (label: string) {
    return { name: `fuzz-${label.toLowerCase()}`, subject: 'Hello {{ who }}', html: '<p>Hello {{ who }}</p>', variables: [{ name: 'who', default: 'there' }] }
  }

  /** Every secret the server knows for these accounts: none may appear in an answer to the fuzz. */
  secrets (): string[] {
    const out = [PASSWORD, ...this.madeUp]
    for (const w of this.db.prepare('SELECT secret, previous_secret FROM webhooks').all() as Array<{ secret: string; previous_secret: string | null }>) {
      out.push(w.secret)
      if (w.previous_secret) out.push(w.previous_secret)
    }
    for (const a of [this.accounts.A, this.accounts.B]) {
      out.push(a.key, a.revokedKey, a.webhookSecret, a.cookie.split('=')[1]!, a.deadCookie.split('=')[1]!)
    }
    return out
  }

  // -------------------------------------------------------------------------------------------------
  // Plans into requests

  /** Which account's credential a plan uses (A when none). */
  static actor (auth: AuthChoice): 'A' | 'B' {
    return auth === 'sessionB' || auth === 'keyB' ? 'B' : 'A'
  }

  idFor (route: string, param: string, owner: Account): string {
    if (param === 'deliveryId') return owner.deliveryId
    if (param === 'attachmentId') return 'att_1'
    if (param === 'version') return '1'
    if (param === 'email') return owner.suppressed
    if (param === 'token' || param === '*') return 'eyJrIjoibyJ9.' + 'A'.repeat(43)
    if (route.startsWith('/api/keys')) return owner.keyId
    if (route.startsWith('/api/webhooks')) return owner.webhookId
    if (route.startsWith('/api/emails')) return owner.emailId
    if (route.startsWith('/api/domains')) return owner.domainId
    if (route.startsWith('/api/received')) return owner.receivedId
    if (route.startsWith('/api/templates')) return owner.templateId
    return owner.id
  }

  authHeaders (auth: AuthChoice): Record<string, string> {
    const { A, B } = this.accounts
    const garbage = () => {
      const v = `svc_sk_${randomBytes(24).toString('base64url')}`
      this.madeUp.push(v)
      return v
    }
    switch (auth) {
      case 'none': return {}
      case 'sessionA': return { cookie: A.cookie }
      case 'sessionB': return { cookie: B.cookie }
      case 'keyA': return { 'x-api-key': A.key }
      case 'keyB': return { 'x-api-key': B.key }
      case 'revokedKeyA': return { 'x-api-key': A.revokedKey }
      case 'deadSessionA': return { cookie: A.deadCookie }
      case 'garbageCookie': return { cookie: `svc_session=${garbage()}` }
      case 'garbageKey': return { 'x-api-key': garbage() }
      case 'sessionA+keyA': return { cookie: A.cookie, 'x-api-key': A.key }
      case 'sessionA+revokedKeyA': return { cookie: A.cookie, 'x-api-key': A.revokedKey }
    }
  }

  resolve (route: RouteInfo, plan: Plan): FuzzRequest {
    const me = this.accounts[World.actor(plan.auth)]
    const other = me.label === 'A' ? this.accounts.B : this.accounts.A
    let path = route.url
    for (const name of route.params) {
      const choice = plan.params[name]!
      const value = choice.kind === 'own'
        ? pctEncode(this.idFor(route.url, name, me))
        : choice.kind === 'other'
          ? pctEncode(this.idFor(route.url, name, other))
          // "raw" keeps URL-safe ASCII as it is ('..', '%' followed by hex) and encodes the rest.
          : capEncoded(choice.value, choice.raw ? rawish : pctEncode)
      path = name === '*' ? path.replace('*', value) : path.replace(`:${name}`, value)
    }
    if (plan.query) path += `?${plan.query}`
    const headers: Record<string, string> = { ...plan.headers, ...this.authHeaders(plan.auth) }
    if (plan.origin !== undefined) headers.origin = plan.origin
    if (plan.body.contentType !== undefined) headers['content-type'] = plan.body.contentType
    return { method: plan.method, path, headers, body: plan.body.text, via: plan.via }
  }

  async send (req: FuzzRequest): Promise<FuzzResponse> {
    // Node refuses a request head over 16 KiB before svc sees it: that edge has its own property.
    const headSize = req.path.length + Object.entries(req.headers).reduce((n, [k, v]) => n + k.length + v.length + 4, 0)
    if (req.via === 'socket' && headSize < 12_000) {
      const { responses, raw } = await rawExchange(this.port, serialise(req, this.port))
      if (responses.length === 0) throw new Error(`no HTTP answer on the socket: ${JSON.stringify(raw.toString('latin1').slice(0, 200))}`)
      return responses[0]!
    }
    return viaInject(this.app, { ...req, via: 'inject' })
  }

  // -------------------------------------------------------------------------------------------------
  // State

  /** PRAGMA data_version: it moves whenever another connection (the app's) commits a write. */
  version (): number {
    return Number(this.db.pragma('data_version', { simple: true }))
  }

  private cached: { version: number; snapshot: Record<string, string> } | undefined

  /**
   * snapshot(), reused while the store has not been written since it was taken: an unchanged
   * data_version proves that no row changed, and every view the API gives is read from those rows.
   */
  async state (): Promise<Record<string, string>> {
    const version = this.version()
    if (this.cached?.version === version) return this.cached.snapshot
    const snapshot = await this.snapshot()
    // The snapshot's own reads may have written (a session's sliding renewal): cache only a quiet one.
    if (this.version() === version) this.cached = { version, snapshot }
    return snapshot
  }

  /** Every row of every table (volatile columns aside), plus what each account sees through the API. */
  async snapshot (): Promise<Record<string, string>> {
    const out: Record<string, string> = {}
    const tables = this.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all() as Array<{ name: string }>
    for (const { name } of tables) {
      const rows = (this.db.prepare(`SELECT * FROM "${name}"`).all() as Array<Record<string, unknown>>).map((r) => {
        for (const c of VOLATILE[name] ?? []) delete r[c]
        return JSON.stringify(r)
      }).sort()
      out[`db.${name}`] = `${rows.length} rows: ${rows.join('\n')}`
    }
    for (const a of [this.accounts.A, this.accounts.B]) {
      for (const url of ['/api/account', '/api/keys', '/api/webhooks', '/api/domains', '/api/templates', '/api/suppressions?limit=100', `/api/webhooks/${a.webhookId}/deliveries?limit=100`]) {
        const res = await this.app.inject({ method: 'GET', url, headers: { cookie: a.cookie } })
        const body = res.json()
        if (Array.isArray(body?.data)) for (const item of body.data) delete item.lastUsedAt
        out[`api.${a.label} GET ${url}`] = `${res.statusCode} ${JSON.stringify(body?.data)}`
      }
    }
    return out
  }

  static diff (before: Record<string, string>, after: Record<string, string>): string[] {
    const out: string[] = []
    for (const k of new Set([...Object.keys(before), ...Object.keys(after)])) {
      if (before[k] === after[k]) continue
      const b = (before[k] ?? '').split('\n')
      const a = (after[k] ?? '').split('\n')
      const gone = b.filter((l) => !a.includes(l)).slice(0, 2).map((l) => `- ${l.slice(0, 300)}`)
      const added = a.filter((l) => !b.includes(l)).slice(0, 2).map((l) => `+ ${l.slice(0, 300)}`)
      out.push(`${k} changed:\n      ${[...gone, ...added].join('\n      ')}`)
    }
    return out
  }

  /** True while background work that writes is pending: mail to send, deliveries to make, events to route. */
  private busy (): boolean {
    const q = (sql: string) => Number((this.db.prepare(sql).get() as { n: number | null }).n ?? 0)
    return q('SELECT count(*) AS n FROM emails WHERE next_attempt_at IS NOT NULL') > 0 ||
      q("SELECT count(*) AS n FROM deliveries WHERE status IN ('pending', 'retrying')") > 0 ||
      q('SELECT count(*) AS n FROM events WHERE routed = 0 AND seq > (SELECT routed_through FROM routing)') > 0
  }

  /** Waits for the background work that a successful request started (not a timing assertion: a wait). */
  async settle (): Promise<void> {
    const deadline = Date.now() + 10_000
    let last = -1
    while (Date.now() < deadline) {
      const now = this.version()
      if (!this.busy() && now === last) return
      last = now
      await new Promise((resolve) => setTimeout(resolve, 15))
    }
    // Not settled: say so, rather than go on and judge a world still moving.
    throw new Error(`the fuzz world did not settle within 10 s: ${JSON.stringify(this.busyWith())}`)
  }

  busyWith (): unknown {
    return {
      emails: this.db.prepare('SELECT id, status, attempts, next_attempt_at, last_error FROM emails WHERE next_attempt_at IS NOT NULL LIMIT 3').all(),
      deliveries: this.db.prepare("SELECT id, status, attempts, next_attempt_at, last_error FROM deliveries WHERE status IN ('pending', 'retrying') LIMIT 3").all(),
      routing: this.db.prepare('SELECT (SELECT routed_through FROM routing) AS through, (SELECT max(seq) FROM events) AS max').get(),
    }
  }

  /** After a request that succeeded: put back whatever fixture it spent (a session, a key, a webhook…). */
  async repair (): Promise<void> {
    const s = this.server
    const version = this.version()
    for (const a of [this.accounts.A, this.accounts.B]) {
      if ((await World.call(s, 'GET', '/api/account', { cookie: a.cookie })).status !== 200) a.cookie = await World.login(s, a.email)
      const keys = (await World.call(s, 'GET', '/api/keys', { cookie: a.cookie })).body.data as Array<{ id: string; status: string }>
      if (keys.find((k) => k.id === a.keyId)?.status !== 'active') {
        for (const k of keys) if (k.status === 'active' && k.id !== a.keyId) await World.call(s, 'DELETE', `/api/keys/${k.id}`, { cookie: a.cookie })
        const key = World.must(await World.call(s, 'POST', '/api/keys', { cookie: a.cookie, json: { name: `${a.label} key` } }), 201, 'recreate key').body.data
        a.key = key.key
        a.keyId = key.id
      }
      const hooks = (await World.call(s, 'GET', '/api/webhooks', { cookie: a.cookie })).body.data as Array<{ id: string; url: string; status: string; events: string[] }>
      for (const h of hooks) if (h.id !== a.webhookId) await World.call(s, 'DELETE', `/api/webhooks/${h.id}`, { cookie: a.cookie })
      const mine = hooks.find((h) => h.id === a.webhookId)
      if (!mine) {
        const hook = World.must(await World.call(s, 'POST', '/api/webhooks', { cookie: a.cookie, json: { url: this.hookUrl, events: ['email.complained'] } }), 201, 'recreate webhook').body.data
        this.receiver.secrets.push(hook.secret)
        a.webhookId = hook.id
        a.webhookSecret = hook.secret
        a.deliveryId = World.must(await World.call(s, 'POST', `/api/webhooks/${hook.id}/test`, { cookie: a.cookie, json: {} }), 202, 'test delivery').body.data.id
      } else if (mine.url !== this.hookUrl || mine.status !== 'enabled') {
        World.must(await World.call(s, 'PATCH', `/api/webhooks/${a.webhookId}`, { cookie: a.cookie, json: { url: this.hookUrl, status: 'enabled' } }), 200, 'restore webhook')
      }
      // A rotation keeps the old secret signing for a day; the current one is the secret to guard.
      const list = (await World.call(s, 'GET', '/api/suppressions?limit=100', { cookie: a.cookie })).body.data as Array<{ email: string }>
      if (!list.some((x) => x.email === a.suppressed)) await World.call(s, 'POST', '/api/suppressions', { cookie: a.cookie, json: { email: a.suppressed } })
      // The account's one domain (the Free plan's limit): a fuzzed DELETE may have taken it.
      const domains = (await World.call(s, 'GET', '/api/domains', { cookie: a.cookie })).body.data as Array<{ id: string }>
      if (!domains.some((d) => d.id === a.domainId)) {
        for (const d of domains) await World.call(s, 'DELETE', `/api/domains/${d.id}`, { cookie: a.cookie })
        a.domainId = World.must(await World.call(s, 'POST', '/api/domains', { cookie: a.cookie, json: { name: `fuzz-${a.label.toLowerCase()}.example.test` } }), 201, 'recreate domain').body.data.id
      }
      // The account's one template, at version 1 as made (a fuzzed DELETE or PATCH may have changed it;
      // a fuzzed POST may have added others, which would fill the plan).
      const templates = (await World.call(s, 'GET', '/api/templates', { cookie: a.cookie })).body.data as Array<{ id: string; version: number }>
      for (const t of templates) if (t.id !== a.templateId || t.version !== 1) await World.call(s, 'DELETE', `/api/templates/${t.id}`, { cookie: a.cookie })
      if (!templates.some((t) => t.id === a.templateId && t.version === 1)) {
        a.templateId = World.must(await World.call(s, 'POST', '/api/templates', { cookie: a.cookie, json: World.template(a.label) }), 201, 'recreate template').body.data.id
      }
    }
    if (this.version() !== version) await this.settle()
  }

  /**
   * Sends one request and checks it: the answer passes problemsOf(), a refused request (4xx) leaves
   * every table and every account's view exactly as it was, and `extra` adds checks of the caller's.
   * Throws with a full description of the request and the answer.
   */
  async exercise (req: FuzzRequest, extra: (res: FuzzResponse) => string[] = () => []): Promise<FuzzResponse> {
    const t0 = Date.now()
    const before = await this.state()
    const secrets = this.secrets()
    const t1 = Date.now()
    const res = await this.send(req)
    const t2 = Date.now()
    const problems = [...problemsOf(req, res, secrets), ...extra(res)]
    if (res.status >= 400) {
      const changes = World.diff(before, await this.state())
      if (changes.length) problems.push(`the request was refused (${res.status}) but changed state:\n    ${changes.join('\n    ')}`)
    } else {
      await this.settle()
      await this.repair()
    }
    if (process.env.FUZZ_DEBUG) console.error(`${req.method} ${req.path.slice(0, 60)} ${res.status}: snapshot ${t1 - t0} ms, request ${t2 - t1} ms, after ${Date.now() - t2} ms`)
    if (problems.length) throw new Error(`${problems.map((p) => `  ✗ ${p}`).join('\n')}\n${describe(req, res)}`)
    return res
  }
}

/** The router's limit on a path parameter, counted on the encoded text as sent (routerOptions.maxParamLength). */
export const MAX_PARAM_LENGTH = 8192

/**
 * The router refuses a parameter over its limit before svc sees it; that edge has a property of its own
 * (routes.test.ts), so here a longer hostile value is cut, on a character boundary, to fit once encoded.
 */
function capEncoded (value: string, encode: (s: string) => string): string {
  let chars = Array.from(value)
  let out = encode(value)
  while (out.length > MAX_PARAM_LENGTH) {
    chars = chars.slice(0, Math.max(0, Math.floor(chars.length * MAX_PARAM_LENGTH / out.length) - 1))
    out = encode(chars.join(''))
  }
  return out
}

/**
 * Keeps URL-safe ASCII as it is ('..', ';', a valid %XX) and encodes the rest; falls back to full
 * encoding when the result would not decode (malformed percent-encoding has a property of its own).
 */
function rawish (value: string): string {
  const out = value.replace(/[^A-Za-z0-9\-._~!$&'()*+,;=:@%]/gu, (c) => pctEncode(c)).replace(/%(?![0-9A-Fa-f]{2})/g, '%25')
  try {
    decodeURIComponent(out)
    return out
  } catch {
    return pctEncode(value)
  }
}

/** JSON-quoted, cut to n characters, with every character outside printable ASCII shown as \\uXXXX. */
export function clip (s: string, n = 240): string {
  const shown = (t: string) => JSON.stringify(t).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
  return s.length > n ? `${shown(s.slice(0, n))}… (${s.length} chars)` : shown(s)
}

export function describe (req: FuzzRequest, res?: FuzzResponse): string {
  const body = req.body === undefined ? '(none)' : clip(req.body.toString())
  const lines = [
    `  request (${req.via}): ${req.method} ${clip(req.path, 300)}`,
    `    headers: ${clip(JSON.stringify(req.headers), 400)}`,
    `    body: ${body}${req.body !== undefined ? ` sha256:${createHash('sha256').update(req.body).digest('hex').slice(0, 12)}` : ''}`,
  ]
  if (res) {
    lines.push(`  answer: ${res.status} content-type=${String(res.headers['content-type'])} x-request-id=${String(res.headers['x-request-id'])}`)
    lines.push(`    body: ${clip(res.text, 400)}`)
  }
  return lines.join('\n')
}
