// The delivery documents in MongoDB and what the adapter (deliveries.ts) builds from them: the record
// the API shows, the secrets that sign, lease tokens, and the update that applies an outcome.
import { MongoBulkWriteError, type Document, type Filter, type WriteError } from 'mongodb'
import { isoOrNull } from '../../domain/clock.js'
import { shownNextAttempt, transition, type Transition } from '../../domain/delivery-transition.js'
import type { EventType } from '../../domain/events.js'
import { GONE_ERROR } from '../../domain/webhook-health.js'
import type { DeliveryOutcome, DeliveryRecord, DeliveryStatus } from '../deliveries.js'
import type { WebhookDoc } from './documents.js'

export const LIVE: string[] = ['pending', 'retrying']
export const FINAL: string[] = ['succeeded', 'failed', 'cancelled']
export const REQUEUABLE: string[] = ['failed', 'cancelled']

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
  /** Of the attempts, those the receiver pushed back (see DeliveryWork.pushbacks); absent means 0. */
  pushbacks?: number
  /** Present exactly while live: when due; while leased, the lease's expiry. */
  nextAttemptAt?: number
  /** Present only while leased. */
  leaseOwner?: string
  /** The lease token (see the contract's Fencing); absent means 0. */
  lease?: number
  /** Present (true) only while parked: leased to `leaseOwner`, out of its memory, due when the lease expires. */
  parked?: true
  lastAttemptAt: number | null
  lastStatusCode: number | null
  lastError: string | null
  lastDurationMs: number | null
  createdAt: number
  updatedAt: number
}


/** A webhook document with its health fields (absent on webhooks that never had an outcome). */
export interface HookDoc extends WebhookDoc {
  failingSince?: number | null
  lastSuccessAt?: number | null
}

export type HookForWork = Pick<HookDoc, '_id' | 'url' | 'secret' | 'previousSecret' | 'previousSecretExpiresAt'>

/** The adapter's name for the domain's isoOrNull (the other Mongo files import it from here). */
export const iso = isoOrNull

/** A count from a caller: a whole number, at least 0 (a Mongo limit of 0 would mean "no limit"). */
export function count (n: number): number {
  const v = Math.floor(Number(n))
  return Number.isFinite(v) && v > 0 ? v : 0
}

export function toRecord (d: DeliveryDoc): DeliveryRecord {
  return {
    id: d._id,
    webhookId: d.webhookId,
    eventId: d.eventId,
    event: d.eventType as EventType,
    emailId: d.emailId,
    status: d.status as DeliveryStatus,
    attempts: d.attempts,
    lastAttemptAt: iso(d.lastAttemptAt),
    nextAttemptAt: iso(shownNextAttempt(d.status, d.leaseOwner !== undefined && d.leaseOwner !== null, d.nextAttemptAt)),
    lastStatusCode: d.lastStatusCode ?? null,
    lastError: d.lastError ?? null,
    lastDurationMs: d.lastDurationMs ?? null,
    createdAt: iso(d.createdAt)!,
  }
}

/** The secrets that sign now: the current one, and the previous one until its overlap ends. */
export function liveSecrets (h: HookForWork, now: number): string[] {
  const secrets = [h.secret]
  if (h.previousSecret && h.previousSecretExpiresAt && Date.parse(h.previousSecretExpiresAt) > now) secrets.push(h.previousSecret)
  return secrets
}

/** The indexes of an upsert bulkWrite that inserted a document (a duplicate key means "already there"). */
export async function upsertedIndexes (run: () => Promise<{ upsertedIds: Record<number, unknown> }>): Promise<Set<number>> {
  try {
    const r = await run()
    return new Set(Object.keys(r.upsertedIds).map(Number))
  } catch (err) {
    // Two upserts of the same new _id at once: one inserts, the other may fail with E11000 (servers
    // before 4.2 do not retry it). The document exists, so that op made nothing: not ours to hand out.
    if (err instanceof MongoBulkWriteError && err.err === undefined) {
      const errors = ([] as WriteError[]).concat(err.writeErrors)
      if (errors.length > 0 && errors.every((e) => e.code === 11000)) return new Set(Object.keys(err.result.upsertedIds).map(Number))
    }
    throw err
  }
}

