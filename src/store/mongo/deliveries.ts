// The delivery engine's collections in MongoDB, with the semantics of the SQLite adapter (the reference:
// src/store/sqlite/deliveries.ts) and no multi-document transaction, so it runs on a standalone mongod,
// a replica set or a sharded cluster alike.
//
// Documents. `deliveries`: one per (event, webhook), `_id` = deliveryId(eventId, webhookId), so the same
// routing done twice (a retried write, a router that crashed half way, two nodes) upserts the same
// documents and never makes a second delivery. Times are numbers (ms). `nextAttemptAt` is present exactly
// while the delivery is live (pending / retrying): when it is due, or while it is leased, when its lease
// expires; it is removed ($unset) when the delivery becomes final, so the sparse due index only ever
// holds live deliveries. `leaseOwner` is present only while leased. `leaseToken` names the claim that
// last leased it and is the compare-and-set value of the next claim.
// `events` (made by MongoStore.insertEvents / the mail outbox, `routed: false`) gain `routingOwner` and
// `routingUntil` while a router holds them. Webhook health lives on the webhook documents as numbers:
// `failingSince` (start of the current failing streak, null when none) and `lastSuccessAt`.
//
// Atomicity: every single-document write is atomic on any deployment; what SQLite does in one
// transaction is done here as a sequence of idempotent steps, ordered so that a crash (or a lost
// connection) between two steps errs on the side of delivering at least once, never of losing a delivery:
//
// - Routing: (1) claim a batch of unrouted events (updateMany on selected _ids, conditional on "no live
//   routing claim", setting a per-call token and an expiry), (2) upsert the deliveries with $setOnInsert,
//   leased to the caller, (3) mark the events routed (only those still carrying our token). A crash after
//   (1) leaves events claimed until the expiry, then any node routes them. A crash after (2) leaves some
//   deliveries already inserted (leased to the dead node: due again when that lease expires) and the
//   events unrouted: re-routing upserts the same ids, inserts only the missing ones and hands out only
//   what it inserted. Worst case: a delivery is attempted a little later, never twice made, never lost.
//   Unlike SQLite, the webhooks are read a moment before the deliveries are written: a webhook disabled
//   or deleted in that moment may still get the delivery it was read for (attempted once, at most; its
//   next claim cancels it). Delivering to it is the safe side of that race.
// - Claiming: read due deliveries, then lease each one with a conditional update on the values read
//   ({_id, nextAttemptAt, leaseToken}); a claim that lost the race to another node matches nothing. Only
//   what this claim's token won is handed out. A crash after the lease writes leaves leases nobody
//   works on: they expire and the deliveries are due again.
// - Outcomes: the deliveries (one bulkWrite), then the webhooks' health, then an auto-disable, then the
//   cancellation of that webhook's live deliveries. A bulkWrite is not one atomic write: if it stops
//   half way, the outcomes not applied leave their deliveries leased, so they are attempted again when
//   the lease expires (at least once; receivers dedupe on X-Svc-Delivery). A crash after it delays the health change to the
//   next outcome of that webhook (its streak starts later, or a 410 is answered again and disables it
//   then); a webhook disabled whose deliveries were not yet cancelled gets them cancelled by the next
//   claim (claims never hand out a delivery whose webhook is not enabled).
// - Test deliveries: the event (inserted already routed), then its delivery. A crash in between leaves
//   an orphan test event, which pruneEvents removes in time; the caller saw an error and may send again.
// - Pruning: deletes re-check their conditions in the delete filter itself.
//
// Query safety, as in index.ts: every value from a caller passes through String()/Number() before it
// reaches a filter or an update, and documents are built here field by field.
import { randomUUID } from 'node:crypto'
import { MongoBulkWriteError, type AnyBulkWriteOperation, type Collection, type Db, type Filter } from 'mongodb'
import type { EventRecord, EventType } from '../../domain/events.js'
import { deliveryId } from '../../domain/ids.js'
import type {
  DeliveryOutcome, DeliveryPage, DeliveryRecord, DeliveryStats, DeliveryStatus, DeliveryStore, DeliveryWork, LeaseRequest,
} from '../deliveries.js'
import { eventDoc, type EventDoc, type WebhookDoc } from './documents.js'

