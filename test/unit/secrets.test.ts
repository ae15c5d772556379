// Sealing (src/domain/secrets.ts): one seal/open for every value svc keeps encrypted, a key per purpose.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { open, openWebhookSecret, seal, sealingKey, sealWebhookSecret, type SealPurpose } from '../../src/domain/secrets.js'
import { createTrackingToken, verifyTrackingToken } from '../../src/mail/tracking.js'

const SECRET = 'secret-one-0123456789-abcdefghijklmnop'
const OTHER_SECRET = 'secret-two-0123456789-abcdefghijklmnop'
const PURPOSES: SealPurpose[] = ['webhook signing secret', 'dkim private key', 'tracking token']

/** The same text with the character at `at` replaced by another base64url character. */
function flip (s: string, at: number): string {
  return s.slice(0, at) + (s[at] === 'A' ? 'B' : 'A') + s.slice(at + 1)
}

describe('seal and open', () => {
  test('what is sealed opens, for every purpose, and shows nothing of itself', () => {
    for (const purpose of PURPOSES) {
      for (const plain of ['', 'whsec_abc', '-----BEGIN PRIVATE KEY-----\nü✓\n', 'x'.repeat(100_000)]) {
        const sealed = seal(SECRET, purpose, 'rec_1', plain)
        assert.match(sealed, /^v1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/)
        if (plain.length > 0) assert.equal(sealed.includes(plain), false)
        assert.equal(open(SECRET, purpose, 'rec_1', sealed), plain)
      }
    }
  })

  test('a fresh IV per value: the same text sealed twice differs', () => {
    assert.notEqual(seal(SECRET, 'dkim private key', 'rec_1', 'PEM'), seal(SECRET, 'dkim private key', 'rec_1', 'PEM'))
  })

  test('a value sealed for one purpose does not open as another', () => {
    for (const sealedFor of PURPOSES) {
      const sealed = seal(SECRET, sealedFor, 'rec_1', 'the plain text')
      for (const openedAs of PURPOSES) {
        if (openedAs === sealedFor) continue
        assert.throws(() => open(SECRET, openedAs, 'rec_1', sealed), `${sealedFor} opened as ${openedAs}`)
      }
    }
  })

  test('nor on another record, nor under another SVC_SECRET', () => {
    const sealed = seal(SECRET, 'webhook signing secret', 'wh_1', 'whsec_x')
    assert.throws(() => open(SECRET, 'webhook signing secret', 'wh_2', sealed))
    assert.throws(() => open(OTHER_SECRET, 'webhook signing secret', 'wh_1', sealed))
  })

  test('tampering with any character fails, and so does anything not in the sealed form', () => {
    const sealed = seal(SECRET, 'dkim private key', 'dom_1', 'PEM bytes')
    for (let i = 0; i < sealed.length; i++) {
      if (sealed[i] === '.') continue
      const altered = flip(sealed, i)
      if (altered === sealed) continue
      // A flip in a base64url character's unused low bits can decode to the same bytes; only a change of bytes must fail.
      const [, iv, tag, body] = altered.split('.') as [string, string, string, string]
      const [, iv0, tag0, body0] = sealed.split('.') as [string, string, string, string]
      const sameBytes = [[iv, iv0], [tag, tag0], [body, body0]].every(([a, b]) => Buffer.from(a!, 'base64url').equals(Buffer.from(b!, 'base64url')))
      if (sameBytes) continue
      assert.throws(() => open(SECRET, 'dkim private key', 'dom_1', altered), `character ${i}`)
    }
    const [v, iv, tag, body] = sealed.split('.') as [string, string, string, string]
    for (const bad of [
      '', 'PEM bytes', 'v1', `v1.${iv}.${tag}`, `v2.${iv}.${tag}.${body}`, `${v}.${iv}.${tag}.${body}.x`,
      `${v}..${tag}.${body}`, `${v}.${iv}..${body}`, `${v}.${iv}.${tag.slice(0, 8)}.${body}`, `${v}.${iv}.${tag}.${body.slice(1)}`,
    ]) {
      assert.throws(() => open(SECRET, 'dkim private key', 'dom_1', bad), JSON.stringify(bad))
    }
    // A truncated tag is refused even when it is the start of the right one (GCM alone would take 4 bytes).
    const short = Buffer.from(tag, 'base64url').subarray(0, 4).toString('base64url')
    assert.throws(() => open(SECRET, 'dkim private key', 'dom_1', `${v}.${iv}.${short}.${body}`))
  })

  test('one key per purpose and secret, the same each time', () => {
    const keys = PURPOSES.map((p) => sealingKey(SECRET, p).toString('hex'))
    assert.equal(new Set(keys).size, PURPOSES.length)
    for (const k of keys) assert.equal(k.length, 64)
    assert.deepEqual(PURPOSES.map((p) => sealingKey(SECRET, p).toString('hex')), keys)
    assert.notEqual(sealingKey(OTHER_SECRET, 'dkim private key').toString('hex'), keys[1])
    assert.equal(sealingKey(SECRET, 'dkim private key').toString('hex'), keys[1], 'back to the first secret')
    assert.throws(() => sealingKey(SECRET, 'no such purpose' as SealPurpose), TypeError)
  })

  test('webhook secrets are sealed with their purpose and bound to their webhook', () => {
    const stored = sealWebhookSecret(SECRET, 'wh_1', 'whsec_plain')
    assert.equal(stored.includes('whsec_plain'), false)
    assert.equal(openWebhookSecret(SECRET, 'wh_1', stored), 'whsec_plain')
    assert.throws(() => openWebhookSecret(SECRET, 'wh_2', stored))
    assert.throws(() => openWebhookSecret(OTHER_SECRET, 'wh_1', stored))
    assert.throws(() => openWebhookSecret(SECRET, 'wh_1', 'whsec_plain'), 'a secret in the clear is no stored secret')
  })

  test('tracking tokens are keyed by the tracking purpose: another SVC_SECRET makes them fail', () => {
    const claims = { kind: 'open', emailId: 'em_1', recipient: 'a@example.net', exp: 2_000_000_000 } as const
    const token = createTrackingToken(SECRET, claims)
    assert.deepEqual(verifyTrackingToken(SECRET, token, 'open', 1_900_000_000), claims)
    assert.equal(verifyTrackingToken(OTHER_SECRET, token, 'open', 1_900_000_000), null)
  })
})
