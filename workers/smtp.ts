// The SMTP thread: the relay's connections, each recipient's copy (from the mailer's draft), each
// message's MIME and DKIM signature, and the SMTP dialogue run here, beside the mailer's thread rather
// than in it. The mailer attaches once, with one long-lived
// Piscina task that hands over a MessagePort; messages come in on it in handfuls, and answers go back the
// same way as the relay gives them. The task ends when the mailer closes its end of the port.
// Wiring only; the behaviour is src/mail/smtp-transport.ts (tested in one thread) and smtp-wire.ts.
import type { MessagePort } from 'node:worker_threads'
import { workerData } from 'node:worker_threads'
import { MessageBuildError, MessageRefusedError, personalize } from '../src/mail/compose.js'
import { createSmtpTransport, type SmtpTransportOptions } from '../src/mail/smtp-transport.js'
import type { MailStage } from '../src/mail/stages.js'
import { fromWire, type AnswerBatch, type RelayAnswer, type RelayJob } from '../src/mail/smtp-wire.js'

/** Piscina `workerData`: the relay's URL (it may carry the password: it stays in this process's memory). */
export interface SmtpWorkerData {
  url: string
  options: Omit<SmtpTransportOptions, 'registry' | 'report'>
  /** What recipients' copies are made with, for drafts (the tracking secret stays in this process). */
  copies?: { publicUrl: string; secret: string }
}

export interface SmtpAttachJob { port: MessagePort }

const ANSWER_BATCH = 256

/** Messages started per turn of the thread's event loop. */
const START_PER_TURN = 16

const emptyBatch = (): AnswerBatch => ({ answers: [], stages: [], rendered: { template: 0, copy: 0 } })

export default async function attach ({ port }: SmtpAttachJob): Promise<number> {
  const data = workerData as SmtpWorkerData
  let batch = emptyBatch()
  let scheduled = false
  let closed = false
  let inFlight = 0
  let sent = 0
  const flush = () => {
    scheduled = false
    if (closed || (batch.answers.length === 0 && batch.stages.length === 0)) return
    port.postMessage(batch)
    batch = emptyBatch()
  }
  const later = () => {
    // Answers of one turn of the event loop travel together; a full handful goes at once.
    if (batch.answers.length >= ANSWER_BATCH) flush()
    else if (!scheduled) {
      scheduled = true
      setImmediate(flush)
    }
  }
  const transport = createSmtpTransport(data.url, {
    ...data.options,
    report: {
      stages: {
        since: (stage: MailStage, startedAt: number) => { batch.stages.push([stage, (performance.now() - startedAt) / 1000]) },
        observe: (stage: MailStage, seconds: number) => { batch.stages.push([stage, seconds]) },
      },
      rendered: (what, n) => { batch.rendered[what] += n },
    },
  })
  const copies = data.copies
  /** The message of a job: its copies made here when it came as a draft. */
  const sendJob = async (job: RelayJob) => {
    const msg = fromWire(job.msg)
    if (job.draft === undefined) return await transport.send(msg)
    if (copies === undefined) throw new Error('a draft reached an SMTP thread that cannot make copies')
    const t0 = performance.now()
    const made = personalize({ ...job.draft, msg }, copies)
    batch.stages.push(['copies', (performance.now() - t0) / 1000])
    return await transport.send(made)
  }
  let finish: () => void = () => {}
  const finished = new Promise<void>((resolve) => { finish = resolve })
  const answer = (a: RelayAnswer) => {
    inFlight -= 1
    batch.answers.push(a)
    later()
    if (closed && inFlight === 0) finish()
  }
  // Messages are started a handful per turn of the event loop: a whole post of them (up to a few hundred)
  // at once would keep the relay's replies waiting behind their rendering, and every connection with them.
  let waiting: RelayJob[] = []
  let next = 0
  let draining = false
  const drain = () => {
    const end = Math.min(waiting.length, next + START_PER_TURN)
    for (; next < end; next++) {
      const job = waiting[next]!
      inFlight += 1
      sent += 1
      sendJob(job).then(
        (results) => answer({ id: job.id, results }),
        (err: unknown) => answer({
          id: job.id,
          failed: {
            build: err instanceof MessageBuildError,
            ...(err instanceof MessageRefusedError ? { refused: true } : {}),
            reason: err instanceof Error ? err.message : String(err),
          },
        }),
      )
    }
    if (next < waiting.length) {
      setImmediate(drain)
    } else {
      waiting = []
      next = 0
      draining = false
    }
  }
  port.on('message', (jobs: RelayJob[]) => {
    if (waiting.length === 0) waiting = jobs
    else for (const job of jobs) waiting.push(job)
    if (!draining) {
      draining = true
      drain()
    }
  })
  port.on('close', () => {
    // The mailer closes its end once nothing is in flight; whatever still is has nowhere to answer, and
    // the email's lease brings it back.
    closed = true
    // Nor is a message not yet started sent now.
    waiting = waiting.slice(0, next)
    if (inFlight === 0) finish()
  })
  await finished
  await transport.close()
  return sent
}