const LIVE: string[] = ['pending', 'retrying']
const FINAL: string[] = ['succeeded', 'failed', 'cancelled']
const REQUEUABLE: string[] = ['failed', 'cancelled']

export interface DeliveryDoc {
  _id: string
  accountId: string
  webhookId: string
  eventId: string
  eventType: string
  emailId: string
  /** When the event happened (ms). */
  eventAt: number
  status: string
  attempts: number
  /** Present exactly while live: when due; while leased, the lease's expiry. */
  nextAttemptAt?: number
  /** Present only while leased. */
  leaseOwner?: string
  /** The claim (or routing) that last leased it; compared and set by the next claim. */
  leaseToken?: string
  lastAttemptAt: number | null
  lastStatusCode: number | null
  lastError: string | null
  lastDurationMs: number | null
  createdAt: number
  updatedAt: number
}


/** A webhook document with its health fields (absent on webhooks that never had an outcome). */
interface HookDoc extends WebhookDoc {
  failingSince?: number | null
  lastSuccessAt?: number | null
}

type HookForWork = Pick<HookDoc, '_id' | 'url' | 'secret' | 'previousSecret' | 'previousSecretExpiresAt'>

function iso (ms: number | null | undefined): string | null {
  return ms === null || ms === undefined ? null : new Date(ms).toISOString()
}

/** A count from a caller: a whole number, at least 0 (a Mongo limit of 0 would mean "no limit"). */
function count (n: number): number {
  const v = Math.floor(Number(n))
  return Number.isFinite(v) && v > 0 ? v : 0
}

function toRecord (d: DeliveryDoc): DeliveryRecord {
  const live = LIVE.includes(d.status)
  return {
    id: d._id,
    webhookId: d.webhookId,
    eventId: d.eventId,
    event: d.eventType as EventType,
    emailId: d.emailId,
    status: d.status as DeliveryStatus,
    attempts: d.attempts,
    lastAttemptAt: iso(d.lastAttemptAt),
    nextAttemptAt: live && (d.leaseOwner === undefined || d.leaseOwner === null) ? iso(d.nextAttemptAt) : null,
    lastStatusCode: d.lastStatusCode ?? null,
    lastError: d.lastError ?? null,
    lastDurationMs: d.lastDurationMs ?? null,
    createdAt: iso(d.createdAt)!,
  }
}

/** The secrets that sign now: the current one, and the previous one until its overlap ends. */
function liveSecrets (h: HookForWork, now: number): string[] {
  const secrets = [h.secret]
  if (h.previousSecret && h.previousSecretExpiresAt && Date.parse(h.previousSecretExpiresAt) > now) secrets.push(h.previousSecret)
  return secrets
}

function encodeCursor (id: string): string {
  return Buffer.from(id).toString('base64url')
}

function decodeCursor (cursor: string): string | null {
  const id = Buffer.from(String(cursor), 'base64url').toString()
  return /^dlv_[0-9a-f]{28}$/.test(id) ? id : null
}

/** The indexes of an upsert bulkWrite that inserted a document (a duplicate key means "already there"). */
async function upsertedIndexes (run: () => Promise<{ upsertedIds: Record<number, unknown> }>): Promise<Set<number>> {
  try {
    const r = await run()
    return new Set(Object.keys(r.upsertedIds).map(Number))
  } catch (err) {
    // Two upserts of the same new _id at once: one inserts, the other may fail with E11000 (servers
    // before 4.2 do not retry it). The document exists, so that op made nothing: not ours to hand out.
    if (err instanceof MongoBulkWriteError && err.err === undefined) {
      const errors = Array.isArray(err.writeErrors) ? err.writeErrors : [err.writeErrors]
      if (errors.length > 0 && errors.every((e) => e.code === 11000)) return new Set(Object.keys(err.result.upsertedIds).map(Number))
    }
    throw err
  }
}

