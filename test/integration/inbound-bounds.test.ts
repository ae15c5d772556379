// Received mail costs a bounded amount, off the API's thread (src/mail/inbound/judging.ts), on real parts:
// svc's inbound listener on loopback, a DNS server on loopback with one zone that never answers
// (silent.example), nodemailer and a raw socket as the sending MTAs, the API over HTTP. Small bounds for
// the test: a 2 s deadline, lookups that would wait longer than that, one job at once.
//
// - thousands of DKIM-Signature fields: ten are checked (a handful of DNS questions, not thousands), the
//   first one passes, the message is kept;
// - a selector in a zone that never answers: at the deadline the verdicts are temperror, the message is
//   kept and the worker thread is gone; meanwhile /healthz answers and an email is sent and delivered;
// - a client that hangs up while its message is judged: the work stops (its thread ends) and nothing is kept;
// - a second message while the one job is taken: 451 4.3.2, nothing kept;
// - returning mail and received mail are not mixed in one transaction: the second kind's RCPT is 452 (the
//   sender sends it in a transaction of its own), so no received message is read on the listener's thread.
import assert from 'node:assert/strict'
import net from 'node:net'
import { after, before, describe, test } from 'node:test'
import nodemailer from 'nodemailer'
import type { InboundMail } from '../../src/mail/inbound/listener.js'
import type { Receiving } from '../../src/mail/inbound/receiving.js'
import { dkimKey, signedMessage, type SenderKey } from '../helpers/dkim.js'
import { startDnsServer, type TestDns } from '../helpers/dns-server.js'
import { publishRecords, verifiedDomain, type ShownRecord } from '../helpers/domains.js'
import { startServer, type TestServer } from '../helpers/server.js'
import { sender, type Sender } from '../helpers/sending.js'
import { startSmtpSink } from '../helpers/smtp-sink.js'
import { waitFor } from '../helpers/wait.js'

const DEADLINE_MS = 2000
const COMPLAINTS = 'complaints@bounces.svc.test'

interface World {
  server: TestServer
  dns: TestDns
  s: Sender
  port: number
  receiving: Receiving
  customer: SenderKey
  silent: SenderKey
}

let w: World

/** Mails `raw` to svc's listener; resolves with its last answer (rejects with the refusal). */
async function mail (raw: Buffer, from: string): Promise<string> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: w.port, secure: false, ignoreTLS: true, logger: false })
  try {
    return (await transport.sendMail({ envelope: { from, to: ['support@example.com'] }, raw })).response
  } finally {
    transport.close()
  }
}

async function judgements (result: string): Promise<number> {
  const text = (await w.server.client().get('/metrics')).text
  const line = text.split('\n').find((l) => l.startsWith(`svc_inbound_judgements_total{result="${result}"}`))
  return line === undefined ? 0 : Number(line.split(' ').at(-1))
}

async function receivedWith (subject: string): Promise<any[]> {
  const res = await w.s.client.get('/api/received?limit=100')
  assert.equal(res.status, 200, res.text)
  return res.body.data.filter((m: { subject: string }) => m.subject === subject)
}

