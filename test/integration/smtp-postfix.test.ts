// svc behind a real relay: Debian's Postfix on loopback is SMTP_URL, and relays everything to an SMTP
// server playing the remote MX (test/helpers/postfix.ts). What a sender pointing svc at their own
// Postfix would check: every email reaches the remote once, signed so that DKIM still verifies after
// Postfix has handled it, each with its own recipient's unsubscribe link; and whatever Postfix answers
// becomes the sender's events. Its refusal at RCPT (550) is a bounce and a suppression; its 450 is a
// retry, delivered once Postfix relents; and a recipient the remote refuses after Postfix took the
// message comes back as Postfix's own DSN, mailed to the VERP Return-Path, which Postfix routes to svc's
// inbound port: a bounce, suppressed, on the right recipient.
//
// And a Postfix that takes no mail before STARTTLS, with a certificate svc is told to trust: svc
// upgrades every connection, and without that trust sends nothing.
//
// Skipped, saying why, where Postfix is not installed or the tests do not run as root (.ci/run installs
// it from Debian).
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { dkimVerify } from 'mailauth'
import { simpleParser } from 'mailparser'
import { createHash } from 'node:crypto'
import { createSmtpThreadTransport } from '../../src/mail/smtp-thread.js'
import { createSmtpTransport } from '../../src/mail/smtp-transport.js'
import { verifyTrackingToken } from '../../src/mail/tracking.js'
import type { InboundMail } from '../../src/mail/inbound/listener.js'
import { startDnsServer } from '../helpers/dns-server.js'
import { verifiedDomain } from '../helpers/domains.js'
import { freePort } from '../helpers/ports.js'
import { SAMPLE_PNG, samplePdf } from '../helpers/files.js'
import { postfixMissing, startPostfix, type PostfixOptions } from '../helpers/postfix.js'
import { TEST_SECRET, startServer } from '../helpers/server.js'
import { readerBatches, sender, timeline } from '../helpers/sending.js'
import { header, startSmtpSink } from '../helpers/smtp-sink.js'
import { waitFor } from '../helpers/wait.js'

const missing = postfixMissing()
const TLS_DIR = new URL('../../../test/fixtures/tls/', import.meta.url)

async function world (t: Parameters<typeof startServer>[0], access: PostfixOptions['access'] = {}, more: Partial<PostfixOptions> = {}) {
  const dns = await startDnsServer(t)
  const remote = await startSmtpSink()
  t.after(() => remote.close())
  const relayPort = await freePort()
  const server = await startServer(t, {
    env: {
      DNS_SERVERS: dns.server, SMTP_URL: `smtp://127.0.0.1:${relayPort}`, PUBLIC_URL: 'https://mail.svc.test',
      MAIL_FROM: 'svc <no-reply@svc.test>', INBOUND_SMTP_PORT: '0', INBOUND_SMTP_HOST: '127.0.0.1',
    },
    // Retries a quarter of a second apart, for ten seconds: long enough to outlast a restart of Postfix.
    deps: { mailer: { retryDelaysMs: Array.from({ length: 40 }, () => 250), random: () => 0.5 } },
  })
  const inbound = server.service.components.find((c) => c.name === 'inbound-smtp') as unknown as InboundMail
  // Mail for the bounce domain goes to svc's inbound port; everything else to the remote MX.
  const postfix = await startPostfix(t, { port: relayPort, relayPort: remote.port, transports: { 'bounces.example.com': inbound.port }, access, ...more })
  const s = await sender(server)
  await verifiedDomain(s.client, dns, 'example.com')
  return { dns, remote, server, postfix, s }
}

/** Whose token this is: the recipient sealed in it. */
function ownerOf (url: string, kind: 'unsubscribe'): string | undefined {
  const path = new URL(url).pathname
  return verifyTrackingToken(TEST_SECRET, path.slice(path.lastIndexOf('/') + 1), kind)?.recipient
}

