// Password guessing, slowed where it comes from and capped per account.
//
// Per account and client address (createLoginThrottle): after `freeFailures` failed logins that address
// waits before its next try for that account, 1 s, then 2 s, 4 s … up to `maxDelayMs`, doubling with each
// further failure (with the default 5: 14 failures in the first 15 minutes, then one per 15 minutes); a
// success clears the count. The owner at another address is never held back by this.
//
// "An address" is a sender as src/domain/inbound-limits.ts counts one (addressKey): an IPv4 address (an
// IPv4-mapped IPv6 one is the IPv4 address it carries), or an IPv6 /64, since one IPv6 host picks any of
// its /64's addresses for each request. Were each IPv6 address its own, one host could make 14 failures
// from each of 15 fresh addresses, fill the ceiling and lock the owner out; a /64 is one address here.
//
// Per account, from every address together (the ceiling, createLoginGuard): at most `ceiling` FAILED
// logins in a window. Only tried passwords count: a right one does not, nor does an attempt an address's
// own wait refused (that is checked first), so one address, which makes a handful of failures per window
// before its waits grow past it, can never fill the ceiling and lock the owner out; guessing spread over
// many addresses fills it, and then the account refuses every address until the window ends.
//
// An attempt in flight (its password not yet checked) counts as a failure until it is settled, so a burst
// of concurrent guesses gets no more tries than the same guesses one after another.
//
// The ceiling counts in windows of LOGIN_CEILING_WINDOW_MS aligned on the epoch, and an attempt's window is
// the one it began in: its counts, and the success or refusal that settles it later, all land in that
// window, even when it is answered after the window has ended. So the two counts of failedBefore always
// cover the same attempts, whichever store keeps them.
//
// The per-address counts live in this process, in a map bounded to `maxEntries` that forgets the pair
// heard from least recently. The ceiling's counts live where the route's rate limits count
// (RATE_LIMIT_STORE): in the store every node shares, or in this process (createLocalCeilingCounts),
// for at most LOCAL_CEILING_ENTRIES emails.
import { createHash } from 'node:crypto'
import type { Clock } from './clock.js'
import { addressKey } from './inbound-limits.js'

/** The ceiling's window: failed logins per account are counted over 15 minutes. */
export const LOGIN_CEILING_WINDOW_MS = 15 * 60_000

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

/** Remembers `key` as the most recently heard, and forgets the least recent one past `maxEntries`. */
function touch<V> (map: Map<string, V>, key: string, value: V, maxEntries: number): void {
  map.delete(key)
  map.set(key, value)
  if (map.size > maxEntries) map.delete(map.keys().next().value!)
}

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

    /** Failed logins from this address for this account since its last success (or quiet spell). */
    failures (account: string, address: string): number {
      return current(keyOf(account, address), clock.now())?.failures ?? 0
    },

    /** A wrong password (or an unknown account) from this address. Returns the wait it now has. */
    failed (account: string, address: string): number {
      const now = clock.now()
      const key = keyOf(account, address)
      const e = current(key, now) ?? { failures: 0, lockedUntil: 0, lastAt: now }
      e.failures += 1
      e.lastAt = now
      // The `freeFailures`-th failure brings the first wait; each one after it doubles the wait.
      const over = e.failures - freeFailures
      if (over >= 0) e.lockedUntil = now + Math.min(maxDelayMs, baseDelayMs * 2 ** Math.min(over, 30))
      touch(entries, key, e, maxEntries)
      return Math.max(0, e.lockedUntil - now)
    },

    succeeded (account: string, address: string): void {
      entries.delete(keyOf(account, address))
    },

    get size (): number { return entries.size },
  }
}

export type LoginThrottle = ReturnType<typeof createLoginThrottle>

export interface LoginGuardOptions extends LoginThrottleOptions {
  /** Failed logins per account in one window, from every address together. */
  ceiling: number
  /** The ceiling's window (LOGIN_CEILING_WINDOW_MS); windows are aligned on the epoch. */
  windowMs?: number
}

/**
 * The ceiling's counts: one hit on the account's `tries` or `marks` count of window number `window`
 * (floor(time / windowMs), the window the attempt began in), answered with that count's hits so far, this
 * one included. The window is part of what is counted, so a store must keep each window's counts apart
 * (and keep them at least windowMs). Counted where every node sees them when rate limits are shared
 * (RATE_LIMIT_STORE=store), else in this process (createLocalCeilingCounts).
 */
export type CeilingCounter = (count: 'tries' | 'marks', window: number) => Promise<{ hits: number }>

/** Emails whose ceiling counts one process keeps (RATE_LIMIT_STORE=memory): about 220 bytes each, 22 MB in all. */
export const LOCAL_CEILING_ENTRIES = 100_000

/**
 * The ceiling's counts in this process: per email, its two counts in the newest window it was tried in.
 * A hit for a later window starts the email afresh; a hit for an earlier one (a login answered after its
 * window ended) finds that window over and changes nothing. At most `maxEntries` emails are kept, keyed by
 * a digest of the email (its length does not matter); past that the one tried least recently is forgotten,
 * so resetting an email's full ceiling takes tries at `maxEntries` other emails within one window.
 */
