// The SMTP transport in a thread of its own. Over SMTP each email costs its recipients' copies (tracking
// tokens, the html filled in), its MIME, its signature and its share of the SMTP dialogue: about as much as
// all the rest of its path through svc (accepting it, storing it, the record). Here that part runs in one
// worker thread beside the main one, so on two cores the two halves run at once. The message crosses as
// data (./smtp-wire.ts: a draft, or a message with its copies made), many to a message-port post.
import { fileURLToPath } from 'node:url'
import { MessageChannel, type MessagePort } from 'node:worker_threads'
import { Piscina } from 'piscina'
import { MessageBuildError, MessageRefusedError } from './compose.js'
import { DEFAULT_SMTP_POOL_SIZE, parseSmtpUrl, renderedCounter, type SmtpTransportOptions } from './smtp-transport.js'
import { stageTimer } from './stages.js'
import { draftToWire, toWire, type AnswerBatch, type RelayJob } from './smtp-wire.js'
import type { MessageDraft } from './compose.js'
import type { MailTransport, RecipientResult } from './transport.js'
import type { SmtpAttachJob, SmtpWorkerData } from '../../workers/smtp.js'

const WORKER_FILE = fileURLToPath(new URL('../../workers/smtp.js', import.meta.url))

interface Waiting { resolve: (results: RecipientResult[]) => void; reject: (err: Error) => void }

interface Lane { port: MessagePort; ended: Promise<void> }

export interface SmtpThreadOptions extends Omit<SmtpTransportOptions, 'report'> {
  /** What each recipient's copy is made with, in the thread (MailTransport.sendDraft); no sendDraft without it. */
  copies?: { publicUrl: string; secret: string }
}

/** Below this an attachment's bytes are copied across (a copy costs less than a transfer's bookkeeping). */
const MOVE_FROM_BYTES = 64 * 1024

/**
 * The attachment bytes moved (not copied) to the thread: those that are the whole of their own buffer.
 * A megabyte cloned across a message port costs 3–8 ms of the main thread (a structured clone); moved, it
 * costs nothing, and the main thread no longer holds the bytes while the thread sends them. The transport
 * owns a message's bytes once given them (./transport.ts OutgoingMessage.attachments).
 */
export function movedBytes (jobs: RelayJob[]): ArrayBuffer[] {
  const moved = new Set<ArrayBuffer>()
  for (const job of jobs) {
    for (const a of job.msg.attachments ?? []) {
      const bytes = a.content
      const buffer = bytes.buffer
      if (buffer instanceof ArrayBuffer && bytes.byteLength >= MOVE_FROM_BYTES && bytes.byteOffset === 0 && bytes.byteLength === buffer.byteLength) {
        moved.add(buffer)
      }
    }
  }
  return [...moved]
}

export function createSmtpThreadTransport (url: string, opts: SmtpThreadOptions = {}): MailTransport {
  // A bad URL is refused here, at start, not in the thread at the first email.
  parseSmtpUrl(url)
  const { registry, copies, ...options } = opts
  const workerData: SmtpWorkerData = { url, options: { ...options, maxConnections: options.maxConnections ?? DEFAULT_SMTP_POOL_SIZE } }
  if (copies !== undefined) workerData.copies = copies
  const pool = new Piscina({ filename: WORKER_FILE, workerData, minThreads: 0, maxThreads: 1, concurrentTasksPerWorker: 1, idleTimeout: 1000 })
  const stages = stageTimer(registry)
  const rendered = renderedCounter(registry)
  const waiting = new Map<number, Waiting>()
  let nextId = 1
  let outbox: RelayJob[] = []
  let scheduled = false
  let lane: Lane | undefined
  let closed = false

  const onAnswers = (batch: AnswerBatch) => {
    for (const [stage, seconds] of batch.stages) stages.observe(stage, seconds)
    if (batch.rendered.template > 0) rendered?.inc({ what: 'template' }, batch.rendered.template)
    if (batch.rendered.copy > 0) rendered?.inc({ what: 'copy' }, batch.rendered.copy)
    for (const a of batch.answers) {
      const w = waiting.get(a.id)
      if (w === undefined) continue
      waiting.delete(a.id)
      if ('results' in a) w.resolve(a.results)
      else {
        const { build, refused, reason } = a.failed
        w.reject(refused === true ? new MessageRefusedError(reason) : build ? new MessageBuildError(reason) : new Error(reason))
      }
    }
  }

  const attach = (): Lane => {
    if (lane !== undefined) return lane
    const { port1, port2 } = new MessageChannel()
    port1.on('message', onAnswers)
    const job: SmtpAttachJob = { port: port2 }
    const ended = pool.run(job, { transferList: [port2] }).then(() => {}, (err: unknown) => {
      // The thread died: what it had not answered fails as a transport error (the mailer retries it) and
      // the next message attaches to the thread Piscina starts in its place.
      if (lane === attached) lane = undefined
      port1.close()
      const reason = `the SMTP thread failed: ${err instanceof Error ? err.message : String(err)}`
      for (const w of waiting.values()) w.reject(new Error(reason))
      waiting.clear()
    })
    const attached: Lane = { port: port1, ended }
    lane = attached
    return attached
  }

  const flush = () => {
    scheduled = false
    if (outbox.length === 0) return
    const jobs = outbox
    outbox = []
    try {
      attach().port.postMessage(jobs, movedBytes(jobs))
    } catch (err) {
      // Bytes already moved or not movable: these messages fail as a transport error (the mailer retries
      // them with their bytes read again).
      const reason = `the message could not cross to the SMTP thread: ${err instanceof Error ? err.message : String(err)}`
      for (const job of jobs) {
        waiting.get(job.id)?.reject(new Error(reason))
        waiting.delete(job.id)
      }
    }
  }

  const relay = (wire: () => Omit<RelayJob, 'id'>): Promise<RecipientResult[]> => {
    if (closed) return Promise.reject(new Error('SMTP transport is closed'))
    let job: Omit<RelayJob, 'id'>
    try {
      job = wire()
    } catch (err) {
      return Promise.reject(err)
    }
    return new Promise<RecipientResult[]>((resolve, reject) => {
      const id = nextId++
      waiting.set(id, { resolve, reject })
      outbox.push({ id, ...job })
      // The messages of one turn of the event loop cross together.
      if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
    })
  }

  // The thread starts with the service, not with its first email: loading its modules and compiling its
  // code took the first few thousand emails of a burst a fifth of a second and more.
  attach()

  return {
    name: 'smtp',
    send (msg) {
      // Copies are made here, where the functions are: a copy that cannot be made fails before anything is sent.
      return relay(() => ({ msg: toWire(msg) }))
    },
    ...(copies !== undefined ? { sendDraft: (draft: MessageDraft) => relay(() => draftToWire(draft)) } : {}),
    async close () {
      if (closed) return
      closed = true
      flush()
      // The mailer closes its transport once its sends are answered; the thread then ends its connections.
      const current = lane
      lane = undefined
      if (current !== undefined) {
        current.port.close()
        await current.ended
      }
      await pool.close({ force: false })
    },
  }
}
