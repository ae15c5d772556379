// Attachments on real parts: a PDF and an inline PNG sent over SMTP to a real server on loopback, read
// back with mailparser (the bytes' SHA-256, the inline part's Content-ID, the text part written from the
// html) and DKIM-verified with mailauth; a batch item with a file; refusals at the API that store
// nothing; a relay whose SIZE is smaller than the message gets no DATA, and the timeline says why; and the
// bytes are dropped once the email is final, its attachments' facts kept.
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { request, type ClientRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, test } from 'node:test'
import { dkimVerify } from 'mailauth'
import { simpleParser } from 'mailparser'
import { SMTPServer } from 'smtp-server'
import { startDnsServer } from '../helpers/dns-server.js'
import { SAMPLE_PNG, samplePdf } from '../helpers/files.js'
import { verifiedDomain } from '../helpers/domains.js'
import { startServer, type TestServer } from '../helpers/server.js'
import { sender, timeline } from '../helpers/sending.js'
import { startSmtpSink } from '../helpers/smtp-sink.js'
import { waitFor } from '../helpers/wait.js'

const sha256 = (b: Buffer | Uint8Array) => createHash('sha256').update(b).digest('hex')

describe('attachments over SMTP', () => {
  test('a PDF and an inline PNG arrive whole in every copy, the text part is written from the html, and DKIM verifies', async (t) => {
    const dns = await startDnsServer(t)
    const sink = await startSmtpSink()
    t.after(() => sink.close())
    const server = await startServer(t, { env: { DNS_SERVERS: dns.server, SMTP_URL: sink.url, MAIL_FROM: 'svc <no-reply@svc.test>' } })
    const s = await sender(server)
    await verifiedDomain(s.client, dns, 'example.com')
    const pdf = samplePdf()
    const html = '<p>Your invoice, <b>June</b>.</p><p><img src="cid:logo@shop" alt="Shop"></p><p><a href="https://shop.example.com/orders/7">Your order</a></p>'
    const res = await s.send({
      from: 'Shop <shop@example.com>', to: ['first@example.net', 'second@example.net'], subject: 'Invoice 7', html,
      attachments: [
        { filename: 'C:\\Users\\me\\Rechnung März.pdf', content: pdf.toString('base64') },
        { filename: 'logo.png', content: SAMPLE_PNG.toString('base64'), contentId: 'logo@shop' },
      ],
    })
    assert.equal(res.status, 202, res.text)
    const id: string = res.body.data.id
    const email = await s.settled(id)
    assert.equal(email.status, 'delivered', JSON.stringify(email.events))
    assert.deepEqual(email.attachments, [
      { filename: 'Rechnung März.pdf', contentType: 'application/pdf', size: pdf.length, sha256: sha256(pdf) },
      { filename: 'logo.png', contentType: 'image/png', size: SAMPLE_PNG.length, sha256: sha256(SAMPLE_PNG), contentId: 'logo@shop' },
    ])

    assert.equal(sink.received.length, 2, 'a copy per recipient')
    for (const m of sink.received) {
      const parsed = await simpleParser(m.raw, { keepCidLinks: true })
      const file = parsed.attachments.find((a) => a.contentType === 'application/pdf')!
      assert.equal(file.filename, 'Rechnung März.pdf', 'the non-ASCII name comes back whole (RFC 2231)')
      assert.equal(sha256(file.content), sha256(pdf), 'the PDF arrives byte for byte')
      assert.equal(file.contentDisposition, 'attachment')
      const logo = parsed.attachments.find((a) => a.contentType === 'image/png')!
      assert.equal(logo.contentId, '<logo@shop>')
      assert.equal(logo.related, true, 'inline: in the html\'s multipart/related')
      assert.equal(sha256(logo.content), sha256(SAMPLE_PNG))
      assert.match(String(parsed.html), /src="cid:logo@shop"/, 'the html names the inline part by its Content-ID')
      // Written from the html: the words, and the link as text.
      assert.match(String(parsed.text), /Your invoice, June\./)
      assert.match(String(parsed.text), /Your order \[https:\/\/[^\]]+\]/)
      assert.match(m.raw, /^Content-Type: multipart\/mixed;/m)
      assert.match(m.raw, /Content-Type: multipart\/related;/)
      assert.match(m.raw, /Content-Type: multipart\/alternative;/)
      const verdict = await dkimVerify(Buffer.from(m.raw), { resolver: dns.resolve as never })
      const first = verdict.results[0] as { status: { result: string }; signingDomain?: string } | undefined
      assert.equal(first?.status.result, 'pass', `DKIM for ${m.rcptTo[0]}: ${JSON.stringify(first?.status)}`)
      assert.equal(first?.signingDomain, 'example.com')
    }
    // Each copy is its own (its tracking), the files the same.
    assert.notEqual(sink.received[0]!.raw, sink.received[1]!.raw)
  })

  test('a batch item with an attachment arrives; its neighbour without one is a plain message', async (t) => {
    const sink = await startSmtpSink()
    t.after(() => sink.close())
    const server = await startServer(t, { env: { SMTP_URL: sink.url, MAIL_FROM: 'Shop <shop@example.com>' } })
    const s = await sender(server)
    const csv = Buffer.from('order,total\n7,12.50\n')
    const res = await s.batch([
      { to: 'a@example.net', subject: 'Receipt', text: 'Attached.', attachments: [{ filename: 'receipt.csv', content: csv.toString('base64') }] },
      { to: 'b@example.net', subject: 'Hello', text: 'No files.' },
    ])
    assert.equal(res.status, 202, res.text)
    for (const { id } of res.body.data) assert.equal((await s.settled(id)).status, 'delivered')
    const byRecipient = new Map(sink.received.map((m) => [m.rcptTo[0], m.raw]))
    const withFile = await simpleParser(byRecipient.get('a@example.net')!)
    assert.equal(withFile.attachments.length, 1)
    assert.equal(withFile.attachments[0]!.filename, 'receipt.csv')
    assert.equal(withFile.attachments[0]!.contentType, 'text/csv')
    assert.equal(withFile.attachments[0]!.content.toString(), csv.toString())
    assert.equal((await simpleParser(byRecipient.get('b@example.net')!)).attachments.length, 0)
  })
})

