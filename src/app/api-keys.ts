import { hash } from 'node:crypto'
import { InsufficientPermission, InvalidApiKey, NotFound } from '../errors.js'
import { iso, type Clock } from '../domain/clock.js'
import { newId } from '../domain/ids.js'
import { withinPlan } from '../domain/plan-limits.js'
import { API_KEY_PREFIX, hashToken, newApiKey } from '../domain/secrets.js'
import type { AccountRecord, ApiKeyRecord, Store } from '../store/types.js'
import {
  API_KEY_PERMISSIONS, DEFAULT_API_KEY_PERMISSION, isApiKeyPermission, mayCreateKey, permissionAllows, requirePermission, type ApiKeyNeed, type ApiKeyPermission,
} from '../domain/api-key-permissions.js'

export {
  API_KEY_PERMISSIONS, DEFAULT_API_KEY_PERMISSION, isApiKeyPermission, mayCreateKey, permissionAllows, requirePermission, type ApiKeyNeed, type ApiKeyPermission,
}

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
// Keys remembered at most (active keys that were presented); past it the memory starts over.
const MAX_REMEMBERED_KEYS = 10_000

export function createApiKeyService ({ store, secret, clock }: ApiKeyServiceOptions) {
  const pendingUses = new Map<string, string>()
  let flushTimer: NodeJS.Timeout | undefined
  // Keys found active, by a SHA-256 of the presented key (never the key itself), with when their use was
  // last noted; valid while the store's revocation count is `rememberedAt`. Only with a store that counts
  // revocations (Store.apiKeyRevocations): then a request costs one read of that count instead of an
  // HMAC and a lookup, and any revocation, by any process, empties this before the next request trusts it.
  const remembered = new Map<string, { key: ApiKeyRecord; notedAt: number }>()
  let rememberedAt: number | undefined

  async function flushUsage (): Promise<void> {
    if (flushTimer) clearTimeout(flushTimer)
    flushTimer = undefined
    if (pendingUses.size === 0) return
    const uses = [...pendingUses].map(([id, lastUsedAt]) => ({ id, lastUsedAt }))
    pendingUses.clear()
    await store.touchApiKeys(uses)
  }

  /** Notes a use unless one was noted less than a minute before `now`; returns when the last one was. */
  function noteUse (key: ApiKeyRecord, now: number, notedAt: number): number {
    if (now - notedAt < LAST_USED_RESOLUTION_MS) return notedAt
    pendingUses.set(key.id, iso(now))
    // Usage is best effort: a failed flush loses a timestamp, never a request.
    flushTimer ??= setTimeout(() => { flushUsage().catch(() => {}) }, USAGE_FLUSH_MS).unref()
    return now
  }

  const lastUse = (key: ApiKeyRecord): number => (key.lastUsedAt === null ? -Infinity : Date.parse(key.lastUsedAt))

  /**
   * The key's record when `presented` is an active key whose permission allows `need` (401 for unknown
   * and revoked keys alike, 403 insufficient_permission for a key that may not). A revocation holds from
   * the next request on, on every node: either the lookup goes to the store, or (a store that counts
   * revocations) the count is read first and a key remembered under an older count is looked up again.
   */
  async function authenticate (presented: string, need: ApiKeyNeed = 'send'): Promise<ApiKeyRecord> {
    if (!presented.startsWith(API_KEY_PREFIX) || presented.length > MAX_KEY_LENGTH) throw InvalidApiKey()
    const counted = store.apiKeyRevocations?.()
    const revocations = counted === undefined || typeof counted === 'number' ? counted : await counted
    if (revocations !== rememberedAt) {
      remembered.clear()
      rememberedAt = revocations
    }
    const digest = revocations === undefined ? undefined : hash('sha256', presented, 'base64url')
    const known = digest === undefined ? undefined : remembered.get(digest)
    if (known !== undefined) {
      requirePermission(known.key.permission, need)
      known.notedAt = noteUse(known.key, clock.now(), known.notedAt)
      return known.key
    }
    const key = await store.findApiKeyByHash(hashToken(secret, presented, 'api-key'))
    if (!key || key.revokedAt !== null) throw InvalidApiKey()
    requirePermission(key.permission, need)
    const notedAt = noteUse(key, clock.now(), lastUse(key))
    // Remembered only if no newer count was seen meanwhile (the lookup may predate that revocation).
    if (digest !== undefined && rememberedAt === revocations) {
      if (remembered.size >= MAX_REMEMBERED_KEYS) remembered.clear()
      remembered.set(digest, { key, notedAt })
    }
    return key
  }

  return {
    /**
     * A new key with `permission` (default full_access). `creator`: the key the request came with, if it
     * came with one (a session may create either permission).
     */
    async create (
      account: AccountRecord,
      name: string,
      permission: ApiKeyPermission = DEFAULT_API_KEY_PERMISSION,
      creator?: Pick<ApiKeyRecord, 'permission'> | null,
    ): Promise<{ record: ApiKeyRecord; key: string }> {
      if (creator && !mayCreateKey(creator.permission, permission)) {
        throw InsufficientPermission(`A ${creator.permission} key cannot create a ${permission} key`)
      }
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
        permission,
      }
      await withinPlan(account.plan, 'apiKeys', (limit) => store.insertApiKey(record, limit))
      return { record, key }
    },

    list (accountId: string): Promise<ApiKeyRecord[]> {
      return store.listApiKeys(accountId)
    },

    async revoke (accountId: string, id: string): Promise<ApiKeyRecord> {
      const record = await store.revokeApiKey(accountId, id, iso(clock.now()))
      if (!record) throw NotFound('No API key with this id')
      pendingUses.delete(id)
      // The store's count has moved too; this makes it hold here even before that count is read.
      remembered.clear()
      rememberedAt = undefined
      return record
    },

    authenticate,

    /** authenticate(), and the key's account: what a management route acts for. */
    async authenticateAccount (presented: string, need: ApiKeyNeed): Promise<{ key: ApiKeyRecord; account: AccountRecord }> {
      const key = await authenticate(presented, need)
      const account = await store.findAccountById(key.accountId)
      if (!account) throw InvalidApiKey()
      return { key, account }
    },

    flushUsage,
  }
}

export type ApiKeyService = ReturnType<typeof createApiKeyService>
