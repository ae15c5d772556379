// The rules of sending without a server: addresses, request hashes, what one attempt changes, and the
// message the transport is given.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import addressparser from 'nodemailer/lib/addressparser/index.js'
import { ConfigError, loadConfig } from '../../config/index.js'
import { formatAddress, parseAddress } from '../../src/domain/addresses.js'
import { systemClock } from '../../src/domain/clock.js'
import { createEmailService, requestHash } from '../../src/app/emails.js'
import { DEFAULT_RETRY_DELAYS_MS, planAttempt, withJitter, type RecipientOutcome } from '../../src/domain/mail-attempt.js'
import { composeMessage } from '../../src/mail/mailer.js'
import { verifyTrackingToken } from '../../src/mail/tracking.js'
import type { EmailRecord } from '../../src/store/emails.js'
import type { Store } from '../../src/store/types.js'

describe('addresses', () => {
  test('bare and display forms are accepted and normalised to one lower-case address', () => {
    assert.deepEqual(parseAddress('Someone@Example.COM'), { name: null, address: 'someone@example.com' })
    assert.deepEqual(parseAddress('  Jane Doe <Jane@Example.com> '), { name: 'Jane Doe', address: 'jane@example.com' })
    assert.deepEqual(parseAddress('"Doe, Jane" <jane@example.com>'), { name: 'Doe, Jane', address: 'jane@example.com' })
    assert.deepEqual(parseAddress('<jane@example.com>'), { name: null, address: 'jane@example.com' })
    assert.deepEqual(parseAddress('José Núñez <jose@xn--nez-8ma.example>'), { name: 'José Núñez', address: 'jose@xn--nez-8ma.example' })
    assert.deepEqual(parseAddress('a.b+tag@sub.example.co.uk'), { name: null, address: 'a.b+tag@sub.example.co.uk' })
  })

  test('anything that could become another header or another recipient is refused', () => {
    for (const bad of [
      'a@example.com\r\nBcc: x@evil.test', 'a@example.com\nBcc: x@evil.test', '"Eve\r\nBcc: x@evil.test" <e@example.com>',
      'a@example.com, b@example.com', 'a@example.com; b@example.com', 'Team: a@example.com;', 'a@b@example.com', '@example.com',
      'a@', 'a@-example.com', 'a@example..com', 'a@127.0.0.1', 'a@[127.0.0.1]', '"a b"@example.com', 'jöe@example.com',
      'a@exämple.com', 'Eve <eve@example.com', 'Eve <e@x.com> <f@y.com>', 'E<v>e <e@example.com>', '\u0000a@example.com',
      `${'a'.repeat(65)}@example.com`, `a@${'b'.repeat(250)}.com`,
    ]) {
      assert.ok('error' in parseAddress(bad), `refused: ${JSON.stringify(bad)}`)
    }
  })

  test('a formatted address reads back, through the parser nodemailer uses, as the same one address', () => {
    for (const input of ['Plain Name <p@example.com>', '"Quote \\" and \\\\ slash" <q@example.com>', '"a, b; c: d" <x@example.com>', 'x@example.com']) {
      const parsed = parseAddress(input)
      assert.ok(!('error' in parsed), input)
      const back = addressparser(formatAddress(parsed), { flatten: true })
      assert.equal(back.length, 1, input)
      assert.equal(back[0]!.address, parsed.address)
      assert.equal(back[0]!.name || null, parsed.name)
    }
  })
})

describe('request hashes', () => {
  test('the same body in another key order is the same request; any other change is another', () => {
    const h = requestHash('POST /api/send', { to: 'a@example.com', subject: 'Hi', headers: { A: '1', B: '2' } })
    assert.equal(requestHash('POST /api/send', { headers: { B: '2', A: '1' }, subject: 'Hi', to: 'a@example.com' }), h)
    assert.notEqual(requestHash('POST /api/send', { to: 'a@example.com', subject: 'Hi!', headers: { A: '1', B: '2' } }), h)
    assert.notEqual(requestHash('POST /api/send/batch', { to: 'a@example.com', subject: 'Hi', headers: { A: '1', B: '2' } }), h)
    assert.notEqual(requestHash('POST /api/send', [1, 2]), requestHash('POST /api/send', [2, 1]), 'array order matters')
  })
})