export function createLocalCeilingCounts ({ maxEntries = LOCAL_CEILING_ENTRIES }: { maxEntries?: number } = {}) {
  const entries = new Map<string, { window: number; tries: number; marks: number }>()
  const keyOf = (account: string) => createHash('sha256').update(account).digest('base64url').slice(0, 22)
  return {
    counter (account: string): CeilingCounter {
      const key = keyOf(account)
      return async (which, window) => {
        let e = entries.get(key)
        if (e !== undefined && e.window > window) return { hits: 0 }
        if (e === undefined || e.window < window) e = { window, tries: 0, marks: 0 }
        e[which] += 1
        touch(entries, key, e, maxEntries)
        return { hits: e[which] }
      }
    },

    get size (): number { return entries.size },
  }
}

export type LoginAttempt =
  | {
      allowed: true
      /** The password was right: the address's failures are cleared, and this try is taken off the ceiling. */
      succeeded(): Promise<void>
      /** The password was wrong (or the account unknown). Returns the address's wait. */
      failed(): number
      /** Neither (the check itself failed): forgotten, and taken off the ceiling as far as the count can be reached. */
      abandoned(): Promise<void>
    }
  | {
      allowed: false
      /** `address`: this address's own wait; `account`: the ceiling, which every address meets. */
      by: 'address' | 'account'
      waitMs: number
    }

/**
 * Failed logins in the window before this try, from the two counts this try just hit: every try counts
 * once in `tries`; every try, and every success, once in `marks`. So successes = marks − tries, and the
 * tries before this one that did not succeed (failed, or still in flight) = (tries − 1) − successes. A try
 * that was refused, or whose check broke off, is taken off like a success: only wrong passwords count.
 *
 * Reading a shared count means hitting it, and a count only goes up, so a success cannot be taken back from
 * one count; with two it can. A try in flight counts as failed until it succeeds.
 */
export function failedBefore (tries: number, marks: number): number {
  return Math.max(0, 2 * tries - marks - 1)
}

/**
 * Both limits in the order they apply: an address that must wait is answered by its wait alone (and
 * spends nothing of the account's ceiling); then the ceiling; an attempt past both may try its password.
 */
export function createLoginGuard (options: LoginGuardOptions) {
  const { clock, ceiling, freeFailures, baseDelayMs = 1000, windowMs = LOGIN_CEILING_WINDOW_MS } = options
  const throttle = createLoginThrottle(options)
  // Attempts of one address for one account whose password is being checked. An entry exists only while
  // one is in flight, so the map is bounded by the requests being served.
  const inFlight = new Map<string, number>()
  const pairKey = (account: string, address: string) => `${account}\0${address}`
  const add = (key: string, n: number) => {
    const v = (inFlight.get(key) ?? 0) + n
    if (v > 0) inFlight.set(key, v)
    else inFlight.delete(key)
  }

  return {
    /** `clientAddress`: the request's address; its addressKey (the address, or its IPv6 /64) is what waits. */
    async attempt (account: string, clientAddress: string, count: CeilingCounter): Promise<LoginAttempt> {
      const address = addressKey(clientAddress)
      const pair = pairKey(account, address)
      // The address first: one that must wait is told so, and its attempt costs the account nothing.
      const addressWait = throttle.waitMs(account, address)
      if (addressWait > 0) return { allowed: false, by: 'address', waitMs: addressWait }
      // Its tries in flight count as failures: a burst gets no more tries than the same guesses in a row.
      const pending = inFlight.get(pair) ?? 0
      if (pending > 0 && throttle.failures(account, address) + pending >= freeFailures) {
        return { allowed: false, by: 'address', waitMs: baseDelayMs }
      }
      add(pair, 1)
      // Every count of this attempt, the ones that settle it included, is in the window it began in.
      const window = Math.floor(clock.now() / windowMs)
      let settled = false
      const settle = (): boolean => {
        if (settled) return false
        settled = true
        add(pair, -1)
        return true
      }
      try {
        // Marks before tries: a try hitting both counts between this one's two hits raises the estimate,
        // never lowers it, so concurrent tries err toward refusing.
        const marks = await count('marks', window)
        const tries = await count('tries', window)
        if (failedBefore(tries.hits, marks.hits) >= ceiling) {
          settle()
          // Not tried, so not a failure: taken off as a success is (else refusals while the ceiling is
          // full only because of tries in flight would keep it full after those succeed). If it cannot be
          // taken off, it stays counted: the ceiling errs toward refusing.
          await count('marks', window).catch(() => undefined)
          return { allowed: false, by: 'account', waitMs: Math.max(1, (window + 1) * windowMs - clock.now()) }
        }
      } catch (err) {
        settle()
        throw err
      }
      return {
        allowed: true,
        async succeeded () {
          if (!settle()) return
          throttle.succeeded(account, address)
          await count('marks', window)
        },
        failed (): number {
          if (settle()) return throttle.failed(account, address)
          return throttle.waitMs(account, address)
        },
        async abandoned () {
          if (settle()) await count('marks', window).catch(() => undefined)
        },
      }
    },

    /** Addresses with an attempt in flight (for tests: every attempt is settled). */
    get inFlight (): number { return inFlight.size },
  }
}

export type LoginGuard = ReturnType<typeof createLoginGuard>
