// `node dist/benchmarks/mail-render.js` (after `npm run build`): how much of the main thread rendering one
// SMTP message takes, in that thread (nodemailer's MIME pipeline and DKIM signature, as the SMTP transport
// did for every message before) and handed to the render worker thread (src/mail/render-pool.ts). The
// figure is the main thread's event-loop busy time per message, median of 10 after 2 warm-ups.
import { generateKeyPairSync } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import nodemailer, { type SendMailOptions } from 'nodemailer'
import { createRenderer } from '../src/mail/render-pool.js'

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs8', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } })

function message (kib: number, dkim: boolean): SendMailOptions {
  const line = '<p>Hello <a href="https://example.com/x?y=1">there</a>, a line of html with some words in it.</p>\n'
  const html = line.repeat(Math.ceil(kib * 1024 / 2 / line.length))
  const mail: SendMailOptions = { messageId: '<em_bench@example.com>', from: 'Shop <shop@example.com>', to: ['reader@example.net'], subject: 'Hello', html, text: html.replaceAll('<p>', '').replaceAll('</p>', '') }
  if (dkim) mail.dkim = { domainName: 'example.com', keySelector: 's1', privateKey }
  return mail
}

const busy = async (work: () => Promise<unknown>): Promise<number> => {
  const start = performance.eventLoopUtilization()
  await work()
  return performance.eventLoopUtilization(start).active
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!

const here = nodemailer.createTransport({ streamTransport: true, buffer: true, disableFileAccess: true, disableUrlAccess: true })
const worker = createRenderer()
console.log('| body (html + text) | DKIM | main thread, rendered there | main thread, handed to the worker |')
console.log('|---|---|---|---|')
for (const dkim of [false, true]) {
  for (const kib of [1, 32, 256, 1024]) {
    const mail = message(kib, dkim)
    const inline: number[] = []
    const handed: number[] = []
    for (let i = 0; i < 12; i++) {
      const a = await busy(() => here.sendMail(mail))
      const b = await busy(() => worker.render(mail))
      if (i >= 2) { inline.push(a); handed.push(b) }
    }
    console.log(`| ${kib} KiB | ${dkim ? 'yes' : 'no'} | ${median(inline).toFixed(1)} ms | ${median(handed).toFixed(2)} ms |`)
  }
}
await worker.close()
