// The links inside a sent email, followed the way a recipient's mail client follows them: the open pixel,
// a tracked link, and the unsubscribe page and its one-click POST. The links are read from what the
// transport was given, so what is tested is what a recipient gets.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createSandboxTransport, type SandboxTransport } from '../../src/mail/sandbox-transport.js'
import { createTrackingToken } from '../../src/mail/tracking.js'
import { TEST_SECRET, errorOf, startServer, type Response, type TestServer } from '../helpers/server.js'
import { sender, timeline, type Sender } from '../helpers/sending.js'

interface Links {
  id: string
  pixel: string
  click: string
  unsubscribe: string
}

async function setup (t: Parameters<typeof startServer>[0]) {
  const transport = createSandboxTransport()
  const server = await startServer(t, { deps: { transport } })
  return { server, transport, s: await sender(server) }
}

/** Sends an email with one link and returns the paths of its tracking links (PUBLIC_URL is not this port). */
async function sendWithLinks (s: Sender, transport: SandboxTransport, to: string | string[] = 'reader@example.com'): Promise<Links> {
  const res = await s.send({
    to, subject: 'News', html: '<p><a href="https://shop.example.com/item?id=7&amp;ref=mail">Item</a></p>',
  })
  assert.equal(res.status, 202, res.text)
  const id: string = res.body.data.id
  await s.settled(id)
  const copy = transport.sent().find((m) => m.messageId === id)!
  const path = (url: string) => new URL(url).pathname
  const html = copy.html ?? ''
  return {
    id,
    pixel: path(/<img src="([^"]+)"/.exec(html)![1]!),
    click: path(/<a href="([^"]+)"/.exec(html)![1]!.replace(/&amp;/g, '&')),
    unsubscribe: path(/^<(.+)>$/.exec(copy.headers['List-Unsubscribe']!)![1]!),
  }
}

function tamper (path: string): string {
  // Change one character of the token: its authentication tag no longer matches.
  const i = path.lastIndexOf('/') + 5
  const c = path[i] === 'A' ? 'B' : 'A'
  return path.slice(0, i) + c + path.slice(i + 1)
}

function rawPost (server: TestServer, path: string, body?: string, contentType?: string): Promise<Response> {
  return server.client().request('POST', path, {
    ...(body !== undefined ? { body } : {}),
    headers: contentType ? { 'content-type': contentType } : {},
  })
}

describe('open pixel', () => {
  test('answers a 1×1 transparent GIF that is never cached, and records every open', async (t) => {
    const { server, transport, s } = await setup(t)
    const links = await sendWithLinks(s, transport)
    const res = await server.client().get(links.pixel)
    assert.equal(res.status, 200)
    assert.equal(res.headers['content-type'], 'image/gif')
    assert.match(String(res.headers['cache-control']), /no-store/)
    assert.ok(res.text.startsWith('GIF89a'))
    await server.client().get(links.pixel)
    // A HEAD (a proxy or link checker probing the URL) is answered but is not an open.
    const head = await fetch(server.url + links.pixel, { method: 'HEAD' })
    assert.equal(head.status, 200)
    const email = (await s.email(links.id)).body.data
    assert.deepEqual(timeline(email).filter((e) => e.startsWith('email.opened')), ['email.opened reader@example.com', 'email.opened reader@example.com'])
  })
})