const CLAIM_PROJECTION = { _id: 1, webhookId: 1, eventId: 1, eventType: 1, attempts: 1, eventAt: 1, nextAttemptAt: 1, leaseToken: 1 } as const
const HOOK_PROJECTION = { _id: 1, url: 1, secret: 1, previousSecret: 1, previousSecretExpiresAt: 1, status: 1, deletedAt: 1, events: 1, accountId: 1 } as const

export abstract class MongoDeliveries implements DeliveryStore {
  readonly deliveries: Collection<DeliveryDoc>
  private readonly eventQueue: Collection<EventDoc>
  private readonly hookDocs: Collection<HookDoc>

  constructor (readonly db: Db) {
    this.deliveries = db.collection<DeliveryDoc>('deliveries')
    this.eventQueue = db.collection<EventDoc>('events')
    this.hookDocs = db.collection<HookDoc>('webhooks')
  }

  /** Tells this process's listeners that there may be work (MongoStore.subscribe). */
  protected abstract hintWork (): void

  /** The delivery engine's indexes; idempotent. Called by MongoStore.ensureIndexes. */
  protected async ensureDeliveryIndexes (): Promise<void> {
    await Promise.all([
      this.deliveries.createIndexes([
        // Due work: only live deliveries have nextAttemptAt, so the sparse index holds only them.
        { key: { nextAttemptAt: 1 }, name: 'deliveries_due', sparse: true },
        { key: { webhookId: 1, nextAttemptAt: 1 }, name: 'deliveries_webhook_due' },
        { key: { webhookId: 1, _id: -1 }, name: 'deliveries_webhook' },
        { key: { leaseOwner: 1 }, name: 'deliveries_leases', sparse: true },
        { key: { eventId: 1 }, name: 'deliveries_event' },
        { key: { status: 1, updatedAt: 1 }, name: 'deliveries_status_updated' },
        { key: { status: 1, eventAt: 1 }, name: 'deliveries_status_event' },
        { key: { webhookId: 1, status: 1, createdAt: 1 }, name: 'deliveries_webhook_status_created' },
      ]),
      this.eventQueue.createIndexes([
        { key: { routed: 1, occurredAt: 1, _id: 1 }, name: 'events_routed_time' },
      ]),
    ])
  }

  /**
   * Cancels a webhook's live deliveries (it was disabled or deleted). In-flight attempts still report;
   * a success among them is recorded. Called by MongoStore after the webhook document changed: if this
   * step is lost, the next claim cancels them instead.
   */
  protected async cancelPendingFor (webhookId: string, reason: string, now: number): Promise<void> {
    await this.deliveries.updateMany({ webhookId: String(webhookId), status: { $in: LIVE } }, {
      $set: { status: 'cancelled', lastError: String(reason), updatedAt: Number(now) },
      $unset: { nextAttemptAt: '', leaseOwner: '' },
    })
  }

  // Routing

