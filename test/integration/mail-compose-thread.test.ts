// Large bodies are built in a worker thread (src/mail/compose-pool.ts), small ones in the mailer's own:
// the message is the same either way (tracked links, pixel, List-Unsubscribe), and a body that cannot be
// built is failed with its reason from the worker too. Real server, real worker thread, sandbox transport.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { request } from 'undici'
import { COMPOSE_IN_THREAD_CHARS } from '../../src/mail/compose-pool.js'
import { createSandboxTransport } from '../../src/mail/sandbox-transport.js'
import { startServer } from '../helpers/server.js'
import { sender } from '../helpers/sending.js'

async function composed (url: string): Promise<Record<string, number>> {
  const text = await (await request(url + '/metrics')).body.text()
  const counts: Record<string, number> = {}
  for (const m of text.matchAll(/^svc_mail_composed_total\{thread="(\w+)"\} (\d+)$/gm)) counts[m[1]!] = Number(m[2])
  return counts
}

describe('where a message is built', () => {
  test('a large html body is built in the worker thread, a small one in the mailer\'s: both tracked the same way', async (t) => {
    const transport = createSandboxTransport()
    const server = await startServer(t, { deps: { transport } })
    const s = await sender(server)
    // 200 links, padded past the threshold.
    const links = Array.from({ length: 200 }, (_, i) => `<p><a href="https://example.com/page/${i}?q=${i}">link ${i}</a> ${'lorem ipsum '.repeat(20)}</p>`).join('\n')
    const big = `<html><body>${links}</body></html>`
    assert.ok(big.length > COMPOSE_IN_THREAD_CHARS)
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
})
