// An open-loop load: requests started at a fixed rate whatever the answers, so that a stall in the server
// shows as latency rather than as a slower load. Each 2 ms, every request due by then is started, or
// counted as skipped while `maxInFlight` are unanswered (the generator's own bound).

export interface OpenLoop {
  /** Requests a second. */
  rate: number
  /** How long requests are started for, from `t0` (performance.now() time). */
  untilMs: number
  t0: number
  maxInFlight: number
  /** Requests started and not yet answered (the caller counts them). */
  inFlight: () => number
  /** Starts request number `i` (0, 1, 2, …). */
  fire: (i: number) => void
}

/** Resolves once `untilMs` has passed, with the requests started and those skipped. */
export async function openLoop (o: OpenLoop): Promise<{ issued: number; skipped: number }> {
  let issued = 0
  let skipped = 0
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const elapsed = performance.now() - o.t0
      if (elapsed >= o.untilMs) {
        clearInterval(timer)
        resolve()
        return
      }
      const due = Math.floor((elapsed / 1000) * o.rate)
      while (issued + skipped < due) {
        if (o.inFlight() >= o.maxInFlight) skipped++
        else o.fire(issued++)
      }
    }, 2)
  })
  return { issued, skipped }
}