  async routeEvents (req: LeaseRequest): Promise<{ events: number; work: DeliveryWork[] }> {
    const owner = String(req.owner)
    const now = Number(req.now)
    const leaseUntil = Number(req.leaseUntil)
    const limit = count(req.limit)
    if (limit === 0) return { events: 0, work: [] }

    // (1) Claim a batch. Every call has its own token, so two calls (of one node or two) never mistake
    // each other's claims; a claim whose router died expires at `routingUntil`.
    const token = `${owner}#${randomUUID()}`
    const free: Filter<EventDoc> = { routed: false, routingUntil: { $not: { $gt: now } } }
    let events: EventDoc[] = []
    // Another router may take the batch we selected between our read and our claim; try again a little.
    for (let round = 0; round < 3 && events.length === 0; round++) {
      const candidates = await this.eventQueue.find(free, { projection: { _id: 1 }, sort: { _id: 1 }, limit }).toArray()
      if (candidates.length === 0) return { events: 0, work: [] }
      const ids = candidates.map((c) => c._id)
      await this.eventQueue.updateMany({ ...free, _id: { $in: ids } }, { $set: { routingOwner: token, routingUntil: leaseUntil } })
      events = await this.eventQueue.find({ _id: { $in: ids }, routed: false, routingOwner: token }, { sort: { _id: 1 } }).toArray()
    }
    if (events.length === 0) return { events: 0, work: [] }

    // (2) One delivery per enabled, subscribed webhook of the event's account, as the webhooks are now.
    const accountIds = [...new Set(events.map((e) => e.accountId))]
    const hooks = await this.hookDocs.find({ accountId: { $in: accountIds }, status: 'enabled', deletedAt: null },
      { projection: HOOK_PROJECTION }).toArray()
    const hooksOf = new Map<string, HookDoc[]>()
    for (const h of hooks) {
      const list = hooksOf.get(h.accountId)
      if (list) list.push(h)
      else hooksOf.set(h.accountId, [h])
    }

    const planned: DeliveryWork[] = []
    const ops: AnyBulkWriteOperation<DeliveryDoc>[] = []
    for (const e of events) {
      const eventAt = Date.parse(e.occurredAt)
      for (const h of hooksOf.get(e.accountId) ?? []) {
        if (!h.events.includes(e.type)) continue
        const id = deliveryId(e._id, h._id)
        ops.push({
          updateOne: {
            filter: { _id: id },
            update: {
              $setOnInsert: {
                accountId: e.accountId, webhookId: h._id, eventId: e._id, eventType: e.type, emailId: e.emailId, eventAt,
                status: 'pending', attempts: 0, nextAttemptAt: leaseUntil, leaseOwner: owner, leaseToken: token,
                lastAttemptAt: null, lastStatusCode: null, lastError: null, lastDurationMs: null, createdAt: now, updatedAt: now,
              },
            },
            upsert: true,
          },
        })
        planned.push({
          id, webhookId: h._id, url: h.url, secrets: liveSecrets(h, now), event: e.type as EventType, payload: e.payload, attempts: 0, eventAt,
        })
      }
    }
    // Only what this call inserted is handed out: a delivery that already existed (a crashed or slow
    // router made it) is leased to that router and comes back through claimDeliveries when its lease expires.
    const inserted = ops.length > 0
      ? await upsertedIndexes(() => this.deliveries.bulkWrite(ops, { ordered: false }))
      : new Set<number>()

    // (3) Routed. Events whose claim we lost meanwhile (it expired and another router took them) are left
    // to that router; our deliveries and its deliveries are the same documents.
    await this.eventQueue.updateMany({ _id: { $in: events.map((e) => e._id) }, routingOwner: token },
      { $set: { routed: true }, $unset: { routingOwner: '', routingUntil: '' } })

    return { events: events.length, work: planned.filter((_, i) => inserted.has(i)) }
  }

  // Leases

  /** Parking is not kept here (see recordOutcomes): paging a webhook's backlog in is claiming its due work. */
  async unparkDeliveries (req: { owner: string; webhookId: string; now: number; leaseUntil: number; limit: number }): Promise<DeliveryWork[]> {
    return this.claimDeliveries({ owner: req.owner, now: req.now, leaseUntil: req.leaseUntil, limit: req.limit, webhookId: req.webhookId })
  }

