// The SMTP thread: the relay's connections, each message's MIME and DKIM signature, and the SMTP dialogue
// run here, beside the mailer's thread rather than in it. The mailer attaches once, with one long-lived
// Piscina task that hands over a MessagePort; messages come in on it in handfuls, and answers go back the
// same way as the relay gives them. The task ends when the mailer closes its end of the port.
// Wiring only; the behaviour is src/mail/smtp-transport.ts (tested in one thread) and smtp-wire.ts.
import type { MessagePort } from 'node:worker_threads'
import { workerData } from 'node:worker_threads'
import { MessageBuildError } from '../src/mail/compose.js'
import { createSmtpTransport, type SmtpTransportOptions } from '../src/mail/smtp-transport.js'
import type { MailStage } from '../src/mail/stages.js'
import { fromWire, type AnswerBatch, type RelayAnswer, type RelayJob } from '../src/mail/smtp-wire.js'

/** Piscina `workerData`: the relay's URL (it may carry the password: it stays in this process's memory). */
export interface SmtpWorkerData {
  url: string
  options: Omit<SmtpTransportOptions, 'registry' | 'report'>
}

export interface SmtpAttachJob { port: MessagePort }

const ANSWER_BATCH = 256

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
  let finish: () => void = () => {}
  const finished = new Promise<void>((resolve) => { finish = resolve })
  const answer = (a: RelayAnswer) => {
    inFlight -= 1
    batch.answers.push(a)
    later()
    if (closed && inFlight === 0) finish()
  }
  port.on('message', (jobs: RelayJob[]) => {
    for (const job of jobs) {
      inFlight += 1
      sent += 1
      transport.send(fromWire(job.msg)).then(
        (results) => answer({ id: job.id, results }),
        (err: unknown) => answer({
          id: job.id,
          failed: { build: err instanceof MessageBuildError, reason: err instanceof Error ? err.message : String(err) },
        }),
      )
    }
  })
  port.on('close', () => {
    // The mailer closes its end once nothing is in flight; whatever still is has nowhere to answer, and
    // the email's lease brings it back.
    closed = true
    if (inFlight === 0) finish()
  })
  await finished
  await transport.close()
  return sent
}
