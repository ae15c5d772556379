// The delivery log in MongoDB: what an account reads of its webhooks' deliveries and changes by hand
// (a retry, a re-drive, a requeue, a replay, a test delivery), and the upkeep (stats, pruning). The
// engine's side (routing, leases, outcomes) extends it in ./deliveries.ts, whose header says how the
// documents are laid out and why each multi-step write is safe to stop half way.
import type { Collection, Db, Filter } from 'mongodb'
import type { EventRecord } from '../../domain/events.js'
import { decodeDeliveryCursor as decodeCursor, encodeDeliveryCursor as encodeCursor } from '../../domain/ids.js'
import { deliveryIdAt, type ReplayRange } from '../../domain/replay.js'
import type { DeliveryPage, DeliveryRecord, DeliveryStats, DeliveryStatus } from '../deliveries.js'
import { eventDoc, type EventDoc } from './documents.js'
import { FINAL, LIVE, REQUEUABLE, count, iso, toRecord, type DeliveryDoc } from './delivery-docs.js'

export abstract class MongoDeliveryLog {
  readonly deliveries: Collection<DeliveryDoc>
  protected readonly eventQueue: Collection<EventDoc>

  constructor (readonly db: Db) {
    this.deliveries = db.collection<DeliveryDoc>('deliveries')
    this.eventQueue = db.collection<EventDoc>('events')
  }

  /** Tells this process's listeners that there may be work (MongoStore.subscribe). */
  protected abstract hintWork (): void

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

  async redriveDeliveries (webhookId: string, now: number): Promise<number> {
    const at = Number(now)
    // Waiting for a later time and not leased (leased and parked deliveries carry a leaseOwner).
    const r = await this.deliveries.updateMany(
      { webhookId: String(webhookId), status: { $in: LIVE }, nextAttemptAt: { $gt: at }, leaseOwner: { $exists: false } },
      { $set: { nextAttemptAt: at } })
    if (r.modifiedCount > 0) this.hintWork()
    return r.modifiedCount
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

  async countInRange (accountId: string, webhookId: string, range: ReplayRange): Promise<number> {
    return await this.deliveries.countDocuments(rangeFilter(accountId, webhookId, range))
  }

  async replayPage (accountId: string, webhookId: string, range: ReplayRange, after: string | null, now: number, limit: number): Promise<{ read: number; last: string | null }> {
    const at = Number(now)
    const filter = rangeFilter(accountId, webhookId, range)
    // `after` is exclusive; the range's lower bound (`dlv_` + 12 time digits) is shorter than every id.
    if (after !== null) filter._id = { $gt: String(after), $lt: deliveryIdAt(range.until) }
    const ids = (await this.deliveries.find(filter, { projection: { _id: 1 }, sort: { _id: 1 }, limit: count(limit) }).toArray()).map((d) => d._id)
    if (ids.length === 0) return { read: 0, last: null }
    // Final ones pending and due now (attempts and token kept); live ones waiting for later due now; leased ones left alone.
    const [final, waiting] = await Promise.all([
      this.deliveries.updateMany({ _id: { $in: ids }, status: { $in: FINAL } },
        { $set: { status: 'pending', nextAttemptAt: at, updatedAt: at }, $unset: { leaseOwner: '', parked: '' } }),
      this.deliveries.updateMany({ _id: { $in: ids }, status: { $in: LIVE }, leaseOwner: { $exists: false }, nextAttemptAt: { $gt: at } },
        { $set: { nextAttemptAt: at } }),
    ])
    if (final.modifiedCount + waiting.modifiedCount > 0) this.hintWork()
    return { read: ids.length, last: ids.at(-1)! }
  }

  async anyLiveInRange (webhookId: string, range: ReplayRange): Promise<boolean> {
    const { accountId: _accountId, ...filter } = rangeFilter('', webhookId, range)
    return await this.deliveries.findOne({ ...filter, status: { $in: LIVE } }, { projection: { _id: 1 } }) !== null
  }

  async insertTestDelivery (e: EventRecord, webhookId: string, id: string, now: number): Promise<DeliveryRecord> {
    const at = Number(now)
    const event: EventDoc = { ...eventDoc(e), routed: true, test: true } // a test event never reaches other webhooks
    await this.eventQueue.insertOne(event)
    const doc: DeliveryDoc = {
      _id: String(id), accountId: event.accountId, webhookId: String(webhookId), eventId: event._id, eventType: event.type,
      emailId: event.emailId, eventAt: Date.parse(event.occurredAt), status: 'pending', attempts: 0, nextAttemptAt: at, lease: 0,
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

/** A replay range as a filter: its webhook's deliveries with ids in [from, to) (src/domain/replay.ts), of its types. */
function rangeFilter (accountId: string, webhookId: string, range: ReplayRange): Filter<DeliveryDoc> {
  return {
    webhookId: String(webhookId), accountId: String(accountId),
    _id: { $gte: deliveryIdAt(range.since), $lt: deliveryIdAt(range.until) },
    ...(range.types === null ? {} : { eventType: { $in: Array.from(range.types, String) } }),
  }
}
