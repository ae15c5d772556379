// svc as the benchmarks see it: a data directory seeded through the store's own API before svc starts,
// then `node dist/src/server.js` as a child process, measured from outside.
import Database from 'better-sqlite3'
import type { ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { iso } from '../../src/domain/clock.js'
import { eventPayload, type EventRecord, type EventType } from '../../src/domain/events.js'
import { newId } from '../../src/domain/ids.js'
import { limitsOf } from '../../src/domain/plans.js'
import { hashToken, newApiKey, newWebhookSecret } from '../../src/domain/secrets.js'
import { openSqliteStore, type SqliteStore } from '../../src/store/sqlite/index.js'
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
  async webhook (accountId: string, opts: { slow?: boolean; events?: EventType[] } = {}): Promise<number> {
    const index = this.secrets.length
    const secret = newWebhookSecret()
    this.secrets.push(secret)
    const now = iso(Date.now())
    const r = await this.store.insertWebhook({
      id: newId('wh'), accountId, url: new URL(`${this.sinkOrigin}/${opts.slow ? 's' : 'h'}/${index}`).href,
      events: opts.events ?? ['email.sent', 'email.delivered'], secret, previousSecret: null, previousSecretExpiresAt: null,
      status: 'enabled', createdAt: now, updatedAt: now,
    }, limitsOf('pro').webhooks)
    if (r !== 'created') throw new Error('seeding: webhook refused (plan limit)')
    return index
  }

  /** An API key for the account; returns the key itself (as x-api-key). */
  async apiKey (accountId: string): Promise<string> {
    const { key, keyPrefix } = newApiKey()
    const r = await this.store.insertApiKey({
      id: newId('key'), accountId, name: 'bench', keyHash: hashToken(SVC_SECRET, key, 'api-key'), keyPrefix,
      createdAt: iso(Date.now()), lastUsedAt: null, revokedAt: null,
    }, limitsOf('pro').apiKeys)
    if (r !== 'created') throw new Error('seeding: API key refused')
    return key
  }

  /** `perAccount` stored events for each of `accounts`, interleaved (event i belongs to account i mod n). */
  async events (accounts: string[], perAccount: number, type: EventType = 'email.delivered'): Promise<number> {
    const total = accounts.length * perAccount
    const chunk: EventRecord[] = []
    for (let i = 0; i < total; i++) {
      const accountId = accounts[i % accounts.length]!
      const at = iso(Date.now())
      const e = { id: newId('evt'), accountId, emailId: newId('em'), type, recipient: `someone${i}@example.com`, occurredAt: at }
      chunk.push({ ...e, payload: eventPayload(e) })
      if (chunk.length === 5000) await this.store.insertEvents(chunk.splice(0))
    }
    await this.store.insertEvents(chunk)
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

export interface SvcProcess {
  child: ChildProcess
  pid: number
  origin: string
  /** The last lines svc wrote (warnings and errors; logs are at warn level). */
  output: () => string
}

export async function startSvc (dataDir: string, env: Record<string, string> = {}): Promise<SvcProcess> {
  const port = await freePort()
  const child = spawnTracked(process.execPath, [SERVER_FILE], {
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
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  const keep = (chunk: Buffer) => { out = (out + chunk.toString('utf8')).slice(-8000) }
  child.stdout!.on('data', keep)
  child.stderr!.on('data', keep)
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
  return { child, pid: child.pid!, origin, output: () => out }
}

/** Stops svc (SIGTERM: it finishes in-flight work and writes outcomes) after reading its peak RSS. */
export async function stopSvc (svc: SvcProcess, graceMs = 40_000): Promise<{ peakRssMiB: number; exitCode: number | null }> {
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