  async claimDeliveries (req: LeaseRequest & { webhookId?: string }): Promise<DeliveryWork[]> {
    const owner = String(req.owner)
    const now = Number(req.now)
    const leaseUntil = Number(req.leaseUntil)
    const limit = count(req.limit)
    if (limit === 0) return []
    const filter: Filter<DeliveryDoc> = { nextAttemptAt: { $lte: now }, status: { $in: LIVE } }
    if (req.webhookId !== undefined) filter.webhookId = String(req.webhookId)
    const due = await this.deliveries.find(filter, { projection: CLAIM_PROJECTION, sort: { nextAttemptAt: 1 }, limit }).toArray()
    if (due.length === 0) return []

    const [hooks, events] = await Promise.all([
      this.hookDocs.find({ _id: { $in: [...new Set(due.map((d) => d.webhookId))] } }, { projection: HOOK_PROJECTION }).toArray(),
      this.eventQueue.find({ _id: { $in: [...new Set(due.map((d) => d.eventId))] } }, { projection: { _id: 1, payload: 1 } }).toArray(),
    ])
    const hookById = new Map(hooks.map((h) => [h._id, h]))
    const payloadOf = new Map(events.map((e) => [e._id, e.payload]))

    const token = `${owner}#${randomUUID()}`
    const ops: AnyBulkWriteOperation<DeliveryDoc>[] = []
    const candidates: DeliveryWork[] = []
    for (const d of due) {
      // Compare and set on what was read: if another node leased it (or an outcome changed it) since,
      // this matches nothing.
      const unchanged: Filter<DeliveryDoc> = {
        _id: d._id, status: { $in: LIVE }, nextAttemptAt: d.nextAttemptAt!,
        leaseToken: d.leaseToken === undefined || d.leaseToken === null ? { $exists: false } : d.leaseToken,
      }
      const hook = hookById.get(d.webhookId)
      const payload = payloadOf.get(d.eventId)
      const deleted = hook === undefined || (hook.deletedAt ?? null) !== null
      if (hook === undefined || deleted || hook.status !== 'enabled' || payload === undefined) {
        const reason = deleted ? 'webhook deleted' : hook.status !== 'enabled' ? 'webhook disabled' : 'event no longer stored'
        ops.push({ updateOne: { filter: unchanged, update: { $set: { status: 'cancelled', lastError: reason, updatedAt: now }, $unset: { nextAttemptAt: '', leaseOwner: '' } } } })
        continue
      }
      ops.push({ updateOne: { filter: unchanged, update: { $set: { leaseOwner: owner, leaseToken: token, nextAttemptAt: leaseUntil } } } })
      candidates.push({
        id: d._id, webhookId: d.webhookId, url: hook.url, secrets: liveSecrets(hook, now), event: d.eventType as EventType,
        payload, attempts: d.attempts, eventAt: d.eventAt,
      })
    }
    await this.deliveries.bulkWrite(ops, { ordered: false })
    if (candidates.length === 0) return []
    // What this claim won: the deliveries that now carry its token.
    const won = new Set((await this.deliveries.find({ _id: { $in: candidates.map((w) => w.id) }, leaseToken: token },
      { projection: { _id: 1 } }).toArray()).map((d) => d._id))
    return candidates.filter((w) => won.has(w.id))
  }

  async renewLeases (owner: string, leaseUntil: number): Promise<void> {
    await this.deliveries.updateMany({ leaseOwner: String(owner), status: { $in: LIVE } }, { $set: { nextAttemptAt: Number(leaseUntil) } })
  }

  async releaseLeases (owner: string, now: number): Promise<void> {
    const o = String(owner)
    await this.deliveries.updateMany({ leaseOwner: o, status: { $in: LIVE } }, { $set: { nextAttemptAt: Number(now) }, $unset: { leaseOwner: '' } })
    // Final deliveries never keep a lease (every final write removes it); this only tidies after an
    // interrupted write.
    await this.deliveries.updateMany({ leaseOwner: o, status: { $nin: LIVE } }, { $unset: { leaseOwner: '', nextAttemptAt: '' } })
  }

  // Outcomes

