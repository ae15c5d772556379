// Returning mail on real parts: svc relays an email from a verified domain through an SMTP server on
// loopback (each recipient under its own VERP Return-Path), then the test mails DSNs and ARF reports in
// the shapes Postfix, Exim, Gmail, Microsoft and Yahoo send (test/fixtures/inbound) to svc's inbound
// SMTP port, and checks what a user sees: the webhooks a real receiver gets, the email's timeline, the
// suppression list, the metric. Forged, unmatched and oversized mail changes nothing.
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, test } from 'node:test'
import nodemailer from 'nodemailer'
import type { InboundMail } from '../../src/mail/inbound/listener.js'
import { startDnsServer } from '../helpers/dns-server.js'
import { verifiedDomain } from '../helpers/domains.js'
import { startReceiver } from '../helpers/receiver.js'
import { startServer, type TestServer } from '../helpers/server.js'
import { sender, timeline, type Sender } from '../helpers/sending.js'
import { header, startSmtpSink, type SmtpSink } from '../helpers/smtp-sink.js'
import { waitFor } from '../helpers/wait.js'

const FIXTURES = new URL('../../../test/fixtures/inbound/', import.meta.url)
const COMPLAINTS = 'complaints@bounces.svc.test'

function fixture (name: string, values: Record<string, string>): string {
  let text = readFileSync(new URL(name, FIXTURES), 'utf8')
  for (const [key, value] of Object.entries(values)) text = text.split(`{{${key}}}`).join(value)
  return text.replace(/\r?\n/g, '\r\n')
}

interface World {
  server: TestServer
  sink: SmtpSink
  s: Sender
  inbound: InboundMail
  receiver: Awaited<ReturnType<typeof startReceiver>>
  emailId: string
  messageId: string
  verpOf: Map<string, string>
  mail(to: string, raw: string): Promise<void>
}

const RECIPIENTS = Array.from({ length: 11 }, (_, i) => `r${i + 1}@example.net`)

async function world (t: Parameters<typeof startServer>[0]): Promise<World> {
  const dns = await startDnsServer(t)
  const sink = await startSmtpSink()
  const server = await startServer(t, {
    env: {
      DNS_SERVERS: dns.server, SMTP_URL: sink.url, PUBLIC_URL: 'https://mail.svc.test', INBOUND_SMTP_PORT: '0',
      INBOUND_SMTP_HOST: '127.0.0.1', COMPLAINTS_ADDRESS: COMPLAINTS,
    },
    deps: { mailer: { retryDelaysMs: [50, 50], random: () => 0.5 } },
  })
  t.after(() => sink.close())
  // After the server: its teardown (which finishes the deliveries in flight) runs before the receiver's.
  const receiver = await startReceiver(t)
  const s = await sender(server)
  await verifiedDomain(s.client, dns, 'example.com')
  const hook = await s.client.post('/api/webhooks', {
    url: receiver.url('/hook'), events: ['email.sent', 'email.delivered', 'email.bounced', 'email.complained', 'email.opened', 'email.clicked', 'email.unsubscribed'],
  })
  assert.equal(hook.status, 201, hook.text)
  receiver.secrets = [hook.body.data.secret]
  const res = await s.send({ from: 'Shop <shop@example.com>', to: RECIPIENTS, subject: 'Your order', text: 'Thanks' })
  assert.equal(res.status, 202, res.text)
  const emailId: string = res.body.data.id
  await s.settled(emailId, 'delivered')
  const verpOf = new Map<string, string>()
  let messageId = ''
  for (const m of sink.received) {
    verpOf.set(m.rcptTo[0]!, m.mailFrom)
    messageId = header(m.raw, 'Message-ID')!.trim()
  }
  assert.equal(verpOf.size, RECIPIENTS.length)
  assert.match(messageId, new RegExp(`^<${emailId}@example\\.com>$`))
  const inbound = server.service.components.find((c) => c.name === 'inbound-smtp') as unknown as InboundMail
  const port = inbound.port
  const mail = async (to: string, raw: string) => {
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, logger: false })
    try {
      await transport.sendMail({ envelope: { from: '', to: [to] }, raw })
    } finally {
      transport.close()
    }
  }
  return { server, sink, s, inbound, receiver, emailId, messageId, verpOf, mail }
}

function values (w: World, recipient: string, to = w.verpOf.get(recipient)!): Record<string, string> {
  return { VERP: w.verpOf.get(recipient)!, RCPT: recipient, MESSAGE_ID: w.messageId, FROM: 'Shop <shop@example.com>', TO: to }
}

async function suppressions (w: World): Promise<Map<string, string>> {
  const res = await w.s.client.get('/api/suppressions?limit=100')
  return new Map(res.body.data.map((e: { email: string; reason: string }) => [e.email, e.reason]))
}

