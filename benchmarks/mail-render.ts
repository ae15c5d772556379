// `node dist/benchmarks/mail-render.js` (after `npm run build`): what making one recipient's copy of an SMTP
// message costs the main thread, two ways: nodemailer's whole pipeline (MailComposer, then its DKIM signer)
// run for each recipient, and svc's template (src/mail/mime.ts: MailComposer once per message, then per
// recipient the html and List-Unsubscribe put in and a DKIM signature made in libuv's thread pool). The
// figures are the main thread's event-loop busy time and the wall time per recipient, for a message to 20
// recipients, median of 10 after 2 warm-ups.
import { generateKeyPairSync } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import nodemailer from 'nodemailer'
import { mimeTemplate } from '../src/mail/mime.js'
import type { OutgoingMessage } from '../src/mail/transport.js'

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs8', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } })
const RECIPIENTS = Array.from({ length: 20 }, (_, i) => `reader${i}@example.net`)

function bodies (kib: number): { html: string; text: string } {
  const line = '<p>Hello <a href="https://example.com/x?y=1">there</a>, a line of html with some words in it.</p>\n'
  const html = line.repeat(Math.ceil(kib * 1024 / 2 / line.length))
  return { html, text: html.replaceAll('<p>', '').replaceAll('</p>', '') }
}

const busy = async (work: () => Promise<unknown>): Promise<{ active: number; wall: number }> => {
  const start = performance.eventLoopUtilization()
  const t0 = performance.now()
  await work()
  return { active: performance.eventLoopUtilization(start).active, wall: performance.now() - t0 }
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!

const here = nodemailer.createTransport({ streamTransport: true, buffer: true, disableFileAccess: true, disableUrlAccess: true })
const unsubscribe = (r: string) => `<https://svc.example.com/t/u/${Buffer.from(r).toString('base64url')}${'x'.repeat(120)}>`
console.log(`| body (html + text) | DKIM | nodemailer per recipient: main thread / wall | template + copies: main thread / wall |`)
console.log('|---|---|---|---|')
for (const dkim of [false, true]) {
  for (const kib of [1, 32, 256]) {
    const { html, text } = bodies(kib)
    const key = dkim ? { domainName: 'example.com', keySelector: 's1', privateKey } : undefined
    const a: Array<{ active: number; wall: number }> = []
    const b: Array<{ active: number; wall: number }> = []
    for (let i = 0; i < 12; i++) {
      const x = await busy(() => Promise.all(RECIPIENTS.map((r) => here.sendMail({
        messageId: '<em_bench@example.com>', from: 'Shop <shop@example.com>', to: RECIPIENTS.slice(0, 3), subject: 'Hello',
        html: html.replace('https://example.com/x', `https://example.com/x/${r}`), text, headers: { 'List-Unsubscribe': unsubscribe(r) },
        ...(key !== undefined ? { dkim: key } : {}),
      }))))
      const y = await busy(async () => {
        const msg: OutgoingMessage = {
          messageId: 'em_bench', from: 'Shop <shop@example.com>', to: RECIPIENTS.slice(0, 3), cc: [], bcc: [], subject: 'Hello', html, text,
          headers: { 'List-Unsubscribe': unsubscribe(RECIPIENTS[0]!) }, ...(key !== undefined ? { dkim: key } : {}),
        }
        const t = await mimeTemplate(msg)
        await Promise.all(RECIPIENTS.map((r) => t.render({ html: html.replace('https://example.com/x', `https://example.com/x/${r}`), headers: { 'List-Unsubscribe': unsubscribe(r) } })))
      })
      if (i >= 2) { a.push(x); b.push(y) }
    }
    const per = (xs: Array<{ active: number; wall: number }>) =>
      `${(median(xs.map((v) => v.active)) / RECIPIENTS.length).toFixed(2)} ms / ${(median(xs.map((v) => v.wall)) / RECIPIENTS.length).toFixed(2)} ms`
    console.log(`| ${kib} KiB | ${dkim ? 'yes' : 'no'} | ${per(a)} | ${per(b)} |`)
  }
}