  async recordOutcomes (outcomes: DeliveryOutcome[], opts: { now: number; autoDisableMs: number }): Promise<void> {
    if (outcomes.length === 0) return
    const now = Number(opts.now)
    const autoDisableMs = Number(opts.autoDisableMs)
    const succeeded = new Map<string, number>()
    const failing = new Map<string, number>()
    const gone = new Set<string>()
    const ops: AnyBulkWriteOperation<DeliveryDoc>[] = []
    const live = (id: string): Filter<DeliveryDoc> => ({ _id: String(id), status: { $in: LIVE } })
    const code = (c: number | undefined): number | null => (c === undefined || c === null ? null : Number(c))

    for (const o of outcomes) {
      const hook = String(o.webhookId)
      switch (o.kind) {
        case 'succeeded': {
          const at = Number(o.at)
          // A success is recorded even for a delivery cancelled meanwhile: it did arrive.
          ops.push({ updateOne: { filter: { _id: String(o.id), status: { $in: [...LIVE, 'cancelled'] } }, update: {
            $set: { status: 'succeeded', lastAttemptAt: at, lastStatusCode: code(o.statusCode), lastError: null, lastDurationMs: Number(o.durationMs), updatedAt: now },
            $inc: { attempts: 1 },
            $unset: { nextAttemptAt: '', leaseOwner: '' },
          } } })
          succeeded.set(hook, at)
          break
        }
        case 'retry': {
          const at = Number(o.at)
          ops.push({ updateOne: { filter: live(o.id), update: {
            $set: {
              status: 'retrying', nextAttemptAt: Number(o.nextAttemptAt), lastAttemptAt: at, lastStatusCode: code(o.statusCode),
              lastError: String(o.error), lastDurationMs: Number(o.durationMs), updatedAt: now,
            },
            $inc: { attempts: 1 },
            $unset: { leaseOwner: '' },
          } } })
          failing.set(hook, Math.min(at, failing.get(hook) ?? at))
          break
        }
        case 'failed':
        case 'gone': {
          const at = Number(o.at)
          const error = o.kind === 'gone' ? 'receiver answered 410 Gone: webhook disabled' : String(o.error)
          ops.push({ updateOne: { filter: live(o.id), update: {
            $set: { status: 'failed', lastAttemptAt: at, lastStatusCode: code(o.statusCode), lastError: error, lastDurationMs: Number(o.durationMs), updatedAt: now },
            $inc: { attempts: 1 },
            $unset: { nextAttemptAt: '', leaseOwner: '' },
          } } })
          if (o.kind === 'gone') gone.add(hook)
          else failing.set(hook, Math.min(at, failing.get(hook) ?? at))
          break
        }
        case 'deferred':
          ops.push({ updateOne: { filter: live(o.id), update: { $set: { nextAttemptAt: Number(o.nextAttemptAt) }, $unset: { leaseOwner: '' } } } })
          break
        case 'parked':
          // No parking here: the delivery goes back due at once and is claimed again by webhook.
          ops.push({ updateOne: { filter: live(o.id), update: { $set: { nextAttemptAt: Number(now) }, $unset: { leaseOwner: '' } } } })
          break
      }
    }
    // Ordered: two outcomes of one delivery in a batch apply in the order given, as in SQLite.
    await this.deliveries.bulkWrite(ops, { ordered: true })

    // Webhook health. Each step is one atomic update of one webhook document.
    const disable = new Set(gone)
    await Promise.all([...succeeded].map(([hook, at]) =>
      this.hookDocs.updateOne({ _id: hook }, { $set: { failingSince: null, lastSuccessAt: at } })))
    await Promise.all([...failing].filter(([hook]) => !succeeded.has(hook)).map(async ([hook, at]) => {
      // failingSince = failingSince ?? at, and read back, in one step.
      const h = await this.hookDocs.findOneAndUpdate({ _id: hook },
        [{ $set: { failingSince: { $ifNull: ['$failingSince', { $literal: at }] } } }],
        { returnDocument: 'after', projection: { failingSince: 1, status: 1 } })
      if (h !== null && h.status === 'enabled' && typeof h.failingSince === 'number' && now - h.failingSince >= autoDisableMs) disable.add(hook)
    }))
    await Promise.all([...disable].map(async (hook) => {
      const r = await this.hookDocs.updateOne({ _id: hook, status: 'enabled', deletedAt: null },
        { $set: { status: 'auto_disabled', updatedAt: iso(now)! } })
      // If this process stops here, the next claim cancels what this would have cancelled.
      if (r.modifiedCount === 1) {
        await this.cancelPendingFor(hook, gone.has(hook) ? 'webhook disabled: receiver answered 410 Gone' : 'webhook auto-disabled after failing for too long', now)
      }
    }))
  }

