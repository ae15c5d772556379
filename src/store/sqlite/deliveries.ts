// The delivery engine's tables in SQLite. Every method that changes rows runs inside the shared write
// queue, so routing, leasing and outcomes share commits with everything else.
import type Database from 'better-sqlite3'
import type { EventRecord } from '../../domain/events.js'
import { decodeDeliveryCursor as decodeCursor, deliveryId, encodeDeliveryCursor as encodeCursor } from '../../domain/ids.js'
import { OUTCOME_KINDS, firstStatus, firstTransition, type OutcomeKind } from '../../domain/delivery-transition.js'
import { appliedAttempts, cancelReasonFor, decideHealth, unchanged, type CancelReason } from '../../domain/webhook-health.js'
import type {
  DeliveryOrigin, DeliveryOutcome, DeliveryPage, DeliveryRecord, DeliveryStats, DeliveryStatus, DeliveryStore, DeliveryWork, LeaseRequest,
  RoutedThrough, RoutingPosition,
} from '../deliveries.js'
import type { WriteQueue } from './write-queue.js'
import { RecentEvents } from './recent-events.js'
import { compileStoredFilter, emailTagsOf, filterAccepts, receivedFacts, routeFacts, sentEmailFacts, type EmailFacts } from '../../domain/webhook-filter.js'
import type { ReplayRange } from '../../domain/replay.js'
import { deliveryLeaseRelease } from './leases.js'
import { ENGINE, LIVE, liveSecrets, outcomeParams, outcomeSql, rangeParams, toRecord, type Row } from './delivery-rows.js'

export abstract class SqliteDeliveries implements DeliveryStore {
  private readonly d
  /** Per outcome kind, the UPDATE built from the transition table (absent: the outcome is stale). */
  private readonly outcomeUpdates = new Map<OutcomeKind, Database.Statement>()
  private readonly listeners = new Set<() => void>()
  /** Set inside a write that makes work for the engine; listeners hear of it after the commit. */
  protected workHint = false
  /** Event rows this process just committed, for the engine's next read (./recent-events.ts). */
  protected readonly recentEvents = new RecentEvents()

