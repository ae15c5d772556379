// The embedded store: one SQLite file in DATA_DIR through better-sqlite3, WAL mode, synchronous=FULL.
// better-sqlite3 is synchronous; reads answer at once (wrapped in a promise), writes go through the
// WriteQueue so that concurrent requests share one durable commit.
import Database from 'better-sqlite3'
import { chmodSync, closeSync, mkdirSync, openSync, statSync } from 'node:fs'
import { join } from 'node:path'
import type { EventRecord, EventType } from '../../domain/events.js'
import type { Plan } from '../../domain/plans.js'
import type {
  AccountRecord, ApiKeyRecord, DomainCheck, DomainRecord, LimitedInsert, SessionRecord, Store, WebhookPatch, WebhookRecord, WebhookStatus,
} from '../types.js'
import { migrate } from './migrations.js'

export { migrate }
import type { ReplayState } from '../../domain/replay.js'
import { SqliteAccounts } from './accounts.js'
import { SqliteApiKeys } from './api-keys.js'
import { SqliteWebhooks } from './webhooks.js'
import { SqliteDeliveries } from './deliveries.js'
import { SqliteEmails } from './emails.js'
import { SqliteDomains } from './domains.js'
import { SqliteReceived } from './received.js'
import { SqliteTemplates } from './templates.js'
import type { TemplateHead, TemplateKey, TemplateSummary, TemplateVersionRecord, TemplateVersionSummary } from '../templates.js'
import { SqliteMeta } from './meta.js'
import type { ReceivedQuery, ReceivedRecord } from '../received.js'
import type {
  AcceptResult, EmailAttempt, EmailClaim, EmailLease, EmailRecord, EngagementEvent, IdempotencyRecord, QuotaCharge, SuppressionCursor, SuppressionRecord, UnsubscribeResult,
} from '../emails.js'
import type { AttachmentContent, DailyEventCount, EmailListQuery, EmailSummary } from '../emails.js'
import { BackgroundCheckpoints, SQLITE_FALLBACK_CHECKPOINT, checkpointThread, type CheckpointOutcome, type CheckpointRunner } from './checkpoints.js'
import { WriteQueue } from './write-queue.js'
import { StoreHealth } from '../faults.js'

export interface SqliteOptions {
  /** Directory of the database file (created when missing). */
  dataDir: string
  /** File name inside dataDir; default svc.db. */
  fileName?: string
  /**
   * Where WAL checkpoints run: 'thread' (the default), a worker thread with its own connection
   * (./checkpoints.ts), with the main connection's own at SQLITE_FALLBACK_CHECKPOINT pages as a backstop;
   * 'inline', SQLite's default, inside the commit that passes 1,000 pages.
   */
  checkpoints?: 'thread' | 'inline'
}

type Row = Record<string, unknown>

const str = (v: unknown): string => v as string

function toEvent (r: Row): EventRecord {
  return {
    id: str(r.id),
    accountId: str(r.account_id),
    emailId: str(r.email_id),
    type: r.type as EventType,
    recipient: str(r.recipient),
    occurredAt: str(r.occurred_at),
    payload: str(r.payload),
  }
}

/**
 * DATA_DIR is this process's alone: the directory 0700, the database 0600 (SQLite gives its -wal and -shm
 * files the database's mode). Existing ones are tightened too: group and other lose every bit, and nothing
 * is widened (an operator's read-only 0400 database stays read-only, and svc says so at its first write).
 * One owned by another user is left as it is.
 */
function privateFiles (dir: string, file: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  try {
    closeSync(openSync(file, 'wx', 0o600))
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
  }
  for (const path of [dir, file, file + '-wal', file + '-shm']) {
    try {
      const mode = statSync(path).mode & 0o777
      if ((mode & 0o077) !== 0) chmodSync(path, mode & 0o700)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code !== 'ENOENT' && code !== 'EPERM') throw err
    }
  }
}