  // The delivery log

  async listDeliveries (accountId: string, webhookId: string, opts: { status?: DeliveryStatus; limit: number; cursor?: string }): Promise<DeliveryPage> {
    const before = opts.cursor !== undefined ? decodeCursor(opts.cursor) : 'dlv_~'
    const limit = count(opts.limit)
    if (before === null || limit === 0) return { items: [], nextCursor: null }
    const filter: Filter<DeliveryDoc> = { accountId: String(accountId), webhookId: String(webhookId), _id: { $lt: before } }
    if (opts.status !== undefined) filter.status = String(opts.status)
    const docs = await this.deliveries.find(filter, { sort: { _id: -1 }, limit: limit + 1 }).toArray()
    const items = docs.slice(0, limit).map(toRecord)
    return { items, nextCursor: docs.length > limit ? encodeCursor(items.at(-1)!.id) : null }
  }

  async findDelivery (accountId: string, webhookId: string, id: string): Promise<DeliveryRecord | null> {
    const doc = await this.deliveries.findOne({ _id: String(id), accountId: String(accountId), webhookId: String(webhookId) })
    return doc ? toRecord(doc) : null
  }

  async retryDelivery (accountId: string, webhookId: string, id: string, now: number): Promise<DeliveryRecord | null> {
    const filter = { _id: String(id), accountId: String(accountId), webhookId: String(webhookId) }
    const at = Number(now)
    // A delivery in flight (leased) is left alone: its attempt is already under way.
    const r = await this.deliveries.updateOne({ ...filter, leaseOwner: { $exists: false } },
      { $set: { status: 'pending', nextAttemptAt: at, updatedAt: at } })
    if (r.modifiedCount > 0) this.hintWork()
    const doc = await this.deliveries.findOne(filter)
    return doc ? toRecord(doc) : null
  }

  async requeueFailed (accountId: string, webhookId: string, w: { since: number; until: number }, now: number, limit: number): Promise<number> {
    const max = count(limit)
    const at = Number(now)
    const filter: Filter<DeliveryDoc> = {
      webhookId: String(webhookId), accountId: String(accountId), status: { $in: REQUEUABLE },
      createdAt: { $gte: Number(w.since), $lt: Number(w.until) },
    }
    let done = 0
    // Select, then update those still failed: a concurrent requeue may take some of ours, in which case
    // we look again, so that returning less than `limit` still means "nothing left".
    for (let round = 0; round < 10 && done < max; round++) {
      const wanted = max - done
      const ids = (await this.deliveries.find(filter, { projection: { _id: 1 }, limit: wanted }).toArray()).map((d) => d._id)
      if (ids.length === 0) break
      const r = await this.deliveries.updateMany({ ...filter, _id: { $in: ids } },
        { $set: { status: 'pending', nextAttemptAt: at, updatedAt: at }, $unset: { leaseOwner: '' } })
      done += r.modifiedCount
      if (r.modifiedCount === ids.length && ids.length < wanted) break // took all there was
    }
    if (done > 0) this.hintWork()
    return done
  }

  async countFailed (accountId: string, webhookId: string, w: { since: number; until: number }): Promise<number> {
    return await this.deliveries.countDocuments({
      webhookId: String(webhookId), accountId: String(accountId), status: { $in: REQUEUABLE },
      createdAt: { $gte: Number(w.since), $lt: Number(w.until) },
    })
  }

  async insertTestDelivery (e: EventRecord, webhookId: string, id: string, now: number): Promise<DeliveryRecord> {
    const at = Number(now)
    const event: EventDoc = { ...eventDoc(e), routed: true, test: true } // a test event never reaches other webhooks
    await this.eventQueue.insertOne(event)
    const doc: DeliveryDoc = {
      _id: String(id), accountId: event.accountId, webhookId: String(webhookId), eventId: event._id, eventType: event.type,
      emailId: event.emailId, eventAt: Date.parse(event.occurredAt), status: 'pending', attempts: 0, nextAttemptAt: at,
      lastAttemptAt: null, lastStatusCode: null, lastError: null, lastDurationMs: null, createdAt: at, updatedAt: at,
    }
    const { _id, ...fields } = doc
    await this.deliveries.updateOne({ _id }, { $setOnInsert: fields }, { upsert: true })
    this.hintWork()
    const stored = await this.deliveries.findOne({ _id, accountId: event.accountId, webhookId: doc.webhookId })
    return toRecord(stored ?? doc)
  }

