// Where the SMTP transport renders a message (its MIME and DKIM signature): in one worker thread, started
// at the first message and stopped when idle. Rendering costs milliseconds even for a small message (an
// RSA signature, nodemailer's stream pipeline) and hundreds for a megabyte; handing it over costs well
// under one, so the main thread keeps serving the API and the delivery engine meanwhile.
import { fileURLToPath } from 'node:url'
import type { SendMailOptions } from 'nodemailer'
import { MessageBuildError, errorKind } from './compose.js'
import { oneThread } from './one-thread.js'
import type { RenderAnswer } from '../../workers/render.js'

const WORKER_FILE = fileURLToPath(new URL('../../workers/render.js', import.meta.url))

export interface Renderer {
  /**
   * The message's bytes, DKIM-signed when `mail.dkim` is set. Throws MessageBuildError when it cannot be
   * rendered (the reason names the step, never the content).
   */
  render(mail: SendMailOptions): Promise<Buffer>
  close(): Promise<void>
}

export function createRenderer (): Renderer {
  const thread = oneThread<SendMailOptions, RenderAnswer>(WORKER_FILE)
  return {
    async render (mail) {
      if (thread.closed) throw new Error('the render thread is closed')
      let answer: RenderAnswer
      try {
        answer = await thread.run(mail)
      } catch (err) {
        if (thread.closed) throw new Error('the render thread is closed')
        // The thread died under this message (nodemailer threw where nothing catches it): the same
        // message would kill it again, so it is the message that cannot be built. Piscina starts another.
        throw new MessageBuildError(`rendering the MIME message stopped its thread (${errorKind(err)})`)
      }
      if (!(answer instanceof Uint8Array)) throw new MessageBuildError(answer.reason)
      return Buffer.from(answer.buffer, answer.byteOffset, answer.byteLength)
    },
    close: () => thread.close(),
  }
}
