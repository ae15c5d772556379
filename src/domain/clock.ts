/** Time as a parameter, so rules about expiry can be tested without waiting. */
export interface Clock {
  now(): number
}

export const systemClock: Clock = { now: () => Date.now() }

/** Timeouts as a parameter, so that what waits can be tested by firing it by hand. */
export interface Timers {
  set (fn: () => void, ms: number): unknown
  clear (handle: unknown): void
}

/** Node's timers; unref'd, so that a pending one never keeps the process alive. */
export const realTimers: Timers = {
  set: (fn, ms) => setTimeout(fn, ms).unref(),
  clear: (handle) => clearTimeout(handle as NodeJS.Timeout),
}

// The last time formatted: a batch stamps its emails, events and outcomes with one `now`, so most calls
// in a row ask for the same millisecond.
let lastMs = Number.NaN
let lastIso = ''

export function iso (ms: number): string {
  if (ms !== lastMs) {
    lastIso = new Date(ms).toISOString()
    lastMs = ms
  }
  return lastIso
}

/** A stored time in milliseconds as an ISO string; null (or absent) stays null. */
export function isoOrNull (ms: number | null | undefined): string | null {
  return ms === null || ms === undefined ? null : iso(ms)
}

/**
 * An RFC 3339 date-time (its shape already checked) as epoch milliseconds, or null when it names no
 * instant. A leap second (`23:59:60`, which RFC 3339 allows and a JavaScript date cannot hold) counts as
 * the last millisecond of its minute.
 */
export function parseTimestamp (text: string): number | null {
  let ms = Date.parse(text)
  if (Number.isNaN(ms) && text.slice(17, 19) === '60') {
    let end = 19
    if (text[end] === '.') {
      end++
      while (end < text.length && text.charCodeAt(end) >= 0x30 && text.charCodeAt(end) <= 0x39) end++
    }
    ms = Date.parse(`${text.slice(0, 17)}59.999${text.slice(end)}`)
  }
  return Number.isNaN(ms) ? null : ms
}