  // Operations

  async deliveryStats (_now: number): Promise<DeliveryStats> {
    const oldestOf = async (status: string): Promise<number | null> =>
      (await this.deliveries.findOne({ status }, { sort: { eventAt: 1 }, projection: { eventAt: 1 } }))?.eventAt ?? null
    const [pending, retrying, unroutedEvents, oldestUnrouted, oldestPending, oldestRetrying] = await Promise.all([
      this.deliveries.countDocuments({ status: 'pending' }),
      this.deliveries.countDocuments({ status: 'retrying' }),
      this.eventQueue.countDocuments({ routed: false }),
      this.eventQueue.findOne({ routed: false }, { sort: { occurredAt: 1 }, projection: { occurredAt: 1 } }),
      oldestOf('pending'),
      oldestOf('retrying'),
    ])
    const candidates = [oldestUnrouted ? Date.parse(oldestUnrouted.occurredAt) : null, oldestPending, oldestRetrying]
      .filter((v): v is number => v !== null && Number.isFinite(v))
    return { pending, retrying, unroutedEvents, oldestPendingAt: candidates.length > 0 ? Math.min(...candidates) : null }
  }

  async pruneDeliveries (before: number, limit: number): Promise<number> {
    const max = count(limit)
    if (max === 0) return 0
    const filter: Filter<DeliveryDoc> = { status: { $in: FINAL }, updatedAt: { $lt: Number(before) } }
    const ids = (await this.deliveries.find(filter, { projection: { _id: 1 }, limit: max }).toArray()).map((d) => d._id)
    if (ids.length === 0) return 0
    // The filter again: a delivery requeued or retried by hand since it was read is not final any more.
    const r = await this.deliveries.deleteMany({ ...filter, _id: { $in: ids } })
    return r.deletedCount
  }

  async pruneEvents (before: number, limit: number): Promise<number> {
    const max = count(limit)
    if (max === 0) return 0
    const old = { routed: true, occurredAt: { $lt: iso(Number(before))! } }
    const page = Math.max(max, 100)
    const deletable: string[] = []
    // Oldest first, in pages, skipping events a delivery still needs, until `limit` are found or none is left.
    let after: { occurredAt: string; _id: string } | null = null
    while (deletable.length < max) {
      const keyset: Filter<EventDoc> = after === null ? old : {
        ...old,
        $or: [{ occurredAt: { $gt: after.occurredAt } }, { occurredAt: after.occurredAt, _id: { $gt: after._id } }],
      }
      const batch = await this.eventQueue.find(keyset, { projection: { _id: 1, occurredAt: 1 }, sort: { occurredAt: 1, _id: 1 }, limit: page }).toArray()
      if (batch.length === 0) break
      const ids = batch.map((e) => e._id)
      const needed = new Set((await this.deliveries.distinct('eventId', { eventId: { $in: ids } })).map(String))
      for (const id of ids) if (!needed.has(id) && deletable.length < max) deletable.push(id)
      if (batch.length < page) break
      const last = batch.at(-1)!
      after = { occurredAt: last.occurredAt, _id: last._id }
    }
    if (deletable.length === 0) return 0
    // Between the check above and this delete no delivery can appear for these events: routing makes
    // deliveries only for events not yet routed. The one exception is a test delivery, whose event is
    // inserted already routed just before the delivery; but a test event happens "now", never before
    // `before`. (Were it to happen, the claim would cancel that delivery: nothing is sent without its event.)
    const r = await this.eventQueue.deleteMany({ ...old, _id: { $in: deletable } })
    return r.deletedCount
  }
}
