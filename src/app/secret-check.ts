// Before svc serves (or the CLI acts) on a store: is it the store of this secret? A store restored without
// its secret would otherwise start and answer 401 to every API key (src/domain/secret-check.ts).
import { otherSecretMessage, secretCheckValue, secretMatchesCheck, type SecretSource } from '../domain/secret-check.js'
import type { Store } from '../store/types.js'

/** The store was written under another secret; the message says what to set, and nothing secret. */
export class OtherSecretError extends Error {}

/**
 * Resolves when the store's check value is `secret`'s: 'matched', or 'written' when the store had none yet
 * (a new store, or one from before svc kept it), which it now has. Throws OtherSecretError otherwise,
 * `where` naming the store in the message.
 */
export async function requireStoreSecret (
  store: Pick<Store, 'secretCheck' | 'initSecretCheck'>, secret: string, where: string, source: SecretSource,
): Promise<'matched' | 'written'> {
  let stored = await store.secretCheck()
  let outcome: 'matched' | 'written' = 'matched'
  if (stored === null) {
    // Another process starting at the same instant may have written its own first: the value kept is the
    // one compared.
    stored = await store.initSecretCheck(secretCheckValue(secret))
    outcome = 'written'
  }
  if (!secretMatchesCheck(secret, stored)) throw new OtherSecretError(otherSecretMessage(where, source))
  return outcome
}
