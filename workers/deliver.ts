// The Piscina worker: one HTTP sender per thread, built from workerData on the first batch (so a thread
// that never gets work opens no sockets), kept for the thread's life so its keep-alive pool is reused.
// Wiring only; the behaviour lives in src/delivery/http-sender.ts, where it is tested without threads.
import type { MessagePort } from 'node:worker_threads'
import { workerData } from 'node:worker_threads'
import { createHttpSender, type DeliveryResult, type DeliveryTask, type HttpSender, type SenderOptions } from '../src/delivery/http-sender.js'
import type { ResolvedAddress } from '../src/domain/webhook-url.js'

/**
 * What the dispatcher passes as Piscina `workerData`. Functions cannot cross threads, so instead of a
 * resolver it may carry fixed answers per host name (an /etc/hosts of sorts; tests use it so that a
 * worker thread never asks public DNS).
 */
export type DeliverWorkerData = Omit<SenderOptions, 'resolver'> & { hosts?: Record<string, ResolvedAddress[]> }

/** A batch, and the port its results stream back on (one message per tick, as results come in). */
export interface DeliverJob {
  tasks: DeliveryTask[]
  port: MessagePort
}

let sender: HttpSender | undefined
const RESULT_BATCH = 64

function build (): HttpSender {
  const { hosts, ...options } = workerData as DeliverWorkerData
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

/** Sends a batch; results go out on job.port as they arrive, so a slow receiver delays only itself. */
export default async function deliver (job: DeliverJob): Promise<number> {
  sender ??= build()
  let pending: DeliveryResult[] = []
  let scheduled = false
  const flush = () => {
    if (pending.length === 0) return
    job.port.postMessage(pending)
    pending = []
  }
  try {
    await sender.sendEach(job.tasks, (result) => {
      pending.push(result)
      // Results go back in handfuls: those that arrive in the same turn of the event loop travel in one
      // message (a message per result costs more than the result), and a full handful goes at once.
      if (pending.length >= RESULT_BATCH) flush()
      else if (!scheduled) {
        scheduled = true
        setImmediate(() => { scheduled = false; flush() })
      }
    })
    flush()
  } finally {
    job.port.close()
  }
  return job.tasks.length
}
