// What an API key may do: its permissions and the one rule that ranks them (used by src/app/api-keys.ts,
// the HTTP auth, and the stores that read old keys without a permission).
import { InsufficientPermission } from '../errors.js'

/**
 * What an API key may do. `full_access`: everything the session cookie may do, for its own account
 * (keys, webhooks, deliveries, suppressions, emails, …). `sending_access`: send and read emails only.
 */
export const API_KEY_PERMISSIONS = ['full_access', 'sending_access'] as const
export type ApiKeyPermission = (typeof API_KEY_PERMISSIONS)[number]
/** A key created without a permission, and every key made before permissions existed. */
export const DEFAULT_API_KEY_PERMISSION: ApiKeyPermission = 'full_access'

/** What a route needs of the key presented: `send` (sending and reading emails) or `manage` (the rest). */
export type ApiKeyNeed = 'send' | 'manage'

// Each permission's rank; a key may do what its rank reaches. Anything else (a value this version does
// not know, read from a store) reaches nothing.
const RANK: Readonly<Record<string, number>> = { sending_access: 1, full_access: 2 }
const NEED_RANK: Readonly<Record<ApiKeyNeed, number>> = { send: 1, manage: 2 }

export function isApiKeyPermission (value: unknown): value is ApiKeyPermission {
  return typeof value === 'string' && (API_KEY_PERMISSIONS as readonly string[]).includes(value)
}

function rankOf (permission: string): number {
  return Object.hasOwn(RANK, permission) ? RANK[permission]! : 0
}

/** The one rule: whether a key with `permission` may make a request that needs `need`. */
export function permissionAllows (permission: string, need: ApiKeyNeed): boolean {
  return rankOf(permission) >= NEED_RANK[need]
}

/**
 * Whether a key with `creator`'s permission may create a key with `wanted`: creating keys is management,
 * and never beyond the creator's own permission. (A session may create either.)
 */
export function mayCreateKey (creator: string, wanted: ApiKeyPermission): boolean {
  return permissionAllows(creator, 'manage') && isApiKeyPermission(wanted) && rankOf(creator) >= rankOf(wanted)
}

/** Throws insufficient_permission unless a key with `permission` may do what `need` asks. */
export function requirePermission (permission: string, need: ApiKeyNeed): void {
  if (!permissionAllows(permission, need)) {
    throw InsufficientPermission(need === 'manage'
      ? 'This route needs a full_access API key (a sending_access key may only send and read emails)'
      : 'This API key may not send')
  }
}
