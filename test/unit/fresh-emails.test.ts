// The claim's cache of freshly accepted emails (src/store/sqlite/fresh-emails.ts), with a fake clock:
// each email is handed out once, and the bounds hold (entries, body characters, age), keeping the
// oldest when full, since they are the next a claim takes.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { FreshEmails } from '../../src/store/sqlite/fresh-emails.js'
import type { EmailRecord } from '../../src/store/emails.js'

function email (id: string, bodyChars = 10): EmailRecord {
  return {
    id, accountId: 'acct_1', from: 'a@example.com', to: ['b@example.com'], cc: [], bcc: [], replyTo: [], subject: 's',
    html: 'x'.repeat(bodyChars), text: null, headers: {}, tags: [], suppressed: [], recipients: [{ address: 'b@example.com', state: 'pending' }],
    status: 'queued', attempts: 0, nextAttemptAt: '2026-01-01T00:00:00.000Z', leaseOwner: null, leaseExpiresAt: null, leaseToken: 0,
    lastError: null, createdAt: '2026-01-01T00:00:00.000Z', updatedAt: '2026-01-01T00:00:00.000Z',
  }
}

describe('fresh emails', () => {
  test('each email is handed out once, as it was added', () => {
    const fresh = new FreshEmails({ maxEntries: 10, maxBodyChars: 1000, maxAgeMs: 60_000 }, () => 0)
    const a = email('em_a')
    fresh.add([a, email('em_b')])
    assert.equal(fresh.take('em_a'), a)
    assert.equal(fresh.take('em_a'), undefined, 'taken once')
    assert.equal(fresh.take('em_unknown'), undefined)
    assert.equal(fresh.held(), 1)
  })

  test('when full, the oldest stay and newer ones are left out', () => {
    const fresh = new FreshEmails({ maxEntries: 2, maxBodyChars: 1000, maxAgeMs: 60_000 }, () => 0)
    fresh.add([email('em_1'), email('em_2'), email('em_3')])
    assert.ok(fresh.take('em_1') && fresh.take('em_2'))
    assert.equal(fresh.take('em_3'), undefined)
    // Room again once taken.
    fresh.add([email('em_4')])
    assert.ok(fresh.take('em_4'))
  })

  test('bodies are bounded in characters: a large one is left out, smaller ones after it still fit', () => {
    const fresh = new FreshEmails({ maxEntries: 100, maxBodyChars: 100, maxAgeMs: 60_000 }, () => 0)
    fresh.add([email('em_small', 40), email('em_big', 80), email('em_small2', 50)])
    assert.equal(fresh.bodyChars, 90)
    assert.equal(fresh.take('em_big'), undefined)
    assert.ok(fresh.take('em_small'))
    assert.equal(fresh.bodyChars, 50)
    assert.ok(fresh.take('em_small2'))
    assert.equal(fresh.bodyChars, 0)
    // The same id twice counts once.
    fresh.add([email('em_twice', 30)])
    fresh.add([email('em_twice', 30)])
    assert.equal(fresh.bodyChars, 30)
  })

  test('an email added again is held as new: its age starts over, and the older ones still age out first', () => {
    let now = 0
    const fresh = new FreshEmails({ maxEntries: 10, maxBodyChars: 1000, maxAgeMs: 1000 }, () => now)
    fresh.add([email('em_again'), email('em_old')])
    now = 800
    fresh.add([email('em_again')])
    now = 1000
    assert.equal(fresh.held(), 1, 'em_old aged out even though em_again was added before it')
    assert.equal(fresh.take('em_old'), undefined)
    assert.ok(fresh.take('em_again'))
  })

  test('what no claim took in time is dropped, oldest first', () => {
    let now = 0
    const fresh = new FreshEmails({ maxEntries: 3, maxBodyChars: 1000, maxAgeMs: 1000 }, () => now)
    fresh.add([email('em_old1'), email('em_old2')])
    now = 600
    fresh.add([email('em_young')])
    now = 1000
    assert.equal(fresh.held(), 1, 'the two from t=0 aged out')
    assert.equal(fresh.take('em_old1'), undefined)
    assert.ok(fresh.take('em_young'))
    // A full cache of entries no one will claim frees itself with time.
    fresh.add([email('em_x1'), email('em_x2'), email('em_x3')])
    fresh.add([email('em_x4')])
    assert.equal(fresh.take('em_x4'), undefined, 'full')
    now = 2001
    fresh.add([email('em_x5')])
    assert.ok(fresh.take('em_x5'), 'the stale ones made room')
    assert.equal(fresh.held(), 0)
  })
})
