// A send's tracking and unsubscribe choices in the message it becomes (src/mail/compose.ts): off means no
// pixel, links as written, no List-Unsubscribe; a copy that names nobody is one message for all.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { TRACKING_TTL_MS } from '../../src/domain/tracking-links.js'
import { draftMessage, personalize } from '../../src/mail/compose.js'
import type { EmailRecord } from '../../src/store/emails.js'

const OPTS = { publicUrl: 'https://mail.example.com', secret: 'test-secret-0123456789abcdef' }
const HTML = '<html><body><p><a href="https://example.com/a?x=1&amp;y=2">A</a> <a href=\'http://example.org/b\'>B</a></p></body></html>'

function email (over: Partial<EmailRecord> = {}): EmailRecord {
  const at = '2026-11-27T12:00:00.000Z'
  return {
    id: 'em_choices', accountId: 'acct_1', from: 'shop@example.com', to: ['a@example.net', 'b@example.net'], cc: [], bcc: [], replyTo: [],
    subject: 'S', html: HTML, text: 'text', headers: {}, tags: [], suppressed: [],
    recipients: [{ address: 'a@example.net', state: 'pending' }, { address: 'b@example.net', state: 'pending' }],
    status: 'queued', attempts: 0, nextAttemptAt: at, leaseOwner: null, leaseExpiresAt: null, leaseToken: 1, lastError: null,
    createdAt: at, updatedAt: at, ...over,
  }
}

describe('tracking and unsubscribe choices in the message', () => {
  test('the default: a pixel, tracked links and List-Unsubscribe in each recipient\'s copy', () => {
    const msg = personalize(draftMessage(email(), OPTS), OPTS)
    assert.ok(msg.copy, 'each recipient a copy of their own')
    const b = msg.copy('b@example.net')
    assert.match(b.html!, /\/t\/o\//)
    assert.match(b.html!, /\/t\/c\//)
    assert.match(b.headers['List-Unsubscribe']!, /^<https:\/\/mail\.example\.com\/t\/u\//)
    assert.equal(b.headers['List-Unsubscribe-Post'], 'List-Unsubscribe=One-Click')
  })

  test('tracking off and unsubscribe: false: the html as written, no List-Unsubscribe, one message for every recipient', () => {
    const msg = personalize(draftMessage(email({ tracking: { opens: false, clicks: false }, unsubscribe: false }), OPTS), OPTS)
    assert.equal(msg.html, HTML)
    assert.equal(msg.copy, undefined, 'nothing names a recipient')
    assert.equal(msg.headers['List-Unsubscribe'], undefined)
    assert.equal(msg.headers['List-Unsubscribe-Post'], undefined)
  })

  test('opens only: the pixel, and every link byte for byte', () => {
    const msg = personalize(draftMessage(email({ tracking: { opens: true, clicks: false } }), OPTS), OPTS)
    const html = msg.copy!('a@example.net').html!
    assert.match(html, /\/t\/o\//)
    assert.ok(html.includes('<a href="https://example.com/a?x=1&amp;y=2">A</a> <a href=\'http://example.org/b\'>B</a>'))
  })

  test('clicks only: tracked links and no pixel', () => {
    const html = personalize(draftMessage(email({ tracking: { opens: false, clicks: true } }), OPTS), OPTS).copy!('a@example.net').html!
    assert.doesNotMatch(html, /\/t\/o\//)
    assert.match(html, /\/t\/c\//)
  })

  test('unsubscribe: false with tracking on: tracked copies without List-Unsubscribe', () => {
    const msg = personalize(draftMessage(email({ unsubscribe: false }), OPTS), OPTS)
    const a = msg.copy!('a@example.net')
    assert.deepEqual(a.headers, {})
    assert.equal(msg.headers['List-Unsubscribe'], undefined)
    assert.match(a.html!, /\/t\/c\//)
  })

  test('a scheduled email\'s links live from its time, not its acceptance', () => {
    const scheduledAt = '2026-12-20T09:00:00.000Z'
    const draft = draftMessage(email({ scheduledAt }), OPTS)
    assert.equal(draft.expiresAt, Math.floor((Date.parse(scheduledAt) + TRACKING_TTL_MS) / 1000))
    assert.equal(draftMessage(email(), OPTS).expiresAt, Math.floor((Date.parse('2026-11-27T12:00:00.000Z') + TRACKING_TTL_MS) / 1000))
  })
})
