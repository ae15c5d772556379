// The Piscina worker: one HTTP sender per thread, built from workerData on the first batch (so a thread
// that never gets work opens no sockets), kept for the thread's life so its keep-alive pool is reused.
// Wiring only; the behaviour lives in src/delivery/http-sender.ts, where it is tested without threads.
import { workerData } from 'node:worker_threads'
import { createHttpSender, type DeliveryResult, type DeliveryTask, type HttpSender, type SenderOptions } from '../src/delivery/http-sender.js'

/** What the dispatcher passes as Piscina `workerData`: functions (a resolver) cannot cross threads. */
export type DeliverWorkerData = Omit<SenderOptions, 'resolver'>

let sender: HttpSender | undefined

export default async function deliver (batch: DeliveryTask[]): Promise<DeliveryResult[]> {
  sender ??= createHttpSender(workerData as DeliverWorkerData)
  return sender.send(batch)
}