describe('refused at the API, nothing stored', () => {
  test('over the allowance: 413 naming the limit; a program: 422 naming the file; bad base64: 400; none stores anything', async (t) => {
    const server = await startServer(t, { env: { ATTACHMENTS_MAX_BYTES: '3000' } })
    const s = await sender(server)
    const big = await s.send({ to: 'a@example.net', subject: 'Big', text: 'x', attachments: [{ filename: 'big.pdf', content: samplePdf(4000).toString('base64') }] })
    assert.equal(big.status, 413, big.text)
    assert.equal(big.body.error.code, 'payload_too_large')
    assert.match(big.body.error.message, /3,000 bytes/)
    assert.deepEqual(big.body.error.details.map((d: { path: string }) => d.path), ['body.attachments'])
    assert.match(big.body.error.details[0].message, /at most 3,000 bytes of attachments \(ATTACHMENTS_MAX_BYTES\)/)

    // In a batch, the item is named; the whole batch is refused.
    const batch = await s.batch([
      { to: 'a@example.net', subject: 'ok', text: 'x' },
      { to: 'b@example.net', subject: 'Big', text: 'x', attachments: [{ filename: 'a.bin', content: randomBytes(2000).toString('base64') }, { filename: 'b.bin', content: randomBytes(2000).toString('base64') }] },
    ])
    assert.equal(batch.status, 413, batch.text)
    assert.deepEqual(batch.body.error.details.map((d: { path: string }) => d.path), ['body[1].attachments'])

    const program = await s.send({ to: 'a@example.net', subject: 'Tool', text: 'x', attachments: [{ filename: '../setup.EXE', content: 'TVo=' }] })
    assert.equal(program.status, 422, program.text)
    assert.equal(program.body.error.code, 'attachment_not_allowed')
    assert.deepEqual(program.body.error.details.map((d: { path: string }) => d.path), ['body.attachments[0].filename'])
    assert.match(program.body.error.details[0].message, /"setup\.EXE" is refused: \.exe files are programs/)

    const bad = await s.send({ to: 'nope', subject: 'Bad', text: 'x', attachments: [{ filename: 'a.txt', content: 'aGVsbG8=\n' }, { filename: 'b.txt', content: 'x', unknown: 1 }] })
    assert.equal(bad.status, 400, bad.text)
    const paths = bad.body.error.details.map((d: { path: string }) => d.path)
    assert.ok(paths.includes('body.to'), paths.join(', '))
    assert.ok(paths.some((p: string) => p.startsWith('body.attachments')), paths.join(', '))

    const tooMany = await s.send({ to: 'a@example.net', subject: 'Many', text: 'x', attachments: Array.from({ length: 21 }, (_, i) => ({ filename: `${i}.txt`, content: 'eA==' })) })
    assert.equal(tooMany.status, 400, tooMany.text)
    assert.match(JSON.stringify(tooMany.body.error.details), /20/)

    const listed = await s.client.get('/api/emails')
    assert.equal(listed.status, 200)
    assert.deepEqual(listed.body.data, [], 'nothing was stored')
  })

  test('only the send routes take a large body: 5 MB of attachments go through, a 5 MB webhook is 413', async (t) => {
    const server = await startServer(t)
    const s = await sender(server)
    const file = randomBytes(5 * 1024 * 1024)
    const res = await s.send({ to: 'a@example.net', subject: 'Large', text: 'x', attachments: [{ filename: 'data.bin', content: file.toString('base64') }] })
    assert.equal(res.status, 202, res.text)
    const email = await s.settled(res.body.data.id)
    assert.equal(email.attachments[0].sha256, sha256(file))
    const hook = await s.client.post('/api/webhooks', { url: `https://example.com/${'x'.repeat(5 * 1024 * 1024)}`, events: ['email.sent'] })
    assert.equal(hook.status, 413)
  })
})