describe('tracked links', () => {
  test('302 to the original link, and email.clicked carries that link', async (t) => {
    const { server, transport, s } = await setup(t)
    const links = await sendWithLinks(s, transport)
    const res = await server.client().get(links.click)
    assert.equal(res.status, 302)
    assert.equal(res.headers.location, 'https://shop.example.com/item?id=7&ref=mail')
    assert.equal(res.headers['referrer-policy'], 'no-referrer')
    const events = await server.store.listEmailEvents(s.accountId, links.id)
    const clicked = events.filter((e) => e.type === 'email.clicked')
    assert.equal(clicked.length, 1)
    // The webhook body of the event, as the delivery engine will send it.
    const payload = JSON.parse(clicked[0]!.payload)
    assert.deepEqual(payload, {
      emailId: links.id, to: 'reader@example.com', timestamp: clicked[0]!.occurredAt, type: 'email.clicked',
      eventId: clicked[0]!.id, tags: [], metadata: {}, data: { url: 'https://shop.example.com/item?id=7&ref=mail' },
    })
  })

  test('a forged, altered, expired or wrong-kind token is a 404 and never a redirect', async (t) => {
    const { server, transport, s } = await setup(t)
    const links = await sendWithLinks(s, transport)
    const now = Math.floor(Date.now() / 1000)
    const forged = createTrackingToken('another secret, not the service one', {
      kind: 'click', emailId: links.id, recipient: 'reader@example.com', url: 'https://evil.example/', exp: now + 3600,
    })
    const expired = createTrackingToken(TEST_SECRET, {
      kind: 'click', emailId: links.id, recipient: 'reader@example.com', url: 'https://shop.example.com/', exp: now - 1,
    })
    const cases: Array<[string, string]> = [
      ['altered', tamper(links.click)],
      ['forged', `/t/c/${forged}`],
      ['expired', `/t/c/${expired}`],
      ['an open token on the click route', links.pixel.replace('/t/o/', '/t/c/')],
      ['garbage', '/t/c/not-a-token'],
      ['truncated', links.click.slice(0, -4)],
      ['extended', `${links.click}AAAA`],
    ]
    for (const [what, path] of cases) {
      const res = await server.client().get(path)
      assert.equal(res.status, 404, what)
      assert.equal(res.headers.location, undefined, `${what}: no redirect`)
    }
    assert.equal((await server.client().get(tamper(links.pixel))).status, 404)
    const expiredOpen = createTrackingToken(TEST_SECRET, { kind: 'open', emailId: links.id, recipient: 'reader@example.com', exp: now - 1 })
    assert.equal((await server.client().get(`/t/o/${expiredOpen}`)).status, 404)
    assert.equal((await server.client().get(tamper(links.unsubscribe))).status, 404)
    assert.equal((await rawPost(server, tamper(links.unsubscribe))).status, 404)

    // None of them was recorded.
    const types = (await s.email(links.id)).body.data.events.map((e: { type: string }) => e.type)
    assert.deepEqual(types, ['email.sent', 'email.delivered'])
  })

  test('the links an email carries name neither its recipient nor its destinations to whoever reads them', async (t) => {
    const { transport, s } = await setup(t)
    const links = await sendWithLinks(s, transport, 'private.person@example.com')
    const copy = transport.sent().find((m) => m.messageId === links.id)!
    const tokens = [links.pixel, links.click, links.unsubscribe].map((p) => p.split('/').at(-1)!)
    for (const token of tokens) {
      for (let skip = 0; skip < 4; skip++) {
        const raw = Buffer.from(token.slice(skip), 'base64url')
        for (const view of [token, raw.toString('latin1'), raw.toString('hex')]) {
          for (const secret of ['private.person', 'shop.example.com', 'item?id=7', Buffer.from('private.person').toString('hex')]) {
            assert.ok(!view.includes(secret), `${secret} is readable in a token`)
          }
        }
      }
    }
    // The html still has the original link nowhere, and the List-Unsubscribe header names nobody.
    assert.ok(!(copy.html ?? '').includes('shop.example.com'))
    assert.ok(!copy.headers['List-Unsubscribe']!.includes('private.person'))
  })

  test('a valid token for an email that does not exist is a 404', async (t) => {
    const { server } = await setup(t)
    const token = createTrackingToken(TEST_SECRET, {
      kind: 'click', emailId: 'em_0000000000000000000000000000', recipient: 'x@example.com', url: 'https://example.com/', exp: Math.floor(Date.now() / 1000) + 60,
    })
    const res = await server.client().get(`/t/c/${token}`)
    assert.equal(res.status, 404)
    assert.equal(res.headers.location, undefined)
  })
})

