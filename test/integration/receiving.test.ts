// Receiving mail on real parts: svc's inbound SMTP listener (smtp-server) on loopback, a DNS server on
// loopback holding both svc's domain and the sender's (DKIM key, SPF, DMARC), a real webhook receiver,
// and messages DKIM-signed by their sender with nodemailer. A customer answers an email svc sent, with an
// attachment; the test checks what the owner of the domain sees: the email.received webhook, the API
// (list, one, raw, attachment, byte for byte), the verdicts, and what is refused (550, 552, 403).
import assert from 'node:assert/strict'
import { generateKeyPairSync, randomBytes } from 'node:crypto'
import { describe, test } from 'node:test'
import nodemailer from 'nodemailer'
import { makeEvent } from '../../src/domain/email-events.js'
import { newId } from '../../src/domain/ids.js'
import { PLANS } from '../../src/domain/plans.js'
import type { InboundMail } from '../../src/mail/inbound/listener.js'
import type { ReceivedRecord } from '../../src/store/received.js'
import { startDnsServer, type TestDns } from '../helpers/dns-server.js'
import { publishRecords, verifiedDomain, type ShownRecord } from '../helpers/domains.js'
import { startReceiver } from '../helpers/receiver.js'
import { errorOf, signedUp, startServer, type TestServer } from '../helpers/server.js'
import { sender, type Sender } from '../helpers/sending.js'
import { header, startSmtpSink } from '../helpers/smtp-sink.js'
import { waitFor } from '../helpers/wait.js'

const MAX_BYTES = 1024 * 1024

interface SenderKey { selector: string; privateKey: string; publicKey: string }

function dkimKey (selector: string): SenderKey {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'der' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  })
  return { selector, privateKey, publicKey: Buffer.from(publicKey).toString('base64') }
}

/** The message nodemailer builds (and DKIM-signs when `key` is given), as bytes with CRLF line ends. */
async function compose (mail: nodemailer.SendMailOptions, key?: SenderKey, domainName = 'customer.example'): Promise<Buffer> {
  const t = nodemailer.createTransport({
    streamTransport: true, buffer: true, newline: 'windows',
    ...(key ? { dkim: { domainName, keySelector: key.selector, privateKey: key.privateKey } } : {}),
  })
  const info = await t.sendMail(mail)
  return info.message as Buffer
}

interface World {
  server: TestServer
  dns: TestDns
  s: Sender
  receiver: Awaited<ReturnType<typeof startReceiver>>
  domainId: string
  sentId: string
  sentMessageId: string
  key: SenderKey
  fullKey: string
  port: number
  /** Mails `raw` to svc's listener from `localAddress`; resolves with the server's last answer. */
  mail(to: string | string[], raw: Buffer | string, from?: string, localAddress?: string): Promise<string>
  get(path: string, key?: string): Promise<{ status: number; headers: Headers; bytes: Buffer; json: any }>
}

