import { InvalidApiKey, NotFound, PlanLimitReached } from '../errors.js'
import { iso, type Clock } from './clock.js'
import { newId } from './ids.js'
import { PLANS, limitsOf } from './plans.js'
import { API_KEY_PREFIX, hashToken, newApiKey } from './secrets.js'
import type { AccountRecord, ApiKeyRecord, Store } from '../store/types.js'

export interface ApiKeyServiceOptions {
  store: Store
  secret: string
  clock: Clock
}

// lastUsedAt is coarse on purpose: it is written at most once a minute per key, in batches, so that
// authenticating every POST /api/send costs one indexed read and no write.
const LAST_USED_RESOLUTION_MS = 60_000
const USAGE_FLUSH_MS = 1_000
// svc_sk_ + 43 base64url characters; anything far outside that is rejected before hashing.
const MAX_KEY_LENGTH = 128

export function createApiKeyService ({ store, secret, clock }: ApiKeyServiceOptions) {
  const pendingUses = new Map<string, string>()
  let flushTimer: NodeJS.Timeout | undefined

  async function flushUsage (): Promise<void> {
    if (flushTimer) clearTimeout(flushTimer)
    flushTimer = undefined
    if (pendingUses.size === 0) return
    const uses = [...pendingUses].map(([id, lastUsedAt]) => ({ id, lastUsedAt }))
    pendingUses.clear()
    await store.touchApiKeys(uses)
  }

  function noteUse (key: ApiKeyRecord, now: number): void {
    if (key.lastUsedAt !== null && now - Date.parse(key.lastUsedAt) < LAST_USED_RESOLUTION_MS) return
    pendingUses.set(key.id, iso(now))
    // Usage is best effort: a failed flush loses a timestamp, never a request.
    flushTimer ??= setTimeout(() => { flushUsage().catch(() => {}) }, USAGE_FLUSH_MS).unref()
  }

  return {
    async create (account: AccountRecord, name: string): Promise<{ record: ApiKeyRecord; key: string }> {
      const { key, keyPrefix } = newApiKey()
      const record: ApiKeyRecord = {
        id: newId('key'),
        accountId: account.id,
        name,
        keyHash: hashToken(secret, key, 'api-key'),
        keyPrefix,
        createdAt: iso(clock.now()),
        lastUsedAt: null,
        revokedAt: null,
      }
      const limit = limitsOf(account.plan).apiKeys
      if (await store.insertApiKey(record, limit) === 'limit_reached') {
        throw PlanLimitReached(`The ${PLANS[account.plan].name} plan allows ${limit} active API keys; revoke one or upgrade`)
      }
      return { record, key }
    },

    list (accountId: string): Promise<ApiKeyRecord[]> {
      return store.listApiKeys(accountId)
    },

    async revoke (accountId: string, id: string): Promise<ApiKeyRecord> {
      const record = await store.revokeApiKey(accountId, id, iso(clock.now()))
      if (!record) throw NotFound('No API key with this id')
      pendingUses.delete(id)
      return record
    },

    /**
     * The key's record when `presented` is an active key. Unknown and revoked keys get the same error.
     * No cache: the lookup goes to the store every time, so a revocation holds from the next request on,
     * on every node.
     */
    async authenticate (presented: string): Promise<ApiKeyRecord> {
      if (!presented.startsWith(API_KEY_PREFIX) || presented.length > MAX_KEY_LENGTH) throw InvalidApiKey()
      const key = await store.findApiKeyByHash(hashToken(secret, presented, 'api-key'))
      if (!key || key.revokedAt !== null) throw InvalidApiKey()
      noteUse(key, clock.now())
      return key
    },

    flushUsage,
  }
}

export type ApiKeyService = ReturnType<typeof createApiKeyService>
