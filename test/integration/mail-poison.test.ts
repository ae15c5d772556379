// Poison emails: an email whose message cannot be built (its body is over the build bound, or building it
// throws) is failed at its first attempt with a reason on its timeline, and is never due again, so it
// cannot block or crash the mailer at every start. Real SQLite store, real mailer, sandbox transport.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { makeEvent } from '../../src/domain/email-events.js'
import { MAX_BUILD_BODY_CHARS } from '../../src/domain/mail-attempt.js'
import { newId } from '../../src/domain/ids.js'
import { createSandboxTransport } from '../../src/mail/sandbox-transport.js'
import type { EmailRecord } from '../../src/store/emails.js'
import { startServer, type TestServer } from '../helpers/server.js'
import { sender, timeline } from '../helpers/sending.js'

/** Stores an email the way an accepted send is stored, but past the send route's checks. */
async function storeEmail (server: TestServer, accountId: string, recipient: string, body: { html?: string; text?: string }): Promise<string> {
  const now = Date.now()
  const at = new Date(now).toISOString()
  const id = newId('em', now)
  const email: EmailRecord = {
    id, accountId, from: 'Sender <sender@example.com>', to: [recipient], cc: [], bcc: [], replyTo: [], subject: 'Poison',
    html: body.html ?? null, text: body.text ?? null, headers: {}, tags: [], suppressed: [],
    recipients: [{ address: recipient, state: 'pending' }], status: 'queued', attempts: 0, nextAttemptAt: at,
    leaseOwner: null, leaseExpiresAt: null, leaseToken: 0, lastError: null, createdAt: at, updatedAt: at,
  }
  const events = [makeEvent({ accountId, emailId: id, type: 'email.sent', recipient, at: now })]
  assert.equal((await server.store.acceptEmails({ emails: [email], events })).outcome, 'accepted')
  return id
}

async function setup (t: Parameters<typeof startServer>[0]) {
  const transport = createSandboxTransport()
  const server = await startServer(t, { deps: { transport } })
  return { server, transport, s: await sender(server) }
}

/** The email is failed for `reason`, once, without a suppression, and is never handed out again. */
async function assertFailedForGood (server: TestServer, accountId: string, id: string, recipient: string, reason: string) {
  const events = await server.store.listEmailEvents(accountId, id)
  assert.deepEqual(events.map((e) => `${e.type} ${e.recipient}`), [`email.sent ${recipient}`, `email.bounced ${recipient}`])
  // The webhook body says why.
  assert.deepEqual(JSON.parse(events[1]!.payload).data, { reason })
  const record = await server.store.findEmail(accountId, id)
  assert.equal(record?.status, 'failed')
  assert.equal(record?.lastError, reason)
  assert.equal(record?.attempts, 1)
  assert.equal(record?.nextAttemptAt, null)
  assert.equal(record?.leaseOwner, null)
  // The fault is the message's, not the address's.
  assert.deepEqual(await server.store.findSuppressions(accountId, [recipient]), [])
  // What a start does (take this node's leases back), then a claim far in the future: it is never due again.
  await server.store.releaseEmailLeases(server.config.nodeId ?? '')
  const inAYear = Date.now() + 365 * 86_400_000
  const due = await server.store.claimDueEmails({ owner: 'probe', dueBy: new Date(inAYear).toISOString(), now: inAYear, leaseUntil: inAYear + 60_000, limit: 100 })
  assert.ok(!due.some((e) => e.id === id), 'the failed email is due again')
}

describe('poison emails', () => {
  test('a body over the build bound: failed with the reason on its timeline, and the queue goes on', async (t) => {
    const { server, transport, s } = await setup(t)
    const id = await storeEmail(server, s.accountId, 'reader@example.com', { html: `<p>${'x'.repeat(MAX_BUILD_BODY_CHARS)}</p>` })
    const fine = await s.send({ to: 'other@example.com', subject: 'Fine', html: '<a href="https://example.com/">x</a>' })
    assert.equal(fine.status, 202)

    const failed = await s.settled(id)
    assert.equal(failed.status, 'failed')
    assert.deepEqual(timeline(failed), ['email.sent reader@example.com', 'email.bounced reader@example.com'])
    await assertFailedForGood(server, s.accountId, id, 'reader@example.com', `could not be built: the html is longer than ${MAX_BUILD_BODY_CHARS} characters`)

    assert.equal((await s.settled(fine.body.data.id)).status, 'delivered')
    const sent = transport.sent().map((m) => m.messageId)
    assert.ok(sent.includes(fine.body.data.id))
    assert.ok(!sent.includes(id), 'nothing of the poison email was handed to the transport')
  })

  test('a build that throws: failed with the step that failed, never the content', async (t) => {
    const { server, transport, s } = await setup(t)
    // An address no tracking token can hold (a send refuses it; an old or hand-made row may have it).
    const recipient = `${'secret-local-part-'.repeat(16)}@example.com`
    const id = await storeEmail(server, s.accountId, recipient, { html: '<a href="https://example.com/private-path">x</a>', text: 'private text' })
    const failed = await s.settled(id)
    assert.equal(failed.status, 'failed')
    const reason = 'could not be built: making the List-Unsubscribe link failed (TypeError)'
    await assertFailedForGood(server, s.accountId, id, recipient, reason)
    assert.ok(!transport.sent().some((m) => m.messageId === id))
  })
})

describe('hostile html through the whole pipeline', () => {
  test('a send with 900 KB of whitespace inside an href is delivered, with that link as written and the others tracked', { timeout: 60_000 }, async (t) => {
    const { transport, s, server } = await setup(t)
    const hostile = `<a href="https://example.com/${' '.repeat(900_000)}x">long</a>`
    const res = await s.send({ to: 'reader@example.com', subject: 'Hostile', html: `<body><a href="https://example.com/ok">ok</a>${hostile}</body>` })
    assert.equal(res.status, 202)
    // The old rewrite blocked the event loop here for minutes (this whole process with it).
    assert.equal((await s.settled(res.body.data.id)).status, 'delivered')
    const html = transport.sent().find((m) => m.messageId === res.body.data.id)?.html ?? ''
    assert.ok(html.includes(hostile), 'the untrackable link is left as written')
    assert.ok(!html.includes('https://example.com/ok'), 'the ordinary link is tracked')
    assert.match(html, /<a href="[^"]+\/t\/c\/[A-Za-z0-9_-]+">ok<\/a>/)
    assert.equal((await server.client().get('/healthz')).status, 200)
  })
})
