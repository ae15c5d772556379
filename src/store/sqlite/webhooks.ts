// Webhooks in SQLite: each account's endpoints, their edits and deletion, and the replay state they
// carry. Disabling or deleting one cancels its live deliveries in the same write (`cancelPendingFor`,
// from ./deliveries.ts). Reads answer at once; each change is one WriteQueue.run.
import type Database from 'better-sqlite3'
import type { EventType } from '../../domain/events.js'
import { CANCEL_REASONS, cancelOnEdit, type CancelReason } from '../../domain/webhook-health.js'
import { readStoredFilter, serialiseFilter, withFilterAndReplay } from '../../domain/webhook-filter.js'
import { replayStateOf, type ReplayState } from '../../domain/replay.js'
import type { LimitedInsert, WebhookPatch, WebhookRecord, WebhookStatus } from '../types.js'
import type { WriteQueue } from './write-queue.js'

type Row = Record<string, unknown>
const str = (v: unknown): string => v as string
const strOrNull = (v: unknown): string | null => (v ?? null) as string | null

function toWebhook (r: Row): WebhookRecord {
  return {
    id: str(r.id),
    accountId: str(r.account_id),
    url: str(r.url),
    events: JSON.parse(str(r.events)) as EventType[],
    secret: str(r.secret),
    previousSecret: strOrNull(r.previous_secret),
    previousSecretExpiresAt: strOrNull(r.previous_secret_expires_at),
    status: r.status as WebhookStatus,
    rateLimit: typeof r.rate_limit === 'number' ? r.rate_limit : null,
    createdAt: str(r.created_at),
    updatedAt: str(r.updated_at),
    ...withFilterAndReplay(readStoredFilter(r.route_filter), replayStateOf(r.replay)),
  }
}

export class SqliteWebhooks {
  private readonly q

  /** `cancelPendingFor`: cancels a webhook's live deliveries, inside the write that disables or deletes it. */
  constructor (db: Database.Database, private readonly writes: WriteQueue,
    private readonly cancelPendingFor: (webhookId: string, reason: CancelReason, now: number) => void) {
    const p = (sql: string) => db.prepare(sql)
    this.q = {
      countWebhooks: p('SELECT count(*) AS n FROM webhooks WHERE account_id = ? AND deleted_at IS NULL'),
      webhooksByStatus: p('SELECT status, count(*) AS n FROM webhooks WHERE deleted_at IS NULL GROUP BY status'),
      insertWebhook: p(`INSERT INTO webhooks (id, account_id, url, events, secret, previous_secret, previous_secret_expires_at,
                          status, rate_limit, route_filter, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
      listWebhooks: p('SELECT * FROM webhooks WHERE account_id = ? AND deleted_at IS NULL ORDER BY id DESC'),
      webhookById: p('SELECT * FROM webhooks WHERE account_id = ? AND id = ? AND deleted_at IS NULL'),
      updateWebhook: p(`UPDATE webhooks SET url = ?, events = ?, status = ?, rate_limit = ?, route_filter = ?, secret = ?, previous_secret = ?,
                          previous_secret_expires_at = ?, updated_at = ? WHERE account_id = ? AND id = ? AND deleted_at IS NULL`),
      setReplay: p('UPDATE webhooks SET replay = ? WHERE account_id = ? AND id = ? AND deleted_at IS NULL'),
      clearFailing: p('UPDATE webhooks SET failing_since = NULL WHERE id = ?'),
      deleteWebhook: p('UPDATE webhooks SET deleted_at = ?, updated_at = ? WHERE account_id = ? AND id = ? AND deleted_at IS NULL'),
    }
  }

  insertWebhook (w: WebhookRecord, limit: number): Promise<LimitedInsert> {
    return this.writes.run(() => {
      const { n } = this.q.countWebhooks.get(w.accountId) as { n: number }
      if (n >= limit) return 'limit_reached'
      this.q.insertWebhook.run(w.id, w.accountId, w.url, JSON.stringify(w.events), w.secret, w.previousSecret,
        w.previousSecretExpiresAt, w.status, w.rateLimit ?? null, serialiseFilter(w.filter ?? null), w.createdAt, w.updatedAt)
      return 'created'
    })
  }

  async listWebhooks (accountId: string): Promise<WebhookRecord[]> {
    return (this.q.listWebhooks.all(accountId) as Row[]).map(toWebhook)
  }

  async findWebhook (accountId: string, id: string): Promise<WebhookRecord | null> {
    const row = this.q.webhookById.get(accountId, id) as Row | undefined
    return row ? toWebhook(row) : null
  }

  updateWebhook (accountId: string, id: string, patch: WebhookPatch, updatedAt: string): Promise<WebhookRecord | null> {
    return this.writes.run(() => {
      const row = this.q.webhookById.get(accountId, id) as Row | undefined
      if (!row) return null
      const w = { ...toWebhook(row), updatedAt }
      // Only the fields a patch may carry, and only those given: ids and ownership never change here.
      if (patch.url !== undefined) w.url = patch.url
      if (patch.events !== undefined) w.events = patch.events
      if (patch.status !== undefined) w.status = patch.status
      if (patch.rateLimit !== undefined) w.rateLimit = patch.rateLimit
      // As find reads it back: no filter field when there is none.
      if (patch.filter === null) delete w.filter
      else if (patch.filter !== undefined) w.filter = patch.filter
      if (patch.secret !== undefined) w.secret = patch.secret
      if (patch.previousSecret !== undefined) w.previousSecret = patch.previousSecret
      if (patch.previousSecretExpiresAt !== undefined) w.previousSecretExpiresAt = patch.previousSecretExpiresAt
      this.q.updateWebhook.run(w.url, JSON.stringify(w.events), w.status, w.rateLimit ?? null, serialiseFilter(w.filter ?? null), w.secret, w.previousSecret,
        w.previousSecretExpiresAt, updatedAt, accountId, id)
      const cancel = cancelOnEdit(patch.status)
      if (cancel !== null) this.cancelPendingFor(id, cancel, Date.parse(updatedAt))
      // Enabling starts the health record afresh: an old failing streak must not disable it again at once.
      if (patch.status === 'enabled') this.q.clearFailing.run(id)
      return w
    })
  }

  deleteWebhook (accountId: string, id: string, deletedAt: string): Promise<boolean> {
    return this.writes.run(() => {
      if (this.q.deleteWebhook.run(deletedAt, deletedAt, accountId, id).changes !== 1) return false
      this.cancelPendingFor(id, CANCEL_REASONS.deleted, Date.parse(deletedAt))
      return true
    })
  }

  async countWebhooks (accountId: string): Promise<number> {
    return (this.q.countWebhooks.get(accountId) as { n: number }).n
  }

  async countWebhooksByStatus (): Promise<Record<WebhookStatus, number>> {
    const counts: Record<WebhookStatus, number> = { enabled: 0, disabled: 0, auto_disabled: 0 }
    for (const r of this.q.webhooksByStatus.all() as Array<{ status: WebhookStatus; n: number }>) counts[r.status] = r.n
    return counts
  }

  setWebhookReplay (accountId: string, id: string, replay: ReplayState): Promise<boolean> {
    return this.writes.run(() => this.q.setReplay.run(JSON.stringify(replay), accountId, id).changes === 1)
  }
}
