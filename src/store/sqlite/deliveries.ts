// The delivery engine's tables in SQLite. Every method that changes rows runs inside the shared write
// queue, so routing, leasing and outcomes share commits with everything else.
import type Database from 'better-sqlite3'
import type { EventRecord, EventType } from '../../domain/events.js'
import { deliveryId } from '../../domain/ids.js'
import type {
  DeliveryOutcome, DeliveryPage, DeliveryRecord, DeliveryStats, DeliveryStatus, DeliveryStore, DeliveryWork, LeaseRequest,
} from '../deliveries.js'
import type { WriteQueue } from './write-queue.js'

type Row = Record<string, any>

const LIVE = `status IN ('pending', 'retrying')`

/**
 * The engine's bookkeeping is written without fsync (see WriteQueue): losing the last of it to a power
 * cut makes deliveries happen again, never disappear, because the work they describe is leased and its
 * lease runs out.
 */
const ENGINE = { durable: false }

function iso (ms: number | null | undefined): string | null {
  return ms === null || ms === undefined ? null : new Date(ms).toISOString()
}

function toRecord (r: Row): DeliveryRecord {
  const live = r.status === 'pending' || r.status === 'retrying'
  return {
    id: r.id,
    webhookId: r.webhook_id,
    eventId: r.event_id,
    event: r.event_type as EventType,
    emailId: r.email_id,
    status: r.status as DeliveryStatus,
    attempts: r.attempts,
    lastAttemptAt: iso(r.last_attempt_at),
    nextAttemptAt: live && r.lease_owner === null ? iso(r.next_attempt_at) : null,
    lastStatusCode: r.last_status_code ?? null,
    lastError: r.last_error ?? null,
    lastDurationMs: r.last_duration_ms ?? null,
    createdAt: iso(r.created_at)!,
  }
}

/** The secrets that sign now: the current one, and the previous one until its overlap ends. */
function liveSecrets (r: Row, now: number): string[] {
  const secrets = [r.secret as string]
  if (r.previous_secret && r.previous_secret_expires_at && Date.parse(r.previous_secret_expires_at) > now) secrets.push(r.previous_secret)
  return secrets
}

function encodeCursor (id: string): string {
  return Buffer.from(id).toString('base64url')
}

function decodeCursor (cursor: string): string | null {
  const id = Buffer.from(cursor, 'base64url').toString()
  return /^dlv_[0-9a-f]{28}$/.test(id) ? id : null
}

export abstract class SqliteDeliveries implements DeliveryStore {
  private readonly d
  private readonly listeners = new Set<() => void>()
  /** Set inside a write that makes work for the engine; listeners hear of it after the commit. */
  protected workHint = false