  constructor (readonly db: Database.Database, protected readonly writes: WriteQueue) {
    writes.journal(this.recentEvents)
    writes.afterCommit(() => {
      if (!this.workHint) return
      this.workHint = false
      for (const listener of this.listeners) listener()
    })
    const p = (sql: string) => db.prepare(sql)
    for (const kind of OUTCOME_KINDS) {
      const sql = outcomeSql(kind)
      if (sql !== null) this.outcomeUpdates.set(kind, p(sql))
    }
    const claimColumns = `d.id, d.webhook_id, d.event_type, d.attempts, d.pushbacks, d.event_at, d.lease, e.payload, w.url, w.secret,
      w.previous_secret, w.previous_secret_expires_at, w.status AS webhook_status, w.deleted_at, w.rate_limit`
    // Events up to here are routed (see migration 5).
    const CURSOR = '(SELECT routed_through FROM routing WHERE id = 1)'
    const claimFrom = `FROM deliveries d JOIN events e ON e.seq = d.event_seq JOIN webhooks w ON w.id = d.webhook_id`
    this.d = {
      routingRow: p('SELECT routed_through, router_owner, router_until, router_token FROM routing WHERE id = 1'),
      takeRouting: p(`UPDATE routing SET router_owner = ?, router_until = ?, router_token = router_token + 1
                      WHERE id = 1 AND router_token = ? RETURNING router_token, routed_through`),
      renewRouting: p('UPDATE routing SET router_until = ? WHERE id = 1 AND router_owner = ? AND router_token = ?'),
      advanceRouting: p('UPDATE routing SET routed_through = max(routed_through, ?) WHERE id = 1 AND router_owner = ? AND router_token = ?'),
      lastStoredSeq: p('SELECT coalesce(max(event_seq), 0) AS seq FROM deliveries'),
      eventsAfter: p(`SELECT seq, id, account_id, email_id, type, occurred_at, payload, route FROM events
                      WHERE seq > ? AND routed = 0 ORDER BY seq LIMIT ?`),
      anyAfter: p('SELECT 1 FROM events WHERE seq > ? AND routed = 0 LIMIT 1'),
      stored: p('SELECT 1 FROM deliveries WHERE id = ?'),
      // A first attempt's row, made with its outcome (written once).
      insertWritten: p(`INSERT OR IGNORE INTO deliveries (id, account_id, webhook_id, event_seq, event_id, event_type, email_id, event_at,
                          status, attempts, pushbacks, next_attempt_at, lease_owner, parked, lease, last_attempt_at, last_status_code, last_error,
                          last_duration_ms, created_at, updated_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)`),
      unrouted: p(`SELECT seq, id, account_id, email_id, type, occurred_at, payload, route FROM events
                   WHERE seq > ${CURSOR} AND routed = 0 ORDER BY seq LIMIT ?`),
      anyUnrouted: p(`SELECT 1 FROM events WHERE seq > ${CURSOR} AND routed = 0 LIMIT 1`),
      anyDue: p(`SELECT 1 FROM deliveries WHERE ${LIVE} AND next_attempt_at <= ? LIMIT 1`),
      markRouted: p('UPDATE routing SET routed_through = max(routed_through, ?) WHERE id = 1'),
      enabledHooks: p(`SELECT id, url, events, secret, previous_secret, previous_secret_expires_at, rate_limit, route_filter FROM webhooks
                       WHERE account_id = ? AND status = 'enabled' AND deleted_at IS NULL`),
      // What a filtered webhook's routing needs of an event's email (src/domain/webhook-filter.ts).
      emailFacts: p('SELECT from_address, tags FROM emails WHERE id = ?'),
      receivedRecipients: p('SELECT recipient FROM received_recipients WHERE received_id = ? LIMIT 1000'),
      insert: p(`INSERT OR IGNORE INTO deliveries (id, account_id, webhook_id, event_seq, event_id, event_type, email_id, event_at,
                   status, attempts, next_attempt_at, lease_owner, parked, lease, created_at, updated_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?, ?)`),
      due: p(`SELECT ${claimColumns} ${claimFrom} WHERE d.${LIVE} AND d.next_attempt_at <= ? ORDER BY d.next_attempt_at LIMIT ?`),
      parkedFor: p(`SELECT ${claimColumns} ${claimFrom}
                    WHERE d.webhook_id = ? AND d.lease_owner = ? AND d.parked = 1 AND d.${LIVE} ORDER BY d.next_attempt_at LIMIT ?`),
      dueForWebhook: p(`SELECT ${claimColumns} ${claimFrom}
                        WHERE d.webhook_id = ? AND d.${LIVE} AND d.next_attempt_at <= ? ORDER BY d.next_attempt_at LIMIT ?`),
      // A claim: a fresh token (see Fencing in ../deliveries.ts).
      lease: p(`UPDATE deliveries SET lease_owner = ?, next_attempt_at = ?, parked = 0, lease = lease + 1 WHERE id = ? RETURNING lease`),
      // Cancelling keeps the token: an attempt in flight still records itself (see ../deliveries.ts).
      cancel: p(`UPDATE deliveries SET status = 'cancelled', next_attempt_at = NULL, lease_owner = NULL, parked = 0, last_error = ?, updated_at = ?
                 WHERE id = ? AND ${LIVE}`),
      // Only the listed deliveries, and not parked ones: if their actor never pages them back in, the lease
      // runs out and they are due for any claim, so nothing can stay parked for ever.
      renew: p(`UPDATE deliveries SET next_attempt_at = ?
                WHERE id IN (SELECT value FROM json_each(?)) AND lease_owner = ? AND parked = 0 AND ${LIVE}`),
      release: deliveryLeaseRelease(db, 'owner'),

      // Re-drive (see redriveDeliveries): what waits for a later time is due now; leased and parked work is not touched.
      redrive: p(`UPDATE deliveries SET next_attempt_at = ? WHERE webhook_id = ? AND ${LIVE} AND next_attempt_at > ? AND lease_owner IS NULL`),
      hookHealth: p('SELECT status, deleted_at, failing_since FROM webhooks WHERE id = ?'),
      hookFailing: p('UPDATE webhooks SET failing_since = ? WHERE id = ?'),
      hookSuccess: p('UPDATE webhooks SET last_success_at = max(coalesce(last_success_at, 0), ?) WHERE id = ?'),
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
      // Replay: a range of event times is a range of delivery ids (src/domain/replay.ts), read on deliveries_webhook
      // alone when every type is asked for; the account is checked once, on the webhook (its ids are global).
      countInRange: p(`SELECT count(*) AS n FROM deliveries WHERE webhook_id = @webhook AND id >= @from AND id < @to
                         AND (@types IS NULL OR event_type IN (SELECT value FROM json_each(@types)))
                         AND EXISTS (SELECT 1 FROM webhooks WHERE id = @webhook AND account_id = @account)`),
      replayIds: p(`SELECT id FROM deliveries WHERE webhook_id = @webhook AND id > @after AND id < @to
                      AND (@types IS NULL OR event_type IN (SELECT value FROM json_each(@types)))
                      AND EXISTS (SELECT 1 FROM webhooks WHERE id = @webhook AND account_id = @account)
                    ORDER BY id LIMIT @limit`),
      replayFinal: p(`UPDATE deliveries SET status = 'pending', next_attempt_at = @now, lease_owner = NULL, parked = 0, updated_at = @now
                      WHERE id IN (SELECT value FROM json_each(@ids)) AND status IN ('succeeded', 'failed', 'cancelled')`),
      replayWaiting: p(`UPDATE deliveries SET next_attempt_at = @now
                        WHERE id IN (SELECT value FROM json_each(@ids)) AND ${LIVE} AND lease_owner IS NULL AND next_attempt_at > @now`),
      liveInRange: p(`SELECT 1 FROM deliveries WHERE webhook_id = @webhook AND id >= @from AND id < @to AND ${LIVE}
                        AND (@types IS NULL OR event_type IN (SELECT value FROM json_each(@types))) LIMIT 1`),
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

  /** Cancels a webhook's live deliveries; call inside a write. In-flight attempts still report (their token stays). */
  protected cancelPendingFor (webhookId: string, reason: CancelReason, now: number): void {
    this.d.cancelForHook.run(reason, now, webhookId)
  }

  subscribe (listener: () => void): () => void {
    this.listeners.add(listener)
    return () => {
      this.listeners.delete(listener)
      if (this.listeners.size === 0) this.recentEvents.clear()
    }
  }

  /** Whether an engine in this process reads the events: only then are new ones held for it. */
  protected get engineListening (): boolean {
    return this.listeners.size > 0
  }

  routeEvents (req: LeaseRequest): Promise<{ events: number; work: DeliveryWork[] }> {
    // A plain read first: most calls find nothing, and those should not take the write lock.
    if (this.d.anyUnrouted.get() === undefined) return Promise.resolve({ events: 0, work: [] })
    // Not fsynced: after a power cut an event is routed again, to the same delivery ids (deliveryId()).
    return this.writes.run(() => {
      const events = this.d.unrouted.all(req.limit) as Row[]
      if (events.length === 0) return { events: 0, work: [] }
      const hooksOf = new Map<string, Row[]>()
      const facts = new Map<string, EmailFacts | null>()
      const work: DeliveryWork[] = []
      const saturated = new Set(req.saturated)
      for (const e of events) {
        const eventAt = Date.parse(e.occurred_at)
        for (const h of this.enabledHooksOf(hooksOf, e.account_id, req.now)) {
          if (!h.types.includes(e.type)) continue
          if (h.filter !== null && !filterAccepts(h.filter, this.factsOf(facts, e))) continue
          const id = deliveryId(e.id, h.id)
          // The first claim of a new delivery: token 1. A saturated webhook's new deliveries are parked.
          const parked = saturated.has(h.id)
          const made = this.d.insert.run(id, e.account_id, h.id, e.seq, e.id, e.type, e.email_id, eventAt, req.leaseUntil, req.owner, parked ? 1 : 0, 1, req.now, req.now)
          if (parked || made.changes === 0) continue
          work.push({ id, webhookId: h.id, url: h.url, secrets: h.secrets, event: e.type, payload: e.payload, attempts: 0, pushbacks: 0, eventAt, lease: 1, rateLimit: h.rate_limit ?? null })
        }
      }
      this.d.markRouted.run(events.at(-1)!.seq)
      return { events: events.length, work }
    }, ENGINE)
  }

  readEvents (req: LeaseRequest & { routing?: RoutingPosition }): Promise<{ events: number; work: DeliveryWork[]; routing: RoutingPosition | null }> {
    const held = (r: Row) => req.routing !== undefined && r.router_owner === req.owner && r.router_token === req.routing.token && r.router_until > req.now
    const heldByAnother = (r: Row) => r.router_owner !== null && r.router_owner !== req.owner && r.router_until > req.now
    const before = this.d.routingRow.get() as Row
    if (held(before)) {
      // The usual call: a plain read of what is committed, outside the write queue (no write, so no wait
      // for the next batch and its fsync); acted on only once what it read is on disk.
      const read = this.eventsAfter(req.routing!, req)
      return read.events === 0 ? Promise.resolve(read) : this.writes.settled().then(() => read)
    }
    if (heldByAnother(before) || this.d.anyAfter.get(before.routed_through) === undefined) {
      // Another node routes; or nothing is left to read, and an idle node takes no lease.
      return Promise.resolve({ events: 0, work: [], routing: null })
    }
    // Taking the lease is a write: inside the write queue.
    return this.writes.run(() => {
      const r = this.d.routingRow.get() as Row
      if (heldByAnother(r)) return { events: 0, work: [], routing: null }
      // The lease is free, ran out, or is this caller's under a position it lost: take it (a new token), and start from the durable cursor. What the previous
      // holder stored past it (its outcomes that landed) is skipped by eventsAfter.
      const taken = this.d.takeRouting.get(req.owner, req.leaseUntil, r.router_token) as Row
      return this.eventsAfter({ token: taken.router_token, through: taken.routed_through, recheckThrough: (this.d.lastStoredSeq.get() as Row).seq }, req)
    }, ENGINE)
  }

  /**
   * The account's enabled webhooks, each with the types it subscribes to and its live secrets (one array
   * per webhook, shared by the deliveries made from it: nothing changes it), read once per call (`cache`).
   */
  private enabledHooksOf (cache: Map<string, Row[]>, accountId: string, now: number): Row[] {
    let hooks = cache.get(accountId)
    if (!hooks) {
      hooks = (this.d.enabledHooks.all(accountId) as Row[]).map((h) => ({
        ...h, types: JSON.parse(h.events) as string[], secrets: liveSecrets(h, now), filter: compileStoredFilter(h.route_filter),
      }))
      cache.set(accountId, hooks)
    }
    return hooks
  }

  /**
   * What a filtered webhook needs of an event's email: its From domain and tags (received mail: its
   * recipients' domains), once per email and routing call (`cache`); null when there is no such email.
   * The event carries them (its route: parsed once per read, the emails of one send sharing theirs); one
   * from before routes were stored, or of no sent email, is looked up. Only events that a filtered webhook
   * subscribes to get here: no filter, no work. The cache holds routes (JSON, `{…`) and email ids apart.
   */
  private factsOf (cache: Map<string, EmailFacts | null>, e: Row): EmailFacts | null {
    if (typeof e.route === 'string') {
      let carried = cache.get(e.route)
      if (carried === undefined) cache.set(e.route, carried = routeFacts(e.route))
      if (carried !== null) return carried
    }
    let facts = cache.get(e.email_id)
    if (facts === undefined) {
      if (e.type === 'email.received') {
        const rows = this.d.receivedRecipients.all(e.email_id) as Row[]
        facts = rows.length > 0 ? receivedFacts(rows.map((r) => String(r.recipient))) : null
      } else {
        const row = this.d.emailFacts.get(e.email_id) as Row | undefined
        facts = row ? sentEmailFacts(String(row.from_address), emailTagsOf(row.tags)) : null
      }
      cache.set(e.email_id, facts)
    }
    return facts
  }

  /** Up to req.limit events after `pos` and the first attempts they make (see readEvents). */
  private eventsAfter (pos: RoutingPosition, req: LeaseRequest): { events: number; work: DeliveryWork[]; routing: RoutingPosition } {
    const events = (this.recentEvents.after(pos.through, req.limit) ?? this.d.eventsAfter.all(pos.through, req.limit)) as Row[]
    if (events.length === 0) return { events: 0, work: [], routing: pos }
    const hooksOf = new Map<string, Row[]>()
    const facts = new Map<string, EmailFacts | null>()
    const work: DeliveryWork[] = []
    for (const e of events) {
      const eventAt = Date.parse(e.occurred_at)
      let origin: DeliveryOrigin | undefined
      for (const h of this.enabledHooksOf(hooksOf, e.account_id, req.now)) {
        if (!h.types.includes(e.type)) continue
        if (h.filter !== null && !filterAccepts(h.filter, this.factsOf(facts, e))) continue
        const id = deliveryId(e.id, h.id)
        if (e.seq <= pos.recheckThrough && this.d.stored.get(id) !== undefined) continue
        origin ??= { seq: e.seq, accountId: e.account_id, eventId: e.id, eventType: e.type, emailId: e.email_id, eventAt, router: pos.token, createdAt: req.now }
        work.push({ id, webhookId: h.id, url: h.url, secrets: h.secrets, event: e.type, payload: e.payload, attempts: 0, pushbacks: 0, eventAt, lease: 0, origin, rateLimit: h.rate_limit ?? null })
      }
    }
    return { events: events.length, work, routing: { ...pos, through: events.at(-1)!.seq } }
  }

  renewRouting (owner: string, token: number, leaseUntil: number): Promise<boolean> {
    return this.writes.run(() => this.d.renewRouting.run(leaseUntil, owner, token).changes === 1, ENGINE)
  }

  /** A first attempt's row, as its outcome leaves it (written once); `cancelled`: its webhook may no longer be called. */
  private writeFirst (o: DeliveryOutcome, origin: DeliveryOrigin, cancelled: CancelReason | null, now: number): number {
    const before = cancelled ? 'cancelled' : 'live'
    const t = firstTransition(before, o.kind)
    const v = outcomeParams(o, now)
    const next = t.next === 'nextAttemptAt' ? v.next : t.next === 'leaseUntil' ? v.leaseUntil : null
    return this.d.insertWritten.run(o.id, origin.accountId, o.webhookId, origin.seq, origin.eventId, origin.eventType, origin.emailId, origin.eventAt,
      firstStatus(before, t), t.attempt ? 1 : 0, t.attempt ? v.pushbacks : 0, next, t.lease === 'ended' ? null : v.owner, t.lease === 'parked' ? 1 : 0,
      v.at, v.code, t.attempt ? v.error : cancelled, v.duration, origin.createdAt, now).changes
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
      const reason = cancelReasonFor({ status: r.webhook_status, deleted: r.deleted_at !== null })
      if (reason !== null) {
        this.d.cancel.run(reason, req.now, r.id)
        continue
      }
      const { lease } = this.d.lease.get(req.owner, req.leaseUntil, r.id) as Row
      work.push({
        id: r.id, webhookId: r.webhook_id, url: r.url, secrets: liveSecrets(r, req.now), event: r.event_type,
        payload: r.payload, attempts: r.attempts, pushbacks: r.pushbacks, eventAt: r.event_at, lease, rateLimit: r.rate_limit ?? null,
      })
    }
    return work
  }

  async renewLeases (owner: string, ids: readonly string[], leaseUntil: number): Promise<void> {
    if (ids.length === 0) return
    await this.writes.run(() => this.d.renew.run(leaseUntil, JSON.stringify(ids), owner), ENGINE)
  }

  async releaseLeases (owner: string, now: number): Promise<void> {
    await this.writes.run(() => this.d.release(now, owner))
  }

  async recordOutcomes (outcomes: DeliveryOutcome[], opts: { now: number; autoDisableMs: number; routed?: RoutedThrough }): Promise<{ stale: number }> {
    if (outcomes.length === 0 && opts.routed === undefined) return { stale: 0 }
    return await this.writes.run(() => {
      let stale = 0
      const applied: boolean[] = []
      // For first attempts (written once): the routing token that holds now, and each webhook's state.
      let router: number | undefined
      const cancelled = new Map<string, CancelReason | null>()
      for (const o of outcomes) {
        let n: number
        if (o.origin !== undefined) {
          router ??= (this.d.routingRow.get() as Row).router_token as number
          if (router !== o.origin.router) {
            n = 0
          } else {
            let reason = cancelled.get(o.webhookId)
            if (reason === undefined) {
              const h = this.d.hookHealth.get(o.webhookId) as Row | undefined
              reason = cancelReasonFor(h ? { status: h.status, deleted: h.deleted_at !== null } : null)
              cancelled.set(o.webhookId, reason)
            }
            n = this.writeFirst(o, o.origin, reason, opts.now)
          }
        } else {
          // Only a first attempt held in memory is stored as `leased`: of a stored delivery it is stale.
          n = this.outcomeUpdates.get(o.kind)?.run(outcomeParams(o, opts.now)).changes ?? 0
        }
        applied.push(n > 0)
        if (n === 0) stale += 1
      }
      const attempts = appliedAttempts(outcomes, (i) => applied[i] === true)
      for (const [hook, list] of attempts) {
        const row = this.d.hookHealth.get(hook) as Row | undefined
        if (!row) continue
        const before = { status: row.status, deleted: row.deleted_at !== null, failingSince: row.failing_since ?? null }
        const decision = decideHealth(before, list, opts)
        if (decision.lastSuccessAt !== null) this.d.hookSuccess.run(decision.lastSuccessAt, hook)
        if (unchanged(before, decision)) continue
        if (decision.failingSince !== before.failingSince) this.d.hookFailing.run(decision.failingSince, hook)
        if (decision.disable !== null && this.d.disableHook.run(new Date(opts.now).toISOString(), hook).changes === 1) {
          this.d.cancelForHook.run(decision.disable, opts.now, hook)
        }
      }
      if (opts.routed !== undefined) this.d.advanceRouting.run(opts.routed.through, opts.routed.owner, opts.routed.token)
      return { stale }
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

  redriveDeliveries (webhookId: string, now: number): Promise<number> {
    return this.writes.run(() => {
      const n = this.d.redrive.run(now, webhookId, now).changes
      if (n > 0) this.workHint = true
      return n
    }, ENGINE)
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

  async countInRange (accountId: string, webhookId: string, range: ReplayRange): Promise<number> {
    return (this.d.countInRange.get(rangeParams(accountId, webhookId, range)) as Row).n
  }

  replayPage (accountId: string, webhookId: string, range: ReplayRange, after: string | null, now: number, limit: number): Promise<{ read: number; last: string | null }> {
    return this.writes.run(() => {
      const { from, ...params } = rangeParams(accountId, webhookId, range)
      // `after` is exclusive; the range's lower bound (`dlv_` + 12 time digits) is shorter than every id,
      // so "after it" starts at the first id of the range.
      const ids = this.d.replayIds.pluck().all({ ...params, after: after ?? from, limit }) as string[]
      if (ids.length === 0) return { read: 0, last: null }
      const json = JSON.stringify(ids)
      const n = this.d.replayFinal.run({ ids: json, now }).changes + this.d.replayWaiting.run({ ids: json, now }).changes
      if (n > 0) this.workHint = true
      return { read: ids.length, last: ids.at(-1)! }
    })
  }

  async anyLiveInRange (webhookId: string, range: ReplayRange): Promise<boolean> {
    const { account: _account, ...params } = rangeParams('', webhookId, range)
    return this.d.liveInRange.get(params) !== undefined
  }

  insertTestDelivery (e: EventRecord, webhookId: string, id: string, now: number): Promise<DeliveryRecord> {
    return this.writes.run(() => {
      const { seq } = this.d.insertTestEvent.get(e.id, e.accountId, e.emailId, e.type, e.recipient, e.occurredAt, e.payload) as Row
      this.d.insert.run(id, e.accountId, webhookId, seq, e.id, e.type, e.emailId, Date.parse(e.occurredAt), now, null, 0, 0, now, now)
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
