// Runs instrumentHtml off the test's thread, so a test can give up on a rewrite that never ends: a
// synchronous call on the main thread cannot be interrupted by any timeout, the test runner's included.
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads'
import { instrumentHtml, type InstrumentOptions } from '../../src/mail/tracking.js'

interface Job {
  html: string
  opts: InstrumentOptions
}

if (!isMainThread && parentPort !== null && (workerData as { instrumentWorker?: boolean } | undefined)?.instrumentWorker === true) {
  const port = parentPort
  port.on('message', (job: Job) => {
    port.postMessage(instrumentHtml(job.html, job.opts))
  })
}

/**
 * instrumentHtml(html, opts) in a worker thread; rejects (and stops the worker) when it has not answered
 * within `deadlineMs`, which no linear rewrite of a few megabytes comes near.
 */
export async function instrumentInWorker (html: string, opts: InstrumentOptions, deadlineMs = 50_000): Promise<string> {
  const worker = new Worker(new URL(import.meta.url), { workerData: { instrumentWorker: true } })
  try {
    return await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`instrumentHtml did not finish within ${deadlineMs} ms on ${html.length} characters: it is no longer linear`))
      }, deadlineMs)
      worker.once('message', (out: string) => { clearTimeout(timer); resolve(out) })
      worker.once('error', (err) => { clearTimeout(timer); reject(err) })
      worker.postMessage({ html, opts } satisfies Job)
    })
  } finally {
    await worker.terminate()
  }
}
