// The Store contract. Domain code talks to this interface only; each adapter (src/store/sqlite,
// src/store/mongo) implements all of it and passes the shared contract suite (test/contract/).
//
// Rules every adapter keeps:
// - Every method is asynchronous and every promise resolves only once the write is durable, except where
//   a method says otherwise: the delivery engine's bookkeeping (DeliveryStore's routing, claims, leases
//   and outcomes; SQLite writes them without fsync) and the rate-limit counters may lose their last writes
//   to a power cut, which makes a delivery happen again, never disappear (see deliveries.ts).
// - Ids and timestamps are made by the application (src/domain/ids.ts); the store never invents them.
// - Values from requests are bound as parameters, never spliced into a query.
// - "Not found" is `null` (or `false`), never an exception; exceptions mean the store itself failed.
// - Timestamps in records are ISO 8601 UTC strings with milliseconds. The delivery engine's interface
//   (DeliveryStore's requests, work and outcomes) takes and gives epoch milliseconds instead; the records
//   it answers for the API (DeliveryRecord) use ISO strings like every other record.
import type { ApiKeyPermission } from '../domain/api-key-permissions.js'
import type { WebhookStatus } from '../domain/webhook-health.js'
import type { WebhookFilter } from '../domain/webhook-filter.js'
import type { ReplayState } from '../domain/replay.js'
import type { EventRecord, EventType } from '../domain/events.js'
import type { Plan } from '../domain/plans.js'
import type { DeliveryStore } from './deliveries.js'
import type { EmailRecord, EmailStore, SuppressionRecord } from './emails.js'
import type { StoreHealth } from './faults.js'
import type { ReceivedStore } from './received.js'
import type { TemplateStore } from './templates.js'

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
  /** What the key may do (src/domain/api-key-permissions.ts decides what each permission allows). */
  permission: ApiKeyPermission
}

export type { WebhookStatus }

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
  /** Deliveries per second at most, held by every node together; null (or absent) for none. */
  rateLimit?: number | null
  /** Which emails' events it takes (src/domain/webhook-filter.ts); null (or absent) for all. */
  filter?: WebhookFilter | null
  /** The last replay asked of it (src/domain/replay.ts); null (or absent) when none was. */
  replay?: ReplayState | null
  createdAt: string
  updatedAt: string
}

export interface WebhookPatch {
  url?: string
  events?: EventType[]
  status?: WebhookStatus
  rateLimit?: number | null
  filter?: WebhookFilter | null
  secret?: string
  previousSecret?: string | null
  previousSecretExpiresAt?: string | null
}

export type LimitedInsert = 'created' | 'limit_reached'

/** pending: never verified yet. verified: every required record found. failed: verified once, a record is gone since. */
export type DomainStatus = 'pending' | 'verified' | 'failed'
export type DnsRecordStatus = 'pending' | 'verified' | 'failed'
export type DnsRecordPurpose = 'dkim' | 'spf' | 'return_path' | 'dmarc' | 'receiving'

/** A sender domain (src/app/domains.ts). The DNS records shown are derived from it and the configuration. */
export interface DomainRecord {
  id: string
  accountId: string
  /** Lower-case ASCII (an IDN in punycode). */
  name: string
  /** The DKIM selector: `<selector>._domainkey.<name>`. */
  selector: string
  /** The DKIM public key, base64 of its DER SubjectPublicKeyInfo (what the TXT record's p= holds). */
  publicKey: string
  /** The DKIM private key, sealed (src/domain/secrets.ts); only the mailer opens it. */
  privateKey: string
  status: DomainStatus
  /** What the last check found for each record. */
  records: Record<DnsRecordPurpose, DnsRecordStatus>
  createdAt: string
  updatedAt: string
  lastCheckedAt: string | null
  /** When the domain last became verified; null while it never was. */
  verifiedAt: string | null
  /** Whether mail to any address at the domain is taken (src/app/received.ts). */
  receiving: boolean
  /**
   * The domain's defaults for sends from it that do not choose (src/app/emails.ts): null (or absent)
   * while never set, which means the account's default (on).
   */
  tracking?: { opens: boolean | null; clicks: boolean | null }
}

export interface DomainCheck {
  status: DomainStatus
  records: Record<DnsRecordPurpose, DnsRecordStatus>
  checkedAt: string
  verifiedAt: string | null
}

export interface Store extends DeliveryStore, EmailStore, ReceivedStore, TemplateStore {
  readonly kind: 'sqlite' | 'mongo'

  /**
   * `listener` is called after a write that may have made work for the delivery engine (new events,
   * deliveries due now). A hint for low latency, not a guarantee: the engine polls as well, and other
   * nodes' writes are not seen here. Returns the unsubscribe function.
   */
  subscribe(listener: () => void): () => void