async function world (t: Parameters<typeof startServer>[0], pruneEveryMs?: number, maxBytes = MAX_BYTES): Promise<World> {
  const dns = await startDnsServer(t)
  const sink = await startSmtpSink()
  const server = await startServer(t, {
    env: {
      DNS_SERVERS: dns.server, SMTP_URL: sink.url, PUBLIC_URL: 'https://mail.svc.test', INBOUND_SMTP_PORT: '0',
      INBOUND_SMTP_HOST: '127.0.0.1', INBOUND_MAX_BYTES: String(maxBytes),
    },
    deps: { mailer: { retryDelaysMs: [50, 50], random: () => 0.5 }, ...(pruneEveryMs !== undefined ? { receiving: { pruneEveryMs } } : {}) },
  })
  t.after(() => sink.close())
  const receiver = await startReceiver(t)
  const s = await sender(server)
  const domain = await verifiedDomain(s.client, dns, 'example.com')

  // The sender's own domain: its DKIM key, an SPF record naming 127.0.0.1 only, a strict DMARC policy.
  const key = dkimKey('s1')
  dns.publish('s1._domainkey.customer.example', { TXT: [`v=DKIM1; k=rsa; p=${key.publicKey}`] })
  dns.publish('customer.example', { TXT: ['v=spf1 ip4:127.0.0.1 -all'] })
  dns.publish('_dmarc.customer.example', { TXT: ['v=DMARC1; p=reject; adkim=r; aspf=r'] })

  const hook = await s.client.post('/api/webhooks', { url: receiver.url('/hook'), events: ['email.received'] })
  assert.equal(hook.status, 201, hook.text)
  receiver.secrets = [hook.body.data.secret]

  // svc sends an email from support@example.com; the customer will answer it.
  const sent = await s.send({ from: 'Support <support@example.com>', to: 'customer@customer.example', subject: 'Your ticket 42', text: 'We are on it.' })
  assert.equal(sent.status, 202, sent.text)
  const sentId: string = sent.body.data.id
  await s.settled(sentId, 'delivered')
  const sentMessageId = header(sink.received.at(-1)!.raw, 'Message-ID')!.trim()

  const full = await s.client.post('/api/keys', { name: 'ops', permission: 'full_access' })
  assert.equal(full.status, 201, full.text)

  const inbound = server.service.components.find((c) => c.name === 'inbound-smtp') as unknown as InboundMail
  const port = inbound.port
  const mail = async (to: string | string[], raw: Buffer | string, from = 'customer@customer.example', localAddress?: string) => {
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, logger: false, ...(localAddress ? { localAddress } : {}) })
    try {
      const info = await transport.sendMail({ envelope: { from, to: Array.isArray(to) ? to : [to] }, raw })
      return info.response
    } finally {
      transport.close()
    }
  }
  const get = async (path: string, apiKey = full.body.data.key as string) => {
    const res = await fetch(server.url + path, { headers: { 'x-api-key': apiKey } })
    const bytes = Buffer.from(await res.arrayBuffer())
    let json: any
    try { json = JSON.parse(bytes.toString('utf8')) } catch {}
    return { status: res.status, headers: res.headers, bytes, json }
  }
  return { server, dns, s, receiver, domainId: domain.id, sentId, sentMessageId, key, fullKey: full.body.data.key, port, mail, get }
}

async function turnOn (w: World): Promise<ShownRecord> {
  const res = await w.s.client.patch(`/api/domains/${w.domainId}`, { receiving: true })
  assert.equal(res.status, 200, res.text)
  assert.equal(res.body.data.receiving, true)
  const mx = res.body.data.records.find((r: ShownRecord) => r.purpose === 'receiving')
  assert.deepEqual(mx, { type: 'MX', name: 'example.com', value: 'mail.svc.test', priority: 10, purpose: 'receiving', required: false, status: 'pending' })
  publishRecords(w.dns, [mx])
  const verified = await w.s.client.post(`/api/domains/${w.domainId}/verify`)
  assert.equal(verified.body.data.status, 'verified')
  assert.equal(verified.body.data.records.find((r: ShownRecord) => r.purpose === 'receiving').status, 'verified')
  return mx
}

async function metric (w: World, labels: string): Promise<number> {
  const text = (await w.server.client().get('/metrics')).text
  const line = text.split('\n').find((l) => l.startsWith(`svc_inbound_messages_total{${labels}}`))
  return line === undefined ? 0 : Number(line.split(' ').at(-1))
}

/** A message of `size` bytes kept at `at`, stored directly (as the listener would, without SMTP). */
async function stored (w: World, size: number, at: number): Promise<ReceivedRecord> {
  const message = {
    id: newId('rcv', at), accountId: w.s.accountId, domainId: w.domainId, recipients: ['old@example.com'], mailFrom: '', from: '', to: [], cc: [],
    subject: 'old', text: null, textTruncated: false, html: null, htmlTruncated: false, headers: [], messageId: null, inReplyTo: null,
    attachments: [], authentication: { spf: 'none', dkim: 'none', dmarc: 'none', arc: null }, size, createdAt: new Date(at).toISOString(),
  } satisfies ReceivedRecord
  const event = makeEvent({ accountId: w.s.accountId, emailId: message.id, type: 'email.received', recipient: message.recipients[0]!, at }, { id: message.id })
  assert.equal(await w.server.store.insertReceived({ message, raw: Buffer.from('x'), contents: [], event, limitBytes: Infinity }), 'recorded')
  return message
}

const refusedWith = (code: number) => (err: { responseCode?: number }) => err.responseCode === code

