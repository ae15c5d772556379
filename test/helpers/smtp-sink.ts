// A real SMTP server on 127.0.0.1:0 that plays a relay. What it answers depends on the recipient's local
// part: `nosuch…` is refused with 550 at RCPT, `shutdown…` with 421 (and the connection closed),
// `flaky…` with 421 the first time it is seen and accepted after; everything else is accepted with 250.
// A message counts as received only once its 250 has been written: with `hold()`, DATA is answered only
// on `release()`, and a message whose connection died meanwhile is dropped, as a real relay drops it.
import type { AddressInfo } from 'node:net'
import { SMTPServer } from 'smtp-server'

export interface Received {
  mailFrom: string
  rcptTo: string[]
  raw: string
  /** When its 250 was written (ms since the epoch, this process's clock). */
  at: number
}

interface Held {
  sessionId: string
  message: Received
  answer: (err?: Error | null, message?: string) => void
}

export interface SmtpSink {
  url: string
  port: number
  received: Received[]
  /** Messages whose DATA waits for release(). */
  held(): number
  /** Client connections open now. */
  connections(): number
  hold(): void
  /** Answers every held message whose connection is still open, and stops holding. */
  release(): void
  close(): Promise<void>
}

function smtpError (message: string, responseCode: number): Error {
  return Object.assign(new Error(message), { responseCode })
}

export async function startSmtpSink (): Promise<SmtpSink> {
  const received: Received[] = []
  const seen = new Set<string>()
  const closed = new Set<string>()
  const open = new Set<string>()
  let holding = false
  let held: Held[] = []

  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    // A client that never says QUIT (a killed process) must not hold close() for the default 30 s.
    closeTimeout: 1000,
    onRcptTo (address, _session, cb) {
      const a = address.address.toLowerCase()
      const local = a.split('@')[0] ?? ''
      if (local.startsWith('nosuch')) return cb(smtpError('5.1.1 no such user here', 550))
      if (local.startsWith('shutdown')) return cb(smtpError('4.3.2 service shutting down', 421))
      if (local.startsWith('flaky') && !seen.has(a)) {
        seen.add(a)
        return cb(smtpError('4.3.2 busy, come back later', 421))
      }
      cb()
    },
    onData (stream, session, cb) {
      const chunks: Buffer[] = []
      stream.on('data', (c: Buffer) => chunks.push(c))
      stream.on('end', () => {
        const message: Received = {
          mailFrom: session.envelope.mailFrom === false ? '' : session.envelope.mailFrom.address,
          rcptTo: session.envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks).toString('utf8'),
          at: 0,
        }
        if (holding) {
          held.push({ sessionId: session.id, message, answer: cb })
          return
        }
        message.at = Date.now()
        received.push(message)
        cb(null, 'queued')
      })
    },
    onConnect (session, cb) {
      open.add(session.id)
      cb()
    },
    onClose (session) {
      open.delete(session.id)
      closed.add(session.id)
    },
  })
  // A client killed in the middle of a transaction (the multi-node tests SIGKILL a node whose messages
  // are held at DATA) resets its connection; smtp-server reports that as an 'error' on the server, which
  // would otherwise be thrown in the test process. The message is simply never answered, as with a real
  // relay; what a test checks is what the surviving clients got through.
  server.on('error', () => {})
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.server.address() as AddressInfo).port
  return {
    url: `smtp://127.0.0.1:${port}`,
    port,
    received,
    held: () => held.length,
    connections: () => open.size,
    hold: () => { holding = true },
    release: () => {
      holding = false
      const waiting = held
      held = []
      for (const h of waiting) {
        if (closed.has(h.sessionId)) continue
        h.message.at = Date.now()
        received.push(h.message)
        h.answer(null, 'queued')
      }
    },
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve())
    }),
  }
}

function headerBlock (raw: string): string {
  const end = raw.indexOf('\r\n\r\n')
  return end < 0 ? raw : raw.slice(0, end)
}

/** Header lines as they appear, continuation lines folded back onto their header. */
export function headerLines (raw: string): string[] {
  return headerBlock(raw).replace(/\r\n[ \t]+/g, ' ').split('\r\n')
}

export function header (raw: string, name: string): string | undefined {
  const prefix = name.toLowerCase() + ':'
  return headerLines(raw).find((l) => l.toLowerCase().startsWith(prefix))?.slice(prefix.length).trim()
}
