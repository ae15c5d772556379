// The delivery engine's collections in MongoDB, keeping the contract (src/store/deliveries.ts, checked by
// test/contract/delivery-contract.ts on both adapters), its fencing rule, and the transition table
// (src/domain/delivery-transition.ts) that decides what each outcome does.
//
// Documents. `deliveries`: one per (event, webhook), `_id` = deliveryId(eventId, webhookId), so the same
// routing done twice (a retried write, a router that crashed half way, two nodes) upserts the same
// documents and never makes a second delivery. Times are numbers (ms). `nextAttemptAt` is present exactly
// while the delivery is live (pending / retrying): when it is due, or while it is leased, when its lease
// expires; it is removed ($unset) when the delivery becomes final, so the sparse due index only ever
// holds live deliveries. `leaseOwner` is present only while leased, `parked: true` only while parked.
// `lease` is the lease token (an integer; absent means 0): every claim increments it and hands it out,
// every outcome that ends a lease increments it again, and every outcome's filter names it, so a stale
// outcome matches nothing.
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
//   leased to the caller under token 1 (parked, if their webhook is saturated), (3) mark the events
//   routed (only those still carrying our token). A crash after (1) leaves events claimed until the
//   expiry, then any node routes them. A crash after (2) leaves some deliveries already inserted (leased
//   to the dead node: due again when that lease expires) and the events unrouted: re-routing upserts the
//   same ids, inserts only the missing ones and hands out only what it inserted. Worst case: a delivery
//   is attempted a little later, never twice made, never lost. Unlike SQLite, the webhooks are read a
//   moment before the deliveries are written: a webhook disabled or deleted in that moment may still get
//   the delivery it was read for (attempted once, at most; its next claim cancels it).
// - Claiming (and unparking): read due (parked) deliveries, then lease each one with a conditional update
//   on the values read ({_id, nextAttemptAt, lease}) that increments the token; a claim that lost the
//   race to another node matches nothing. When every update matched (the usual case) that is the whole
//   claim; otherwise the claim reads back which ones it won, and reads the next due page again (at most
//   three rounds), so nodes that raced for the same first page do not come back empty-handed. A crash
//   after the lease writes leaves leases nobody renews: they expire and the deliveries are due again.
// - Outcomes: the deliveries (one ordered bulkWrite of conditional single-document updates, each naming
//   its token), then the webhooks' health (decided by src/domain/webhook-health.ts from the outcomes that
//   applied; stored with a compare-and-set on the fields it was decided from), then the cancellation of a
//   disabled webhook's live deliveries. If the bulkWrite stops half way, the engine writes the batch
//   again: what applied already is stale the second time (its token moved on), the rest applies. A crash
//   after it delays the health change to the next outcome of that webhook; a webhook disabled whose
//   deliveries were not yet cancelled gets them cancelled by the next claim (claims never hand out a
//   delivery whose webhook is not enabled).
// - Test deliveries: the event (inserted already routed), then its delivery. A crash in between leaves
//   an orphan test event, which pruneEvents removes in time; the caller saw an error and may send again.
// - Pruning: deletes re-check their conditions in the delete filter itself.
//
// Query safety, as in index.ts: every value from a caller passes through String()/Number() before it
// reaches a filter or an update, documents are built here field by field, and values inside update
// pipelines are wrapped in $literal (a string starting with '$' is a field path there).
import { randomUUID } from 'node:crypto'
import type { AnyBulkWriteOperation, Collection, Db, Filter } from 'mongodb'
import pRetry from 'p-retry'
import type { EventType } from '../../domain/events.js'
import { deliveryId } from '../../domain/ids.js'
import { transition } from '../../domain/delivery-transition.js'
import { CANCEL_REASONS, appliedAttempts, cancelReasonFor, type CancelReason } from '../../domain/webhook-health.js'
import type { DeliveryOutcome, DeliveryStore, DeliveryWork, LeaseRequest } from '../deliveries.js'
import type { EventDoc } from './documents.js'
import { MongoDeliveryLog } from './delivery-log.js'
import { compileStoredFilter, emailTagsOf, filterAccepts, receivedFacts, routeFacts, sentEmailFacts, type CompiledFilter, type EmailFacts } from '../../domain/webhook-filter.js'
import { storeWebhookHealth } from './webhook-health.js'
import {
  CLAIM_PROJECTION, CLAIM_ROUNDS, HOOK_PROJECTION, LIVE, RENEW_CHUNK, count, liveSecrets, outcomeSet, tokenIs, tokenOf, upsertedIndexes, type ClaimDoc, type DeliveryDoc, type HookDoc,
} from './delivery-docs.js'

