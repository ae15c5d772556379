// Every recipient's copy is their own: over SMTP to a real server on loopback, each recipient (to, cc and
// bcc alike) gets a transaction with their own List-Unsubscribe link and tracked links and pixel, and what
// they do with them (open, click, one-click unsubscribe) is credited to them and nobody else. And at
// volume: a few thousand emails from a verified domain each arrive once, with their own recipient's
// unsubscribe link and a DKIM signature a third-party verifier (mailauth) accepts.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { dkimVerify } from 'mailauth'
import { simpleParser } from 'mailparser'
import { verifyTrackingToken } from '../../src/mail/tracking.js'
import { startDnsServer } from '../helpers/dns-server.js'
import { verifiedDomain } from '../helpers/domains.js'
import { TEST_SECRET, startServer, type Response, type TestServer } from '../helpers/server.js'
import { readerBatches, sender, timeline } from '../helpers/sending.js'
import { header, startSmtpSink, type Received } from '../helpers/smtp-sink.js'
import { waitFor } from '../helpers/wait.js'

function rawPost (server: TestServer, path: string, body?: string, contentType?: string): Promise<Response> {
  return server.client().request('POST', path, {
    ...(body !== undefined ? { body } : {}),
    headers: contentType ? { 'content-type': contentType } : {},
  })
}

/** The tracking paths of one received copy (PUBLIC_URL is not the test server's port: paths only). */
async function linksOf (m: Received): Promise<{ unsubscribe: string; pixel: string; click: string }> {
  const parsed = await simpleParser(m.raw)
  const html = String(parsed.html)
  const path = (url: string) => new URL(url).pathname
  return {
    unsubscribe: path(/^<(.+)>$/.exec(header(m.raw, 'List-Unsubscribe')!)![1]!),
    pixel: path(/<img src="([^"]+)"/.exec(html)![1]!),
    click: path(/<a href="([^"]+)"/.exec(html)![1]!.replace(/&amp;/g, '&')),
  }
}

/** Whose token this is: the recipient sealed in it. */
function ownerOf (path: string, kind: 'open' | 'click' | 'unsubscribe'): string | undefined {
  return verifyTrackingToken(TEST_SECRET, path.slice(path.lastIndexOf('/') + 1), kind)?.recipient
}