export const CLAIM_PROJECTION = { _id: 1, webhookId: 1, eventId: 1, eventType: 1, attempts: 1, pushbacks: 1, eventAt: 1, nextAttemptAt: 1, lease: 1 } as const
/** Rounds of read-and-lease one claim makes at most when other nodes win part of what it read. */
export const CLAIM_ROUNDS = 3
/** Ids per renewal update. */
export const RENEW_CHUNK = 5000

export type ClaimDoc = Pick<DeliveryDoc, '_id' | 'webhookId' | 'eventId' | 'eventType' | 'attempts' | 'pushbacks' | 'eventAt' | 'nextAttemptAt' | 'lease'>

/** A stored token: absent is 0. */
export function tokenOf (d: { lease?: number | null }): number {
  return typeof d.lease === 'number' ? d.lease : 0
}

/** A filter on the stored token (0 also matches documents written before tokens existed). */
export function tokenIs (lease: number): Filter<DeliveryDoc>['lease'] {
  const t = Number(lease)
  return t === 0 ? { $not: { $gt: 0 } } : t
}

/** A constant inside an update pipeline (a string there could otherwise be read as a field path). */
export function lit (value: unknown): Document {
  return { $literal: value }
}

export const CANCELLED = { $eq: ['$status', 'cancelled'] }
export const NEXT_TOKEN = { $add: [{ $ifNull: ['$lease', 0] }, 1] }
export const HOOK_PROJECTION = { _id: 1, url: 1, secret: 1, previousSecret: 1, previousSecretExpiresAt: 1, status: 1, deletedAt: 1, events: 1, accountId: 1, rateLimit: 1, filter: 1 } as const

/**
 * The $set stage that applies an outcome (of a stored delivery) as the transition table says
 * (src/domain/delivery-transition.ts), live or cancelled alike: where the two rows differ, a $cond on the
 * stored status picks one.
 */
export function outcomeSet (o: DeliveryOutcome, now: number): Document {
  const code = (c: number | undefined): number | null => (c === undefined || c === null ? null : Number(c))
  const fields = (t: Transition): Record<string, unknown> => ({
    status: t.status === 'same' ? '$status' : lit(t.status),
    nextAttemptAt: t.next === null ? '$$REMOVE' : lit(Number(t.next === 'nextAttemptAt' ? (o as { nextAttemptAt: number }).nextAttemptAt : (o as { leaseUntil: number }).leaseUntil)),
    leaseOwner: t.lease === 'ended' ? '$$REMOVE' : lit(String((o as { owner: string }).owner)),
    parked: t.lease === 'parked' ? lit(true) : '$$REMOVE',
    lease: t.lease === 'ended' ? NEXT_TOKEN : { $ifNull: ['$lease', 0] },
    ...(t.attempt && 'at' in o
      ? {
          attempts: { $add: [{ $ifNull: ['$attempts', 0] }, 1] },
          ...(o.kind === 'retry' && o.pushback === true ? { pushbacks: { $add: [{ $ifNull: ['$pushbacks', 0] }, 1] } } : {}),
          lastAttemptAt: lit(Number(o.at)),
          lastStatusCode: lit(code(o.statusCode)),
          lastError: lit(o.kind === 'gone' ? GONE_ERROR : o.kind === 'succeeded' ? null : String(o.error)),
          lastDurationMs: lit(Number(o.durationMs)),
          updatedAt: lit(now),
        }
      : {}),
  })
  const live = fields(transition('live', o.kind) as Transition)
  const cancelled = fields(transition('cancelled', o.kind) as Transition)
  const set: Document = {}
  for (const key of new Set([...Object.keys(live), ...Object.keys(cancelled)])) {
    const l = key in live ? live[key] : `$${key}`
    const c = key in cancelled ? cancelled[key] : `$${key}`
    set[key] = JSON.stringify(l) === JSON.stringify(c) ? l : { $cond: [CANCELLED, c, l] }
  }
  return set
}