function email (overrides: Partial<EmailRecord> = {}): EmailRecord {
  const at = '2026-01-01T00:00:00.000Z'
  return {
    id: 'em_0190000000000000000000000001',
    accountId: 'acct_0190000000000000000000000001',
    from: 'Shop <shop@example.com>',
    to: ['Ann <ann@example.com>', 'bob@example.com'],
    cc: ['cid@example.com'],
    bcc: ['dee@example.com'],
    replyTo: [],
    subject: 'Hi',
    html: '<html><body><a href="https://example.com/x">x</a></body></html>',
    text: 'x',
    headers: { 'X-Campaign': 'c1' },
    tags: [],
    suppressed: [],
    recipients: ['ann', 'bob', 'cid', 'dee'].map((n) => ({ address: `${n}@example.com`, state: 'pending' as const })),
    status: 'queued',
    attempts: 0,
    nextAttemptAt: at,
    leaseOwner: 'node',
    leaseExpiresAt: Date.parse(at) + 30_000,
    leaseToken: 1,
    lastError: null,
    createdAt: at,
    updatedAt: at,
    ...overrides,
  }
}

const policy = { retryDelaysMs: [1000, 60_000], random: () => 0.5 }
const NOW = Date.parse('2026-01-01T00:01:00.000Z')
const result = (recipient: string, outcome: RecipientOutcome['outcome'], response = `${outcome} answer`): RecipientOutcome =>
  ({ recipient, outcome, response })

describe('planAttempt', () => {
  test('each outcome raises its events; bounces and complaints suppress that address only; deferred ones wait', () => {
    const plan = planAttempt(email(), [
      result('ann@example.com', 'delivered'), result('bob@example.com', 'bounced', '550 no such user'),
      result('cid@example.com', 'complained'), result('dee@example.com', 'deferred', '451 later'),
    ], NOW, policy)
    assert.deepEqual(plan.events.map((e) => `${e.type} ${e.recipient}`), [
      'email.delivered ann@example.com', 'email.bounced bob@example.com', 'email.delivered cid@example.com', 'email.complained cid@example.com',
    ])
    assert.deepEqual(plan.suppressions.map((s) => `${s.email} ${s.reason}`), ['bob@example.com bounced', 'cid@example.com complained'])
    assert.deepEqual(plan.recipients.map((r) => r.state), ['delivered', 'bounced', 'complained', 'pending'])
    assert.equal(plan.status, 'deferred')
    assert.equal(plan.attempts, 1)
    assert.equal(plan.nextAttemptAt, new Date(NOW + 1000).toISOString())
    assert.equal(plan.lastError, '451 later')
    assert.deepEqual(JSON.parse(plan.events[1]!.payload).data, { reason: '550 no such user' })
    for (const e of plan.events) {
      assert.equal(e.occurredAt, new Date(NOW).toISOString())
      assert.deepEqual(Object.keys(JSON.parse(e.payload)).slice(0, 5), ['emailId', 'to', 'timestamp', 'type', 'eventId'])
    }
    assert.equal(new Set(plan.events.map((e) => e.id)).size, plan.events.length)
  })

  test('only pending recipients are touched; a missing result counts as deferred', () => {
    const before = email({
      attempts: 1,
      recipients: [{ address: 'ann@example.com', state: 'delivered' }, { address: 'bob@example.com', state: 'pending' }],
    })
    const plan = planAttempt(before, [result('ann@example.com', 'bounced')], NOW, policy)
    assert.deepEqual(plan.recipients, [{ address: 'ann@example.com', state: 'delivered' }, { address: 'bob@example.com', state: 'pending' }])
    assert.deepEqual(plan.events, [])
    assert.equal(plan.nextAttemptAt, new Date(NOW + 60_000).toISOString())
  })

  test('once the schedule is spent a deferred recipient bounces, without a suppression', () => {
    const last = email({ attempts: 2, recipients: [{ address: 'ann@example.com', state: 'pending' }, { address: 'bob@example.com', state: 'delivered' }] })
    const plan = planAttempt(last, [result('ann@example.com', 'deferred', 'ECONNREFUSED')], NOW, policy)
    assert.equal(plan.status, 'partially_delivered')
    assert.equal(plan.nextAttemptAt, null)
    assert.deepEqual(plan.suppressions, [])
    assert.equal(JSON.parse(plan.events[0]!.payload).data.reason, 'gave up after 3 attempts; last answer: ECONNREFUSED')
  })

  test('final statuses: all delivered (complaints included), all bounced, or partially delivered', () => {
    const two = email({ recipients: [{ address: 'a@x.com', state: 'pending' }, { address: 'b@x.com', state: 'pending' }] })
    const status = (a: RecipientOutcome['outcome'], b: RecipientOutcome['outcome']) =>
      planAttempt(two, [result('a@x.com', a), result('b@x.com', b)], NOW, policy).status
    assert.equal(status('delivered', 'complained'), 'delivered')
    assert.equal(status('bounced', 'bounced'), 'bounced')
    assert.equal(status('delivered', 'bounced'), 'partially_delivered')
  })

  test('the default schedule backs off and gives up after about a day; jitter stays within ±20 %', () => {
    for (let i = 1; i < DEFAULT_RETRY_DELAYS_MS.length; i++) assert.ok(DEFAULT_RETRY_DELAYS_MS[i]! >= DEFAULT_RETRY_DELAYS_MS[i - 1]!)
    const total = DEFAULT_RETRY_DELAYS_MS.reduce((a, b) => a + b, 0)
    assert.ok(total > 20 * 3_600_000 && total < 28 * 3_600_000, `${total / 3_600_000} h`)
    assert.equal(withJitter(1000, () => 0), 800)
    assert.equal(withJitter(1000, () => 0.999999), 1200)
  })
})

