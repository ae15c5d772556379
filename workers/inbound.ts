// The inbound worker thread (src/mail/inbound/judging.ts): reads a received message with mailparser and
// judges its sender with mailauth, its DNS lookups made from here through DNS_SERVERS, so that neither the
// parse of a 10 MiB message nor thousands of signatures hold the thread that answers the API. The main
// thread ends a task that passes its deadline (or whose connection is gone) by terminating this thread.
// Wiring only; the work is src/mail/inbound/examine.ts, tested without threads.
import { workerData } from 'node:worker_threads'
import type { Authentication, ParsedMessage } from '../src/domain/received-message.js'
import { dnsBudgetEnd, dnsLookup, judge, limitedResolver, readMessage } from '../src/mail/inbound/examine.js'
import type { SignatureBounds } from '../src/mail/inbound/signature-bounds.js'

/** Piscina `workerData`: how every message is judged. */
export interface InboundWorkerData {
  dnsServers: string[]
  lookupTimeoutMs: number
  maxLookups: number
  bounds: SignatureBounds
}

/**
 * The message's bytes, shared with the main thread (a SharedArrayBuffer: not copied between threads), and
 * for a judgement its deadline (Date.now, the same clock in every thread), from which its DNS budget is set.
 */
export type InboundTask =
  | { kind: 'read'; raw: Uint8Array }
  | { kind: 'judge'; raw: Uint8Array; ip: string; helo: string; sender: string; mta: string; deadlineAt: number }

/** An Error's class does not survive the trip between threads: a message mailparser refused comes back as a reason. */
export type InboundAnswer =
  | { kind: 'read'; parsed: ParsedMessage }
  | { kind: 'unreadable'; reason: string }
  | { kind: 'judged'; authentication: Authentication }

const options = workerData as InboundWorkerData
const lookup = dnsLookup(options.dnsServers, options.lookupTimeoutMs)

export default async function inbound (task: InboundTask): Promise<InboundAnswer> {
  const raw = Buffer.from(task.raw.buffer, task.raw.byteOffset, task.raw.byteLength)
  if (task.kind === 'read') {
    let parsed: ParsedMessage
    try {
      parsed = await readMessage(raw)
    } catch (err) {
      return { kind: 'unreadable', reason: err instanceof Error ? err.message : String(err) }
    }
    // Each attachment in memory of its own size (a copy): a view into a larger buffer would carry all of
    // it to the main thread. It arrives there as a Uint8Array (judging.ts makes it a Buffer again).
    for (const a of parsed.attachments) a.content = new Uint8Array(a.content) as Buffer
    return { kind: 'read', parsed }
  }
  const authentication = await judge(raw, {
    ip: task.ip,
    helo: task.helo,
    sender: task.sender,
    mta: task.mta,
    resolver: limitedResolver(lookup, { maxLookups: options.maxLookups, until: dnsBudgetEnd(task.deadlineAt) }),
    bounds: options.bounds,
  })
  return { kind: 'judged', authentication }
}