describe('a copy per recipient', () => {
  test('to, cc and bcc each get their own unsubscribe link and tracking; each action is credited to who took it', async (t) => {
    const sink = await startSmtpSink()
    const server = await startServer(t, { env: { SMTP_URL: sink.url, MAIL_FROM: 'Example <mail@example.com>' } })
    t.after(() => sink.close())
    const s = await sender(server)
    const res = await s.send({
      to: ['First <first@example.net>', 'second@example.net'], cc: 'copy@example.net', bcc: 'blind@example.net',
      subject: 'News', html: '<p><a href="https://shop.example.com/item?id=7">Item</a></p>', text: 'News',
    })
    assert.equal(res.status, 202, res.text)
    const id: string = res.body.data.id
    assert.equal((await s.settled(id)).status, 'delivered')

    const everyone = ['first@example.net', 'second@example.net', 'copy@example.net', 'blind@example.net']
    assert.equal(sink.received.length, 4, 'one transaction per recipient')
    const byRecipient = new Map(sink.received.map((m) => [m.rcptTo.join(','), m]))
    assert.deepEqual([...byRecipient.keys()].sort(), [...everyone].sort())
    const links = new Map<string, Awaited<ReturnType<typeof linksOf>>>()
    for (const r of everyone) {
      const m = byRecipient.get(r)!
      // The same message for everyone (headers as written, no Bcc), with links of its own.
      assert.equal(header(m.raw, 'To'), 'First <first@example.net>, second@example.net')
      assert.equal(header(m.raw, 'Cc'), 'copy@example.net')
      assert.equal(header(m.raw, 'Message-ID'), `<${id}@example.com>`)
      assert.doesNotMatch(m.raw.split('\r\n\r\n')[0]!, /blind@example\.net/)
      const l = await linksOf(m)
      assert.equal(ownerOf(l.unsubscribe, 'unsubscribe'), r, `${r}'s List-Unsubscribe names them`)
      assert.equal(ownerOf(l.pixel, 'open'), r)
      assert.equal(ownerOf(l.click, 'click'), r)
      links.set(r, l)
    }
    assert.equal(new Set([...links.values()].map((l) => l.unsubscribe)).size, 4, 'four different links')

    // One-click from the cc copy: `copy` leaves, nobody else.
    const one = await rawPost(server, links.get('copy@example.net')!.unsubscribe, 'List-Unsubscribe=One-Click', 'application/x-www-form-urlencoded')
    assert.equal(one.status, 200)
    const listed = (await s.client.get('/api/suppressions')).body.data.map((e: { email: string; reason: string }) => `${e.email} ${e.reason}`)
    assert.deepEqual(listed, ['copy@example.net unsubscribed'])
    // The bcc copy's link unsubscribes the blind recipient, not the first `to`.
    assert.equal((await rawPost(server, links.get('blind@example.net')!.unsubscribe, 'List-Unsubscribe=One-Click', 'application/x-www-form-urlencoded')).status, 200)

    // Opens and clicks are credited to whoever's copy they came from.
    const open = await server.client().get(links.get('second@example.net')!.pixel)
    assert.equal(open.status, 200)
    const click = await server.client().get(links.get('blind@example.net')!.click)
    assert.equal(click.status, 302)
    assert.equal(click.headers.location, 'https://shop.example.com/item?id=7')
    const events = await waitFor('the engagement events', async () => {
      const e = timeline((await s.email(id)).body.data).filter((x) => /opened|clicked|unsubscribed/.test(x))
      return e.length >= 4 ? e : false
    })
    assert.deepEqual(events.sort(), [
      'email.clicked blind@example.net', 'email.opened second@example.net',
      'email.unsubscribed blind@example.net', 'email.unsubscribed copy@example.net',
    ])
    const after = (await s.client.get('/api/suppressions')).body.data.map((e: { email: string }) => e.email).sort()
    assert.deepEqual(after, ['blind@example.net', 'copy@example.net'], 'first and second are still subscribed')
  })

  test('2,000 emails from a verified domain: each arrives once, with its own recipient\'s unsubscribe link and a valid DKIM signature', async (t) => {
    const dns = await startDnsServer(t)
    const sink = await startSmtpSink()
    const server = await startServer(t, {
      env: { DNS_SERVERS: dns.server, SMTP_URL: sink.url, PUBLIC_URL: 'https://mail.svc.test', MAIL_FROM: 'svc <no-reply@svc.test>', SMTP_POOL_SIZE: '4' },
    })
    t.after(() => sink.close())
    const s = await sender(server)
    await verifiedDomain(s.client, dns, 'example.com')
    const count = 2000
    for (const batch of readerBatches(count, 'Shop <shop@example.com>')) {
      const res = await s.batch(batch)
      assert.equal(res.status, 202, res.text)
    }
    await waitFor(() => `${count} messages at the relay (${sink.received.length} so far)`, () => sink.received.length >= count, { timeoutMs: 180_000 })

    const seen = new Map<string, number>()
    for (const m of sink.received) {
      assert.equal(m.rcptTo.length, 1)
      const r = m.rcptTo[0]!
      seen.set(r, (seen.get(r) ?? 0) + 1)
      const unsubscribe = /^<(.+)>$/.exec(header(m.raw, 'List-Unsubscribe')!)![1]!
      assert.equal(ownerOf(new URL(unsubscribe).pathname, 'unsubscribe'), r, 'the unsubscribe link names this recipient')
      assert.match(m.mailFrom, /^b\+[a-z2-7]+@bounces\.example\.com$/, 'a VERP envelope sender')
    }
    assert.equal(seen.size, count, 'every recipient got their email')
    assert.deepEqual([...new Set(seen.values())], [1], 'each exactly once')
    // Every signature verifies against the published key (a third-party verifier).
    let verified = 0
    for (const m of sink.received) {
      const verdict = await dkimVerify(Buffer.from(m.raw), { resolver: dns.resolve as never })
      const first = verdict.results[0] as { status: { result: string }; signingDomain?: string } | undefined
      assert.equal(first?.status.result, 'pass', `DKIM for ${m.rcptTo[0]}: ${JSON.stringify(first?.status)}`)
      assert.equal(first?.signingDomain, 'example.com')
      verified++
    }
    assert.equal(verified, count)
    // And the verifier can fail: a changed subject no longer passes.
    const tampered = sink.received[0]!.raw.replace(/^Subject: /m, 'Subject: X')
    const bad = await dkimVerify(Buffer.from(tampered), { resolver: dns.resolve as never })
    assert.notEqual((bad.results[0] as { status: { result: string } }).status.result, 'pass')
    // Nothing arrives twice later: the mailer recorded each one (no lease runs out and resends).
    await waitFor('every email to be recorded as delivered', async () => {
      const res = await s.client.get('/api/emails?status=delivered&limit=1')
      return res.status === 200 && res.body.data.length === 1 ? true : false
    })
    assert.equal(sink.received.length, count)
  })
})