export type { DeliveryDoc }

export abstract class MongoDeliveries extends MongoDeliveryLog implements DeliveryStore {
  private readonly hookDocs: Collection<HookDoc>

  constructor (db: Db) {
    super(db)
    this.hookDocs = db.collection<HookDoc>('webhooks')
  }

  /** The delivery engine's indexes; idempotent. Called by MongoStore.ensureIndexes. */
  protected async ensureDeliveryIndexes (): Promise<void> {
    await Promise.all([
      this.deliveries.createIndexes([
        // Due work: only live deliveries have nextAttemptAt, so the sparse index holds only them.
        { key: { nextAttemptAt: 1 }, name: 'deliveries_due', sparse: true },
        { key: { webhookId: 1, nextAttemptAt: 1 }, name: 'deliveries_webhook_due' },
        { key: { webhookId: 1, _id: -1 }, name: 'deliveries_webhook' },
        { key: { leaseOwner: 1 }, name: 'deliveries_leases', sparse: true },
        // unparkDeliveries: one owner's parked deliveries of one webhook, oldest first; only parked ones are in it.
        { key: { webhookId: 1, leaseOwner: 1, nextAttemptAt: 1 }, name: 'deliveries_parked', partialFilterExpression: { parked: true } },
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
   * Cancels a webhook's live deliveries (it was disabled or deleted). The tokens stay, so attempts in
   * flight still record themselves. Idempotent, so it is tried a few times; a failure after that is
   * thrown to the caller (until it succeeds, claims cancel these deliveries instead of handing them out).
   */
  protected async cancelPendingFor (webhookId: string, reason: CancelReason, now: number): Promise<void> {
    await pRetry(() => this.deliveries.updateMany({ webhookId: String(webhookId), status: { $in: LIVE } }, {
      $set: { status: 'cancelled', lastError: String(reason), updatedAt: Number(now) },
      $unset: { nextAttemptAt: '', leaseOwner: '', parked: '' },
    }), { retries: 3, minTimeout: 50, maxTimeout: 500 })
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
    // Filters made into sets once per call; the emails they need read in one query per collection.
    const filters = new Map<string, CompiledFilter | null>(hooks.map((h) => [h._id, compileStoredFilter(h.filter)]))
    const facts = await this.factsFor(events.filter((e) => (hooksOf.get(e.accountId) ?? []).some((h) => filters.get(h._id) !== null && h.events.includes(e.type))))

    const saturated = new Set((req.saturated ?? []).map(String))
    // Per op: the work it hands out when it inserts, or null for a parked delivery (made, not handed out).
    const planned: Array<DeliveryWork | null> = []
    const ops: AnyBulkWriteOperation<DeliveryDoc>[] = []
    for (const e of events) {
      const eventAt = Date.parse(e.occurredAt)
      for (const h of hooksOf.get(e.accountId) ?? []) {
        if (!h.events.includes(e.type)) continue
        const filter = filters.get(h._id) ?? null
        if (filter !== null && !filterAccepts(filter, facts.get(e.emailId) ?? null)) continue
        const id = deliveryId(e._id, h._id)
        const parked = saturated.has(h._id)
        ops.push({
          updateOne: {
            filter: { _id: id },
            update: {
              $setOnInsert: {
                accountId: e.accountId, webhookId: h._id, eventId: e._id, eventType: e.type, emailId: e.emailId, eventAt,
                status: 'pending', attempts: 0, nextAttemptAt: leaseUntil, leaseOwner: owner, lease: 1, ...(parked ? { parked: true as const } : {}),
                lastAttemptAt: null, lastStatusCode: null, lastError: null, lastDurationMs: null, createdAt: now, updatedAt: now,
              },
            },
            upsert: true,
          },
        })
        planned.push(parked ? null : {
          id, webhookId: h._id, url: h.url, secrets: liveSecrets(h, now), event: e.type as EventType, payload: e.payload, attempts: 0, pushbacks: 0, eventAt, lease: 1,
          rateLimit: h.rateLimit ?? null,
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

    return { events: events.length, work: planned.filter((w, i): w is DeliveryWork => w !== null && inserted.has(i)) }
  }

  /**
   * What filtered webhooks need of these events' emails (src/domain/webhook-filter.ts): a sent email's
   * From domain and tags, received mail's recipients' domains; by email id, absent when there is no such
   * email. Values are ids read from the events, passed through String().
   */
  private async factsFor (events: EventDoc[]): Promise<Map<string, EmailFacts>> {
    const facts = new Map<string, EmailFacts>()
    if (events.length === 0) return facts
    // The events that carry their route (made with them) need no read; the emails of one send share theirs.
    const unknown: EventDoc[] = []
    const parsed = new Map<string, EmailFacts | null>()
    for (const e of events) {
      let carried: EmailFacts | null = null
      if (typeof e.route === 'string') {
        carried = parsed.get(e.route) ?? null
        if (!parsed.has(e.route)) parsed.set(e.route, carried = routeFacts(e.route))
      }
      if (carried !== null) facts.set(e.emailId, carried)
      else unknown.push(e)
    }
    const sent = [...new Set(unknown.filter((e) => e.type !== 'email.received' && !facts.has(e.emailId)).map((e) => String(e.emailId)))]
    const received = [...new Set(unknown.filter((e) => e.type === 'email.received').map((e) => String(e.emailId)))]
    const [emails, messages] = await Promise.all([
      sent.length === 0 ? [] : this.db.collection<{ _id: string; from: string; tags?: unknown }>('emails')
        .find({ _id: { $in: sent } }, { projection: { _id: 1, from: 1, tags: 1 } }).toArray(),
      received.length === 0 ? [] : this.db.collection<{ _id: string; recipient: string | string[] }>('received')
        .find({ _id: { $in: received } }, { projection: { _id: 1, recipient: 1 } }).toArray(),
    ])
    for (const m of emails) facts.set(m._id, sentEmailFacts(String(m.from), emailTagsOf(m.tags)))
    for (const m of messages) facts.set(m._id, receivedFacts((Array.isArray(m.recipient) ? m.recipient : [m.recipient]).map(String)))
    return facts
  }

  // Leases

  async unparkDeliveries (req: { owner: string; webhookId: string; now: number; leaseUntil: number; limit: number }): Promise<DeliveryWork[]> {
    const owner = String(req.owner)
    const limit = count(req.limit)
    if (limit === 0) return []
    // Parked deliveries whose lease ran out are due for anyone (claimDeliveries); until then only their owner takes them back.
    const filter: Filter<DeliveryDoc> = { webhookId: String(req.webhookId), leaseOwner: owner, parked: true, status: { $in: LIVE } }
    return await this.leaseRounds(filter, { owner, now: Number(req.now), leaseUntil: Number(req.leaseUntil), limit }, { leaseOwner: owner, parked: true })
  }

  async claimDeliveries (req: LeaseRequest & { webhookId?: string }): Promise<DeliveryWork[]> {
    const limit = count(req.limit)
    if (limit === 0) return []
    const now = Number(req.now)
    const filter: Filter<DeliveryDoc> = { nextAttemptAt: { $lte: now }, status: { $in: LIVE } }
    if (req.webhookId !== undefined) filter.webhookId = String(req.webhookId)
    return await this.leaseRounds(filter, { owner: String(req.owner), now, leaseUntil: Number(req.leaseUntil), limit }, {})
  }

  /**
   * Reads up to `limit` deliveries matching `filter` (earliest first) and leases them with a fresh token,
   * each by a compare-and-set on what was read (plus `cas`), cancelling those whose webhook may no longer
   * be called. Reads again when other nodes won part of a page, CLAIM_ROUNDS times at most.
   */
  private async leaseRounds (
    filter: Filter<DeliveryDoc>, req: { owner: string; now: number; leaseUntil: number; limit: number }, cas: Filter<DeliveryDoc>,
  ): Promise<DeliveryWork[]> {
    const { owner, now, leaseUntil } = req
    const won: DeliveryWork[] = []
    const hookById = new Map<string, HookDoc>()
    const payloadOf = new Map<string, string>()
    for (let round = 0; round < CLAIM_ROUNDS && won.length < req.limit; round++) {
      const due = await this.deliveries.find(filter, { projection: CLAIM_PROJECTION, sort: { nextAttemptAt: 1 }, limit: req.limit - won.length })
        .toArray() as ClaimDoc[]
      if (due.length === 0) break
      const hookIds = [...new Set(due.map((d) => d.webhookId))].filter((id) => !hookById.has(id))
      const eventIds = [...new Set(due.map((d) => d.eventId))].filter((id) => !payloadOf.has(id))
      const [hooks, events] = await Promise.all([
        hookIds.length > 0 ? this.hookDocs.find({ _id: { $in: hookIds } }, { projection: HOOK_PROJECTION }).toArray() : [],
        eventIds.length > 0 ? this.eventQueue.find({ _id: { $in: eventIds } }, { projection: { _id: 1, payload: 1 } }).toArray() : [],
      ])
      for (const h of hooks) hookById.set(h._id, h)
      for (const e of events) payloadOf.set(e._id, e.payload)

      const ops: AnyBulkWriteOperation<DeliveryDoc>[] = []
      const candidates: DeliveryWork[] = []
      for (const d of due) {
        // Compare and set on what was read: if another node leased it (or an outcome changed it) since,
        // this matches nothing.
        const read: Filter<DeliveryDoc> = { ...cas, _id: d._id, status: { $in: LIVE }, nextAttemptAt: d.nextAttemptAt!, lease: tokenIs(tokenOf(d)) }
        const hook = hookById.get(d.webhookId)
        const payload = payloadOf.get(d.eventId)
        const reason = cancelReasonFor(hook === undefined ? null : { status: hook.status, deleted: (hook.deletedAt ?? null) !== null }) ??
          (payload === undefined ? CANCEL_REASONS.eventMissing : null)
        if (reason !== null || hook === undefined || payload === undefined) {
          // Cancelled under the same token: a holder whose lease ran out mid-attempt still records it.
          ops.push({ updateOne: { filter: read, update: { $set: { status: 'cancelled', lastError: reason ?? CANCEL_REASONS.eventMissing, updatedAt: now }, $unset: { nextAttemptAt: '', leaseOwner: '', parked: '' } } } })
          continue
        }
        ops.push({ updateOne: { filter: read, update: { $set: { leaseOwner: owner, nextAttemptAt: leaseUntil }, $inc: { lease: 1 }, $unset: { parked: '' } } } })
        candidates.push({
          id: d._id, webhookId: d.webhookId, url: hook.url, secrets: liveSecrets(hook, now), event: d.eventType as EventType,
          payload, attempts: d.attempts, pushbacks: d.pushbacks ?? 0, eventAt: d.eventAt, lease: tokenOf(d) + 1, rateLimit: hook.rateLimit ?? null,
        })
      }
      const wanted = req.limit - won.length
      const r = await this.deliveries.bulkWrite(ops, { ordered: false })
      if (r.matchedCount === ops.length) {
        won.push(...candidates)
        if (due.length < wanted) break // all there was
        continue
      }
      // Another node won some of them: those that now carry this claim's owner and token are ours.
      if (candidates.length > 0) {
        const mine = new Map((await this.deliveries.find({ _id: { $in: candidates.map((w) => w.id) }, leaseOwner: owner },
          { projection: { _id: 1, lease: 1 } }).toArray()).map((d) => [d._id, tokenOf(d)]))
        won.push(...candidates.filter((w) => mine.get(w.id) === w.lease))
      }
    }
    return won
  }

  async renewLeases (owner: string, ids: readonly string[], leaseUntil: number): Promise<void> {
    const o = String(owner)
    const until = Number(leaseUntil)
    for (let i = 0; i < ids.length; i += RENEW_CHUNK) {
      const chunk = ids.slice(i, i + RENEW_CHUNK).map(String)
      // Not parked ones: a parked delivery its actor never comes back for runs out and is due for anyone.
      await this.deliveries.updateMany({ _id: { $in: chunk }, leaseOwner: o, status: { $in: LIVE }, parked: { $exists: false } },
        { $set: { nextAttemptAt: until } })
    }
  }

  async releaseLeases (owner: string, now: number): Promise<void> {
    const o = String(owner)
    await this.deliveries.updateMany({ leaseOwner: o, status: { $in: LIVE } },
      { $set: { nextAttemptAt: Number(now) }, $unset: { leaseOwner: '', parked: '' }, $inc: { lease: 1 } })
    // Final deliveries never keep a lease (every final write removes it); this only tidies after an
    // interrupted write.
    await this.deliveries.updateMany({ leaseOwner: o, status: { $nin: LIVE } }, { $unset: { leaseOwner: '', nextAttemptAt: '', parked: '' } })
  }

  // Outcomes

  async recordOutcomes (outcomes: DeliveryOutcome[], opts: { now: number; autoDisableMs: number }): Promise<{ stale: number }> {
    if (outcomes.length === 0) return { stale: 0 }
    const now = Number(opts.now)
    // Every outcome is one update of one document, conditional on its token (fencing), as a pipeline built
    // from the transition table (src/domain/delivery-transition.ts), so that one update serves a live
    // delivery and one cancelled while in flight alike. First attempts held in memory (an origin, a
    // 'leased' outcome) come only from readEvents, which this adapter does not offer: like any outcome
    // that does not apply to a stored delivery, they are stale.
    const applicable = new Set(outcomes.filter((o) => o.origin === undefined && transition('live', o.kind) !== null))
    const ops: AnyBulkWriteOperation<DeliveryDoc>[] = [...applicable].map((o) => {
      const filter: Filter<DeliveryDoc> = { _id: String(o.id), lease: tokenIs(o.lease), status: { $in: [...LIVE, 'cancelled'] } }
      return { updateOne: { filter, update: [{ $set: outcomeSet(o, now) }] } }
    })
    // Ordered: two outcomes of one delivery in a batch apply in the order given, as in SQLite.
    const r = ops.length > 0 ? await this.deliveries.bulkWrite(ops, { ordered: true }) : { matchedCount: 0 }
    let applied: boolean[] = outcomes.map((o) => applicable.has(o))
    if (r.matchedCount !== ops.length) {
      // Some were stale. Which: an outcome applied when the stored token is where it left it (one more
      // than the outcome's, or the same for a parking); a takeover since would move it further.
      const tokens = new Map((await this.deliveries.find({ _id: { $in: [...new Set(outcomes.map((o) => String(o.id)))] } },
        { projection: { _id: 1, lease: 1 } }).toArray()).map((d) => [d._id, tokenOf(d)]))
      applied = outcomes.map((o) => {
        if (!applicable.has(o)) return false
        const t = tokens.get(String(o.id))
        return t === Number(o.lease) + 1 || (o.kind === 'parked' && t === Number(o.lease))
      })
    }
    const stale = applied.filter((a) => !a).length

    const attempts = appliedAttempts(outcomes.map((o) => ({ kind: o.kind, webhookId: String(o.webhookId), ...('at' in o ? { at: o.at } : {}) })), (i) => applied[i] === true)
    if (attempts.size > 0) {
      await storeWebhookHealth(this.hookDocs, attempts, { now, autoDisableMs: Number(opts.autoDisableMs) }, (hook, reason) => this.cancelPendingFor(hook, reason, now))
    }
    return { stale }
  }
}