export function openSqliteStore (options: SqliteOptions): SqliteStore {
  const file = join(options.dataDir, options.fileName ?? 'svc.db')
  privateFiles(options.dataDir, file)
  const db = new Database(file)
  try {
    db.pragma('journal_mode = WAL')
    // A secret replaced in place (a webhook secret sealed at start, a password changed) leaves no copy
    // behind in the file's free space.
    db.pragma('secure_delete = ON')
    // FULL while migrating; afterwards the write queue commits with NORMAL and fsyncs the WAL itself,
    // off the event loop, before a durable write resolves (see write-queue.ts).
    db.pragma('synchronous = FULL')
    db.pragma('foreign_keys = ON')
    // The CLI and the server may hold the same file; wait for the other writer instead of failing.
    db.pragma('busy_timeout = 5000')
    migrate(db)
    if (options.checkpoints !== 'inline') db.pragma(`wal_autocheckpoint = ${SQLITE_FALLBACK_CHECKPOINT}`)
  } catch (err) {
    db.close()
    throw err
  }
  return new SqliteStore(db, options.checkpoints === 'inline' ? undefined : checkpointThread(file))
}

// Each area of the contract lives in its own file (deliveries.ts, …); SqliteStore stacks them on one
// database and one write queue.
export class SqliteStore extends SqliteDeliveries implements Store {
  readonly kind = 'sqlite' as const
  private readonly flushListeners = new Set<(seconds: number) => void>()
  private readonly q
  private readonly accounts: SqliteAccounts
  private readonly apiKeys: SqliteApiKeys
  private readonly webhooks: SqliteWebhooks
  private readonly mail: SqliteEmails
  private readonly domains: SqliteDomains
  private readonly received: SqliteReceived
  private readonly templates: SqliteTemplates
  private readonly meta: SqliteMeta
  /** Whether writes can be made (faults.ts): set by the write queue, cleared only by a probe write. */
  readonly health: StoreHealth

  /** Checkpoints in a thread of their own (./checkpoints.ts); undefined: SQLite's own, inline. */
  private readonly checkpoints: BackgroundCheckpoints | undefined
  private readonly checkpointListeners = new Set<(outcome: CheckpointOutcome) => void>()