  constructor (readonly db: Database.Database, protected readonly writes: WriteQueue) {
    writes.onCommit = () => {
      if (!this.workHint) return
      this.workHint = false
      for (const listener of this.listeners) listener()
    }
    const p = (sql: string) => db.prepare(sql)
    const claimColumns = `d.id, d.webhook_id, d.event_type, d.attempts, d.event_at, e.payload, w.url, w.secret,
      w.previous_secret, w.previous_secret_expires_at, w.status AS webhook_status, w.deleted_at`
    // Events up to here are routed (see migration 5).
    const CURSOR = '(SELECT routed_through FROM routing WHERE id = 1)'
    const claimFrom = `FROM deliveries d JOIN events e ON e.seq = d.event_seq JOIN webhooks w ON w.id = d.webhook_id`
    this.d = {
      unrouted: p(`SELECT seq, id, account_id, email_id, type, occurred_at, payload FROM events
                   WHERE seq > ${CURSOR} AND routed = 0 ORDER BY seq LIMIT ?`),
      anyUnrouted: p(`SELECT 1 FROM events WHERE seq > ${CURSOR} AND routed = 0 LIMIT 1`),
      anyDue: p(`SELECT 1 FROM deliveries WHERE ${LIVE} AND next_attempt_at <= ? LIMIT 1`),
      markRouted: p('UPDATE routing SET routed_through = max(routed_through, ?) WHERE id = 1'),
      enabledHooks: p(`SELECT id, url, events, secret, previous_secret, previous_secret_expires_at FROM webhooks
                       WHERE account_id = ? AND status = 'enabled' AND deleted_at IS NULL`),
      insert: p(`INSERT OR IGNORE INTO deliveries (id, account_id, webhook_id, event_seq, event_id, event_type, email_id, event_at,
                   status, attempts, next_attempt_at, lease_owner, parked, created_at, updated_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?)`),
      due: p(`SELECT ${claimColumns} ${claimFrom} WHERE d.${LIVE} AND d.next_attempt_at <= ? ORDER BY d.next_attempt_at LIMIT ?`),
      parkedFor: p(`SELECT ${claimColumns} ${claimFrom}
                    WHERE d.webhook_id = ? AND d.lease_owner = ? AND d.parked = 1 AND d.${LIVE} ORDER BY d.next_attempt_at LIMIT ?`),
      park: p(`UPDATE deliveries SET lease_owner = ?, next_attempt_at = ?, parked = 1 WHERE id = ? AND ${LIVE}`),
      dueForWebhook: p(`SELECT ${claimColumns} ${claimFrom}
                        WHERE d.webhook_id = ? AND d.${LIVE} AND d.next_attempt_at <= ? ORDER BY d.next_attempt_at LIMIT ?`),
      lease: p(`UPDATE deliveries SET lease_owner = ?, next_attempt_at = ?, parked = 0 WHERE id = ?`),
      cancel: p(`UPDATE deliveries SET status = 'cancelled', next_attempt_at = NULL, lease_owner = NULL, parked = 0, last_error = ?, updated_at = ?
                 WHERE id = ? AND ${LIVE}`),
      // Parked deliveries are not renewed: if their actor never pages them back in, the lease runs out and
      // they are due for any claim, so nothing can stay parked for ever.
      renew: p(`UPDATE deliveries SET next_attempt_at = ? WHERE lease_owner = ? AND parked = 0 AND ${LIVE}`),
      release: p(`UPDATE deliveries SET lease_owner = NULL, parked = 0, next_attempt_at = ? WHERE lease_owner = ? AND ${LIVE}`),
      releaseStale: p(`UPDATE deliveries SET lease_owner = NULL, parked = 0 WHERE lease_owner IS NOT NULL AND NOT (${LIVE})`),

      succeeded: p(`UPDATE deliveries SET status = 'succeeded', attempts = attempts + 1, next_attempt_at = NULL, lease_owner = NULL, parked = 0,
                      last_attempt_at = ?, last_status_code = ?, last_error = NULL, last_duration_ms = ?, updated_at = ?
                    WHERE id = ? AND status IN ('pending', 'retrying', 'cancelled')`),
      retry: p(`UPDATE deliveries SET status = 'retrying', attempts = attempts + 1, next_attempt_at = ?, lease_owner = NULL, parked = 0,
                  last_attempt_at = ?, last_status_code = ?, last_error = ?, last_duration_ms = ?, updated_at = ?
                WHERE id = ? AND ${LIVE}`),
      failed: p(`UPDATE deliveries SET status = 'failed', attempts = attempts + 1, next_attempt_at = NULL, lease_owner = NULL, parked = 0,
                   last_attempt_at = ?, last_status_code = ?, last_error = ?, last_duration_ms = ?, updated_at = ?
                 WHERE id = ? AND ${LIVE}`),
      deferred: p(`UPDATE deliveries SET lease_owner = NULL, parked = 0, next_attempt_at = ? WHERE id = ? AND ${LIVE}`),
      hookSuccess: p('UPDATE webhooks SET failing_since = NULL, last_success_at = ? WHERE id = ?'),
      hookFailure: p('UPDATE webhooks SET failing_since = coalesce(failing_since, ?) WHERE id = ? RETURNING failing_since, status'),
      disableHook: p(`UPDATE webhooks SET status = 'auto_disabled', updated_at = ? WHERE id = ? AND status = 'enabled' AND deleted_at IS NULL`),
      cancelForHook: p(`UPDATE deliveries SET status = 'cancelled', next_attempt_at = NULL, lease_owner = NULL, parked = 0, last_error = ?, updated_at = ?
                        WHERE webhook_id = ? AND ${LIVE}`),

      page: p(`SELECT * FROM deliveries WHERE account_id = ? AND webhook_id = ? AND (? IS NULL OR status = ?) AND id < ?
               ORDER BY id DESC LIMIT ?`),
      one: p('SELECT * FROM deliveries WHERE account_id = ? AND webhook_id = ? AND id = ?'),
      handRetry: p(`UPDATE deliveries SET status = 'pending', next_attempt_at = ?, updated_at = ?
                    WHERE account_id = ? AND webhook_id = ? AND id = ? AND lease_owner IS NULL`),
      requeue: p(`UPDATE deliveries SET status = 'pending', next_attempt_at = ?, lease_owner = NULL, parked = 0, updated_at = ?
                  WHERE id IN (SELECT id FROM deliveries WHERE webhook_id = ? AND account_id = ? AND status IN ('failed', 'cancelled')
                               AND created_at >= ? AND created_at < ? LIMIT ?)`),
      countFailed: p(`SELECT count(*) AS n FROM deliveries WHERE webhook_id = ? AND account_id = ? AND status IN ('failed', 'cancelled')
                      AND created_at >= ? AND created_at < ?`),
      insertTestEvent: p(`INSERT INTO events (id, account_id, email_id, type, recipient, occurred_at, payload, routed)
                          VALUES (?, ?, ?, ?, ?, ?, ?, 1) RETURNING seq`),

      statusCounts: p(`SELECT status, count(*) AS n FROM deliveries WHERE ${LIVE} GROUP BY status`),
      unroutedCount: p(`SELECT count(*) AS n, min(occurred_at) AS oldest FROM events WHERE seq > ${CURSOR} AND routed = 0`),
      oldestLive: p(`SELECT min(event_at) AS oldest FROM deliveries WHERE ${LIVE}`),
      pruneDeliveries: p(`DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries
                            WHERE status IN ('succeeded', 'failed', 'cancelled') AND updated_at < ? LIMIT ?)`),
      pruneEvents: p(`DELETE FROM events WHERE seq IN (SELECT seq FROM events e WHERE (e.seq <= ${CURSOR} OR e.routed = 1) AND e.occurred_at < ?
                        AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq) LIMIT ?)`),
    }
  }

