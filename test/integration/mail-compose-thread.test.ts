// Large bodies are built in a worker thread (src/mail/compose-pool.ts), small ones in the mailer's own:
// the message is the same either way (tracked links, pixel, List-Unsubscribe), and a body that cannot be
// built is failed with its reason from the worker too. Over SMTP the transport builds each message's MIME
// once and makes each recipient's copy from it, and a message it cannot build is failed the same way. Real server, real
// worker threads, the sandbox transport or a real SMTP server on loopback.
import assert from 'node:assert/strict'
import { generateKeyPairSync } from 'node:crypto'
import { describe, test } from 'node:test'
import { simpleParser } from 'mailparser'
import { request } from 'undici'
import { COMPOSE_IN_THREAD_CHARS } from '../../src/mail/compose-pool.js'
import { createSandboxTransport } from '../../src/mail/sandbox-transport.js'
import { createSmtpTransport } from '../../src/mail/smtp-transport.js'
import type { MailTransport } from '../../src/mail/transport.js'
import { startServer } from '../helpers/server.js'
import { sender, timeline } from '../helpers/sending.js'
import { startSmtpSink } from '../helpers/smtp-sink.js'

async function composed (url: string, metric = 'svc_mail_composed_total'): Promise<Record<string, number>> {
  const text = await (await request(url + '/metrics')).body.text()
  const counts: Record<string, number> = {}
  for (const m of text.matchAll(new RegExp(`^${metric}\\{thread="(\\w+)"\\} (\\d+)$`, 'gm'))) counts[m[1]!] = Number(m[2])
  return counts
}

/** 200 links, padded past the threshold. */
function largeHtml (): string {
  const links = Array.from({ length: 200 }, (_, i) => `<p><a href="https://example.com/page/${i}?q=${i}">link ${i}</a> ${'lorem ipsum '.repeat(20)}</p>`).join('\n')
  const big = `<html><body>${links}</body></html>`
  assert.ok(big.length > COMPOSE_IN_THREAD_CHARS)
  return big
}

describe('where a message is built', () => {
  test('a large html body is built in the worker thread, a small one in the mailer\'s: both tracked the same way', async (t) => {
    const transport = createSandboxTransport()
    const server = await startServer(t, { deps: { transport } })
    const s = await sender(server)
    const big = largeHtml()
    const large = await s.send({ to: 'reader@example.com', subject: 'Large', html: big, text: 'plain' })
    assert.equal(large.status, 202, large.text)
    const small = await s.send({ to: 'reader@example.com', subject: 'Small', html: '<a href="https://example.com/one">one</a>' })
    assert.equal(small.status, 202, small.text)
    await s.settled(large.body.data.id, 'delivered')
    await s.settled(small.body.data.id, 'delivered')

    const byId = new Map(transport.sent().map((m) => [m.messageId, m]))
    const l = byId.get(large.body.data.id)!
    const sm = byId.get(small.body.data.id)!
    const tracked = (html: string) => [...html.matchAll(/href="([^"]+)"/g)].map((m) => m[1]!)
    const lLinks = tracked(l.html!)
    assert.equal(lLinks.length, 200, 'every link of the large body is there')
    for (const href of [...lLinks, ...tracked(sm.html!)]) assert.ok(href.startsWith(`${server.config.publicUrl}/t/c/`), `tracked: ${href.slice(0, 60)}`)
    assert.match(l.html!, /\/t\/o\//, 'the open pixel')
    assert.equal(l.text, 'plain')
    for (const m of [l, sm]) assert.match(m.headers['List-Unsubscribe'] ?? '', /^<https?:\/\/[^>]+\/t\/u\/[^>]+>$/)
    // A tracked link of the large body works: it redirects to where it pointed.
    const click = await request(server.url + new URL(lLinks[7]!).pathname)
    assert.equal(click.statusCode, 302)
    assert.equal(click.headers.location, 'https://example.com/page/7?q=7')
    await click.body.dump()

    assert.deepEqual(await composed(server.url), { main: 1, worker: 1 })
  })

  test('over SMTP, every email is built once (its MIME template) and sent as a copy per recipient; a large one arrives tracked', async (t) => {
    const sink = await startSmtpSink()
    t.after(() => sink.close())
    const server = await startServer(t, { env: { SMTP_URL: sink.url } })
    const s = await sender(server)
    const large = await s.send({ to: 'reader@example.com', subject: 'Large', html: largeHtml(), text: 'plain' })
    assert.equal(large.status, 202, large.text)
    const small = await s.send({ to: 'reader@example.com', subject: 'Small', text: 'short' })
    assert.equal(small.status, 202, small.text)
    assert.equal((await s.settled(large.body.data.id)).status, 'delivered')
    assert.equal((await s.settled(small.body.data.id)).status, 'delivered')

    assert.equal(sink.received.length, 2)
    const parsed = await Promise.all(sink.received.map((m) => simpleParser(m.raw)))
    const l = parsed.find((p) => p.subject === 'Large')!
    const hrefs = [...String(l.html).matchAll(/href="([^"]+)"/g)].map((m) => m[1]!)
    assert.equal(hrefs.length, 200)
    for (const href of hrefs) assert.ok(href.startsWith(`${server.config.publicUrl}/t/c/`), `tracked: ${href.slice(0, 60)}`)
    assert.equal(l.text?.trim(), 'plain')
    assert.equal(parsed.find((p) => p.subject === 'Small')!.text?.trim(), 'short')
    const rendered = await (await request(server.url + '/metrics')).body.text()
    assert.match(rendered, /^svc_mail_rendered_total\{what="template"\} 2$/m)
    assert.match(rendered, /^svc_mail_rendered_total\{what="copy"\} 2$/m)
  })

  test('a large email the transport cannot build is failed with the step, quoting nothing; the mailer goes on', async (t) => {
    const sink = await startSmtpSink()
    t.after(() => sink.close())
    const smtp = createSmtpTransport(sink.url)
    t.after(() => smtp.close())
    // The real SMTP transport, handed a signing domain that cannot go into a signature.
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs8', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } })
    const transport: MailTransport = {
      name: 'smtp',
      send: (msg) => smtp.send(msg.subject === 'Poison' ? { ...msg, dkim: { domainName: `${'a'.repeat(3000)}\u{10FFFF}.example.com`, keySelector: 's1', privateKey } } : msg),
      close: async () => {},
    }
    const server = await startServer(t, { deps: { transport } })
    const s = await sender(server)
    const poison = await s.send({ to: 'reader@example.com', subject: 'Poison', html: largeHtml(), text: 'private text' })
    assert.equal(poison.status, 202, poison.text)
    const failed = await s.settled(poison.body.data.id)
    assert.equal(failed.status, 'failed')
    assert.deepEqual(timeline(failed), ['email.sent reader@example.com', 'email.bounced reader@example.com'])
    const record = await server.store.findEmail(s.accountId, poison.body.data.id)
    assert.equal(record?.lastError, 'could not be built: signing the message failed (the DKIM domain or selector is not plain ASCII)')
    assert.equal(record?.nextAttemptAt, null)
    assert.equal(sink.received.length, 0)

    const fine = await s.send({ to: 'reader@example.com', subject: 'Fine', html: largeHtml() })
    assert.equal((await s.settled(fine.body.data.id)).status, 'delivered')
    assert.equal(sink.received.length, 1)
  })
})