describe('receiving mail', () => {
  test('a reply with an attachment: 250, one signed email.received with every field, the API byte for byte', async (t) => {
    const w = await world(t)

    // Before receiving is on, the domain's addresses are refused like any other.
    const early = await compose({ from: 'customer@customer.example', to: 'support@example.com', subject: 'early', text: 'x' }, w.key)
    await assert.rejects(w.mail('support@example.com', early), refusedWith(550))
    await turnOn(w)

    const pdf = Buffer.concat([Buffer.from('%PDF-1.4\n'), randomBytes(20_000), Buffer.from('\n%%EOF\n')])
    const raw = await compose({
      from: 'Customer <customer@customer.example>',
      to: 'Support <support@example.com>',
      cc: 'boss@customer.example',
      subject: 'Re: Your ticket 42',
      // CRLF line ends: SMTP carries nothing else, so what arrives is these bytes exactly.
      text: 'Thanks, the invoice is attached.\r\nCustomer',
      html: '<p>Thanks, the <b>invoice</b> is attached. <img src="https://tracker.example/pixel.gif"></p>',
      inReplyTo: w.sentMessageId,
      references: [w.sentMessageId],
      attachments: [{ filename: 'invoice 42 – März.pdf', content: pdf, contentType: 'application/pdf' }],
    }, w.key)
    const answer = await w.mail('support@example.com', raw)
    assert.match(answer, /^250 /)

    await w.receiver.until(() => w.receiver.received.length >= 1, 'email.received')
    const [hook] = w.receiver.received
    assert.equal(w.receiver.received.length, 1)
    assert.equal(hook!.event, 'email.received')
    assert.deepEqual(hook!.validFor, w.receiver.secrets, 'signed like the others')
    assert.deepEqual(hook!.standardValidFor, w.receiver.secrets, 'Standard Webhooks headers')
    const body = hook!.body
    assert.equal(body.type, 'email.received')
    assert.match(body.eventId, /^evt_/)
    assert.match(body.emailId, /^rcv_[0-9a-f]{28}$/)
    assert.equal(body.to, 'support@example.com')
    assert.ok(Date.parse(body.timestamp) > 0)
    const d = body.data
    assert.equal(d.id, body.emailId)
    assert.equal(d.from, '"Customer" <customer@customer.example>')
    assert.deepEqual(d.to, ['support@example.com'])
    assert.deepEqual(d.cc, ['boss@customer.example'])
    assert.equal(d.subject, 'Re: Your ticket 42')
    assert.equal(d.text, 'Thanks, the invoice is attached.\nCustomer')
    assert.equal(d.textTruncated, false)
    assert.equal(d.html, '<p>Thanks, the <b>invoice</b> is attached. <img src="https://tracker.example/pixel.gif"></p>', 'html passed on as written')
    assert.equal(d.htmlTruncated, false)
    assert.ok(d.headers.some((h: { name: string }) => h.name === 'DKIM-Signature'))
    assert.deepEqual(d.headers.find((h: { name: string }) => h.name === 'Subject'), { name: 'Subject', value: 'Re: Your ticket 42' })
    assert.match(d.messageId, /^<.+@customer\.example>$/)
    assert.equal(d.inReplyTo, w.sentId, 'names the email svc sent')
    assert.deepEqual(d.attachments, [{ id: 'att_1', filename: 'invoice 42 – März.pdf', contentType: 'application/pdf', size: pdf.length }])
    assert.deepEqual(d.authentication, { spf: 'pass', dkim: 'pass', dmarc: 'pass', arc: null })

    // The API, with a full_access key and with the cookie.
    const list = await w.get('/api/received')
    assert.equal(list.status, 200)
    assert.deepEqual(list.json.data.map((m: { id: string }) => m.id), [d.id])
    assert.equal(list.json.nextCursor, null)
    assert.deepEqual((await w.s.client.get('/api/received?to=SUPPORT@example.com')).body.data.map((m: { id: string }) => m.id), [d.id])
    assert.deepEqual((await w.s.client.get('/api/received?to=sales@example.com')).body.data, [])
    const one = await w.get(`/api/received/${d.id}`)
    assert.equal(one.status, 200)
    const { recipient, mailFrom, size, createdAt, ...fields } = one.json.data
    assert.deepEqual(fields, d, 'the same fields as the webhook')
    assert.deepEqual(d.recipients, ['support@example.com'])
    assert.equal(recipient, 'support@example.com')
    assert.equal(mailFrom, 'customer@customer.example')
    assert.equal(size, raw.length, 'the raw message counts, its attachment inside it')
    assert.ok(Date.parse(createdAt) > 0)

    const rawRes = await w.get(`/api/received/${d.id}/raw`)
    assert.equal(rawRes.status, 200)
    assert.equal(rawRes.headers.get('content-type'), 'message/rfc822')
    assert.ok(rawRes.bytes.equals(raw), 'the raw message byte for byte')
    const att = await w.get(`/api/received/${d.id}/attachments/att_1`)
    assert.equal(att.status, 200)
    assert.equal(att.headers.get('content-type'), 'application/pdf')
    assert.equal(att.headers.get('content-disposition'), 'attachment; filename="invoice 42 _ M_rz.pdf"; filename*=UTF-8\'\'invoice%2042%20%E2%80%93%20M%C3%A4rz.pdf')
    assert.equal(att.headers.get('x-content-type-options'), 'nosniff')
    assert.ok(att.bytes.equals(pdf), 'the attachment byte for byte')
    assert.equal((await w.get(`/api/received/${d.id}/attachments/att_2`)).status, 404)
    assert.equal((await w.get('/api/received/rcv_0000000000000000000000000000')).status, 404)

    // Another account sees none of it.
    const other = await signedUp(w.server)
    assert.equal((await other.client.get(`/api/received/${d.id}`)).status, 404)
    assert.equal((await other.client.get(`/api/received/${d.id}/raw`)).status, 404)
    assert.deepEqual((await other.client.get('/api/received')).body.data, [])

    // A sending_access key may not read received mail nor switch receiving.
    const sendingKey = await w.s.client.post('/api/keys', { name: 'app', permission: 'sending_access' })
    for (const path of ['/api/received', `/api/received/${d.id}`, `/api/received/${d.id}/raw`, `/api/received/${d.id}/attachments/att_1`]) {
      const res = await w.get(path, sendingKey.body.data.key)
      assert.equal(res.status, 403, path)
      assert.equal(res.json.error.code, 'insufficient_permission')
    }
    const patch = await w.server.client().patch(`/api/domains/${w.domainId}`, { receiving: false }, { 'x-api-key': sendingKey.body.data.key })
    assert.equal(patch.status, 403)
    assert.equal(errorOf(patch).code, 'insufficient_permission')

    assert.equal(await metric(w, 'kind="received",outcome="received"'), 1)
  })

  test('one 7 MB message to 6 addresses of one account: stored once, listing the 6, its raw size counted once; DELETE frees it', async (t) => {
    const w = await world(t, undefined, 8 * 1024 * 1024)
    await turnOn(w)
    const addresses = ['sales', 'support', 'billing', 'info', 'jobs', 'press'].map((l) => `${l}@example.com`)
    // 5 MiB of attachment, base64 in the message: about 7 MB raw.
    const attachment = randomBytes(5 * 1024 * 1024)
    const raw = await compose({
      from: 'customer@customer.example', to: addresses.join(', '), subject: 'The plans, for everyone', text: 'Attached.',
      attachments: [{ filename: 'plans.bin', content: attachment, contentType: 'application/octet-stream' }],
    }, w.key)
    assert.ok(raw.length > 7_000_000 && raw.length < 8 * 1024 * 1024, `${raw.length} bytes`)
    // The Free plan's storage, with room for this message exactly once (six copies, or the attachment
    // counted beside the raw message, would not fit).
    const filler = await stored(w, PLANS.free.receivedBytes - raw.length, Date.now() - 1000)

    assert.match(await w.mail(addresses, raw), /^250 /)
    const list = (await w.get('/api/received')).json.data as Array<{ id: string; recipients: string[]; recipient: string; size: number }>
    assert.deepEqual(list.map((m) => m.id).slice(1), [filler.id], 'one message stored')
    const m = list[0]!
    assert.deepEqual(m.recipients, addresses, 'listing every recipient, in order')
    assert.equal(m.recipient, 'sales@example.com', 'recipient: the first')
    assert.equal(m.size, raw.length)
    for (const to of addresses) assert.deepEqual((await w.get(`/api/received?to=${encodeURIComponent(to)}`)).json.data.map((x: { id: string }) => x.id), [m.id], to)
    assert.equal(await w.server.store.receivedBytes(w.s.accountId), PLANS.free.receivedBytes, 'the running total: the filler and this message once')
    assert.ok((await w.get(`/api/received/${m.id}/attachments/att_1`)).bytes.equals(attachment))

    // One email.received for it, to the first recipient, its data listing all six.
    assert.deepEqual((await w.server.store.listEmailEvents(w.s.accountId, m.id)).map((e) => e.type), ['email.received'])
    await w.receiver.until(() => w.receiver.received.some((r) => r.body.emailId === m.id), 'email.received')
    const hook = w.receiver.received.find((r) => r.body.emailId === m.id)!.body
    assert.equal(hook.to, 'sales@example.com')
    assert.deepEqual(hook.data.recipients, addresses)

    // Full: the next recipient is answered 452.
    const small = await compose({ from: 'customer@customer.example', to: 'support@example.com', subject: 'hi', text: 'hi' }, w.key)
    await assert.rejects(w.mail('support@example.com', small), refusedWith(452))

    // DELETE: a sending_access key may not, another account and an unknown id get 404 and change nothing.
    const sendingKey = (await w.s.client.post('/api/keys', { name: 'app', permission: 'sending_access' })).body.data.key as string
    const asSending = await w.server.client().delete(`/api/received/${m.id}`, { 'x-api-key': sendingKey })
    assert.equal(asSending.status, 403)
    assert.equal(errorOf(asSending).code, 'insufficient_permission')
    const other = await signedUp(w.server)
    const foreign = await other.client.delete(`/api/received/${m.id}`)
    assert.equal(foreign.status, 404)
    assert.equal(errorOf(foreign).code, 'not_found')
    for (const id of ['rcv_0000000000000000000000000000', 'nope']) assert.equal((await w.s.client.delete(`/api/received/${id}`)).status, 404, id)
    assert.equal(await w.server.store.receivedBytes(w.s.accountId), PLANS.free.receivedBytes)

    // The owner's (a full_access key here; the cookie below) frees its bytes, its raw message and attachment.
    const deleted = await w.server.client().delete(`/api/received/${m.id}`, { 'x-api-key': w.fullKey })
    assert.equal(deleted.status, 200, deleted.text)
    assert.deepEqual(deleted.body, { success: true, data: { id: m.id, deleted: true }, message: 'Received message deleted' })
    for (const path of [`/api/received/${m.id}`, `/api/received/${m.id}/raw`, `/api/received/${m.id}/attachments/att_1`]) assert.equal((await w.get(path)).status, 404, path)
    assert.equal((await w.s.client.delete(`/api/received/${m.id}`)).status, 404, 'once')
    assert.equal(await w.server.store.receivedBytes(w.s.accountId), PLANS.free.receivedBytes - raw.length)

    // The account receives again.
    assert.match(await w.mail('support@example.com', small), /^250 /)
    const after = (await w.s.client.get('/api/received')).body.data as Array<{ id: string; recipients: string[] }>
    assert.deepEqual(after.map((x) => x.recipients), [['support@example.com'], ['old@example.com']])
    assert.equal((await w.s.client.delete(`/api/received/${after[0]!.id}`)).status, 200, 'the cookie deletes too')
    assert.equal(await w.server.store.receivedBytes(w.s.accountId), PLANS.free.receivedBytes - raw.length)
  })

  test('a forged sender: taken, with spf, dkim and dmarc fail', async (t) => {
    const w = await world(t)
    await turnOn(w)
    // Signed with a key that is not the one customer.example publishes, and mailed from 127.0.0.2,
    // which its SPF record does not name.
    const forged = await compose({ from: 'Customer <customer@customer.example>', to: 'billing@example.com', subject: 'Pay this now', text: 'Wire the money.' }, dkimKey('s1'))
    assert.match(await w.mail('billing@example.com', forged, 'customer@customer.example', '127.0.0.2'), /^250 /)
    await w.receiver.until(() => w.receiver.received.length === 1, 'email.received')
    const d = w.receiver.received[0]!.body.data
    assert.equal(w.receiver.received[0]!.body.to, 'billing@example.com')
    assert.deepEqual(d.authentication, { spf: 'fail', dkim: 'fail', dmarc: 'fail', arc: null })
    assert.equal(d.inReplyTo, null)
  })

  test('refused: a domain without receiving (550), no relay (550), over INBOUND_MAX_BYTES (552), the plan\'s storage full (452); receiving off again (550)', async (t) => {
    const w = await world(t)
    await turnOn(w)
    // Another account's verified domain, receiving off.
    const other = await sender(w.server)
    await verifiedDomain(other.client, w.dns, 'shop.example')
    const small = await compose({ from: 'customer@customer.example', to: 'x', subject: 'hi', text: 'hi' }, w.key)
    for (const to of ['orders@shop.example', 'someone@elsewhere.example', 'support@bounces.example.com', 'support@sub.example.com']) {
      await assert.rejects(w.mail(to, small), refusedWith(550), to)
    }

    const big = await compose({ from: 'customer@customer.example', to: 'support@example.com', subject: 'big', text: 'x'.repeat(MAX_BYTES + 1000) }, w.key)
    await assert.rejects(w.mail('support@example.com', big), refusedWith(552))
    assert.equal(await metric(w, 'kind="received",outcome="too_large"'), 1)

    // The Free plan keeps 100 MiB of received mail: with that much kept already, the recipient is
    // answered 452 (try again later) and nothing is added.
    const filler = await stored(w, PLANS.free.receivedBytes, Date.now())
    await assert.rejects(w.mail('support@example.com', small), refusedWith(452))
    assert.equal(await metric(w, 'kind="received",outcome="over_limit"'), 1)
    assert.deepEqual((await w.s.client.get('/api/received')).body.data.map((m: { id: string }) => m.id), [filler.id])

    const off = await w.s.client.patch(`/api/domains/${w.domainId}`, { receiving: false })
    assert.equal(off.status, 200)
    assert.equal(off.body.data.receiving, false)
    assert.equal(off.body.data.records.some((r: ShownRecord) => r.purpose === 'receiving'), false)
    await assert.rejects(w.mail('support@example.com', small), refusedWith(550))

    // Bad input changes nothing.
    for (const body of [{}, { receiving: 'yes' }, { receiving: true, name: 'x' }]) {
      const res = await w.s.client.patch(`/api/domains/${w.domainId}`, body)
      assert.equal(res.status, 400, JSON.stringify(body))
    }
    assert.equal((await w.s.client.get(`/api/domains/${w.domainId}`)).body.data.receiving, false)
    assert.equal((await w.s.client.get('/api/received?cursor=nope')).status, 400)
    // The filler's own event was delivered; nothing mailed here was.
    await w.receiver.until(() => w.receiver.received.length === 1, 'the filler\'s event')
    assert.equal(w.receiver.received[0]!.body.emailId, filler.id)
  })

  test('a hostile megabyte (10,000 header fields, 2,000 References, 5,000 addresses, 600 KiB of text) is taken and bounded; 1 MiB of header is refused', async (t) => {
    const w = await world(t)
    await turnOn(w)
    const hostile = (fields: number) => {
      const lines = ['From: a@customer.example', `To: ${Array.from({ length: 5000 }, (_, i) => `u${i}@example.com`).join(', ')}`, 'Subject: hostile',
        `References: ${Array.from({ length: 2000 }, (_, i) => `<x${i}@e>`).join(' ')} <${w.sentId}@example.com>`]
      for (let i = 0; i < fields; i++) lines.push(`X-H${i}: v`)
      return `${lines.join('\r\n')}\r\n\r\n${'y'.repeat(600 * 1024)}\r\n`
    }
    // mailparser counts each header line as at least 64 bytes and reads at most 1 MiB of header: 20,000
    // fields are refused (554), nothing is kept.
    await assert.rejects(w.mail('support@example.com', hostile(20_000)), refusedWith(554))
    assert.equal(await metric(w, 'kind="received",outcome="unreadable"'), 1)
    const raw = hostile(10_000)
    assert.ok(raw.length > 800 * 1024 && raw.length < MAX_BYTES)
    assert.match(await w.mail('support@example.com', raw), /^250 /)
    await w.receiver.until(() => w.receiver.received.length === 1, 'email.received')
    const d = w.receiver.received[0]!.body.data
    assert.equal(d.headers.length, 100)
    assert.equal(d.to.length, 50)
    assert.equal(d.text.length, 64 * 1024)
    assert.equal(d.textTruncated, true)
    // References are read newest first: the last one names the email svc sent.
    assert.equal(d.inReplyTo, w.sentId)
    // 10,000 header lines are over the verifier's bound (SIGNATURE_BOUNDS.headerLines): not judged.
    assert.equal(d.authentication.dkim, 'permerror')
    const rawRes = await w.get(`/api/received/${d.id}/raw`)
    assert.equal(rawRes.bytes.toString('utf8'), raw)
  })

  test('messages older than RETENTION_DAYS (30) are deleted with their bytes; newer ones stay', async (t) => {
    const w = await world(t, 50)
    const old = await stored(w, 10, Date.now() - 31 * 86_400_000)
    const recent = await stored(w, 10, Date.now() - 29 * 86_400_000)
    await waitFor('the old message pruned', async () => (await w.get(`/api/received/${old.id}/raw`)).status === 404)
    assert.deepEqual((await w.get('/api/received')).json.data.map((m: { id: string }) => m.id), [recent.id])
    assert.equal((await w.get(`/api/received/${recent.id}/raw`)).status, 200)
  })
})
