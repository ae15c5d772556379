// A discarding SMTP relay for the mail benchmarks: smtp-server on loopback, no TLS, no auth, every message
// read to its end and thrown away. It counts messages and recipients, and the time of the first and last
// message, so that the harness measures a sender by what the relay received; and when each message whose
// subject starts with "lat " arrived (the latency phase of the mail-over-SMTP scenario).
import { SMTPServer } from 'smtp-server'
import { serve } from '../lib/procs.js'

let messages = 0
let recipients = 0
let first = 0
let last = 0
let signed = 0
/** Arrival time (ms) by subject, for subjects "lat …" only; at most 100,000 kept. */
const arrivals = new Map<string, number>()

const server = new SMTPServer({
  disabledCommands: ['STARTTLS', 'AUTH'],
  authOptional: true,
  logger: false,
  // Many pooled connections from one sender: no cap below what a sender opens.
  maxClients: 1000,
  size: 50 * 1024 * 1024,
  onData (stream, session, callback) {
    let head = ''
    stream.on('data', (chunk: Buffer) => { if (head.length < 4096) head += chunk.toString('latin1', 0, Math.min(chunk.length, 4096)) })
    stream.on('end', () => {
      const now = Date.now()
      if (messages === 0) first = now
      last = now
      messages++
      recipients += session.envelope.rcptTo.length
      if (/^DKIM-Signature:/im.test(head)) signed++
      const subject = /^Subject: (lat [0-9]+)\r?$/m.exec(head)
      if (subject !== null && arrivals.size < 100_000) arrivals.set(subject[1]!, now)
      callback()
    })
  },
})
server.on('error', () => {})

await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
const port = (server.server.address() as { port: number }).port

serve((msg) => {
  switch (msg.type) {
    case 'info':
      return { port }
    case 'stats':
      return { messages, recipients, signed, first, last, now: Date.now() }
    case 'reset':
      messages = 0; recipients = 0; first = 0; last = 0; signed = 0
      arrivals.clear()
      return {}
    case 'arrivals':
      return { arrivals: [...arrivals] }
    default:
      throw new Error(`unknown request ${msg.type}`)
  }
})
