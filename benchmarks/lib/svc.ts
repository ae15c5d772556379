// svc as the benchmarks see it: a data directory seeded through the store's own API before svc starts,
// then `node dist/src/server.js` as a child process, measured from outside.
import Database from 'better-sqlite3'
import type { ChildProcess } from 'node:child_process'
import { createHash } from 'node:crypto'
import { appendFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { iso } from '../../src/domain/clock.js'
import { eventPayload, type EventRecord, type EventType } from '../../src/domain/events.js'
import { newId } from '../../src/domain/ids.js'
import { limitsOf } from '../../src/domain/plans.js'
import { hashToken, newApiKey, newWebhookSecret, sealWebhookSecret } from '../../src/domain/secrets.js'
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite/index.js'
import type { EmailRecord } from '../../src/store/emails.js'
import { eventRoute, type WebhookFilter } from '../../src/domain/webhook-filter.js'
import { freePort, memoryOf, SERVER_FILE, sleep, spawnTracked, stopChild } from './procs.js'

export const SVC_SECRET = `bench-${newWebhookSecret()}`
/** svc's per-webhook window; the reference points use the same concurrency. */
export const WINDOW = 64

export function tempDataDir (): string {
  return mkdtempSync(join(tmpdir(), 'svc-bench-'))
}

export function removeDir (dir: string): void {
  rmSync(dir, { recursive: true, force: true })
}

/**
 * Seeds one data directory. Webhooks point at the sink: /h/<index> (fast) or /s/<index> (slow), where
 * <index> is the webhook's place in `secrets`, which the sink is given.
 */
export class Seeder {
  readonly store: SqliteStore
  readonly secrets: string[] = []
  readonly accounts: string[] = []
  private n = 0

  constructor (readonly dataDir: string, private readonly sinkOrigin: string) {
    this.store = openSqliteStore({ dataDir })
  }

  async account (): Promise<string> {
    const id = newId('acct')
    const r = await this.store.createAccount({ id, email: `bench-${++this.n}-${id}@example.com`, passwordHash: 'unused', plan: 'free', createdAt: iso(Date.now()) })
    if (r !== 'created') throw new Error('seeding: account not created')
    await this.store.setAccountPlan(id, 'pro')
    this.accounts.push(id)
    return id
  }

  /** Adds a webhook within the Pro plan's limit (10 per account); returns its sink index. */
  async webhook (accountId: string, opts: { slow?: boolean; events?: EventType[]; filter?: WebhookFilter | null } = {}): Promise<number> {
    const index = this.secrets.length
    const secret = newWebhookSecret()
    this.secrets.push(secret)
    const now = iso(Date.now())
    const id = newId('wh')
    // Stored sealed, as svc stores them (it opens each one and refuses what is not sealed); the sink gets the plain one.
    const r = await this.store.insertWebhook({
      id, accountId, url: new URL(`${this.sinkOrigin}/${opts.slow ? 's' : 'h'}/${index}`).href,
      events: opts.events ?? ['email.sent', 'email.delivered'], secret: sealWebhookSecret(SVC_SECRET, id, secret), previousSecret: null, previousSecretExpiresAt: null,
      status: 'enabled', filter: opts.filter ?? null, createdAt: now, updatedAt: now,
    }, limitsOf('pro').webhooks)
    if (r !== 'created') throw new Error('seeding: webhook refused (plan limit)')
    return index
  }

  /** An API key for the account; returns the key itself (as x-api-key). */
  async apiKey (accountId: string): Promise<string> {
    const { key, keyPrefix } = newApiKey()
    const r = await this.store.insertApiKey({
      id: newId('key'), accountId, name: 'bench', keyHash: hashToken(SVC_SECRET, key, 'api-key'), keyPrefix,
      createdAt: iso(Date.now()), lastUsedAt: null, revokedAt: null, permission: 'full_access',
    }, limitsOf('pro').apiKeys)
    if (r !== 'created') throw new Error('seeding: API key refused')
    return key
  }

  /**
   * `perAccount` stored events for each of `accounts`, interleaved (event i belongs to account i mod n).
   * With `email`, each event's email is stored too (delivered already, so svc's mailer leaves it alone),
   * from `email.from` with `email.tags`, and the event carries its route as svc makes it (what a filtered
   * webhook's routing reads); `lookup: true` leaves the route out, so routing reads each email instead
   * (events stored before routes were).
   */
  async events (accounts: string[], perAccount: number, type: EventType = 'email.delivered',
    email?: { from: string; tags: Array<{ name: string; value: string }>; lookup?: boolean }): Promise<number> {
    const total = accounts.length * perAccount
    const chunk: EventRecord[] = []
    const emails: EmailRecord[] = []
    const flush = async () => {
      if (emails.length > 0) await this.store.acceptEmails({ emails: emails.splice(0), events: chunk.splice(0) })
      else await this.store.insertEvents(chunk.splice(0))
    }
    for (let i = 0; i < total; i++) {
      const accountId = accounts[i % accounts.length]!
      const at = iso(Date.now())
      const e = { id: newId('evt'), accountId, emailId: newId('em'), type, recipient: `someone${i}@example.com`, occurredAt: at }
      chunk.push({ ...e, payload: eventPayload(e), ...(email && !email.lookup ? { route: eventRoute(email.from, email.tags) } : {}) })
      if (email) {
        emails.push({
          id: e.emailId, accountId, from: email.from, to: [e.recipient], cc: [], bcc: [], replyTo: [], subject: 'Bench', html: null, text: 'Bench',
          headers: {}, tags: email.tags, suppressed: [], recipients: [{ address: e.recipient, state: 'delivered' }], status: 'delivered', attempts: 1,
          nextAttemptAt: null, leaseOwner: null, leaseExpiresAt: null, leaseToken: 0, lastError: null, createdAt: at, updatedAt: at,
        })
      }
      if (chunk.length === 5000) await flush()
    }
    await flush()
    return total
  }

  /**
   * Routes every stored event into deliveries with the store's own routing, then gives the leases back:
   * the deliveries are pending and due now, for any node (the "N pending deliveries" starting point).
   */
  async routeAll (): Promise<number> {
    const owner = 'bench-seeder'
    let deliveries = 0
    for (let round = 0; round < 100_000; round++) {
      const now = Date.now()
      const r = await this.store.routeEvents({ owner, now, leaseUntil: now, limit: 5000 })
      deliveries += r.work.length
      if (r.events === 0) break
    }
    await this.store.releaseLeases(owner, Date.now())
    return deliveries
  }

  close (): Promise<void> {
    return this.store.close()
  }
}

const DIST = fileURLToPath(new URL('../../', import.meta.url))

/** A hash of svc's compiled code (dist/src, dist/workers, dist/config): what each svc start runs. */
export function buildFingerprint (): string {
  const hash = createHash('sha256')
  for (const top of ['src', 'workers', 'config']) {
    let files: string[] = []
    try {
      files = (readdirSync(join(DIST, top), { recursive: true }) as string[]).filter((f) => f.endsWith('.js')).sort()
    } catch { /* absent */ }
    for (const f of files) hash.update(f).update(readFileSync(join(DIST, top, f)))
  }
  return hash.digest('hex').slice(0, 16)
}

const firstBuild = buildFingerprint()
/** Set when svc's compiled code changed during the run (someone rebuilt dist/ meanwhile). */
export const buildChanges: string[] = []

/**
 * For looking into svc while it is measured (the run's notes say so when set): BENCH_SVC_NODE_ARGS adds Node
 * options to every svc start (e.g. "--trace-gc", or "--heapsnapshot-signal=SIGUSR2"), and BENCH_SVC_STDOUT
 * names a file that gets all of svc's standard output (where --trace-gc writes).
 */
export const EXTRA_NODE_ARGS = (process.env.BENCH_SVC_NODE_ARGS ?? '').split(' ').filter(Boolean)
const STDOUT_FILE = process.env.BENCH_SVC_STDOUT || undefined

/** How every svc start is profiled (run.ts sets them for --cpu-prof and --sql-cost). */
export const svcEnv: { profileRoot?: string; sqlCostRoot?: string } = {}
const SQL_COST_HOOK = fileURLToPath(new URL('../procs/sql-cost-hook.js', import.meta.url))
let starts = 0

export interface SvcProcess {
  child: ChildProcess
  pid: number
  origin: string
  /** The last lines svc wrote (warnings and errors; logs are at warn level). */
  output: () => string
  /** svc's warn and error log lines so far, counted by message. */
  logged: () => Record<string, number>
  /** Marks the coming exit as ours. */
  stopping: () => void
  /** Set when svc exited without being asked to. */
  unexpectedExit: () => string | undefined
  /** Where its CPU profiles go (--cpu-prof). */
  profileDir?: string
  /** Where it writes its SQL statements' cost when it exits (--sql-cost). */
  sqlCostFile?: string
}

export async function startSvc (dataDir: string, env: Record<string, string> = {}, label = 'svc'): Promise<SvcProcess> {
  const start = `${String(++starts).padStart(2, '0')}-${label}`
  const profileDir = svcEnv.profileRoot !== undefined ? join(svcEnv.profileRoot, start) : undefined
  const sqlCostFile = svcEnv.sqlCostRoot !== undefined ? join(svcEnv.sqlCostRoot, `${start}.json`) : undefined
  if (svcEnv.sqlCostRoot !== undefined) mkdirSync(svcEnv.sqlCostRoot, { recursive: true })
  const build = buildFingerprint()
  if (build !== firstBuild && !buildChanges.includes(build)) buildChanges.push(build)
  // A PORT in `env` is kept (the restart soak starts svc again where its load generator sends).
  const port = env.PORT !== undefined ? Number(env.PORT) : await freePort()
  // Node refuses --cpu-prof in NODE_OPTIONS: it goes on the command line.
  const profArgs = profileDir !== undefined ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []
  const sqlArgs = sqlCostFile !== undefined ? ['--import', pathToFileURL(SQL_COST_HOOK).href] : []
  const child = spawnTracked(process.execPath, [...profArgs, ...sqlArgs, ...EXTRA_NODE_ARGS, SERVER_FILE], {
    env: {
      PATH: process.env.PATH ?? '',
      NODE_ENV: 'development',
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      SVC_SECRET,
      LOG_LEVEL: 'warn',
      DELIVERY_WINDOW: String(WINDOW),
      // The API benchmark is one key at full speed; the per-key limit (1000/s by default) would cap it.
      RATE_LIMIT_API_PER_SECOND: '100000000',
      // No .eml copies of the sandbox's emails: figures stay comparable with runs before they existed.
      SANDBOX_KEEP: '0',
      ...(sqlCostFile !== undefined ? { SVC_SQL_COST_FILE: sqlCostFile } : {}),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  const keep = (chunk: Buffer) => { out = (out + chunk.toString('utf8')).slice(-8000) }
  // svc logs JSON lines at warn level and above: count them by message for the record.
  const logged = new Map<string, number>()
  let partial = ''
  child.stdout!.on('data', (chunk: Buffer) => {
    if (STDOUT_FILE !== undefined) appendFileSync(STDOUT_FILE, chunk)
    keep(chunk)
    const lines = (partial + chunk.toString('utf8')).split('\n')
    partial = lines.pop() ?? ''
    for (const line of lines) {
      try {
        const entry = JSON.parse(line) as { level?: number; msg?: string; err?: { message?: string } }
        // The sandbox warning is expected: the benchmarks send no email anywhere.
        if ((entry.level ?? 0) < 40 || entry.msg?.startsWith('SMTP_URL is not set')) continue
        const key = `${entry.level! >= 50 ? 'error' : 'warn'}: ${entry.msg ?? ''}${entry.err?.message ? ` (${entry.err.message.slice(0, 120)})` : ''}`
        logged.set(key, (logged.get(key) ?? 0) + 1)
      } catch { /* not a log line */ }
    }
  })
  child.stderr!.on('data', keep)
  // svc must only stop when we stop it: anything else (a crash, a signal from elsewhere) is reported.
  let stopping = false
  let unexpected: string | undefined
  child.once('exit', (code, signal) => {
    if (!stopping) unexpected = `svc exited by itself during the run (code ${code}, signal ${signal})`
  })
  const origin = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 60_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`svc exited at start (${child.exitCode}): ${out}`)
    try {
      const res = await fetch(`${origin}/readyz`)
      await res.arrayBuffer()
      if (res.ok) break
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) {
      await stopChild(child, 1000, 'SIGKILL')
      throw new Error(`svc not ready within 60 s: ${out}`)
    }
    await sleep(25)
  }
  return {
    child, pid: child.pid!, origin, output: () => out, logged: () => Object.fromEntries(logged),
    stopping: () => { stopping = true }, unexpectedExit: () => unexpected, ...(profileDir !== undefined ? { profileDir } : {}),
    ...(sqlCostFile !== undefined ? { sqlCostFile } : {}),
  }
}

/** Stops svc (SIGTERM: it finishes in-flight work and writes outcomes) after reading its peak RSS. */
export async function stopSvc (svc: SvcProcess, graceMs = 40_000): Promise<{ peakRssMiB: number; exitCode: number | null }> {
  svc.stopping()
  const mem = memoryOf(svc.pid)
  const exitCode = await stopChild(svc.child, graceMs)
  return { peakRssMiB: mem?.peakMiB ?? NaN, exitCode }
}

/** Deliveries by status, and the commonest errors of failed attempts, read from the file once svc has stopped. */
export function deliveryCounts (dataDir: string): { byStatus: Record<string, number>; errors: Record<string, number> } {
  const db = new Database(join(dataDir, 'svc.db'), { readonly: true })
  try {
    const rows = db.prepare('SELECT status, count(*) AS n FROM deliveries GROUP BY status').all() as Array<{ status: string; n: number }>
    const errors = db.prepare(`SELECT last_error AS e, count(*) AS n FROM deliveries WHERE last_error IS NOT NULL
                               GROUP BY last_error ORDER BY n DESC LIMIT 5`).all() as Array<{ e: string; n: number }>
    return { byStatus: Object.fromEntries(rows.map((r) => [r.status, r.n])), errors: Object.fromEntries(errors.map((r) => [r.e, r.n])) }
  } finally {
    db.close()
  }
}
