// Waiting for something that happens in the background (a send, a retry, a restart), without asserting
// how long it took: poll until the condition holds, and fail with a clear message if it never does.
import { setTimeout as sleep } from 'node:timers/promises'

export async function waitFor<T> (
  what: string | (() => string),
  probe: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  opts: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 20_000)
  let last: unknown
  for (;;) {
    try {
      const value = await probe()
      if (value !== undefined && value !== null && value !== false) return value
      last = value
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) {
      throw new Error(`gave up waiting for ${typeof what === 'string' ? what : what()} (last probe: ${last instanceof Error ? last.message : JSON.stringify(last)})`)
    }
    await sleep(opts.intervalMs ?? 20)
  }
}