describe('large sends take their turn', () => {
  const metric = async (server: TestServer, name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec((await server.client().get('/metrics')).text)?.[1])

  test('a large body waits while others hold the budget, is refused with 503 and Retry-After past the wait, and goes in once room is made', async (t) => {
    const server = await startServer(t, { config: { sendBudget: { bytes: 2 * 1024 * 1024, waitMs: 400 } } })
    const s = await sender(server)
    const { port } = new URL(server.url)
    const body = (subject: string) => Buffer.from(JSON.stringify({
      to: 'a@example.net', subject, text: 'x', attachments: [{ filename: 'data.bin', content: randomBytes(1200 * 1024).toString('base64') }],
    }))
    // Holds the budget: its headers and half its body are in, the rest comes later.
    const first = body('First')
    const held = request({ host: '127.0.0.1', port: Number(port), method: 'POST', path: '/api/send', headers: { 'content-type': 'application/json', 'content-length': first.length, 'x-api-key': s.key } })
    const heldAnswer = new Promise<{ status: number; text: string }>((resolve, reject) => {
      held.on('response', (res) => { let text = ''; res.setEncoding('utf8').on('data', (c) => { text += c }).on('end', () => resolve({ status: res.statusCode!, text })) })
      held.on('error', reject)
    })
    held.write(first.subarray(0, first.length / 2))
    await waitFor('the first body to hold the budget', async () => (await metric(server, 'svc_send_body_bytes_held')) === first.length)

    // A small send does not wait; a large one does, and past the wait it is told to come back, nothing stored.
    const small = await s.send({ to: 'b@example.net', subject: 'Small', text: 'x' })
    assert.equal(small.status, 202, small.text)
    const refused = await s.client.request('POST', '/api/send', { body: body('Second').toString('latin1'), headers: { 'content-type': 'application/json', 'x-api-key': s.key } })
    assert.equal(refused.status, 503, refused.text)
    assert.equal(refused.body.error.code, 'unavailable')
    assert.equal(refused.headers['retry-after'], '5')
    assert.match(refused.body.error.message, /large sends/)

    held.end(first.subarray(first.length / 2))
    const answer = await heldAnswer
    assert.equal(answer.status, 202, answer.text)
    // Given back with the answer: the next large send goes straight in.
    const third = await s.send(JSON.parse(body('Third').toString()))
    assert.equal(third.status, 202, third.text)
    const listed = await s.client.get('/api/emails')
    assert.deepEqual(listed.body.data.map((e: { subject: string }) => e.subject).sort(), ['First', 'Small', 'Third'])
  })

  test('a sender that hangs up while waiting gives its place away', async (t) => {
    const server = await startServer(t, { config: { sendBudget: { bytes: 2 * 1024 * 1024, waitMs: 60_000 } } })
    const s = await sender(server)
    const { port } = new URL(server.url)
    const size = 1500 * 1024
    const open = (): ClientRequest => {
      const req = request({ host: '127.0.0.1', port: Number(port), method: 'POST', path: '/api/send', headers: { 'content-type': 'application/json', 'content-length': size, 'x-api-key': s.key } })
      req.on('error', () => {})
      req.write('{')
      return req
    }
    const holder = open()
    await waitFor('the first body to hold the budget', async () => (await metric(server, 'svc_send_body_bytes_held')) === size)
    const waiter = open()
    await waitFor('the second to wait', async () => (await metric(server, 'svc_send_bodies_waiting')) === 1)
    // The waiter goes, then the holder: the budget is whole again, a large send goes in.
    waiter.destroy()
    await waitFor('the waiter to leave', async () => (await metric(server, 'svc_send_bodies_waiting')) === 0)
    holder.destroy()
    await waitFor('the holder to give its bytes back', async () => (await metric(server, 'svc_send_body_bytes_held')) === 0)
    const content = randomBytes(1100 * 1024).toString('base64')
    const res = await s.send({ to: 'a@example.net', subject: 'After', text: 'x', attachments: [{ filename: 'data.bin', content }] })
    assert.equal(res.status, 202, res.text)
  })
})

