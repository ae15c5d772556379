// The engine's way out: where its batches of work go to be signed and POSTed, and where the answers come
// back from. The service uses the worker threads (dispatcher.ts); a unit test gives the engine a fake that
// answers by hand, so that the scheduler (pump, results, settling) runs without threads or sockets.
import type { DeliveryWork } from '../store/deliveries.js'
import type { DeliveryResult } from './http-sender.js'
import type { DeliverWorkerData } from '../../workers/deliver.js'
import { Dispatcher } from './dispatcher.js'

/** What the engine is told back, as answers arrive. */
export interface DeliveryAnswers {
  /** Results of attempts, and deliveries handed back unattempted (`returned`), in the order they came. */
  results (results: DeliveryResult[]): void
  /** Deliveries whose sender died before it answered: each is retried. */
  lost (deliveryIds: string[], error: string): void
}

export interface DeliveryPort {
  /** How many lanes work is spread over (a webhook always goes to the same one: its keep-alive sockets live there). */
  readonly shards: number
  /** Hands a batch of work to a shard, with each webhook's current window (requests in flight at once). */
  sendWork (shard: number, works: DeliveryWork[], windowOf?: (webhookId: string) => number): void
  /** Asks for the queued, unstarted work of some webhooks (or all) back: it comes back as `returned`. */
  hold (shard: number, webhookIds?: string[]): void
  /** hold() on every shard, for every webhook (stopping). */
  holdAll (): void
  /** Stops the senders; the engine calls it once nothing is in flight. */
  close (): Promise<void>
  /** Share of time each shard was busy since the previous call (for /metrics). */
  utilization (): number[]
  /** The OS thread id of each shard, where known (for /metrics). */
  threadIds (): Array<number | undefined>
}

/** Makes the port, given where its answers go. */
export type DeliveryPortFactory = (answers: DeliveryAnswers) => DeliveryPort

/** The service's port: `threads` worker threads, each signing and POSTing over its own sockets. */
export function workerThreadPort (threads: number, workerData: DeliverWorkerData): DeliveryPortFactory {
  return (answers) => new Dispatcher({
    threads,
    workerData,
    onResults: (results) => answers.results(results),
    onLost: (ids, error) => answers.lost(ids, error),
  })
}