describe('unsubscribe', () => {
  async function suppressions (s: Sender) {
    return (await s.client.get('/api/suppressions')).body.data.map((e: { email: string; reason: string }) => `${e.email} ${e.reason}`)
  }

  test('GET shows a confirmation page whose button posts; it unsubscribes nobody', async (t) => {
    const { server, transport, s } = await setup(t)
    const links = await sendWithLinks(s, transport)
    const page = await server.client().get(links.unsubscribe)
    assert.equal(page.status, 200)
    assert.match(String(page.headers['content-type']), /^text\/html/)
    assert.match(page.text, /<form method="post">/)
    assert.match(page.text, /reader@example\.com/)
    assert.match(String(page.headers['content-security-policy']), /form-action 'self'/)
    await server.client().get(links.unsubscribe) // a link scanner, twice
    assert.deepEqual(await suppressions(s), [])
    assert.equal((await s.send({ to: 'reader@example.com', subject: 'Still here', text: 'x' })).status, 202)
  })

  test('one-click POST (RFC 8058) suppresses at once and raises email.unsubscribed once', async (t) => {
    const { server, transport, s } = await setup(t)
    const links = await sendWithLinks(s, transport)
    const res = await rawPost(server, links.unsubscribe, 'List-Unsubscribe=One-Click', 'application/x-www-form-urlencoded')
    assert.equal(res.status, 200)
    assert.match(res.text, /will get no more emails/)
    assert.deepEqual(await suppressions(s), ['reader@example.com unsubscribed'])

    // Again: the answer is the same, and nothing new is raised.
    assert.equal((await rawPost(server, links.unsubscribe)).status, 200)
    assert.equal((await rawPost(server, links.unsubscribe, 'List-Unsubscribe=One-Click', 'application/x-www-form-urlencoded')).status, 200)
    const email = (await s.email(links.id)).body.data
    assert.deepEqual(timeline(email).filter((e) => e.startsWith('email.unsubscribed')), ['email.unsubscribed reader@example.com'])

    const next = await s.send({ to: 'reader@example.com', subject: 'Hello again', text: 'x' })
    assert.equal(next.status, 422)
    assert.equal(errorOf(next).code, 'recipient_suppressed')
  })

  test('an empty POST and a multipart one both unsubscribe; a large body is refused', async (t) => {
    const { server, transport, s } = await setup(t)
    const empty = await sendWithLinks(s, transport, 'empty@example.com')
    assert.equal((await rawPost(server, empty.unsubscribe)).status, 200)
    const multi = await sendWithLinks(s, transport, 'multi@example.com')
    const boundary = 'xYzZY'
    const body = `--${boundary}\r\nContent-Disposition: form-data; name="List-Unsubscribe"\r\n\r\nOne-Click\r\n--${boundary}--\r\n`
    assert.equal((await rawPost(server, multi.unsubscribe, body, `multipart/form-data; boundary=${boundary}`)).status, 200)
    assert.deepEqual((await suppressions(s)).sort(), ['empty@example.com unsubscribed', 'multi@example.com unsubscribed'])

    const big = await sendWithLinks(s, transport, 'big@example.com')
    const tooLarge = await rawPost(server, big.unsubscribe, 'x'.repeat(10_000), 'application/x-www-form-urlencoded')
    assert.equal(tooLarge.status, 413)
    // The form parser is the tracking routes' own: the API still takes JSON only.
    const form = await server.client().request('POST', '/api/send', {
      body: 'to=a@example.com', headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-api-key': s.key },
    })
    assert.equal(form.status, 415)
  })

  test('with several recipients, the kept copy (the first recipient\'s) speaks for the first only; each recipient has their own (mail-per-recipient.test.ts)', async (t) => {
    const { server, transport, s } = await setup(t)
    const links = await sendWithLinks(s, transport, ['first@example.com', 'second@example.com'])
    await server.client().get(links.pixel)
    assert.equal((await rawPost(server, links.unsubscribe)).status, 200)
    const email = (await s.email(links.id)).body.data
    assert.ok(timeline(email).includes('email.opened first@example.com'))
    assert.deepEqual(await suppressions(s), ['first@example.com unsubscribed'])
  })
})