describe('received mail within bounds', () => {
  before(async () => {
    const t = { after: (fn: () => unknown) => { afterAll.push(fn) } }
    const dns = await startDnsServer(t)
    dns.silent.add('silent.example')
    const sink = await startSmtpSink()
    afterAll.push(() => sink.close())
    const server = await startServer(t, {
      env: {
        DNS_SERVERS: dns.server, SMTP_URL: sink.url, PUBLIC_URL: 'https://mail.svc.test', INBOUND_SMTP_PORT: '0', INBOUND_SMTP_HOST: '127.0.0.1',
        COMPLAINTS_ADDRESS: COMPLAINTS,
      },
      deps: {
        mailer: { retryDelaysMs: [50, 50], random: () => 0.5 },
        // A lookup would wait longer than the deadline: the deadline is what ends a silent zone's wait.
        receiving: { judging: { deadlineMs: DEADLINE_MS, lookupTimeoutMs: 10_000, maxJobs: 1 } },
      },
    })
    const s = await sender(server)
    const domain = await verifiedDomain(s.client, dns, 'example.com')
    const on = await s.client.patch(`/api/domains/${domain.id}`, { receiving: true })
    assert.equal(on.status, 200, on.text)
    publishRecords(dns, on.body.data.records.filter((r: ShownRecord) => r.purpose === 'receiving'))
    assert.equal((await s.client.post(`/api/domains/${domain.id}/verify`)).body.data.status, 'verified')

    const customer = dkimKey(dns, 'customer.example', 's1')
    dns.publish('customer.example', { TXT: ['v=spf1 ip4:127.0.0.1 -all'] })
    dns.publish('_dmarc.customer.example', { TXT: ['v=DMARC1; p=reject'] })
    const silent = dkimKey(null, 'silent.example', 's1')
    const port = (server.service.components.find((c) => c.name === 'inbound-smtp') as unknown as InboundMail).port
    const receiving = server.service.components.find((c) => c.name === 'inbound-receiving') as unknown as Receiving
    w = { server, dns, s, port, receiving, customer, silent }
  })
  // What the world started, stopped last first once the suite is done.
  const afterAll: Array<() => unknown> = []
  after(async () => {
    for (const stop of afterAll.reverse()) await stop()
  })

  test('3,000 DKIM-Signature fields: ten checked, the first passes, the message is kept', async () => {
    const raw = (await signedMessage({ from: 'customer@customer.example', to: 'support@example.com', subject: 'many signatures', text: 'Hello.\r\n'.repeat(2000) }, w.customer)).toString('latin1')
    // nodemailer's signature is the first field; 3,000 more after it, each with the message's own body
    // hash and a selector of its own: every one checked would be a DNS question.
    const bh = /bh=([^;]+);/.exec(raw)![1]!
    let end = raw.indexOf('\r\n') + 2
    while (raw[end] === ' ' || raw[end] === '\t') end = raw.indexOf('\r\n', end) + 2
    const junk = Array.from({ length: 3000 }, (_, i) => `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=junk${i}.example; s=s${i}; h=from; bh=${bh}; b=AAAA\r\n`).join('')
    const message = Buffer.from(raw.slice(0, end) + junk + raw.slice(end), 'latin1')

    const asked = w.dns.queries
    const okBefore = await judgements('ok')
    const answer = mail(message, 'customer@customer.example')
    // The API answers while the message is read and judged.
    for (let i = 0; i < 3; i++) assert.equal((await fetch(`${w.server.url}/healthz`)).status, 200)
    assert.match(await answer, /^250 /)
    const [kept] = await receivedWith('many signatures')
    assert.ok(kept, 'kept')
    assert.equal(kept.authentication.dkim, 'pass')
    assert.equal(kept.authentication.dmarc, 'pass')
    assert.equal(kept.size, message.length, 'kept whole, every signature in its raw message')
    // Ten signatures, SPF and DMARC: a handful of questions (3,000 without the bound).
    assert.ok(w.dns.queries - asked <= 20, `${w.dns.queries - asked} DNS questions`)
    assert.equal(await judgements('ok'), okBefore + 1)
    assert.equal(w.receiving.judgingThreads.length, 1, 'the thread stays for the next message')
  })

  test('a selector whose zone never answers: temperror at the deadline, kept; /healthz and sending go on meanwhile', async () => {
    const raw = await signedMessage({ from: 'customer@silent.example', to: 'support@example.com', subject: 'silent zone', text: 'Hello.' }, w.silent)
    const dropped = w.dns.dropped
    const answer = mail(raw, 'customer@silent.example')
    // The judgement is waiting on the silent zone now.
    await waitFor('a question to the silent zone', () => w.dns.dropped > dropped)
    const busy = w.receiving.judgingThreads
    for (let i = 0; i < 3; i++) {
      const health = await fetch(`${w.server.url}/healthz`)
      assert.equal(health.status, 200)
    }
    const sent = await w.s.send({ from: 'support@example.com', to: 'someone@customer.example', subject: 'sent meanwhile', text: 'x' })
    assert.equal(sent.status, 202, sent.text)
    await w.s.settled(sent.body.data.id, 'delivered')

    assert.match(await answer, /^250 /)
    const [kept] = await receivedWith('silent zone')
    assert.ok(kept, 'kept')
    assert.deepEqual(kept.authentication, { spf: 'temperror', dkim: 'temperror', dmarc: 'temperror', arc: null })
    assert.equal(await judgements('deadline'), 1)
    assert.ok(!w.receiving.judgingThreads.some((id) => busy.includes(id)), 'the thread that passed its deadline was terminated')
    assert.equal(w.receiving.judgingThreads.length, 1, 'another in its place')
  })

  test('a client that hangs up while its message is judged: the work stops, nothing is kept', async () => {
    const raw = await signedMessage({ from: 'customer@silent.example', to: 'support@example.com', subject: 'hung up', text: 'Hello.' }, w.silent)
    const dropped = w.dns.dropped
    const socket = net.connect(w.port, '127.0.0.1')
    const replies = replyReader(socket)
    assert.match(await replies.next(), /^220 /)
    for (const [command, code] of [['EHLO client.customer.example', 250], ['MAIL FROM:<customer@silent.example>', 250], ['RCPT TO:<support@example.com>', 250], ['DATA', 354]] as const) {
      socket.write(`${command}\r\n`)
      assert.match(await replies.next(), new RegExp(`^${code} `), command)
    }
    socket.write(Buffer.concat([Buffer.from(raw.toString('latin1').replace(/\r\n\./g, '\r\n..'), 'latin1'), Buffer.from('\r\n.\r\n')]))
    await waitFor('the judgement to wait on the silent zone', () => w.dns.dropped > dropped)
    const busy = w.receiving.judgingThreads
    socket.destroy()

    await waitFor('the job to be aborted', async () => (await judgements('aborted')) === 1)
    assert.ok(!w.receiving.judgingThreads.some((id) => busy.includes(id)), 'its thread was terminated')
    assert.deepEqual(await receivedWith('hung up'), [])
  })

  test('every job taken: the next message is answered 451 4.3.2 and not kept', async () => {
    const slow = await signedMessage({ from: 'customer@silent.example', to: 'support@example.com', subject: 'slow one', text: 'Hello.' }, w.silent)
    const next = await signedMessage({ from: 'customer@customer.example', to: 'support@example.com', subject: 'one too many', text: 'Hello.' }, w.customer)
    const dropped = w.dns.dropped
    const first = mail(slow, 'customer@silent.example')
    await waitFor('the first message to be judged', () => w.dns.dropped > dropped)
    await assert.rejects(mail(next, 'customer@customer.example'), (err: { responseCode?: number; response?: string }) => {
      assert.equal(err.responseCode, 451)
      assert.match(err.response ?? '', /4\.3\.2/)
      return true
    })
    assert.equal(await judgements('refused_busy'), 1)
    assert.match(await first, /^250 /)
    assert.equal((await receivedWith('slow one')).length, 1)
    assert.deepEqual(await receivedWith('one too many'), [])
    // The job is free again: the same message is taken now.
    assert.match(await mail(next, 'customer@customer.example'), /^250 /)
    assert.equal((await receivedWith('one too many')).length, 1)
  })

  test('a complaints address after a receiving one is 452, and the other way round; each alone is taken', async () => {
    const socket = net.connect(w.port, '127.0.0.1')
    const replies = replyReader(socket)
    try {
      const say = async (command: string) => {
        socket.write(`${command}\r\n`)
        return replies.next()
      }
      assert.match(await replies.next(), /^220 /)
      assert.match(await say('EHLO client.customer.example'), /^250 /)
      assert.match(await say('MAIL FROM:<customer@customer.example>'), /^250 /)
      assert.match(await say('RCPT TO:<support@example.com>'), /^250 /)
      assert.match(await say(`RCPT TO:<${COMPLAINTS}>`), /^452 4\.5\.3 /)
      assert.match(await say('RSET'), /^250 /)
      assert.match(await say('MAIL FROM:<>'), /^250 /)
      assert.match(await say(`RCPT TO:<${COMPLAINTS}>`), /^250 /)
      assert.match(await say('RCPT TO:<sales@example.com>'), /^452 4\.5\.3 /)
      assert.match(await say('RCPT TO:<support@example.com>'), /^452 4\.5\.3 /)
      // The transaction goes on with what was taken: a report, within the reports' size.
      assert.match(await say('DATA'), /^354 /)
      assert.match(await say('From: a@example.net\r\nSubject: not a report\r\n\r\nHello.\r\n.'), /^250 /)
      assert.match(await say('QUIT'), /^221 /)
    } finally {
      socket.destroy()
    }
    const text = (await w.server.client().get('/metrics')).text
    assert.match(text, /svc_inbound_messages_total\{kind="rcpt",outcome="mixed"\} 3/)
  })
})

/** SMTP replies from a raw socket: next() resolves with the next whole reply (its last line). */
function replyReader (socket: net.Socket): { next(): Promise<string> } {
  let buffered = ''
  const replies: string[] = []
  const waiting: Array<(reply: string) => void> = []
  socket.on('data', (chunk: Buffer) => {
    buffered += chunk.toString('latin1')
    let nl: number
    while ((nl = buffered.indexOf('\r\n')) >= 0) {
      const line = buffered.slice(0, nl)
      buffered = buffered.slice(nl + 2)
      if (/^\d{3} /.test(line)) {
        const wake = waiting.shift()
        if (wake !== undefined) wake(line)
        else replies.push(line)
      }
    }
  })
  socket.on('error', () => {})
  return {
    next: () => new Promise<string>((resolve) => {
      const reply = replies.shift()
      if (reply !== undefined) resolve(reply)
      else waiting.push(resolve)
    }),
  }
}
