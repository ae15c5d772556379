// Sending through the SMTP relay (SMTP_URL) to a real SMTP server on loopback: what the relay receives,
// and what its 250, 550 and 421 answers make of the email, its events and the suppression list.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { startServer } from '../helpers/server.js'
import { sender, timeline, type Sender } from '../helpers/sending.js'
import { header, headerLines, startSmtpSink, type SmtpSink } from '../helpers/smtp-sink.js'

async function setup (t: Parameters<typeof startServer>[0], retryDelaysMs = [50, 50]) {
  const sink = await startSmtpSink()
  const server = await startServer(t, {
    env: { SMTP_URL: sink.url, MAIL_FROM: 'Example <mail@example.com>' },
    deps: { mailer: { retryDelaysMs, random: () => 0.5 } },
  })
  // After the server's own teardown (hooks run in the order they were added): svc closes its pooled
  // connections first, so the sink has none left to wait for.
  t.after(() => sink.close())
  return { sink, server, s: await sender(server) }
}

function receivedBy (sink: SmtpSink, address: string) {
  return sink.received.filter((m) => m.rcptTo.includes(address))
}

async function suppressed (s: Sender): Promise<string[]> {
  return (await s.client.get('/api/suppressions')).body.data.map((e: { email: string; reason: string }) => `${e.email} ${e.reason}`)
}

describe('the SMTP relay', () => {
  test('250: delivered, with our Message-ID, one-click List-Unsubscribe headers and the custom headers', async (t) => {
    const { sink, s } = await setup(t)
    const res = await s.send({
      to: 'Alice <alice@example.net>', bcc: 'hidden@example.net', subject: 'Your order', html: '<p>Thanks</p>', text: 'Thanks',
      headers: { 'X-Campaign': 'spring-2026' },
    })
    const email = await s.settled(res.body.data.id)
    assert.equal(email.status, 'delivered')
    assert.deepEqual(timeline(email), [
      'email.sent alice@example.net', 'email.sent hidden@example.net', 'email.delivered alice@example.net', 'email.delivered hidden@example.net',
    ])

    // One transaction per recipient: each copy carries its own unsubscribe link and tracking.
    assert.equal(sink.received.length, 2)
    const got = receivedBy(sink, 'alice@example.net')[0]!
    const hidden = receivedBy(sink, 'hidden@example.net')[0]!
    for (const m of [got, hidden]) {
      assert.equal(m.mailFrom, 'mail@example.com')
      assert.equal(m.rcptTo.length, 1)
      assert.equal(header(m.raw, 'Message-ID'), `<${email.id}@example.com>`)
      assert.equal(header(m.raw, 'To'), 'Alice <alice@example.net>')
      assert.equal(header(m.raw, 'Bcc'), undefined)
      assert.doesNotMatch(m.raw.split('\r\n\r\n')[0]!, /hidden@example\.net/)
    }
    assert.equal(header(got.raw, 'From'), 'Example <mail@example.com>')
    assert.equal(header(got.raw, 'Subject'), 'Your order')
    assert.equal(header(got.raw, 'X-Campaign'), 'spring-2026')
    assert.match(header(got.raw, 'List-Unsubscribe') ?? '', /^<http:\/\/127\.0\.0\.1:3000\/t\/u\/[\w-]+>$/)
    assert.equal(header(got.raw, 'List-Unsubscribe-Post'), 'List-Unsubscribe=One-Click')
    assert.notEqual(header(hidden.raw, 'List-Unsubscribe'), header(got.raw, 'List-Unsubscribe'), 'each copy has its own link')
  })

  test('header injection never reaches the relay: refused at the API, and display names stay inside their header', async (t) => {
    const { sink, s } = await setup(t)
    for (const body of [
      { to: 'a@example.net', subject: 'Hi\r\nBcc: victim@evil.test', text: 'x' },
      { to: 'a@example.net', subject: 'Hi', text: 'x', headers: { 'X-Note': 'ok\r\nBcc: victim@evil.test' } },
      { to: 'a@example.net', subject: 'Hi', text: 'x', headers: { 'X-Bad\r\nBcc': 'victim@evil.test' } },
      { to: 'a@example.net\r\nBcc: victim@evil.test', subject: 'Hi', text: 'x' },
      { to: 'a@example.net', from: 'me@example.com\r\nBcc: victim@evil.test', subject: 'Hi', text: 'x' },
    ]) {
      assert.equal((await s.send(body)).status, 400, JSON.stringify(body))
    }
    const res = await s.send({ to: '"Eve, Bcc: victim@evil.test" <eve@example.net>', subject: 'Hi', text: 'x' })
    assert.equal(res.status, 202)
    await s.settled(res.body.data.id)
    assert.equal(sink.received.length, 1, 'only the legitimate send reached the relay')
    const got = sink.received[0]!
    assert.deepEqual(got.rcptTo, ['eve@example.net'])
    assert.deepEqual(headerLines(got.raw).filter((l) => /^(bcc|x-bad):/i.test(l)), [])
  })

  test('550: that recipient bounces and is suppressed, the others are delivered', async (t) => {
    const { sink, s } = await setup(t)
    const res = await s.send({ to: ['nosuch@example.net', 'alice@example.net'], subject: 'Hi', text: 'x' })
    const email = await s.settled(res.body.data.id)
    assert.equal(email.status, 'partially_delivered')
    assert.deepEqual(timeline(email).slice(2).sort(), ['email.bounced nosuch@example.net', 'email.delivered alice@example.net'])
    assert.deepEqual(await suppressed(s), ['nosuch@example.net bounced'])
    assert.deepEqual(receivedBy(sink, 'alice@example.net').length, 1)
    const next = await s.send({ to: 'NoSuch@Example.net', subject: 'Again', text: 'x' })
    assert.equal(next.status, 422)
    assert.equal(next.body.error.code, 'recipient_suppressed')
  })

  test('421: deferred, retried with backoff, then delivered once; the address is not suppressed', async (t) => {
    const { server, sink, s } = await setup(t)
    const res = await s.send({ to: 'flaky@example.net', subject: 'Hi', text: 'x' })
    const email = await s.settled(res.body.data.id)
    assert.equal(email.status, 'delivered')
    assert.equal((await server.store.findEmail(s.accountId, email.id))?.attempts, 2, 'the first attempt was deferred')
    assert.deepEqual(timeline(email), ['email.sent flaky@example.net', 'email.delivered flaky@example.net'])
    assert.equal(receivedBy(sink, 'flaky@example.net').length, 1)
    assert.deepEqual(await suppressed(s), [])
  })

  test('421 on every attempt: bounced once the schedule is spent, without suppressing the address', async (t) => {
    const { server, sink, s } = await setup(t, [20, 20])
    const res = await s.send({ to: ['shutdown@example.net', 'shutdown2@example.net'], subject: 'Hi', text: 'x' })
    const email = await s.settled(res.body.data.id)
    assert.equal(email.status, 'bounced')
    assert.deepEqual(timeline(email), ['email.sent shutdown@example.net', 'email.sent shutdown2@example.net',
      'email.bounced shutdown@example.net', 'email.bounced shutdown2@example.net'])
    const bounced = (await server.store.listEmailEvents(s.accountId, email.id)).filter((e) => e.type === 'email.bounced')
    assert.match(JSON.parse(bounced[0]!.payload).data.reason, /^gave up after 3 attempts; last answer: /)
    assert.deepEqual(await suppressed(s), [], 'a relay that kept failing says nothing about the address')
    assert.equal(sink.received.length, 0)
  })
})
