// The documents the MongoDB adapter keeps, and the mapping between them and the Store records.
// Ids are the application's (src/domain/ids.ts) and serve as `_id`; timestamps stay ISO strings, so
// they compare (and sort) as strings exactly as they do in SQLite. Every value written is rebuilt here
// from the record's typed fields with String(): an object smuggled into a record can never become
// query or update syntax, and nothing beyond the listed fields reaches the database.
import type { ClientSession, MongoClient } from 'mongodb'
import { DEFAULT_API_KEY_PERMISSION } from '../../domain/api-key-permissions.js'
import type { EventRecord, EventType } from '../../domain/events.js'
import type { Plan } from '../../domain/plans.js'
import type { AccountRecord, ApiKeyRecord, SessionRecord, WebhookRecord, WebhookStatus } from '../types.js'
import { readStoredFilter, withFilterAndReplay, type WebhookFilter } from '../../domain/webhook-filter.js'
import { replayStateOf, type ReplayState } from '../../domain/replay.js'

export interface AccountDoc {
  _id: string
  email: string
  passwordHash: string
  plan: string
  createdAt: string
  /**
   * The limit slots: ids of the account's active (unrevoked) API keys and of its webhooks that are not
   * deleted. A slot is taken before the record is inserted and given back after it is revoked/deleted;
   * see the MongoStore comment. May hold an id whose record is gone (a crash between two writes), never
   * lacks one whose record is active.
   */
  activeApiKeyIds: string[]
  webhookIds: string[]
  /** The account's sender domains (absent on accounts made before domains existed). */
  domainIds?: string[]
}

export interface SessionDoc {
  _id: string // tokenHash
  accountId: string
  createdAt: string
  expiresAt: string
  /** expiresAt as a Date, for the TTL index only; null when expiresAt does not parse (TTL then ignores it). */
  expiresAtDate: Date | null
}

export interface ApiKeyDoc {
  _id: string
  accountId: string
  name: string
  keyHash: string
  keyPrefix: string
  createdAt: string
  lastUsedAt: string | null
  revokedAt: string | null
  /** Absent on keys stored before permissions existed: those are DEFAULT_API_KEY_PERMISSION. */
  permission?: string
}

export interface WebhookDoc {
  _id: string
  accountId: string
  url: string
  events: string[]
  secret: string
  previousSecret: string | null
  previousSecretExpiresAt: string | null
  status: string
  /** Deliveries per second at most (rateLimit); absent or null: none. */
  rateLimit?: number | null
  /** Which emails' events it takes (src/domain/webhook-filter.ts); absent or null: all. */
  filter?: WebhookFilter | null
  /** The last replay asked of it (src/domain/replay.ts); absent or null: none. */
  replay?: ReplayState | null
  createdAt: string
  updatedAt: string
  /** Set by deleteWebhook; a webhook with deletedAt is invisible to every Store method. */
  deletedAt: string | null
}

/**
 * Runs `fn` as one multi-document transaction: all of its writes commit, or none. The driver retries it
 * whole on a transient error (a failover, a write conflict) and retries an unknown commit, so `fn` must
 * only write through the session it is given and have no other effect. Transactions need a replica set
 * (or a sharded cluster): a standalone mongod refuses them, which is why svc requires a replica set.
 * The write concern is the client's (majority, journaled by default: src/store/mongo/index.ts).
 */
export async function inTransaction<T> (client: MongoClient, fn: (session: ClientSession) => Promise<T>): Promise<T> {
  return await client.withSession(async (session) => await session.withTransaction(fn))
}

// Whatever a caller passed becomes text (an object too): never an operator in a filter.
// eslint-disable-next-line @typescript-eslint/no-base-to-string
export const nullableString = (v: unknown): string | null => (v === null || v === undefined ? null : String(v))

export function toDate (iso: string): Date | null {
  const d = new Date(iso)
  return Number.isNaN(d.getTime()) ? null : d
}

export function accountDoc (a: AccountRecord): AccountDoc {
  return {
    _id: String(a.id),
    email: String(a.email),
    passwordHash: String(a.passwordHash),
    plan: String(a.plan),
    createdAt: String(a.createdAt),
    activeApiKeyIds: [],
    webhookIds: [],
  }
}

export function toAccount (d: AccountDoc): AccountRecord {
  return { id: d._id, email: d.email, passwordHash: d.passwordHash, plan: d.plan as Plan, createdAt: d.createdAt }
}

