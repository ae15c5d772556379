// The Store contract. Domain code talks to this interface only; each adapter (src/store/sqlite,
// src/store/mongo) implements all of it and passes the shared contract suite (test/contract/).
//
// Rules every adapter keeps:
// - Every method is asynchronous and every promise resolves only once the write is durable.
// - Ids and timestamps are made by the application (src/domain/ids.ts); the store never invents them.
// - Values from requests are bound as parameters, never spliced into a query.
// - "Not found" is `null` (or `false`), never an exception; exceptions mean the store itself failed.
// - Timestamps are ISO 8601 UTC strings with milliseconds.
import type { ApiKeyPermission } from '../domain/api-keys.js'
import type { EventRecord, EventType } from '../domain/events.js'
import type { Plan } from '../domain/plans.js'
import type { DeliveryStore } from './deliveries.js'
import type { EmailStore } from './emails.js'
import type { StoreHealth } from './faults.js'

export interface AccountRecord {
  id: string
  email: string
  passwordHash: string
  plan: Plan
  createdAt: string
}

export interface SessionRecord {
  tokenHash: string
  accountId: string
  createdAt: string
  expiresAt: string
}

export interface ApiKeyRecord {
  id: string
  accountId: string
  name: string
  keyHash: string
  keyPrefix: string
  createdAt: string
  lastUsedAt: string | null
  revokedAt: string | null
  /** What the key may do (src/domain/api-keys.ts decides what each permission allows). */
  permission: ApiKeyPermission
}

export type WebhookStatus = 'enabled' | 'disabled' | 'auto_disabled'

export interface WebhookRecord {
  id: string
  accountId: string
  url: string
  events: EventType[]
  secret: string
  /** The secret before the last rotation; it keeps signing beside the new one until it expires. */
  previousSecret: string | null
  previousSecretExpiresAt: string | null
  status: WebhookStatus
  createdAt: string
  updatedAt: string
}

export interface WebhookPatch {
  url?: string
  events?: EventType[]
  status?: WebhookStatus
  secret?: string
  previousSecret?: string | null
  previousSecretExpiresAt?: string | null
}

export type LimitedInsert = 'created' | 'limit_reached'

export interface Store extends DeliveryStore, EmailStore {
  readonly kind: 'sqlite' | 'mongo'

  /**
   * `listener` is called after a write that may have made work for the delivery engine (new events,
   * deliveries due now). A hint for low latency, not a guarantee: the engine polls as well, and other
   * nodes' writes are not seen here. Returns the unsubscribe function.
   */
  subscribe(listener: () => void): () => void

  /** Resolves when the store answers a trivial query; rejects when it cannot be reached. */
  ping(): Promise<void>
  /** Whether the store can take writes now (disk full, read-only, no primary…): see faults.ts. */
  readonly health: StoreHealth
  close(): Promise<void>

  // Accounts
  /** 'email_taken' when an account with this (already normalised) email exists. */
  createAccount(account: AccountRecord): Promise<'created' | 'email_taken'>
  findAccountById(id: string): Promise<AccountRecord | null>
  findAccountByEmail(email: string): Promise<AccountRecord | null>
  /** false when no such account. */
  setAccountPlan(accountId: string, plan: Plan): Promise<boolean>

  // Sessions (keyed by the hash of the token; the token itself is never stored)
  createSession(session: SessionRecord): Promise<void>
  findSession(tokenHash: string): Promise<SessionRecord | null>
  extendSession(tokenHash: string, expiresAt: string): Promise<void>
  deleteSession(tokenHash: string): Promise<void>
  /** Removes sessions that expired before `now`; returns how many. */
  deleteExpiredSessions(now: string): Promise<number>

  // API keys
  /**
   * Inserts the key unless the account already has `limit` active (unrevoked) keys. The count and the
   * insert are one atomic step: concurrent creations can never exceed the limit.
   */
  insertApiKey(key: ApiKeyRecord, limit: number): Promise<LimitedInsert>
  /** The account's keys, revoked included, newest first. */
  listApiKeys(accountId: string): Promise<ApiKeyRecord[]>
  findApiKeyByHash(keyHash: string): Promise<ApiKeyRecord | null>
  /**
   * Marks the key revoked at `at` unless it already is (the first revocation time is kept). Null when
   * the account has no such key.
   */
  revokeApiKey(accountId: string, id: string, at: string): Promise<ApiKeyRecord | null>
  /** Records last use; a later time never goes backwards. Unknown ids are ignored. */
  touchApiKeys(uses: Array<{ id: string; lastUsedAt: string }>): Promise<void>
  countActiveApiKeys(accountId: string): Promise<number>

  // Webhooks (a deleted webhook is gone from every method below)
  /** Inserts unless the account already has `limit` webhooks; atomic like insertApiKey. */
  insertWebhook(webhook: WebhookRecord, limit: number): Promise<LimitedInsert>
  /** The account's webhooks, newest first. */
  listWebhooks(accountId: string): Promise<WebhookRecord[]>
  findWebhook(accountId: string, id: string): Promise<WebhookRecord | null>
  /** Applies the patch and sets updatedAt; null when the account has no such webhook. */
  updateWebhook(accountId: string, id: string, patch: WebhookPatch, updatedAt: string): Promise<WebhookRecord | null>
  /** false when the account has no such webhook. */
  deleteWebhook(accountId: string, id: string, deletedAt: string): Promise<boolean>
  countWebhooks(accountId: string): Promise<number>
  /** Every account's webhooks by status, deleted ones left out (operators' svc_webhooks gauge). */
  countWebhooksByStatus(): Promise<Record<WebhookStatus, number>>

  // Events (the outbox read by the delivery engine)
  /** Appends events in one atomic write. Events are never changed afterwards except for routing. */
  insertEvents(events: EventRecord[]): Promise<void>
  /** The email's events in the order they were stored. */
  listEmailEvents(accountId: string, emailId: string): Promise<EventRecord[]>

  // Several nodes

  /**
   * Counts one hit on a rate-limit key in the window [windowStart, windowEnd) (ms since the epoch; the
   * caller, src/domain/rate-limits.ts, decides the windows) and returns the window's count including
   * this hit. Hits on one key and window from any number of nodes are counted atomically: N concurrent
   * hits return 1..N, each once. A hit for a later window than the newest stored starts a new count at
   * 1. A hit for an older window than the newest stored (a node whose clock
   * lags) is adapter-specific: SQLite counts it in the newest window, MongoDB in its own.
   * Not durable (an exception to the rule above): a crash may forget the last hits, which only lets a
   * key a few more requests through; in exchange a hit costs no disk flush.
   */
  hitRateLimit(hit: { key: string; windowStart: number; windowEnd: number }): Promise<number>
  /** Forgets the windows that ended at or before `now` (ms); returns how many were removed. */
  pruneRateLimits(now: number): Promise<number>
  /**
   * A number that changes when another process (another node, the CLI) commits a write to this store,
   * cheap enough to read every few milliseconds; null when the adapter has none (MongoDB: other nodes'
   * writes are found by polling). A process that does not serve the API reads it to wake its mailer and
   * engine as soon as an API process accepts a send.
   */
  externalWriteVersion(): Promise<number | null>
}
