// The render worker thread: turns the SMTP transport's mail options for a message into its bytes on the
// wire (the MIME tree, its encoded html and text, and its DKIM signature), so that the main thread, which
// also serves the API and the delivery engine, does not spend milliseconds per message on them.
// nodemailer does the work, exactly as its SMTP transporter would: its stream transport runs the same
// pipeline (MailComposer, then the DKIM signer) and hands back a buffer instead of writing to a socket.
// Wiring only; the thread is managed by src/mail/render-pool.ts.
import nodemailer, { type SendMailOptions } from 'nodemailer'
import type StreamTransport from 'nodemailer/lib/stream-transport/index.js'
import { Piscina } from 'piscina'
import { errorKind } from '../src/mail/compose.js'

/** A failure comes back as a reason that names the step (an Error's class does not survive the trip). */
export type RenderAnswer = Uint8Array | { reason: string }

// No logger option: nodemailer logs nothing without one (its log would print the message's addresses).
const options: StreamTransport.Options = {
  streamTransport: true,
  buffer: true,
  // Bodies come from API requests: a "path" or URL in them must never be read or fetched, here as on
  // the main thread's SMTP transporter.
  disableFileAccess: true,
  disableUrlAccess: true,
}
const renderer = nodemailer.createTransport(options)

export default async function render (mail: SendMailOptions): Promise<RenderAnswer> {
  let raw: Buffer
  try {
    raw = (await renderer.sendMail(mail)).message as Buffer
  } catch (err) {
    // Only the error's class: its message may quote what it choked on (a path, an address).
    return { reason: `rendering the MIME message failed (${errorKind(err)})` }
  }
  // Handed over rather than copied, when the buffer is the message's alone (a small one may sit in
  // Node's shared allocation pool, which must not be taken away from this thread).
  return raw.byteOffset === 0 && raw.byteLength === raw.buffer.byteLength ? Piscina.move(raw) as Uint8Array : raw
}
