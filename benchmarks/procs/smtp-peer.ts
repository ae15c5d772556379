// The "hand-written script" a sender would compare svc with: nodemailer's pooled SMTP transport, the same
// connection count as svc's pool, every message handed to sendMail at once (nodemailer queues them), optionally
// DKIM-signed with nodemailer's own dkim option and with a per-recipient envelope sender (VERP-like).
import net from 'node:net'
import nodemailer from 'nodemailer'
import { serve } from '../lib/procs.js'

serve(async (msg) => {
  if (msg.type !== 'send') throw new Error(`unknown request ${msg.type}`)
  const port = Number(msg.port)
  const count = Number(msg.count)
  const dkim = msg.dkim as { domainName: string; keySelector: string; privateKey: string } | undefined
  const transporter = nodemailer.createTransport({
    host: '127.0.0.1', port, secure: false, ignoreTLS: true, pool: true, maxConnections: Number(msg.connections), maxMessages: Infinity,
    ...(dkim !== undefined ? { dkim } : {}),
  })
  ;(transporter as unknown as { getSocket: (o: unknown, cb: (err: Error | null, s?: { connection: net.Socket }) => void) => void }).getSocket = (_o, cb) => {
    const socket = net.connect(port, '127.0.0.1', () => cb(null, { connection: socket }))
    socket.setNoDelay(true)
    socket.once('error', (err) => cb(err))
  }
  const from = String(msg.from)
  // The same file in every message (the attachment scenario, benchmarks/scenarios/smtp-attachment.ts).
  const attachment = typeof msg.attachment === 'string'
    ? [{ filename: 'report.pdf', contentType: 'application/pdf', content: Buffer.from(msg.attachment, 'base64') }]
    : undefined
  const started = performance.now()
  const sends: Array<Promise<unknown>> = []
  for (let i = 0; i < count; i++) {
    const to = `someone${i}@example.com`
    sends.push(transporter.sendMail({
      from, to, subject: `Benchmark message ${i}`,
      html: `<p>Hello from the svc benchmark, message ${i}.</p><p><a href="https://example.com/docs">Read the docs</a></p>`,
      ...(msg.verp === true ? { envelope: { from: `bounce+${i}@bounces.example.com`, to: [to] } } : {}),
      ...(attachment !== undefined ? { attachments: attachment } : {}),
    }))
  }
  const settled = await Promise.allSettled(sends)
  const seconds = (performance.now() - started) / 1000
  transporter.close()
  const failed = settled.filter((s) => s.status === 'rejected').length
  return { seconds, failed }
})