export function sessionDoc (s: SessionRecord): SessionDoc {
  const expiresAt = String(s.expiresAt)
  return {
    _id: String(s.tokenHash),
    accountId: String(s.accountId),
    createdAt: String(s.createdAt),
    expiresAt,
    expiresAtDate: toDate(expiresAt),
  }
}

export function toSession (d: SessionDoc): SessionRecord {
  return { tokenHash: d._id, accountId: d.accountId, createdAt: d.createdAt, expiresAt: d.expiresAt }
}

export function apiKeyDoc (k: ApiKeyRecord): ApiKeyDoc {
  return {
    _id: String(k.id),
    accountId: String(k.accountId),
    name: String(k.name),
    keyHash: String(k.keyHash),
    keyPrefix: String(k.keyPrefix),
    createdAt: String(k.createdAt),
    lastUsedAt: nullableString(k.lastUsedAt),
    revokedAt: nullableString(k.revokedAt),
    permission: String(k.permission),
  }
}

export function toApiKey (d: ApiKeyDoc): ApiKeyRecord {
  return {
    id: d._id,
    accountId: d.accountId,
    name: d.name,
    keyHash: d.keyHash,
    keyPrefix: d.keyPrefix,
    createdAt: d.createdAt,
    lastUsedAt: d.lastUsedAt ?? null,
    revokedAt: d.revokedAt ?? null,
    permission: (d.permission ?? DEFAULT_API_KEY_PERMISSION) as ApiKeyRecord['permission'],
  }
}

export function webhookDoc (w: WebhookRecord): WebhookDoc {
  return {
    _id: String(w.id),
    accountId: String(w.accountId),
    url: String(w.url),
    events: Array.from(w.events, String),
    secret: String(w.secret),
    previousSecret: nullableString(w.previousSecret),
    previousSecretExpiresAt: nullableString(w.previousSecretExpiresAt),
    status: String(w.status),
    rateLimit: w.rateLimit === null || w.rateLimit === undefined ? null : Number(w.rateLimit),
    filter: filterDoc(w.filter ?? null),
    createdAt: String(w.createdAt),
    updatedAt: String(w.updatedAt),
    deletedAt: null,
  }
}

/** A webhook's filter as stored, built field by field (no value from a request is spliced as it came). */
export function filterDoc (f: WebhookFilter | null): WebhookFilter | null {
  if (f === null) return null
  return {
    domains: Array.from(f.domains, String),
    tags: Array.from(f.tags, (t) => t.value === undefined ? { name: String(t.name) } : { name: String(t.name), value: String(t.value) }),
  }
}

/** A replay's state as stored, field by field. */
export function replayDoc (r: ReplayState): ReplayState {
  return { since: String(r.since), until: String(r.until), types: r.types === null ? null : Array.from(r.types, String) as ReplayState['types'], startedAt: String(r.startedAt) }
}

export function toWebhook (d: WebhookDoc): WebhookRecord {
  return {
    id: d._id,
    accountId: d.accountId,
    url: d.url,
    events: [...d.events] as EventType[],
    secret: d.secret,
    previousSecret: d.previousSecret ?? null,
    previousSecretExpiresAt: d.previousSecretExpiresAt ?? null,
    status: d.status as WebhookStatus,
    rateLimit: typeof d.rateLimit === 'number' ? d.rateLimit : null,
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
    ...withFilterAndReplay(readStoredFilter(d.filter), replayStateOf(d.replay)),
  }
}

/** An event of the outbox. The router adds its claim (routingOwner, routingUntil) to the same document. */
export interface EventDoc {
  _id: string
  accountId: string
  emailId: string
  type: string
  recipient: string
  occurredAt: string
  payload: string
  routed: boolean
  /** What routing matches webhook filters on (EventRecord.route); absent or null when not known. */
  route?: string | null
  /** A test event (POST /api/webhooks/:id/test): no email raised it, so the stats leave it out. */
  test?: boolean
  /** The router's claim while it routes the event (src/store/mongo/deliveries.ts). */
  routingOwner?: string
  routingUntil?: number
}

export function eventDoc (e: EventRecord): EventDoc {
  return {
    _id: String(e.id),
    accountId: String(e.accountId),
    emailId: String(e.emailId),
    type: String(e.type),
    recipient: String(e.recipient),
    occurredAt: String(e.occurredAt),
    payload: String(e.payload),
    routed: false,
    ...(typeof e.route === 'string' ? { route: String(e.route) } : {}),
  }
}

export function toEvent (d: EventDoc): EventRecord {
  return {
    id: d._id, accountId: d.accountId, emailId: d.emailId, type: d.type as EventType,
    recipient: d.recipient, occurredAt: d.occurredAt, payload: d.payload,
  }
}