describe('composeMessage', () => {
  const opts = { publicUrl: 'https://mail.example.org', secret: 'a'.repeat(40) }

  test('carries our id, the unsubscribe headers and the instrumented html, for the first to address', () => {
    const msg = composeMessage(email(), opts)
    assert.equal(msg.messageId, 'em_0190000000000000000000000001')
    assert.equal(msg.headers['X-Campaign'], 'c1')
    assert.equal(msg.headers['List-Unsubscribe-Post'], 'List-Unsubscribe=One-Click')
    const token = /^<https:\/\/mail\.example\.org\/t\/u\/(.+)>$/.exec(msg.headers['List-Unsubscribe']!)![1]!
    const claims = verifyTrackingToken(opts.secret, token, 'unsubscribe', Date.parse('2026-01-02T00:00:00Z') / 1000)
    assert.equal(claims?.recipient, 'ann@example.com')
    assert.match(msg.html!, /href="https:\/\/mail\.example\.org\/t\/c\//)
    assert.match(msg.html!, /<img src="https:\/\/mail\.example\.org\/t\/o\/[^"]+"[^>]*><\/body>/)
    assert.equal(msg.text, 'x', 'text is sent as written')
    // Tokens live 180 days from acceptance.
    assert.equal(verifyTrackingToken(opts.secret, token, 'unsubscribe', Date.parse('2026-07-01T00:00:00Z') / 1000), null)
  })

  test('a retry goes only to the recipients still pending', () => {
    const msg = composeMessage(email({
      recipients: [
        { address: 'ann@example.com', state: 'delivered' }, { address: 'bob@example.com', state: 'pending' },
        { address: 'cid@example.com', state: 'bounced' }, { address: 'dee@example.com', state: 'pending' },
      ],
    }), opts)
    assert.deepEqual([msg.to, msg.cc, msg.bcc], [['bob@example.com'], [], ['dee@example.com']])
  })
})

describe('MAIL_FROM', () => {
  test('defaults to svc <no-reply@localhost>; a value with CR/LF stops the start', () => {
    assert.equal(loadConfig({}).mailFrom, 'svc <no-reply@localhost>')
    assert.equal(loadConfig({ MAIL_FROM: 'Shop <shop@example.com>' }).mailFrom, 'Shop <shop@example.com>')
    for (const bad of ['shop@example.com\r\nBcc: x@evil.test', 'no address here']) {
      assert.throws(() => loadConfig({ MAIL_FROM: bad }), (err: unknown) =>
        err instanceof ConfigError && err.problems.length === 1 && err.problems[0]!.startsWith('MAIL_FROM must be'))
    }
  })

  test('a sender that is not one valid address stops the service from being built', () => {
    const store = {} as Store
    assert.throws(() => createEmailService({ store, clock: systemClock, mailFrom: 'a@@example.com' }), /^Error: MAIL_FROM /)
    assert.doesNotThrow(() => createEmailService({ store, clock: systemClock, mailFrom: 'svc <no-reply@localhost>' }))
  })
})
