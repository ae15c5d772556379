// Batches to worker threads. Webhooks are sharded over the threads by hash(webhookId) mod N, so each
// endpoint's keep-alive connections live in one thread and are reused. Each shard is a one-thread Piscina
// pool; a batch crosses to its thread in one message, and results stream back on a MessagePort as they
// arrive, so a receiver that answers in 5 s delays its own results only.
import { createHash } from 'node:crypto'
import { MessageChannel } from 'node:worker_threads'
import { fileURLToPath } from 'node:url'
import { Piscina } from 'piscina'
import type { DeliveryResult, DeliveryTask } from './http-sender.js'
import type { DeliverJob, DeliverWorkerData } from '../../workers/deliver.js'

const WORKER_FILE = fileURLToPath(new URL('../../workers/deliver.js', import.meta.url))

export function shardOf (webhookId: string, shards: number): number {
  if (shards === 1) return 0
  return createHash('sha1').update(webhookId).digest().readUInt32BE(0) % shards
}

export interface DispatcherOptions {
  threads: number
  workerData: DeliverWorkerData
  /** Called with every batch of results, as they stream in. */
  onResults: (results: DeliveryResult[]) => void
  /** Called for tasks whose worker died before answering: each gets a synthetic failed result. */
  onLost: (tasks: DeliveryTask[], error: string) => void
}

export class Dispatcher {
  private pools: Piscina[] | undefined

  constructor (private readonly opts: DispatcherOptions) {}

  get shards (): number {
    return this.opts.threads
  }

  /** Share of time each shard's thread spent working, 0…1 (for /metrics). */
  utilization (): number[] {
    return (this.pools ?? []).map((p) => p.utilization)
  }

  private pool (shard: number): Piscina {
    // Threads start on first use, not with the engine: on Node 20, Piscina loads the worker with
    // require(esm), and a thread ended while it is still loading aborts the whole process (a V8 fatal
    // error seen in CI when a service stopped right after starting). Lazily, only a node that stops in
    // the instant of its first delivery can meet it.
    this.pools ??= Array.from({ length: this.opts.threads }, () => new Piscina({
      filename: WORKER_FILE,
      workerData: this.opts.workerData,
      minThreads: 1,
      maxThreads: 1,
      // A thread works many batches at once: it is I/O-bound, and the actors bound what is in flight.
      concurrentTasksPerWorker: 256,
      idleTimeout: 60_000,
    }))
    return this.pools[shard]!
  }

  send (shard: number, tasks: DeliveryTask[]): void {
    const { port1, port2 } = new MessageChannel()
    const open = new Set(tasks.map((t) => t.deliveryId))
    port1.on('message', (results: DeliveryResult[]) => {
      for (const r of results) open.delete(r.deliveryId)
      this.opts.onResults(results)
      if (open.size === 0) port1.close()
    })
    const job: DeliverJob = { tasks, port: port2 }
    this.pool(shard).run(job, { transferList: [port2] }).then(
      () => {},
      (err: unknown) => {
        // The thread died or was stopped: whatever it had not answered is reported lost, and retried.
        port1.close()
        const lost = tasks.filter((t) => open.has(t.deliveryId))
        if (lost.length > 0) this.opts.onLost(lost, `worker failed: ${err instanceof Error ? err.message : String(err)}`)
      },
    )
  }

  async close (): Promise<void> {
    const pools = this.pools ?? []
    this.pools = undefined
    await Promise.all(pools.map((p) => p.close({ force: false })))
  }
}
