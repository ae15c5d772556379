// The Standard Webhooks side of signing (webhook-id / webhook-timestamp / webhook-signature), checked with
// the specification's own library, `standardwebhooks`, and the secret format it needs.
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { describe, test } from 'node:test'
import { Webhook } from 'standardwebhooks'
import { signDelivery, signingKeys, standardSign } from '../../src/delivery/signature.js'
import { newWebhookSecret, standardWebhookKey, WEBHOOK_SECRET_BYTES } from '../../src/domain/secrets.js'

const BODY = '{"type":"email.delivered","to":"zoë@example.com"}'
const now = () => Math.floor(Date.now() / 1000)

function headers (id: string, t: number, signature: string | undefined): Record<string, string> {
  return { 'webhook-id': id, 'webhook-timestamp': String(t), ...(signature !== undefined ? { 'webhook-signature': signature } : {}) }
}

describe('webhook secrets', () => {
  test('every new secret is whsec_ + standard base64 of 32 random bytes, which standardwebhooks accepts', () => {
    const seen = new Set<string>()
    for (let i = 0; i < 200; i++) {
      const secret = newWebhookSecret()
      assert.match(secret, /^whsec_[A-Za-z0-9+/]{43}=$/)
      const bytes = Buffer.from(secret.slice(6), 'base64')
      assert.equal(bytes.length, WEBHOOK_SECRET_BYTES)
      assert.ok(WEBHOOK_SECRET_BYTES >= 24)
      assert.equal(bytes.toString('base64'), secret.slice(6), 'valid, canonical base64')
      assert.deepEqual(standardWebhookKey(secret), bytes)
      assert.doesNotThrow(() => new Webhook(secret))
      seen.add(secret)
    }
    assert.equal(seen.size, 200)
  })

  test('the key of a standard base64 secret is its bytes; a string that is not standard base64 has none', () => {
    const bytes = randomBytes(32)
    assert.deepEqual(standardWebhookKey(`whsec_${bytes.toString('base64')}`), bytes)
    assert.deepEqual(standardWebhookKey(bytes.toString('base64')), bytes, 'the prefix is optional, as in standardwebhooks')
    assert.deepEqual(standardWebhookKey(`whsec_${bytes.toString('base64').replace(/=+$/, '')}`), bytes, 'padding is optional')
    for (const bad of ['whsec_', 'whsec_a', 'whsec_ab+_cd', 'whsec_ab-_cd', 'whsec_abc=d', 'whsec_ab===', 'whsec_ab-=', 'whsec_not base64!', 'whsec_abé=', '']) {
      assert.equal(standardWebhookKey(bad), undefined, bad)
    }
  })

  test('a hostile megabyte is refused quickly, without a key', () => {
    assert.equal(standardWebhookKey(`whsec_${'A'.repeat(1 << 20)}`), undefined)
    assert.equal(standardWebhookKey(`whsec_${'+'.repeat(1 << 20)}-`), undefined)
    assert.equal(standardWebhookKey(`whsec_${'='.repeat(1 << 20)}`), undefined)
  })
})

describe('signDelivery', () => {
  const secret = newWebhookSecret()
  const id = 'dlv_0123456789abcdef0123456789ab'

  test('webhook-signature verifies with standardwebhooks Webhook.verify; an altered id, body or timestamp does not', () => {
    const t = now()
    const { standard } = signDelivery(signingKeys([secret]), id, t, BODY)
    assert.match(standard!, /^v1,[A-Za-z0-9+/]{43}=$/)
    assert.deepEqual(new Webhook(secret).verify(BODY, headers(id, t, standard)), JSON.parse(BODY))
    assert.throws(() => new Webhook(secret).verify(BODY.replace('zoë', 'zoe'), headers(id, t, standard)))
    assert.throws(() => new Webhook(secret).verify(BODY, headers(`${id}x`, t, standard)))
    assert.throws(() => new Webhook(secret).verify(BODY, headers(id, t + 1, standard)))
    assert.throws(() => new Webhook(newWebhookSecret()).verify(BODY, headers(id, t, standard)))
  })

  test('the Standard Webhooks signature is what the library itself computes', () => {
    const t = 1_700_000_000
    const expected = new Webhook(secret).sign(id, new Date(t * 1000), BODY)
    assert.equal(`v1,${standardSign(standardWebhookKey(secret)!, id, t, BODY)}`, expected)
    assert.equal(signDelivery(signingKeys([secret]), id, t, BODY).standard, expected)
  })

  test('during a rotation there is one entry per secret, space-separated, and either secret verifies', () => {
    const next = newWebhookSecret()
    const t = now()
    const { standard, svc } = signDelivery(signingKeys([next, secret]), id, t, BODY)
    assert.match(standard!, /^v1,\S+ v1,\S+$/)
    assert.doesNotThrow(() => new Webhook(next).verify(BODY, headers(id, t, standard)))
    assert.doesNotThrow(() => new Webhook(secret).verify(BODY, headers(id, t, standard)))
    assert.match(svc, new RegExp(`^t=${t},v1=[0-9a-f]{64},v1=[0-9a-f]{64}$`))
  })

  test('the seed header is unchanged by the second scheme', async () => {
    const { signatureHeader } = await import('../../src/delivery/signature.js')
    const t = 1_700_000_000
    assert.equal(signDelivery(signingKeys(['whsec_test', secret]), id, t, BODY).svc, signatureHeader(['whsec_test', secret], t, BODY))
  })

  test('without a secret nothing is signed', () => {
    assert.throws(() => signDelivery(signingKeys([]), id, now(), BODY), /at least one signing secret/)
  })
})