  abstract insertEventRows (events: EventRecord[]): void

  /** Cancels a webhook's pending deliveries; call inside a write. In-flight attempts still report. */
  protected cancelPendingFor (webhookId: string, reason: string, now: number): void {
    this.d.cancelForHook.run(reason, now, webhookId)
  }

  subscribe (listener: () => void): () => void {
    this.listeners.add(listener)
    return () => { this.listeners.delete(listener) }
  }

  routeEvents (req: LeaseRequest): Promise<{ events: number; work: DeliveryWork[] }> {
    // A plain read first: most calls find nothing, and those should not take the write lock.
    if (this.d.anyUnrouted.get() === undefined) return Promise.resolve({ events: 0, work: [] })
    // Not fsynced: after a power cut an event is routed again, to the same delivery ids (deliveryId()).
    return this.writes.run(() => {
      const events = this.d.unrouted.all(req.limit) as Row[]
      if (events.length === 0) return { events: 0, work: [] }
      const hooksOf = new Map<string, Row[]>()
      const work: DeliveryWork[] = []
      const saturated = new Set(req.saturated)
      for (const e of events) {
        let hooks = hooksOf.get(e.account_id)
        if (!hooks) {
          hooks = (this.d.enabledHooks.all(e.account_id) as Row[]).map((h) => ({ ...h, types: JSON.parse(h.events) as string[] }))
          hooksOf.set(e.account_id, hooks)
        }
        const eventAt = Date.parse(e.occurred_at)
        for (const h of hooks) {
          if (!h.types.includes(e.type)) continue
          const id = deliveryId(e.id, h.id)
          if (saturated.has(h.id)) {
            this.d.insert.run(id, e.account_id, h.id, e.seq, e.id, e.type, e.email_id, eventAt, req.leaseUntil, req.owner, 1, req.now, req.now)
            continue
          }
          if (this.d.insert.run(id, e.account_id, h.id, e.seq, e.id, e.type, e.email_id, eventAt, req.leaseUntil, req.owner, 0, req.now, req.now).changes === 0) continue
          work.push({ id, webhookId: h.id, url: h.url, secrets: liveSecrets(h, req.now), event: e.type, payload: e.payload, attempts: 0, eventAt })
        }
      }
      this.d.markRouted.run(events.at(-1)!.seq)
      return { events: events.length, work }
    }, ENGINE)
  }