describe('the relay\'s SIZE', () => {
  test('a message over it gets no DATA and fails at once with the limit on its timeline; one under it declares its size', async (t) => {
    const LIMIT = 4000
    const mailFrom: Array<Record<string, string>> = []
    let dataCommands = 0
    const relay = new SMTPServer({
      authOptional: true, disabledCommands: ['STARTTLS'], logger: false, size: LIMIT, closeTimeout: 1000,
      onMailFrom (address, _session, cb) { mailFrom.push({ ...(address.args as Record<string, string>) }); cb() },
      onData (stream, _session, cb) {
        dataCommands++
        stream.resume()
        stream.on('end', () => cb())
      },
    })
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve))
    t.after(() => new Promise<void>((resolve) => relay.close(() => resolve())))
    const port = (relay.server.address() as AddressInfo).port
    const server = await startServer(t, { env: { SMTP_URL: `smtp://127.0.0.1:${port}`, MAIL_FROM: 'Shop <shop@example.com>' } })
    const s = await sender(server)
    const send = (file?: Buffer) => s.send({
      to: ['a@example.net', 'b@example.net'], subject: 'Sized', text: 'Attached.',
      ...(file ? { attachments: [{ filename: 'report.pdf', content: file.toString('base64') }] } : {}),
    })

    // The first: no connection is open yet, so the connection refuses it after EHLO, before MAIL FROM.
    const first = await send(samplePdf(6000))
    assert.equal(first.status, 202)
    const failed = await s.settled(first.body.data.id)
    assert.equal(failed.status, 'failed')
    const reasons = failed.events.filter((e: { type: string }) => e.type === 'email.bounced').map((e: { reason: string }) => e.reason)
    assert.equal(reasons.length, 2)
    for (const r of reasons) assert.match(r, /^not sent: the relay takes at most 4000 bytes \(its SIZE\) and this message is \d+ bytes/)
    assert.deepEqual(timeline(failed).sort(), ['email.bounced a@example.net', 'email.bounced b@example.net', 'email.sent a@example.net', 'email.sent b@example.net'])
    assert.equal(dataCommands, 0)
    assert.equal(mailFrom.length, 0, 'not even MAIL FROM')
    // Not the addresses' fault: nothing is suppressed.
    assert.deepEqual((await s.client.get('/api/suppressions')).body.data, [])

    // Under the limit: delivered, its size declared in MAIL FROM.
    const small = await send()
    assert.equal((await s.settled(small.body.data.id)).status, 'delivered')
    assert.equal(dataCommands, 2)
    assert.equal(mailFrom.length, 2)
    for (const args of mailFrom) assert.match(args.SIZE ?? '', /^\d+$/)

    // Over it again, with the relay's limit known: refused before any transaction.
    const again = await send(samplePdf(6000))
    assert.equal((await s.settled(again.body.data.id)).status, 'failed')
    assert.equal(dataCommands, 2)
    assert.equal(mailFrom.length, 2)
  })
})

describe('the bytes go, the facts stay', () => {
  test('once the email is final and the retention has passed, its attachments\' bytes are dropped; GET still lists them', async (t) => {
    const server = await startServer(t, { deps: { mailer: { attachmentRetentionMs: 0 } } })
    const s = await sender(server)
    const pdf = samplePdf()
    const res = await s.send({ to: 'a@example.net', subject: 'Kept', text: 'x', attachments: [{ filename: 'a.pdf', content: pdf.toString('base64') }] })
    const id: string = res.body.data.id
    assert.deepEqual(await server.store.readEmailAttachments(id), [pdf])
    await s.settled(id)
    await waitFor('the bytes to be prunable', async () => (await server.service.mailer!.pruneAttachments()) === 1 || (await server.store.readEmailAttachments(id)) === null)
    assert.equal(await server.store.readEmailAttachments(id), null)
    const email = (await s.email(id)).body.data
    assert.deepEqual(email.attachments, [{ filename: 'a.pdf', contentType: 'application/pdf', size: pdf.length, sha256: sha256(pdf) }])
  })
})
