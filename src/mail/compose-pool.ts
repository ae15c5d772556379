// Where a message is built: in the mailer's own thread when its body is small (a hop to another thread
// would cost more than the build), in a worker thread when it is large. The mailer shares the main thread
// with the API and the delivery engine; a link-heavy megabyte of html took up to ~150 ms of it to rewrite,
// during which nothing else was answered.
import { fileURLToPath } from 'node:url'
import { Counter, type Registry } from 'prom-client'
import type { EmailRecord } from '../store/emails.js'
import { MessageBuildError, draftMessage, personalize, type MessageDraft } from './compose.js'
import { oneThread } from '../one-thread.js'
import type { OutgoingMessage } from './transport.js'
import type { ComposeAnswer, ComposeWorkerData } from '../../workers/compose.js'

const WORKER_FILE = fileURLToPath(new URL('../../workers/compose.js', import.meta.url))

/** Bodies (html + text, in characters) from this size up are built in the worker thread. */
export const COMPOSE_IN_THREAD_CHARS = 32 * 1024

export interface Composer {
  /** The message of the email's next attempt; throws MessageBuildError when it cannot be built. */
  compose(email: EmailRecord): Promise<OutgoingMessage>
  /** Its draft only (for a transport that makes the copies itself); throws MessageBuildError likewise. */
  draft(email: EmailRecord): Promise<MessageDraft>
  close(): Promise<void>
}

export function createComposer (opts: ComposeWorkerData & { registry?: Registry; thresholdChars?: number }): Composer {
  const threshold = opts.thresholdChars ?? COMPOSE_IN_THREAD_CHARS
  const where = opts.registry
    ? new Counter({
        name: 'svc_mail_composed_total',
        help: 'Messages built for send attempts, by thread: main (small bodies) or worker (large ones)',
        labelNames: ['thread'] as const,
        registers: [opts.registry],
      })
    : undefined
  const workerData: ComposeWorkerData = { publicUrl: opts.publicUrl, secret: opts.secret }
  // Large bodies are rare: their thread starts at the first one.
  const thread = oneThread<EmailRecord, ComposeAnswer>(WORKER_FILE, workerData)
  const draft = async (email: EmailRecord): Promise<MessageDraft> => {
    const size = (email.html?.length ?? 0) + (email.text?.length ?? 0)
    if (size < threshold) {
      where?.inc({ thread: 'main' })
      return draftMessage(email, workerData)
    }
    where?.inc({ thread: 'worker' })
    const answer = await thread.run(email)
    if (!answer.ok) throw new MessageBuildError(answer.reason)
    return answer.draft
  }
  return {
    async compose (email) {
      return personalize(await draft(email), workerData)
    },
    draft,
    close: () => thread.close(),
  }
}