  claimDeliveries (req: LeaseRequest & { webhookId?: string }): Promise<DeliveryWork[]> {
    if (req.webhookId === undefined && this.d.anyDue.get(req.now) === undefined) return Promise.resolve([])
    return this.writes.run(() => {
      const rows = (req.webhookId !== undefined
        ? this.d.dueForWebhook.all(req.webhookId, req.now, req.limit)
        : this.d.due.all(req.now, req.limit)) as Row[]
      return this.leaseRows(rows, req)
    }, ENGINE)
  }

  unparkDeliveries (req: { owner: string; webhookId: string; now: number; leaseUntil: number; limit: number }): Promise<DeliveryWork[]> {
    return this.writes.run(() => this.leaseRows(this.d.parkedFor.all(req.webhookId, req.owner, req.limit) as Row[], req), ENGINE)
  }

  /** Leases claimed rows to `req.owner`, cancelling those whose webhook may no longer be called. */
  private leaseRows (rows: Row[], req: { owner: string; now: number; leaseUntil: number }): DeliveryWork[] {
    const work: DeliveryWork[] = []
    for (const r of rows) {
      if (r.webhook_status !== 'enabled' || r.deleted_at !== null) {
        this.d.cancel.run(r.deleted_at !== null ? 'webhook deleted' : 'webhook disabled', req.now, r.id)
        continue
      }
      this.d.lease.run(req.owner, req.leaseUntil, r.id)
      work.push({
        id: r.id, webhookId: r.webhook_id, url: r.url, secrets: liveSecrets(r, req.now), event: r.event_type,
        payload: r.payload, attempts: r.attempts, eventAt: r.event_at,
      })
    }
    return work
  }

  async renewLeases (owner: string, leaseUntil: number): Promise<void> {
    await this.writes.run(() => this.d.renew.run(leaseUntil, owner), ENGINE)
  }

  async releaseLeases (owner: string, now: number): Promise<void> {
    await this.writes.run(() => {
      this.d.release.run(now, owner)
      this.d.releaseStale.run()
    })
  }

  async recordOutcomes (outcomes: DeliveryOutcome[], opts: { now: number; autoDisableMs: number }): Promise<void> {
    if (outcomes.length === 0) return
    await this.writes.run(() => {
      const succeeded = new Map<string, number>()
      const failing = new Map<string, number>()
      const gone = new Set<string>()
      for (const o of outcomes) {
        switch (o.kind) {
          case 'succeeded':
            this.d.succeeded.run(o.at, o.statusCode, o.durationMs, opts.now, o.id)
            succeeded.set(o.webhookId, o.at)
            break
          case 'retry':
            this.d.retry.run(o.nextAttemptAt, o.at, o.statusCode ?? null, o.error, o.durationMs, opts.now, o.id)
            failing.set(o.webhookId, Math.min(o.at, failing.get(o.webhookId) ?? o.at))
            break
          case 'failed':
            this.d.failed.run(o.at, o.statusCode ?? null, o.error, o.durationMs, opts.now, o.id)
            failing.set(o.webhookId, Math.min(o.at, failing.get(o.webhookId) ?? o.at))
            break
          case 'gone':
            this.d.failed.run(o.at, o.statusCode, 'receiver answered 410 Gone: webhook disabled', o.durationMs, opts.now, o.id)
            gone.add(o.webhookId)
            break
          case 'deferred':
            this.d.deferred.run(o.nextAttemptAt, o.id)
            break
          case 'parked':
            this.d.park.run(o.owner, o.leaseUntil, o.id)
            break
        }
      }
      const disable = new Set(gone)
      for (const [hook, at] of succeeded) this.d.hookSuccess.run(at, hook)
      for (const [hook, at] of failing) {
        if (succeeded.has(hook)) continue
        const row = this.d.hookFailure.get(at, hook) as Row | undefined
        if (row && row.status === 'enabled' && opts.now - row.failing_since >= opts.autoDisableMs) disable.add(hook)
      }
      for (const hook of disable) {
        if (this.d.disableHook.run(new Date(opts.now).toISOString(), hook).changes === 1) {
          this.d.cancelForHook.run(gone.has(hook) ? 'webhook disabled: receiver answered 410 Gone' : 'webhook auto-disabled after failing for too long', opts.now, hook)
        }
      }
    }, ENGINE)
  }