async function metric (w: World, labels: string): Promise<number> {
  const text = (await w.server.client().get('/metrics')).text
  const line = text.split('\n').find((l) => l.startsWith(`svc_inbound_messages_total{${labels}}`))
  return line === undefined ? 0 : Number(line.split(' ').at(-1))
}

function hooks (w: World, type: string) {
  return w.receiver.received.filter((r) => r.body?.type === type)
}

describe('returning mail', () => {
  test('hard bounces (Postfix, Exim, Gmail, Microsoft): email.bounced with status and diagnostic, the address suppressed', async (t) => {
    const w = await world(t)
    const cases = [
      ['postfix-hard.eml', 'r1@example.net', '5.1.1'],
      ['exim-hard.eml', 'r2@example.net', '5.0.0'],
      ['gmail-hard.eml', 'r3@example.net', '5.1.1'],
      ['microsoft-hard.eml', 'r4@example.net', '5.1.10'],
    ] as const
    for (const [file, rcpt] of cases) await w.mail(w.verpOf.get(rcpt)!, fixture(file, values(w, rcpt)))
    await w.receiver.until(() => hooks(w, 'email.bounced').length === 4, 'four email.bounced webhooks')
    for (const [file, rcpt, status] of cases) {
      const got = hooks(w, 'email.bounced').filter((r) => r.body.to === rcpt)
      assert.equal(got.length, 1, `${file}: one webhook for ${rcpt}`)
      assert.equal(got[0]!.body.emailId, w.emailId)
      assert.deepEqual(got[0]!.validFor, w.receiver.secrets, 'signed')
      assert.ok(got[0]!.body.data.reason.startsWith(`${status} `), `${file}: ${got[0]!.body.data.reason}`)
      assert.match(got[0]!.body.data.reason, /550/)
    }
    const list = await suppressions(w)
    for (const [, rcpt] of cases) assert.equal(list.get(rcpt), 'bounced')
    assert.equal(list.size, 4)
    const email = (await w.s.email(w.emailId)).body.data
    for (const [, rcpt] of cases) assert.ok(timeline(email).includes(`email.bounced ${rcpt}`))

    // The same DSN again: accepted, and nothing more happens.
    await w.mail(w.verpOf.get('r1@example.net')!, fixture('postfix-hard.eml', values(w, 'r1@example.net')))
    const again = (await w.s.email(w.emailId)).body.data
    assert.equal(timeline(again).filter((e: string) => e === 'email.bounced r1@example.net').length, 1)
    assert.equal(await metric(w, 'kind="dsn",outcome="bounced"'), 4)
    assert.equal(await metric(w, 'kind="dsn",outcome="duplicate"'), 1)

    // Later sends drop the bounced addresses.
    const next = await w.s.send({ from: 'shop@example.com', to: ['r1@example.net', 'r5@example.net'], subject: 'Again', text: 'x' })
    assert.deepEqual(next.body.data.suppressed, ['r1@example.net'])
    await w.s.settled(next.body.data.id)
    await w.server.service.engine.drained()
  })

  test('soft and delayed (Postfix delayed, Exim 4.x.x failed, Microsoft delayed): on the timeline only, no webhook, no suppression', async (t) => {
    const w = await world(t)
    const cases = [['postfix-delayed.eml', 'r5@example.net'], ['exim-soft.eml', 'r6@example.net'], ['microsoft-delayed.eml', 'r7@example.net']] as const
    for (const [file, rcpt] of cases) await w.mail(w.verpOf.get(rcpt)!, fixture(file, values(w, rcpt)))
    const email = await waitFor('three delays on the timeline', async () => {
      const e = (await w.s.email(w.emailId)).body.data
      return timeline(e).filter((x: string) => x.startsWith('email.delayed')).length === 3 ? e : false
    })
    for (const [, rcpt] of cases) assert.ok(timeline(email).includes(`email.delayed ${rcpt}`))
    assert.equal((await suppressions(w)).size, 0)
    assert.equal(await metric(w, 'kind="dsn",outcome="delayed"'), 3)
    // A delay is not one of the seven webhook events: a bounce mailed after the delays is the next
    // webhook the receiver gets, and nothing else came before it.
    await w.mail(w.verpOf.get('r1@example.net')!, fixture('postfix-hard.eml', values(w, 'r1@example.net')))
    await w.receiver.until(() => hooks(w, 'email.bounced').length === 1, 'the bounce')
    assert.ok(w.receiver.received.every((r) => ['email.sent', 'email.delivered', 'email.bounced'].includes(r.body.type)))
  })

  test('complaints (Yahoo ARF, Microsoft JMRP with the recipient redacted): email.complained and suppressed', async (t) => {
    const w = await world(t)
    // Yahoo, to the complaints address: the VERP address is in Original-Mail-From.
    await w.mail(COMPLAINTS, fixture('yahoo-arf.eml', values(w, 'r8@example.net', COMPLAINTS)))
    // Microsoft, recipient redacted, original inline: matched by the original's Return-Path.
    await w.mail(COMPLAINTS, fixture('microsoft-arf.eml', values(w, 'r9@example.net', COMPLAINTS)))
    await w.receiver.until(() => hooks(w, 'email.complained').length === 2, 'two email.complained webhooks')
    const list = await suppressions(w)
    for (const rcpt of ['r8@example.net', 'r9@example.net']) {
      const got = hooks(w, 'email.complained').filter((r) => r.body.to === rcpt)
      assert.equal(got.length, 1, rcpt)
      assert.equal(got[0]!.body.emailId, w.emailId)
      assert.match(got[0]!.body.data.reason, /^feedback report \(abuse\)/)
      assert.equal(list.get(rcpt), 'complained')
    }
    const email = (await w.s.email(w.emailId)).body.data
    assert.ok(timeline(email).includes('email.complained r9@example.net'))
    assert.equal(await metric(w, 'kind="arf",outcome="complained"'), 2)
  })

  test('a recipient cannot suppress a co-recipient: a report quoting their own copy (its Message-ID) and naming another recipient, without a signed VERP address, changes nothing', async (t) => {
    const w = await world(t)
    const before = { events: timeline((await w.s.email(w.emailId)).body.data), suppressed: await suppressions(w) }
    // r1 received the email too (same Message-ID); the report names r10 in Original-Rcpt-To and To, and
    // carries no VERP address of svc's (Original-Mail-From and Return-Path elsewhere).
    await w.mail(COMPLAINTS, fixture('yahoo-arf.eml', { ...values(w, 'r10@example.net', COMPLAINTS), VERP: 'bounce@elsewhere.example' }))
    await waitFor('the report read as unmatched', async () => await metric(w, 'kind="arf",outcome="unmatched"') === 1)
    assert.deepEqual(await suppressions(w), before.suppressed, 'nobody suppressed')
    assert.deepEqual(timeline((await w.s.email(w.emailId)).body.data), before.events, 'no email.complained on the timeline')
    assert.equal(hooks(w, 'email.complained').length, 0, 'no email.complained webhook')
    // The same report with r10's own signed VERP address in Original-Mail-From is believed.
    await w.mail(COMPLAINTS, fixture('yahoo-arf.eml', values(w, 'r10@example.net', COMPLAINTS)))
    await w.receiver.until(() => hooks(w, 'email.complained').length === 1, 'one email.complained webhook')
    assert.equal(hooks(w, 'email.complained')[0]!.body.to, 'r10@example.net')
  })

  test('forged VERP, unknown addresses, unmatched reports and oversized mail change nothing', async (t) => {
    const w = await world(t)
    const before = { events: timeline((await w.s.email(w.emailId)).body.data), suppressed: await suppressions(w) }

    // One character of the token changed: refused at RCPT, like any address that is not ours.
    const real = w.verpOf.get('r1@example.net')!
    const at = real.indexOf('@')
    const forged = real.slice(0, at - 1) + (real[at - 1] === 'a' ? 'b' : 'a') + real.slice(at)
    for (const to of [forged, 'b+short@bounces.example.com', 'postmaster@bounces.example.com', 'alice@example.net']) {
      await assert.rejects(w.mail(to, fixture('postfix-hard.eml', values(w, 'r1@example.net', to))),
        (err: { responseCode?: number }) => err.responseCode === 550, to)
    }
    assert.equal(await metric(w, 'kind="rcpt",outcome="forged"'), 2)
    assert.equal(await metric(w, 'kind="rcpt",outcome="refused"'), 2)

    // A report about mail svc never sent: accepted (so the sender stops), nothing recorded.
    await w.mail(COMPLAINTS, fixture('unmatched-arf.eml', values(w, 'r1@example.net', COMPLAINTS)))
    // A DSN mailed to the complaints address names no email svc can trust.
    await w.mail(COMPLAINTS, fixture('postfix-hard.eml', values(w, 'r2@example.net', COMPLAINTS)))
    // Not a report at all.
    await w.mail(COMPLAINTS, 'From: someone@example.org\r\nTo: complaints@bounces.svc.test\r\nSubject: hello\r\n\r\nHi\r\n')
    assert.equal(await metric(w, 'kind="arf",outcome="unmatched"'), 1)
    assert.equal(await metric(w, 'kind="dsn",outcome="unmatched"'), 1)
    assert.equal(await metric(w, 'kind="other",outcome="ignored"'), 1)

    // Over 256 KiB: refused, never read.
    const big = fixture('postfix-hard.eml', values(w, 'r1@example.net')).replace('This is the mail system', 'x'.repeat(300 * 1024))
    await assert.rejects(w.mail(real, big), (err: { responseCode?: number }) => err.responseCode === 552)

    assert.deepEqual(timeline((await w.s.email(w.emailId)).body.data), before.events)
    assert.deepEqual(await suppressions(w), before.suppressed)
    assert.ok(!w.receiver.received.some((r) => r.body?.type === 'email.bounced' || r.body?.type === 'email.complained'))
  })
})