  /** `checkpointRunner`: where the WAL's checkpoints run (./checkpoints.ts); without it, inline (SQLite's own). */
  constructor (db: Database.Database, checkpointRunner?: CheckpointRunner) {
    super(db, new WriteQueue(db))
    const checkpoints = checkpointRunner === undefined
      ? undefined
      : new BackgroundCheckpoints(checkpointRunner, { onDone: (outcome) => { for (const listener of this.checkpointListeners) listener(outcome) } })
    this.checkpoints = checkpoints
    if (checkpoints !== undefined) this.writes.afterCommit(() => checkpoints.committed())
    this.health = new StoreHealth({ probe: () => this.probeWrite() })
    this.writes.onFault = (err) => { this.health.failed(err) }
    this.writes.onSynced = (seconds) => { for (const listener of this.flushListeners) listener(seconds) }
    this.accounts = new SqliteAccounts(db, this.writes)
    this.apiKeys = new SqliteApiKeys(db, this.writes)
    this.webhooks = new SqliteWebhooks(db, this.writes, (id, reason, now) => this.cancelPendingFor(id, reason, now))
    this.mail = new SqliteEmails(db, this.writes, (events) => this.insertEventRows(events))
    this.domains = new SqliteDomains(db, this.writes, () => { this.workHint = true })
    this.received = new SqliteReceived(db, this.writes, (events) => this.insertEventRows(events))
    this.templates = new SqliteTemplates(db, this.writes)
    this.meta = new SqliteMeta(db, this.writes)
    const p = (sql: string) => db.prepare(sql)
    this.q = {
      ping: p('SELECT 1'),

      insertEvent: p(`INSERT INTO events (id, account_id, email_id, type, recipient, occurred_at, payload, route)
                      VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
      emailEvents: p('SELECT * FROM events WHERE account_id = ? AND email_id = ? ORDER BY seq'),
    }
  }

  onDiskFlush (listener: (seconds: number) => void): () => void {
    this.flushListeners.add(listener)
    return () => { this.flushListeners.delete(listener) }
  }

  /** `listener` hears of every checkpoint of the WAL run in the checkpoint thread (none when inline). */
  onCheckpoint (listener: (outcome: CheckpointOutcome) => void): () => void {
    this.checkpointListeners.add(listener)
    return () => { this.checkpointListeners.delete(listener) }
  }

  async ping (): Promise<void> {
    this.q.ping.get()
  }

  /**
   * The smallest write that truly tests the write path: page 1 rewritten (user_version set to what it
   * is), committed to the WAL and flushed to disk through the write queue like any request's write.
   * (BEGIN IMMEDIATE; ROLLBACK would not do: it succeeds on a full disk.)
   */
  probeWrite (): Promise<void> {
    return this.writes.run(() => {
      const v = this.db.pragma('user_version', { simple: true }) as number
      this.db.pragma(`user_version = ${Number(v)}`)
    })
  }

  /** Resolves once the checkpoint thread has nothing running or waiting to start (tests). */
  async checkpointsIdle (): Promise<void> {
    await this.checkpoints?.idle()
  }

  async close (): Promise<void> {
    this.health.close()
    await this.writes.close()
    await this.checkpoints?.close()
    if (this.db.open) this.db.close()
  }

  // The secret's check value (src/store/sqlite/meta.ts)

  secretCheck (): Promise<string | null> { return this.meta.secretCheck() }
  initSecretCheck (value: string): Promise<string> { return this.meta.initSecretCheck(value) }

  // Accounts and sessions (src/store/sqlite/accounts.ts)

  createAccount (a: AccountRecord, opts: { onlyIfFirst?: boolean } = {}): Promise<'created' | 'email_taken' | 'not_first'> { return this.accounts.createAccount(a, opts) }
  setAccountPassword (accountId: string, passwordHash: string): Promise<boolean> { return this.accounts.setAccountPassword(accountId, passwordHash) }
  deleteAccountSessions (accountId: string, keep: string | null): Promise<number> { return this.accounts.deleteAccountSessions(accountId, keep) }
  findAccountById (id: string): Promise<AccountRecord | null> { return this.accounts.findAccountById(id) }
  findAccountByEmail (email: string): Promise<AccountRecord | null> { return this.accounts.findAccountByEmail(email) }
  setAccountPlan (accountId: string, plan: Plan): Promise<boolean> { return this.accounts.setAccountPlan(accountId, plan) }
  createSession (s: SessionRecord): Promise<void> { return this.accounts.createSession(s) }
  findSession (tokenHash: string): Promise<SessionRecord | null> { return this.accounts.findSession(tokenHash) }
  extendSession (tokenHash: string, expiresAt: string): Promise<void> { return this.accounts.extendSession(tokenHash, expiresAt) }
  deleteSession (tokenHash: string): Promise<void> { return this.accounts.deleteSession(tokenHash) }
  deleteExpiredSessions (now: string): Promise<number> { return this.accounts.deleteExpiredSessions(now) }

  // API keys (src/store/sqlite/api-keys.ts)

  insertApiKey (k: ApiKeyRecord, limit: number): Promise<LimitedInsert> { return this.apiKeys.insertApiKey(k, limit) }
  listApiKeys (accountId: string): Promise<ApiKeyRecord[]> { return this.apiKeys.listApiKeys(accountId) }
  findApiKeyByHash (keyHash: string): Promise<ApiKeyRecord | null> { return this.apiKeys.findApiKeyByHash(keyHash) }
  revokeApiKey (accountId: string, id: string, at: string): Promise<ApiKeyRecord | null> { return this.apiKeys.revokeApiKey(accountId, id, at) }
  apiKeyRevocations (): number { return this.apiKeys.apiKeyRevocations() }
  touchApiKeys (uses: Array<{ id: string; lastUsedAt: string }>): Promise<void> { return this.apiKeys.touchApiKeys(uses) }
  countActiveApiKeys (accountId: string): Promise<number> { return this.apiKeys.countActiveApiKeys(accountId) }

  // Webhooks (src/store/sqlite/webhooks.ts)

  insertWebhook (w: WebhookRecord, limit: number): Promise<LimitedInsert> { return this.webhooks.insertWebhook(w, limit) }
  listWebhooks (accountId: string): Promise<WebhookRecord[]> { return this.webhooks.listWebhooks(accountId) }
  findWebhook (accountId: string, id: string): Promise<WebhookRecord | null> { return this.webhooks.findWebhook(accountId, id) }
  updateWebhook (accountId: string, id: string, patch: WebhookPatch, updatedAt: string): Promise<WebhookRecord | null> { return this.webhooks.updateWebhook(accountId, id, patch, updatedAt) }
  deleteWebhook (accountId: string, id: string, deletedAt: string): Promise<boolean> { return this.webhooks.deleteWebhook(accountId, id, deletedAt) }
  countWebhooks (accountId: string): Promise<number> { return this.webhooks.countWebhooks(accountId) }
  countWebhooksByStatus (): Promise<Record<WebhookStatus, number>> { return this.webhooks.countWebhooksByStatus() }
  setWebhookReplay (accountId: string, id: string, replay: ReplayState): Promise<boolean> { return this.webhooks.setWebhookReplay(accountId, id, replay) }

  // Events

  /** Inserts event rows; call inside a write (WriteQueue.run) so they commit with what they record. */
  override insertEventRows (events: EventRecord[]): void {
    if (events.length === 0) return
    this.workHint = true
    const keep = this.engineListening
    for (const e of events) {
      const route = e.route ?? null
      const { lastInsertRowid } = this.q.insertEvent.run(e.id, e.accountId, e.emailId, e.type, e.recipient, e.occurredAt, e.payload, route)
      if (keep) this.recentEvents.stage({ seq: Number(lastInsertRowid), id: e.id, account_id: e.accountId, email_id: e.emailId, type: e.type, occurred_at: e.occurredAt, payload: e.payload, route })
    }
  }

  async insertEvents (events: EventRecord[]): Promise<void> {
    if (events.length === 0) return
    await this.writes.run(() => this.insertEventRows(events))
  }

  async listEmailEvents (accountId: string, emailId: string): Promise<EventRecord[]> {
    return (this.q.emailEvents.all(accountId, emailId) as Row[]).map(toEvent)
  }

  // Sending (src/store/sqlite/emails.ts)

  acceptEmails (input: { emails: EmailRecord[]; events: EventRecord[]; idempotency?: IdempotencyRecord; quota?: QuotaCharge; attachments?: AttachmentContent[] }): Promise<AcceptResult> { return this.mail.acceptEmails(input) }
  readSendUsage (accountId: string, periods: string[]): Promise<Record<string, number>> { return this.mail.readSendUsage(accountId, periods) }
  findIdempotencyKey (accountId: string, key: string, now: string): Promise<IdempotencyRecord | null> { return this.mail.findIdempotencyKey(accountId, key, now) }
  pruneIdempotencyKeys (now: string): Promise<number> { return this.mail.pruneIdempotencyKeys(now) }
  findEmail (accountId: string, id: string): Promise<EmailRecord | null> { return this.mail.findEmail(accountId, id) }
  listEmails (accountId: string, query: EmailListQuery): Promise<EmailSummary[]> { return this.mail.listEmails(accountId, query) }
  countEvents (accountId: string, window: { since: string; until: string }): Promise<DailyEventCount[]> { return this.mail.countEvents(accountId, window) }
  claimDueEmails (req: EmailClaim): Promise<EmailRecord[]> { return this.mail.claimDueEmails(req) }
  nextDueAt (now: string): Promise<string | null> { return this.mail.nextDueAt(now) }
  rescheduleEmail (input: { accountId: string; id: string; scheduledAt: string; now: string }): Promise<EmailRecord | 'not_scheduled' | null> { return this.mail.rescheduleEmail(input) }
  cancelEmail (input: { accountId: string; id: string; now: string; refund?: { recipients: number; periods: string[] } }): Promise<EmailRecord | 'not_scheduled' | null> { return this.mail.cancelEmail(input) }
  recordEmailAttempt (attempt: EmailAttempt): Promise<boolean> { return this.mail.recordEmailAttempt(attempt) }
  renewEmailLeases (owner: string, leases: EmailLease[], leaseUntil: number): Promise<number> { return this.mail.renewEmailLeases(owner, leases, leaseUntil) }
  releaseEmailLeases (owner: string, leases?: EmailLease[]): Promise<number> { return this.mail.releaseEmailLeases(owner, leases) }
  findSuppressions (accountId: string, emails: string[]): Promise<SuppressionRecord[]> { return this.mail.findSuppressions(accountId, emails) }
  listSuppressions (accountId: string, opts: { limit: number; after?: SuppressionCursor }): Promise<SuppressionRecord[]> { return this.mail.listSuppressions(accountId, opts) }
  addSuppression (s: SuppressionRecord): Promise<{ created: boolean; record: SuppressionRecord }> { return this.mail.addSuppression(s) }
  deleteSuppression (accountId: string, email: string): Promise<boolean> { return this.mail.deleteSuppression(accountId, email) }
  recordEngagement (event: EngagementEvent): Promise<EventRecord | null> { return this.mail.recordEngagement(event) }
  unsubscribeRecipient (event: EngagementEvent, at: string): Promise<UnsubscribeResult> { return this.mail.unsubscribeRecipient(event, at) }
  repairInterruptedWrites (before: string): Promise<number> { return this.mail.repairInterruptedWrites(before) }
  readEmailAttachments (emailId: string): Promise<Buffer[] | null> { return this.mail.readEmailAttachments(emailId) }
  pruneAttachmentContents (before: string, limit: number): Promise<number> { return this.mail.pruneAttachmentContents(before, limit) }

  // Sender domains and returning mail (src/store/sqlite/domains.ts)

  insertDomain (d: DomainRecord, limit: number): Promise<LimitedInsert | 'name_taken'> { return this.domains.insertDomain(d, limit) }
  listDomains (accountId: string): Promise<DomainRecord[]> { return this.domains.listDomains(accountId) }
  findDomain (accountId: string, id: string): Promise<DomainRecord | null> { return this.domains.findDomain(accountId, id) }
  findDomainByName (accountId: string, name: string): Promise<DomainRecord | null> { return this.domains.findDomainByName(accountId, name) }
  updateDomainCheck (accountId: string, id: string, check: DomainCheck): Promise<DomainRecord | null> { return this.domains.updateDomainCheck(accountId, id, check) }
  deleteDomain (accountId: string, id: string): Promise<boolean> { return this.domains.deleteDomain(accountId, id) }
  listDomainsCheckedBefore (before: string, limit: number): Promise<DomainRecord[]> { return this.domains.listDomainsCheckedBefore(before, limit) }
  findEmailById (id: string): Promise<EmailRecord | null> { return this.mail.findEmailById(id) }
  recordReturnedMail (input: { event: EventRecord; suppression: SuppressionRecord | null; timelineOnly: boolean }): Promise<'recorded' | 'duplicate'> { return this.domains.recordReturnedMail(input) }

  // Received mail (src/store/sqlite/received.ts; the switch lives with the domains)

  setDomainReceiving (accountId: string, id: string, receiving: boolean, at: string): Promise<DomainRecord | null> { return this.domains.setDomainReceiving(accountId, id, receiving, at) }
  findReceivingDomains (name: string, limit: number): Promise<DomainRecord[]> { return this.domains.findReceivingDomains(name, limit) }
  setDomainTracking (accountId: string, id: string, tracking: { opens?: boolean; clicks?: boolean }, at: string): Promise<DomainRecord | null> { return this.domains.setDomainTracking(accountId, id, tracking, at) }
  insertReceived (input: { message: ReceivedRecord; raw: Buffer; contents: Array<{ id: string; content: Buffer }>; event: EventRecord; limitBytes: number }): Promise<'recorded' | 'limit_reached'> { return this.received.insertReceived(input) }
  receivedBytes (accountId: string): Promise<number> { return this.received.receivedBytes(accountId) }
  deleteReceived (accountId: string, id: string): Promise<ReceivedRecord | null> { return this.received.deleteReceived(accountId, id) }
  listReceived (accountId: string, q: ReceivedQuery): Promise<ReceivedRecord[]> { return this.received.listReceived(accountId, q) }
  findReceived (accountId: string, id: string): Promise<ReceivedRecord | null> { return this.received.findReceived(accountId, id) }
  readReceivedRaw (accountId: string, id: string): Promise<Buffer | null> { return this.received.readReceivedRaw(accountId, id) }
  readReceivedAttachment (accountId: string, id: string, attachmentId: string): Promise<Buffer | null> { return this.received.readReceivedAttachment(accountId, id, attachmentId) }
  pruneReceived (before: string, limit: number): Promise<number> { return this.received.pruneReceived(before, limit) }

  // Templates (src/store/sqlite/templates.ts)

  insertTemplate (head: TemplateHead, first: TemplateVersionRecord, limit: number): Promise<LimitedInsert | 'name_taken'> { return this.templates.insertTemplate(head, first, limit) }
  listTemplates (accountId: string): Promise<TemplateSummary[]> { return this.templates.listTemplates(accountId) }
  findTemplate (accountId: string, key: TemplateKey): Promise<TemplateHead | null> { return this.templates.findTemplate(accountId, key) }
  findTemplateVersion (accountId: string, id: string, version: number): Promise<TemplateVersionRecord | null> { return this.templates.findTemplateVersion(accountId, id, version) }
  listTemplateVersions (accountId: string, id: string, page: { limit: number; before?: number }): Promise<TemplateVersionSummary[]> { return this.templates.listTemplateVersions(accountId, id, page) }
  updateTemplate (accountId: string, id: string, expectedVersion: number, next: TemplateVersionRecord, name?: string): Promise<'updated' | 'conflict' | 'not_found' | 'name_taken'> { return this.templates.updateTemplate(accountId, id, expectedVersion, next, name) }
  deleteTemplate (accountId: string, id: string): Promise<boolean> { return this.templates.deleteTemplate(accountId, id) }

  // Several nodes: shared rate limits, and noticing other processes' writes

  private readonly shared = {
    // One row per key. All SET expressions read the row as it was: a later window starts at 1, the same
    // (or, from a lagging clock, an older) window counts on.
    hit: this.db.prepare(`INSERT INTO rate_limits (key, window_start, window_end, count) VALUES (?, ?, ?, 1)
      ON CONFLICT (key) DO UPDATE SET
        count = CASE WHEN excluded.window_start > rate_limits.window_start THEN 1 ELSE rate_limits.count + 1 END,
        window_start = max(rate_limits.window_start, excluded.window_start),
        window_end = max(rate_limits.window_end, excluded.window_end)
      RETURNING count`).pluck(),
    prune: this.db.prepare('DELETE FROM rate_limits WHERE window_end <= ?'),
    dataVersion: this.db.prepare('PRAGMA data_version').pluck(),
  }

  /**
   * Runs at once, outside the write queue, as its own small transaction: a counter needs no fsync (see
   * the contract), and a request must not wait for the queue's next durable commit to learn its count.
   */
  async hitRateLimit (hit: { key: string; windowStart: number; windowEnd: number }): Promise<number> {
    return this.shared.hit.get(String(hit.key), Math.trunc(hit.windowStart), Math.trunc(hit.windowEnd)) as number
  }

  pruneRateLimits (now: number): Promise<number> {
    return this.writes.run(() => this.shared.prune.run(Math.trunc(now)).changes, { durable: false })
  }

  /** PRAGMA data_version: changes when another connection to the file commits (never for this one's own commits). */
  async externalWriteVersion (): Promise<number | null> {
    return this.shared.dataVersion.get() as number
  }
}