  async listDeliveries (accountId: string, webhookId: string, opts: { status?: DeliveryStatus; limit: number; cursor?: string }): Promise<DeliveryPage> {
    const before = opts.cursor !== undefined ? decodeCursor(opts.cursor) : 'dlv_~'
    if (before === null || opts.limit < 1) return { items: [], nextCursor: null }
    const status = opts.status ?? null
    const rows = this.d.page.all(accountId, webhookId, status, status, before, opts.limit + 1) as Row[]
    const items = rows.slice(0, opts.limit).map(toRecord)
    return { items, nextCursor: rows.length > opts.limit ? encodeCursor(items.at(-1)!.id) : null }
  }

  async findDelivery (accountId: string, webhookId: string, id: string): Promise<DeliveryRecord | null> {
    const row = this.d.one.get(accountId, webhookId, id) as Row | undefined
    return row ? toRecord(row) : null
  }

  retryDelivery (accountId: string, webhookId: string, id: string, now: number): Promise<DeliveryRecord | null> {
    return this.writes.run(() => {
      // A delivery in flight (leased) is left alone: its attempt is already under way.
      if (this.d.handRetry.run(now, now, accountId, webhookId, id).changes > 0) this.workHint = true
      const row = this.d.one.get(accountId, webhookId, id) as Row | undefined
      return row ? toRecord(row) : null
    })
  }

  requeueFailed (accountId: string, webhookId: string, w: { since: number; until: number }, now: number, limit: number): Promise<number> {
    return this.writes.run(() => {
      const n = this.d.requeue.run(now, now, webhookId, accountId, w.since, w.until, limit).changes
      if (n > 0) this.workHint = true
      return n
    })
  }

  async countFailed (accountId: string, webhookId: string, w: { since: number; until: number }): Promise<number> {
    return (this.d.countFailed.get(webhookId, accountId, w.since, w.until) as Row).n
  }

  insertTestDelivery (e: EventRecord, webhookId: string, id: string, now: number): Promise<DeliveryRecord> {
    return this.writes.run(() => {
      const { seq } = this.d.insertTestEvent.get(e.id, e.accountId, e.emailId, e.type, e.recipient, e.occurredAt, e.payload) as Row
      this.d.insert.run(id, e.accountId, webhookId, seq, e.id, e.type, e.emailId, Date.parse(e.occurredAt), now, null, 0, now, now)
      this.workHint = true
      return toRecord(this.d.one.get(e.accountId, webhookId, id) as Row)
    })
  }

  async deliveryStats (): Promise<DeliveryStats> {
    const counts = new Map((this.d.statusCounts.all() as Row[]).map((r) => [r.status, r.n]))
    const unrouted = this.d.unroutedCount.get() as Row
    const live = this.d.oldestLive.get() as Row
    const oldestUnrouted = unrouted.oldest ? Date.parse(unrouted.oldest) : null
    const candidates = [oldestUnrouted, live.oldest as number | null].filter((v): v is number => v !== null)
    return {
      pending: counts.get('pending') ?? 0,
      retrying: counts.get('retrying') ?? 0,
      unroutedEvents: unrouted.n,
      oldestPendingAt: candidates.length > 0 ? Math.min(...candidates) : null,
    }
  }

  pruneDeliveries (before: number, limit: number): Promise<number> {
    return this.writes.run(() => this.d.pruneDeliveries.run(before, limit).changes)
  }

  pruneEvents (before: number, limit: number): Promise<number> {
    return this.writes.run(() => this.d.pruneEvents.run(new Date(before).toISOString(), limit).changes)
  }
}
