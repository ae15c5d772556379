import { NotFound, ValidationError, WebhookUrlNotAllowed } from '../errors.js'
import { iso, type Clock } from '../domain/clock.js'
import type { EventType } from '../domain/events.js'
import { newId } from '../domain/ids.js'
import { withinPlan } from '../domain/plan-limits.js'
import { newWebhookSecret, sealWebhookSecret } from '../domain/secrets.js'
import { checkWebhookUrl, type Resolver, type UrlPolicy } from '../domain/webhook-url.js'
import { normaliseWebhookFilter, type WebhookFilter, type WebhookFilterInput } from '../domain/webhook-filter.js'
import { normaliseDomainName } from './domains.js'
import { createReplayer, type ReplayRequest } from './replay.js'
import type { ReplayRange } from '../domain/replay.js'
import type { AccountRecord, Store, WebhookRecord, WebhookPatch } from '../store/types.js'

export interface WebhookServiceOptions {
  store: Store
  clock: Clock
  /** SVC_SECRET: signing secrets are sealed under a key derived from it before they reach the store. */
  secret: string
  urlPolicy: UrlPolicy
  resolver: Resolver
  /** Where a replay that fails in the background reports it. */
  onBackgroundError?: ((err: unknown) => void) | undefined
}

/** How long the secret before a rotation keeps signing beside the new one. */
export const ROTATION_OVERLAP_MS = 24 * 3_600_000

export interface WebhookChanges {
  url?: string | undefined
  events?: EventType[] | undefined
  status?: 'enabled' | 'disabled' | undefined
  rateLimit?: number | null | undefined
  /** null: no filter (the webhook takes every email's events). */
  filter?: WebhookFilterInput | null | undefined
}

/** The filter to store, or a 400 naming every field of it that is wrong. */
function checkedFilter (input: WebhookFilterInput | null | undefined): WebhookFilter | null {
  const checked = normaliseWebhookFilter(input, normaliseDomainName)
  if ('problems' in checked) throw ValidationError('The request is not valid', checked.problems)
  return checked.filter
}

export function createWebhookService ({ store, clock, secret, urlPolicy, resolver, onBackgroundError }: WebhookServiceOptions) {
  const replayer = createReplayer({ store, clock, onBackgroundError })

  async function allowedUrl (raw: string): Promise<string> {
    const verdict = await checkWebhookUrl(raw, urlPolicy, resolver)
    if (!verdict.ok) throw WebhookUrlNotAllowed(verdict.reason)
    return verdict.url.href
  }

  async function get (accountId: string, id: string): Promise<WebhookRecord> {
    const webhook = await store.findWebhook(accountId, id)
    if (!webhook) throw NotFound('No webhook with this id')
    return webhook
  }

  return {
    /** The new webhook, its `secret` in the clear (shown once); the store holds it sealed. */
    async create (account: AccountRecord, input: { url: string; events: EventType[]; rateLimit?: number | null | undefined; filter?: WebhookFilterInput | null | undefined }): Promise<WebhookRecord> {
      const filter = checkedFilter(input.filter)
      const url = await allowedUrl(input.url)
      const now = iso(clock.now())
      const id = newId('wh')
      const plain = newWebhookSecret()
      const record: WebhookRecord = {
        id,
        accountId: account.id,
        url,
        events: [...input.events],
        secret: sealWebhookSecret(secret, id, plain),
        previousSecret: null,
        previousSecretExpiresAt: null,
        status: 'enabled',
        rateLimit: input.rateLimit ?? null,
        filter,
        createdAt: now,
        updatedAt: now,
      }
      await withinPlan(account.plan, 'webhooks', (limit) => store.insertWebhook(record, limit))
      return { ...record, secret: plain }
    },

    list (accountId: string): Promise<WebhookRecord[]> {
      return store.listWebhooks(accountId)
    },

    get,

    async update (accountId: string, id: string, changes: WebhookChanges): Promise<WebhookRecord> {
      await get(accountId, id)
      const patch: WebhookPatch = {}
      if (changes.filter !== undefined) patch.filter = checkedFilter(changes.filter)
      if (changes.url !== undefined) patch.url = await allowedUrl(changes.url)
      if (changes.events !== undefined) patch.events = [...changes.events]
      if (changes.status !== undefined) patch.status = changes.status
      if (changes.rateLimit !== undefined) patch.rateLimit = changes.rateLimit
      const updated = await store.updateWebhook(accountId, id, patch, iso(clock.now()))
      if (!updated) throw NotFound('No webhook with this id')
      // Enabled again by its owner: whatever still waits for it is due now (re-drive), at the adapted pace.
      if (changes.status === 'enabled') await store.redriveDeliveries(id, clock.now())
      return updated
    },

    /**
     * Sends again every delivery of the webhook whose event happened in the window, as new attempts of the
     * same deliveries (src/app/replay.ts); answers how many and the window.
     */
    async replay (accountId: string, id: string, request: ReplayRequest): Promise<{ queued: number; range: ReplayRange }> {
      return await replayer(await get(accountId, id), request)
    },

    async remove (accountId: string, id: string): Promise<void> {
      if (!await store.deleteWebhook(accountId, id, iso(clock.now()))) throw NotFound('No webhook with this id')
    },

    /**
     * A new secret signs from now on; the old one keeps signing beside it for ROTATION_OVERLAP_MS so that
     * receivers can switch without dropping deliveries. A second rotation inside the window retires the
     * oldest secret at once.
     */
    async rotateSecret (accountId: string, id: string): Promise<WebhookRecord> {
      const current = await get(accountId, id)
      const now = clock.now()
      const plain = newWebhookSecret()
      const updated = await store.updateWebhook(accountId, id, {
        secret: sealWebhookSecret(secret, id, plain),
        // Kept as it is stored: sealed, and bound to this webhook.
        previousSecret: current.secret,
        previousSecretExpiresAt: iso(now + ROTATION_OVERLAP_MS),
      }, iso(now))
      if (!updated) throw NotFound('No webhook with this id')
      return { ...updated, secret: plain }
    },
  }
}

/** The secrets that sign a delivery made at `now`: the current one, and the previous one while it lives. */
export function liveSecrets (webhook: WebhookRecord, now: number): string[] {
  const live = [webhook.secret]
  if (webhook.previousSecret !== null && webhook.previousSecretExpiresAt !== null && Date.parse(webhook.previousSecretExpiresAt) > now) {
    live.push(webhook.previousSecret)
  }
  return live
}

export type WebhookService = ReturnType<typeof createWebhookService>