  /** Resolves when the store answers a trivial query; rejects when it cannot be reached. */
  ping(): Promise<void>
  /**
   * Optional: `listener` hears how long each flush of the store's log to disk took, in seconds (SQLite: the
   * fdatasync of the WAL that every durable write waits for). Returns the unsubscribe function.
   */
  onDiskFlush?(listener: (seconds: number) => void): () => void
  /**
   * Optional: `listener` hears of every background compaction of the store's log (SQLite: a checkpoint of
   * the WAL in its own thread), whether it worked and how long it took. Returns the unsubscribe function.
   */
  onCheckpoint?(listener: (outcome: { ok: boolean; seconds: number }) => void): () => void
  /** Whether the store can take writes now (disk full, read-only, no primary…): see faults.ts. */
  readonly health: StoreHealth
  close(): Promise<void>

  // The check value of the secret the store was written under (src/domain/secret-check.ts decides; the
  // store only keeps it)
  /** The stored check value; null when none was stored yet. */
  secretCheck(): Promise<string | null>
  /**
   * Stores `value` unless a check value is stored already, in one atomic step (two processes starting on
   * a new store keep one value); returns the value stored now, the given one or the earlier one.
   */
  initSecretCheck(value: string): Promise<string>

  // Accounts
  /**
   * 'email_taken' when an account with this (already normalised) email exists. With `onlyIfFirst`,
   * 'not_first' when any account exists (closed signup: the first account only).
   */
  createAccount(account: AccountRecord, opts?: { onlyIfFirst?: boolean }): Promise<'created' | 'email_taken' | 'not_first'>
  findAccountById(id: string): Promise<AccountRecord | null>
  findAccountByEmail(email: string): Promise<AccountRecord | null>
  /** false when no such account. */
  setAccountPlan(accountId: string, plan: Plan): Promise<boolean>
  /** false when no such account. */
  setAccountPassword(accountId: string, passwordHash: string): Promise<boolean>

  // Sessions (keyed by the hash of the token; the token itself is never stored)
  createSession(session: SessionRecord): Promise<void>
  findSession(tokenHash: string): Promise<SessionRecord | null>
  extendSession(tokenHash: string, expiresAt: string): Promise<void>
  deleteSession(tokenHash: string): Promise<void>
  /** Ends every session of the account but `keep` (null: all of them); returns how many ended. */
  deleteAccountSessions(accountId: string, keep: string | null): Promise<number>
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
  /**
   * Optional: a number that changes (grows) with every revocation made by any process on this store, in
   * the same atomic write as the revocation, and costs one cheap read. A store that offers it lets the
   * API-key service remember keys it has checked (src/app/api-keys.ts); without it every request looks
   * its key up. A store that can read it without waiting returns the number itself.
   */
  apiKeyRevocations?(): number | Promise<number>
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
  /** Records the replay just started (leaves updatedAt alone: the webhook's settings did not change); false when no such webhook. */
  setWebhookReplay(accountId: string, id: string, replay: ReplayState): Promise<boolean>

  // Sender domains (a deleted domain is gone)
  /** Inserts unless the account already has `limit` domains ('limit_reached') or one with this name; atomic like insertApiKey. */
  insertDomain(domain: DomainRecord, limit: number): Promise<LimitedInsert | 'name_taken'>
  /** The account's domains, newest first. */
  listDomains(accountId: string): Promise<DomainRecord[]>
  findDomain(accountId: string, id: string): Promise<DomainRecord | null>
  findDomainByName(accountId: string, name: string): Promise<DomainRecord | null>
  /** Stores the result of a DNS check; null when the account has no such domain (deleted meanwhile). */
  updateDomainCheck(accountId: string, id: string, check: DomainCheck): Promise<DomainRecord | null>
  /** false when the account has no such domain. */
  deleteDomain(accountId: string, id: string): Promise<boolean>
  /** Domains of every account never checked or last checked before `before`, least recently checked first. */
  listDomainsCheckedBefore(before: string, limit: number): Promise<DomainRecord[]>
  // Receiving at a domain (the rest of received mail: ./received.ts)
  /** Turns receiving on or off; null when the account has no such domain. */
  setDomainReceiving(accountId: string, id: string, receiving: boolean, at: string): Promise<DomainRecord | null>
  /** Sets the given tracking defaults (the others stay); null when the account has no such domain. */
  setDomainTracking(accountId: string, id: string, tracking: { opens?: boolean; clicks?: boolean }, at: string): Promise<DomainRecord | null>
  /** Every account's verified domain of this name with receiving on (at most `limit`), oldest first. */
  findReceivingDomains(name: string, limit: number): Promise<DomainRecord[]>

  // Returning mail (src/mail/inbound): bounces and complaints that arrive after the relay accepted the email
  /** The email whatever its account; null when there is none. */
  findEmailById(id: string): Promise<EmailRecord | null>
  /**
   * Appends the event and adds the suppression (unless the address is already suppressed), together.
   * 'duplicate', and nothing written, when the email already has an event of this type for this recipient
   * (a report received twice, or a bounce already known from the SMTP session). A `timelineOnly` event is
   * never routed to webhooks. MongoDB: check and insert are two steps, so two copies of one report handled
   * at the same instant may both record (at least once, like every webhook event).
   */
  recordReturnedMail(input: { event: EventRecord; suppression: SuppressionRecord | null; timelineOnly: boolean }): Promise<'recorded' | 'duplicate'>

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
