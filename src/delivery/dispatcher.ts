// Batches to worker threads. Webhooks are sharded over the threads by hash(webhookId) mod N, so each
// endpoint's keep-alive connections live in one thread and are reused. Each shard is a one-thread Piscina
// pool (Piscina starts the thread, restarts it if it dies, and stops it), attached to once: a single
// long-lived task hands the thread a MessagePort, and from then on a batch is one message there and its
// results stream back on the same port as they arrive, so a receiver that answers in 5 s delays only its
// own results, and a batch costs no task and no channel of its own.
import { createHash } from 'node:crypto'
import type { EventLoopUtilization } from 'node:perf_hooks'
import { MessageChannel, type MessagePort } from 'node:worker_threads'
import { fileURLToPath } from 'node:url'
import { Piscina } from 'piscina'
import type { DeliveryResult, DeliveryTask } from './http-sender.js'
import type { DeliveryWork } from '../store/deliveries.js'
import { packTasks, packWork, unpackResults } from './wire.js'
import type { AttachJob, DeliverWorkerData, DispatcherMessage, WorkerMessage } from '../../workers/deliver.js'

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
  /** Called with the deliveries a thread had not answered when it died: each is retried. */
  onLost: (deliveryIds: string[], error: string) => void
}

/** One attachment to a shard's thread: the port, what was sent on it and is not answered yet. */
interface ThreadAttachment {
  port: MessagePort
  open: Set<string>
  /** Settles once the thread has loaded the worker and is listening (or has failed to). */
  ready: Promise<void>
  /** Settles when the attach task ends, whichever way. */
  ended: Promise<void>
}

export class Dispatcher {
  private readonly pools: Piscina[]
  private readonly lanes: Array<ThreadAttachment | undefined>
  private readonly elu: Array<EventLoopUtilization | undefined>
  /** Each shard's thread id in the operating system, once its thread has said (Linux only). */
  private readonly tids: Array<number | undefined>
  private closing = false

  constructor (private readonly opts: DispatcherOptions) {
    this.pools = Array.from({ length: opts.threads }, () => new Piscina({
      filename: WORKER_FILE,
      workerData: opts.workerData,
      // No thread until the first attach: a service that never delivers starts none.
      minThreads: 0,
      maxThreads: 1,
      idleTimeout: 1000,
      // Besides the attach task, a thread has nothing to run; Piscina only needs to let that one in.
      concurrentTasksPerWorker: 1,
    }))
    this.lanes = this.pools.map(() => undefined)
    this.elu = this.pools.map(() => undefined)
    this.tids = this.pools.map(() => undefined)
  }

  get shards (): number {
    return this.opts.threads
  }

  /** Share of time each shard's thread was busy since the previous call, 0…1 (for /metrics). */
  utilization (): number[] {
    return this.pools.map((pool, shard) => {
      const perf = pool.threads[0]?.performance
      if (!perf) return 0
      const last = this.elu[shard]
      const now = perf.eventLoopUtilization()
      this.elu[shard] = now
      return last ? perf.eventLoopUtilization(now, last).utilization : now.utilization
    })
  }

  /** The OS thread id of each shard's thread (undefined: not started, or not Linux), for /metrics. */
  threadIds (): Array<number | undefined> {
    return this.tids.slice()
  }

  private attachment (shard: number): ThreadAttachment {
    const existing = this.lanes[shard]
    if (existing) return existing
    const { port1, port2 } = new MessageChannel()
    const open = new Set<string>()
    let markReady: () => void = () => {}
    const ready = new Promise<void>((resolve) => { markReady = resolve })
    port1.on('message', (message: WorkerMessage) => {
      if (message.type === 'ready') {
        this.tids[shard] = message.tid
        markReady()
        return
      }
      const results = unpackResults(message.results)
      for (const r of results) open.delete(r.deliveryId)
      this.opts.onResults(results)
    })
    const job: AttachJob = { port: port2 }
    const ended = this.pools[shard]!.run(job, { transferList: [port2] }).then(
      () => {},
      (err: unknown) => {
        // The thread died (or could not load the worker): what it had not answered is reported lost and
        // retried, and the next batch attaches to the thread Piscina starts in its place.
        if (this.lanes[shard] === lane) this.lanes[shard] = undefined
        port1.close()
        if (open.size > 0 && !this.closing) {
          this.opts.onLost([...open], `worker failed: ${err instanceof Error ? err.message : String(err)}`)
        }
        open.clear()
      },
    ).finally(markReady)
    const lane: ThreadAttachment = { port: port1, open, ready, ended }
    this.lanes[shard] = lane
    return lane
  }

  send (shard: number, tasks: DeliveryTask[]): void {
    const lane = this.attachment(shard)
    for (const t of tasks) lane.open.add(t.deliveryId)
    lane.port.postMessage({ type: 'send', groups: packTasks(tasks) } satisfies DispatcherMessage)
  }

  /**
   * The same, straight from the store's work (the engine's path: no task object per delivery), with each
   * webhook's current window.
   */
  sendWork (shard: number, works: DeliveryWork[], windowOf?: (webhookId: string) => number): void {
    const lane = this.attachment(shard)
    lane.port.postMessage({ type: 'send', groups: packWork(works, lane.open, windowOf) } satisfies DispatcherMessage)
  }

  /**
   * Asks a shard's thread for the deliveries it holds queued and has not started (for the given webhooks,
   * or all): they come back through onResults as `returned`.
   */
  hold (shard: number, webhookIds?: string[]): void {
    this.lanes[shard]?.port.postMessage({ type: 'hold', ...(webhookIds ? { webhookIds } : {}) } satisfies DispatcherMessage)
  }

  /** hold() on every shard, for every webhook (stopping). */
  holdAll (): void {
    for (let shard = 0; shard < this.lanes.length; shard++) this.hold(shard)
  }

  /**
   * Detaches from every thread and stops them. Each thread is first allowed to finish loading: ending a
   * thread in the middle of loading its module can abort the whole process on Node 20. The engine only
   * closes once nothing is in flight.
   */
  async close (): Promise<void> {
    this.closing = true
    const lanes = this.lanes.splice(0).filter((l): l is ThreadAttachment => l !== undefined)
    await Promise.all(lanes.map(async (lane) => {
      await lane.ready
      lane.port.close()
      await lane.ended
    }))
    await Promise.all(this.pools.map((p) => p.close({ force: false })))
  }
}
