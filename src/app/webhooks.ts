import { NotFound, PlanLimitReached, WebhookUrlNotAllowed } from '../errors.js'
import { iso, type Clock } from '../domain/clock.js'
import type { EventType } from '../domain/events.js'
import { newId } from '../domain/ids.js'
import { PLANS, limitsOf } from '../domain/plans.js'
import { newWebhookSecret } from '../domain/secrets.js'
import { checkWebhookUrl, type Resolver, type UrlPolicy } from '../domain/webhook-url.js'
import type { AccountRecord, Store, WebhookRecord, WebhookPatch } from '../store/types.js'

export interface WebhookServiceOptions {
  store: Store
  clock: Clock
  urlPolicy: UrlPolicy
  resolver: Resolver
}

/** How long the secret before a rotation keeps signing beside the new one. */
export const ROTATION_OVERLAP_MS = 24 * 3_600_000

export interface WebhookChanges {
  url?: string | undefined
  events?: EventType[] | undefined
  status?: 'enabled' | 'disabled' | undefined
  rateLimit?: number | null | undefined
}

export function createWebhookService ({ store, clock, urlPolicy, resolver }: WebhookServiceOptions) {
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
    async create (account: AccountRecord, input: { url: string; events: EventType[]; rateLimit?: number | null | undefined }): Promise<WebhookRecord> {
      const url = await allowedUrl(input.url)
      const now = iso(clock.now())
      const record: WebhookRecord = {
        id: newId('wh'),
        accountId: account.id,
        url,
        events: [...input.events],
        secret: newWebhookSecret(),
        previousSecret: null,
        previousSecretExpiresAt: null,
        status: 'enabled',
        rateLimit: input.rateLimit ?? null,
        createdAt: now,
        updatedAt: now,
      }
      const limit = limitsOf(account.plan).webhooks
      if (await store.insertWebhook(record, limit) === 'limit_reached') {
        throw PlanLimitReached(`The ${PLANS[account.plan].name} plan allows ${limit} webhooks; delete one or upgrade`)
      }
      return record
    },

    list (accountId: string): Promise<WebhookRecord[]> {
      return store.listWebhooks(accountId)
    },

    get,

    async update (accountId: string, id: string, changes: WebhookChanges): Promise<WebhookRecord> {
      await get(accountId, id)
      const patch: WebhookPatch = {}
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
      const updated = await store.updateWebhook(accountId, id, {
        secret: newWebhookSecret(),
        previousSecret: current.secret,
        previousSecretExpiresAt: iso(now + ROTATION_OVERLAP_MS),
      }, iso(now))
      if (!updated) throw NotFound('No webhook with this id')
      return updated
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
