// The delivery worker thread. The dispatcher attaches to each thread once, with one long-lived Piscina
// task that hands over a MessagePort; from then on batches come in on that port and results go back on
// it as they arrive, so a batch costs one message each way and nothing else (no task, no channel). The
// task ends when the dispatcher closes its end of the port.
// Wiring only; the behaviour lives in src/delivery/http-sender.ts (one request) and lanes.ts (each
// webhook's window), where it is tested without threads.
import { readlinkSync } from 'node:fs'
import type { MessagePort } from 'node:worker_threads'
import { workerData } from 'node:worker_threads'
import { createHttpSender, type DeliveryResult, type HttpSender, type SenderOptions } from '../src/delivery/http-sender.js'
import { Lanes } from '../src/delivery/lanes.js'
import { ResultPacker, unpackTasks, windowsOf, type ResultBatch, type TaskGroup } from '../src/delivery/wire.js'
import type { ResolvedAddress } from '../src/domain/webhook-url.js'
import { createDns } from '../src/domain/dns.js'

/**
 * What the dispatcher passes as Piscina `workerData`. Functions cannot cross threads, so instead of a
 * resolver it may carry fixed answers per host name (an /etc/hosts of sorts; tests use it so that a
 * worker thread never asks public DNS).
 */
export type DeliverWorkerData = Omit<SenderOptions, 'resolver'> & {
  /** Requests in flight at once per webhook. */
  window: number
  hosts?: Record<string, ResolvedAddress[]>
  /** DNS_SERVERS: webhook hosts are resolved through these (a resolver is made in the thread). */
  dnsServers?: string[]
}

/** The one task a thread runs: the port batches arrive on and results leave by. */
export interface AttachJob {
  port: MessagePort
}

/** What the dispatcher sends: deliveries, or a request to hand back what is queued (some webhooks', or all). */
export type DispatcherMessage = { type: 'send'; groups: TaskGroup[] } | { type: 'hold'; webhookIds?: string[] }

/** What the thread sends on the port: `ready` once, then results in handfuls. */
export type WorkerMessage = { type: 'ready'; tid?: number } | { type: 'results'; results: ResultBatch }

/**
 * This thread's id in the operating system (Linux: /proc/thread-self → "<pid>/task/<tid>"), so that its
 * CPU can be read from /proc per thread; undefined elsewhere.
 */
function osThreadId (): number | undefined {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop())
    return Number.isInteger(tid) && tid > 0 ? tid : undefined
  } catch {
    return undefined
  }
}

const RESULT_BATCH = 64

function build (): HttpSender {
  const { hosts, dnsServers, window: _window, ...options } = workerData as DeliverWorkerData
  if (!hosts && dnsServers !== undefined && dnsServers.length > 0) return createHttpSender({ ...options, resolver: createDns(dnsServers).hosts })
  if (!hosts) return createHttpSender(options)
  return createHttpSender({
    ...options,
    resolver: async (name) => {
      const answer = hosts[name.toLowerCase()]
      if (!answer || answer.length === 0) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${name}`), { code: 'ENOTFOUND' })
      return answer
    },
  })
}

/**
 * Serves batches from `job.port` until the dispatcher closes it, then waits for the requests still in
 * flight and closes the sender's sockets. Resolves with the number of deliveries attempted.
 */
export default function attach (job: AttachJob): Promise<number> {
  const sender = build()
  const { port } = job
  let attempted = 0
  let closed = false
  let finish: () => void = () => {}
  const finished = new Promise<void>((resolve) => { finish = resolve })

  const pending = new ResultPacker()
  let scheduled = false
  const flush = () => {
    scheduled = false
    if (pending.size === 0 || closed) return
    port.postMessage({ type: 'results', results: pending.take() } satisfies WorkerMessage)
  }
  const onResult = (result: DeliveryResult) => {
    pending.push(result)
    // Results that arrive in the same turn of the event loop travel in one message (a message per result
    // costs more than the result), and a full handful goes at once.
    if (pending.size >= RESULT_BATCH) flush()
    else if (!scheduled) {
      scheduled = true
      setImmediate(flush)
    }
    if (closed && lanes.inFlight === 0) finish()
  }
  const lanes = new Lanes((workerData as DeliverWorkerData).window, (task, done) => {
    attempted += 1
    sender.dispatch(task, done)
  }, onResult)

  port.on('message', (message: DispatcherMessage) => {
    if (message.type === 'send') {
      lanes.add(unpackTasks(message.groups), windowsOf(message.groups))
    } else {
      lanes.hold(message.webhookIds)
    }
  })
  port.on('close', () => {
    // The dispatcher only closes once nothing is in flight; if something still is (the engine gave up
    // waiting), its results have nowhere to go and the store's leases bring the work back.
    closed = true
    lanes.hold()
    if (lanes.inFlight === 0) finish()
  })
  const tid = osThreadId()
  port.postMessage({ type: 'ready', ...(tid !== undefined ? { tid } : {}) } satisfies WorkerMessage)
  return finished.then(() => sender.close()).then(() => attempted)
}
