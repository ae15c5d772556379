// Password guessing, slowed where it comes from. Failed logins are counted per account and client
// address: after `freeFailures` of them that address waits before its next try for that account, 1 s,
// then 2 s, 4 s … up to `maxDelayMs`, doubling with each further failure; a success clears the count.
// The owner at another address is never held back by this (the account-wide ceiling, counted in the
// shared rate-limit store by the route, is the guard against guessing spread over many addresses).
//
// The counts live in this process, in a map bounded to `maxEntries` that forgets the pair it heard from
// least recently; a pair quiet for `forgetAfterMs` starts afresh.
import type { Clock } from './clock.js'

export interface LoginThrottleOptions {
  clock: Clock
  /** Failures from one address for one account before any wait. */
  freeFailures: number
  baseDelayMs?: number
  maxDelayMs?: number
  forgetAfterMs?: number
  maxEntries?: number
}

interface Entry { failures: number; lockedUntil: number; lastAt: number }

export function createLoginThrottle ({
  clock, freeFailures, baseDelayMs = 1000, maxDelayMs = 15 * 60_000, forgetAfterMs = 24 * 3_600_000, maxEntries = 100_000,
}: LoginThrottleOptions) {
  const entries = new Map<string, Entry>()
  // Separate fields cannot run together: an email has no NUL, nor does an address.
  const keyOf = (account: string, address: string) => `${account}\0${address}`

  function current (key: string, now: number): Entry | undefined {
    const e = entries.get(key)
    if (e !== undefined && now - e.lastAt > forgetAfterMs) {
      entries.delete(key)
      return undefined
    }
    return e
  }

  return {
    /** Milliseconds this address must still wait before trying this account again; 0: it may try now. */
    waitMs (account: string, address: string): number {
      const now = clock.now()
      const e = current(keyOf(account, address), now)
      return e === undefined ? 0 : Math.max(0, e.lockedUntil - now)
    },

    /** A wrong password (or an unknown account) from this address. Returns the wait it now has. */
    failed (account: string, address: string): number {
      const now = clock.now()
      const key = keyOf(account, address)
      const e = current(key, now) ?? { failures: 0, lockedUntil: 0, lastAt: now }
      e.failures += 1
      e.lastAt = now
      const over = e.failures - freeFailures
      if (over > 0) e.lockedUntil = now + Math.min(maxDelayMs, baseDelayMs * 2 ** Math.min(over - 1, 30))
      // Re-inserted, so the map's order is least recently heard first.
      entries.delete(key)
      entries.set(key, e)
      if (entries.size > maxEntries) entries.delete(entries.keys().next().value!)
      return Math.max(0, e.lockedUntil - now)
    },

    succeeded (account: string, address: string): void {
      entries.delete(keyOf(account, address))
    },

    get size (): number { return entries.size },
  }
}

export type LoginThrottle = ReturnType<typeof createLoginThrottle>