describe('through a real Postfix', { skip: missing ?? false }, () => {
  test('1,000 emails from a verified domain: each reaches the remote once, its DKIM signature still verifies, its unsubscribe link names its recipient', async (t) => {
    const { dns, remote, postfix, s } = await world(t)
    const count = 1000
    for (const batch of readerBatches(count, 'Shop <shop@example.com>')) {
      const res = await s.batch(batch)
      assert.equal(res.status, 202, res.text)
    }
    await waitFor(() => `${count} messages at the remote through Postfix (${remote.received.length} so far)`, () => remote.received.length >= count, { timeoutMs: 180_000 })

    const seen = new Map<string, number>()
    for (const m of remote.received) {
      assert.equal(m.rcptTo.length, 1)
      const r = m.rcptTo[0]!
      seen.set(r, (seen.get(r) ?? 0) + 1)
      // Postfix handled it: its Received line is on top, and the envelope sender it kept is the VERP one.
      assert.match(m.raw, /^Received: from [^\r\n]*\r\n\s+by relay\.postfix\.test \(Postfix\)/)
      assert.match(m.mailFrom, /^b\+[a-z2-7]+@bounces\.example\.com$/)
      assert.equal(ownerOf(/^<(.+)>$/.exec(header(m.raw, 'List-Unsubscribe')!)![1]!, 'unsubscribe'), r)
    }
    assert.equal(seen.size, count, 'every recipient got their email')
    assert.deepEqual([...new Set(seen.values())], [1], 'each exactly once')
    for (const m of remote.received) {
      const verdict = await dkimVerify(Buffer.from(m.raw), { resolver: dns.resolve as never })
      const first = verdict.results[0] as { status: { result: string }; signingDomain?: string } | undefined
      assert.equal(first?.status.result, 'pass', `DKIM for ${m.rcptTo[0]} after Postfix: ${JSON.stringify(first?.status)}`)
      assert.equal(first?.signingDomain, 'example.com')
    }
    // Postfix queued each once: one queue id per message in its log, none deferred or bounced.
    const log = postfix.log()
    assert.equal(log.match(/ status=sent /g)?.length, count, 'Postfix relayed each message once')
    assert.doesNotMatch(log, / status=(deferred|bounced) /)
  })

  test('a PDF and an inline PNG through Postfix to a Maildir: the same bytes, the Content-ID the html names, DKIM still passing; a batch item with a file too', async (t) => {
    const { dns, postfix, s } = await world(t, {}, { maildirDomains: ['maildir.test'] })
    const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex')
    // Above the size whose bytes move to the SMTP thread rather than being copied (src/mail/smtp-thread.ts).
    const pdf = samplePdf(200 * 1024)
    const csv = Buffer.from('order,total\n7,12.50\n')
    const one = await s.send({
      from: 'Shop <shop@example.com>', to: 'jane@maildir.test', subject: 'Invoice 7',
      html: '<p>Your invoice.</p><p><img src="cid:logo@shop" alt="Shop"></p>',
      attachments: [
        { filename: 'Rechnung März.pdf', content: pdf.toString('base64') },
        { filename: 'logo.png', content: SAMPLE_PNG.toString('base64'), contentId: 'logo@shop' },
      ],
    })
    assert.equal(one.status, 202, one.text)
    const batch = await s.batch([
      { from: 'Shop <shop@example.com>', to: 'bob@maildir.test', subject: 'Receipt', text: 'Attached.', attachments: [{ filename: 'receipt.csv', content: csv.toString('base64') }] },
      { from: 'Shop <shop@example.com>', to: 'carol@maildir.test', subject: 'Hello', text: 'No files.' },
    ])
    assert.equal(batch.status, 202, batch.text)
    const delivered = await waitFor(() => `3 messages in Postfix's Maildir (${postfix.maildir().length} so far)`, () => {
      const box = postfix.maildir()
      return box.length >= 3 ? box : false
    }, { timeoutMs: 60_000 })
    const parsed = await Promise.all(delivered.map((raw) => simpleParser(raw, { keepCidLinks: true })))
    const to = (address: string) => parsed.findIndex((p) => (Array.isArray(p.to) ? p.to[0] : p.to)?.value[0]?.address === address)

    const jane = parsed[to('jane@maildir.test')]!
    const file = jane.attachments.find((a) => a.contentType === 'application/pdf')!
    assert.equal(file.filename, 'Rechnung März.pdf')
    assert.equal(sha256(file.content), sha256(pdf), 'the PDF, byte for byte')
    const logo = jane.attachments.find((a) => a.contentType === 'image/png')!
    assert.equal(logo.contentId, '<logo@shop>')
    assert.match(String(jane.html), /src="cid:logo@shop"/, 'the html names the inline part by its Content-ID')
    assert.equal(sha256(logo.content), sha256(SAMPLE_PNG))
    assert.match(String(jane.text), /Your invoice\./, 'a text part, written from the html')
    const bob = parsed[to('bob@maildir.test')]!
    assert.equal(bob.attachments.length, 1)
    assert.equal(bob.attachments[0]!.content.toString(), csv.toString())
    assert.equal(parsed[to('carol@maildir.test')]!.attachments.length, 0)
    // Postfix delivered them itself (its Delivered-To on top), and every signature still verifies.
    for (const raw of delivered) {
      assert.match(raw.toString('latin1'), /^Return-Path: <b\+[a-z2-7]+@bounces\.example\.com>\n(?:X-Original-To: [^\n]*\n)?Delivered-To: /)
      const verdict = await dkimVerify(raw, { resolver: dns.resolve as never })
      const first = verdict.results[0] as { status: { result: string }; signingDomain?: string } | undefined
      assert.equal(first?.status.result, 'pass', `DKIM in the Maildir: ${JSON.stringify(first?.status)}`)
      assert.equal(first?.signingDomain, 'example.com')
    }
  })

  test('a Postfix that takes no mail before STARTTLS: svc upgrades every connection to it, and sends nothing where it cannot verify the certificate', async (t) => {
    const remote = await startSmtpSink()
    t.after(() => remote.close())
    const postfix = await startPostfix(t, {
      relayPort: remote.port,
      tls: { certFile: fileURLToPath(new URL('relay-cert.pem', TLS_DIR)), keyFile: fileURLToPath(new URL('relay-key.pem', TLS_DIR)), required: true },
    })
    const ca = readFileSync(new URL('relay-cert.pem', TLS_DIR))
    // svc's own SMTP thread, told to trust the test certificate (a deployment would use NODE_EXTRA_CA_CERTS
    // or a certificate from a public authority).
    const transport = createSmtpThreadTransport(postfix.url, { tls: { ca }, maxConnections: 4, copies: { publicUrl: 'https://mail.svc.test', secret: TEST_SECRET } })
    const server = await startServer(t, { env: { SMTP_URL: postfix.url, PUBLIC_URL: 'https://mail.svc.test', MAIL_FROM: 'Example <mail@example.com>' }, deps: { transport } })
    t.after(() => transport.close())
    const s = await sender(server)
    const count = 50
    const res = await s.batch(Array.from({ length: count }, (_, i) => ({ to: `tls${i}@example.net`, subject: `Over TLS ${i}`, text: 'x' })))
    assert.equal(res.status, 202, res.text)
    // Only the sends count: Postfix mails its postmaster about a client in trouble, through the same remote.
    const ours = () => remote.received.filter((m) => /^tls\d+@example\.net$/.test(m.rcptTo[0] ?? ''))
    await waitFor(() => `${count} messages through Postfix over TLS (${ours().length} so far)`, () => ours().length >= count, { timeoutMs: 60_000 })
    assert.equal(new Set(ours().map((m) => m.rcptTo[0])).size, count, 'each once')
    assert.equal(ours().length, count)
    for (const m of ours()) {
      // Postfix's Received line names the TLS session it took the message over.
      assert.match(m.raw.split('\r\n\r\n')[0]!, /\(using TLSv1\.[23] with cipher [^)]+\)[\s\S]*by relay\.postfix\.test \(Postfix\) with ESMTPS/)
    }
    assert.doesNotMatch(postfix.log(), /Must issue a STARTTLS command first|disabling TLS support/)

    // The same Postfix, a client that does not trust its certificate: deferred, and Postfix took nothing.
    const untrusting = createSmtpTransport(postfix.url)
    try {
      const results = await untrusting.send({ messageId: 'em_untrusted', from: 'shop@example.com', to: ['nobody@example.net'], cc: [], bcc: [], subject: 'x', text: 'x', headers: {} })
      assert.equal(results[0]?.outcome, 'deferred')
      assert.match(results[0]?.response ?? '', /^ETLS: /)
    } finally {
      await untrusting.close()
    }
    assert.doesNotMatch(postfix.log(), /to=<nobody@example\.net>/)
    assert.equal(ours().length, count)
  })

  test('Postfix\'s answers become the sender\'s events: 550 at RCPT bounces, 450 retries until it relents, and the remote\'s refusal comes back as Postfix\'s DSN', async (t) => {
    const { remote, postfix, s } = await world(t, {
      'refused@example.net': '550 5.1.1 no such user here',
      'later@example.net': '450 4.2.0 mailbox busy, try later',
    })
    const res = await s.send({
      from: 'Shop <shop@example.com>', to: ['ok@example.net', 'refused@example.net', 'later@example.net', 'nosuch1@example.net'],
      subject: 'Your order', text: 'Thanks',
    })
    assert.equal(res.status, 202, res.text)
    const id: string = res.body.data.id

    // Postfix took ok and nosuch1 (it cannot know the remote will refuse nosuch1), refused `refused` at
    // once, and keeps answering 450 for `later`.
    await waitFor('the 550 and a 450 on the timeline', async () => {
      const events = timeline((await s.email(id)).body.data)
      return events.includes('email.bounced refused@example.net') && events.includes('email.delivered ok@example.net') ? events : false
    })
    const first = (await s.email(id)).body.data
    assert.ok(!['delivered', 'bounced', 'partially_delivered', 'failed'].includes(first.status), `a 450 is not final (the email is ${first.status})`)
    assert.ok(!timeline(first).some((e: string) => /^email\.(delivered|bounced) later@/.test(e)), 'nothing final for later@example.net yet')

    // Postfix relents, and is restarted on its new settings: svc's pool loses its connections, opens
    // new ones, and the next retry delivers `later`, once.
    await postfix.restart({ access: { 'refused@example.net': '550 5.1.1 no such user here' } })
    const done = await waitFor('later@example.net to be delivered on a retry', async () => {
      const e = (await s.email(id)).body.data
      return timeline(e).includes('email.delivered later@example.net') ? e : false
    }, { timeoutMs: 60_000 })
    // Postfix said 250 to svc; it relays on its own time.
    await waitFor('Postfix to relay later@example.net\'s copy', () => remote.received.some((m) => m.rcptTo.includes('later@example.net')))
    assert.equal(remote.received.filter((m) => m.rcptTo.includes('later@example.net')).length, 1)
    assert.equal(remote.received.filter((m) => m.rcptTo.includes('ok@example.net')).length, 1, 'a retry resends only what was pending')
    assert.equal(timeline(done).filter((e: string) => e === 'email.delivered ok@example.net').length, 1)

    // The remote refused nosuch1: Postfix bounces it to the VERP address, which it routes to svc.
    const bounced = await waitFor('Postfix\'s DSN for nosuch1 to reach svc', async () => {
      const e = (await s.email(id)).body.data
      return timeline(e).includes('email.bounced nosuch1@example.net') ? e : false
    }, { timeoutMs: 60_000 })
    const dsn = bounced.events.find((e: { type: string; recipient: string }) => e.type === 'email.bounced' && e.recipient === 'nosuch1@example.net')
    assert.match(dsn.reason, /^5\.1\.1 .*550/, 'the status and the remote\'s answer, from Postfix\'s DSN')
    assert.match(postfix.log(), /to=<nosuch1@example\.net>.* status=bounced /)
    // Postfix logs the DSN's delivery once svc's 250 reaches it, which may be just after svc has recorded it.
    await waitFor('Postfix to log the DSN as delivered to svc\'s inbound port', () => /to=<b\+[a-z2-7]+@bounces\.example\.com>.* status=sent /.test(postfix.log()))
    assert.equal(bounced.status, 'partially_delivered')

    const listed = new Map<string, string>((await s.client.get('/api/suppressions')).body.data.map((e: { email: string; reason: string }) => [e.email, e.reason]))
    assert.deepEqual([...listed.keys()].sort(), ['nosuch1@example.net', 'refused@example.net'])
    assert.equal(listed.get('refused@example.net'), 'bounced')
    assert.equal(listed.get('nosuch1@example.net'), 'bounced')
  })
})
