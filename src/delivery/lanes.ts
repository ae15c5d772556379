// The sending side of a webhook actor, inside a worker thread. The engine hands a thread more of a
// webhook's deliveries than its window (a few windows' worth); the thread keeps at most `window` of them
// in flight to the receiver and starts the next one itself the moment one finishes. So the receiver sees
// a full window even while the engine's thread is busy with the store, and no round trip between the
// threads sits between one request and the next.
//
// The engine still owns every decision: what is sent at all, the breaker, pauses. So a lane never sends
// past a failure on its own: when a request fails (any answer but 2xx, or none), the lane hands its
// queue back unattempted, right behind that result, and the engine decides (pause them, or send them
// again). The engine can also ask for a webhook's queue back at any time (`hold`: shutdown, a pause).
import type { DeliveryResult, DeliveryTask } from './http-sender.js'

/** One webhook's sending queue in the thread (not the engine's thread attachment of dispatcher.ts). */
interface WebhookLane {
  active: number
  /** Requests in flight at once for this webhook: the engine's adaptive window, as last given. */
  window: number
  queue: DeliveryTask[]
  /** Index of the next task to start in `queue` (shifting arrays per task costs more). */
  next: number
}

export class Lanes {
  private readonly lanes = new Map<string, WebhookLane>()
  private running = 0

  constructor (
    private readonly window: number,
    /**
     * Sends one task and answers through `done`, exactly once (the delivery thread's sender does, with no
     * promise per request); or returns a promise of the result instead (tests).
     */
    private readonly deliver: (task: DeliveryTask, done: (result: DeliveryResult) => void) => Promise<DeliveryResult> | void,
    private readonly onResult: (result: DeliveryResult) => void,
  ) {
    if (!Number.isInteger(window) || window < 1) throw new RangeError(`lanes: window must be an integer ≥ 1, got ${window}`)
  }

  /** Requests in flight to receivers now. */
  get inFlight (): number {
    return this.running
  }

  /** Deliveries queued behind a full window, not started. */
  get queued (): number {
    let n = 0
    for (const lane of this.lanes.values()) n += lane.queue.length - lane.next
    return n
  }

  /** Queues tasks; `windows` gives some webhooks' current window (the engine adapts it), else the default. */
  add (tasks: DeliveryTask[], windows?: ReadonlyMap<string, number>): void {
    for (const task of tasks) {
      let lane = this.lanes.get(task.webhookId)
      if (!lane) this.lanes.set(task.webhookId, lane = { active: 0, window: this.window, queue: [], next: 0 })
      const given = windows?.get(task.webhookId)
      if (given !== undefined && Number.isInteger(given) && given >= 1) lane.window = given
      lane.queue.push(task)
      while (lane.active < lane.window && lane.next < lane.queue.length) this.startNext(task.webhookId, lane)
    }
  }

  /**
   * Takes back what is queued and not started: for the given webhooks, or all of them. Each comes back as
   * a `returned` result, through onResult like any other, so the engine accounts for it in one place.
   */
  hold (webhookIds?: string[]): number {
    const ids = webhookIds ?? [...this.lanes.keys()]
    let returned = 0
    for (const id of ids) {
      const lane = this.lanes.get(id)
      if (lane) returned += this.giveBack(id, lane)
    }
    return returned
  }

  private giveBack (webhookId: string, lane: WebhookLane): number {
    const waiting = lane.queue.slice(lane.next)
    lane.queue = []
    lane.next = 0
    if (lane.active === 0 && this.lanes.get(webhookId) === lane) this.lanes.delete(webhookId)
    for (const task of waiting) this.onResult({ deliveryId: task.deliveryId, outcome: 'returned', durationMs: 0 })
    return waiting.length
  }

  private startNext (webhookId: string, lane: WebhookLane): void {
    const task = lane.queue[lane.next]
    if (task === undefined) return
    lane.queue[lane.next] = undefined as unknown as DeliveryTask
    lane.next += 1
    if (lane.next === lane.queue.length) {
      lane.queue = []
      lane.next = 0
    }
    lane.active += 1
    this.running += 1
    let answered = false
    const done = (result: DeliveryResult) => {
      if (answered) return
      answered = true
      lane.active -= 1
      this.running -= 1
      this.onResult(result)
      if (result.outcome !== 'delivered') this.giveBack(webhookId, lane)
      else if (lane.next < lane.queue.length) {
        while (lane.active < lane.window && lane.next < lane.queue.length) this.startNext(webhookId, lane)
      } else if (lane.active === 0 && this.lanes.get(webhookId) === lane) this.lanes.delete(webhookId)
    }
    // The sender answers every task itself; this only keeps a bug there from losing a delivery.
    const failed = (err: unknown) => done({
      deliveryId: task.deliveryId, outcome: 'retry', error: `sender failed: ${String(err)}`.slice(0, 200), durationMs: 0,
    })
    try {
      const promise = this.deliver(task, done)
      if (promise !== undefined) promise.then(done, failed)
    } catch (err) {
      // Answered after this turn, like any other result: the rest of the batch is queued by then, so a
      // failure hands it back instead of each task failing on its own.
      queueMicrotask(() => failed(err))
    }
  }
}
