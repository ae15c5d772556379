import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { sign, signatureHeader, verifySignature } from '../../src/delivery/signature.js'

const T = 1_700_000_000
const BODY = '{"emailId":"em_1","to":"a@example.com","timestamp":"2024-01-01T00:00:00.000Z"}'

describe('sign', () => {
  test('matches HMAC-SHA256 over "<t>.<body>" keyed with the whole secret (vector computed outside Node)', () => {
    assert.equal(sign('whsec_test', T, BODY), '0795896c8af15f5278f173bbad22b74e5072c07ce233361c058fc1a106f67888')
  })

  test('uses the UTF-8 bytes of secret and body', () => {
    assert.equal(
      sign('whsec_clé', T, '{"to":"zoë@example.com"}'),
      'a67edda712f6caf9945daa047b194b00e453aa86e2d31b80ab2134c7b06185ee',
    )
  })
})

describe('signatureHeader', () => {
  test('one secret: t then one v1', () => {
    assert.equal(signatureHeader(['whsec_test'], T, BODY), `t=${T},v1=0795896c8af15f5278f173bbad22b74e5072c07ce233361c058fc1a106f67888`)
  })

  test('during a rotation: one v1 per live secret, in order', () => {
    const header = signatureHeader(['whsec_new', 'whsec_old'], T, BODY)
    assert.equal(header, `t=${T},v1=${sign('whsec_new', T, BODY)},v1=${sign('whsec_old', T, BODY)}`)
  })

  test('refuses to sign without a secret, rather than sending an unverifiable delivery', () => {
    assert.throws(() => signatureHeader([], T, BODY), /at least one signing secret/)
  })
})

describe('verifySignature', () => {
  const header = signatureHeader(['whsec_test'], T, BODY)

  test('accepts a fresh, correct signature', () => {
    assert.equal(verifySignature(header, BODY, 'whsec_test', { now: T + 10 }), true)
  })

  test('accepts either secret during a rotation', () => {
    const rotated = signatureHeader(['whsec_new', 'whsec_old'], T, BODY)
    assert.equal(verifySignature(rotated, BODY, 'whsec_new', { now: T }), true)
    assert.equal(verifySignature(rotated, BODY, 'whsec_old', { now: T }), true)
    assert.equal(verifySignature(rotated, BODY, 'whsec_other', { now: T }), false)
  })

  test('rejects a changed body, a wrong secret, or a secret without its prefix', () => {
    assert.equal(verifySignature(header, BODY.replace('em_1', 'em_2'), 'whsec_test', { now: T }), false)
    assert.equal(verifySignature(header, `${BODY} `, 'whsec_test', { now: T }), false)
    assert.equal(verifySignature(header, BODY, 'whsec_wrong', { now: T }), false)
    assert.equal(verifySignature(header, BODY, 'test', { now: T }), false)
  })

  test('rejects a timestamp swapped for a fresher one', () => {
    const replayed = header.replace(`t=${T}`, `t=${T + 1000}`)
    assert.equal(verifySignature(replayed, BODY, 'whsec_test', { now: T + 1000 }), false)
  })

  test('enforces the 300 s tolerance by default, in both directions, and a custom one', () => {
    assert.equal(verifySignature(header, BODY, 'whsec_test', { now: T + 300 }), true)
    assert.equal(verifySignature(header, BODY, 'whsec_test', { now: T + 301 }), false)
    assert.equal(verifySignature(header, BODY, 'whsec_test', { now: T - 301 }), false)
    assert.equal(verifySignature(header, BODY, 'whsec_test', { now: T + 3600, toleranceSeconds: 7200 }), true)
  })

  test('uses the current time when none is given', () => {
    const now = Math.floor(Date.now() / 1000)
    assert.equal(verifySignature(signatureHeader(['whsec_test'], now, BODY), BODY, 'whsec_test'), true)
    assert.equal(verifySignature(header, BODY, 'whsec_test'), false)
  })

  test('rejects malformed headers', () => {
    const v1 = sign('whsec_test', T, BODY)
    for (const bad of ['', `v1=${v1}`, `t=${T}`, `t=${T},v1=`, `t=abc,v1=${v1}`, `t=${T},t=${T},v1=${v1}`, `t=${T},v0=${v1}`, `t=${T},v1=${v1.toUpperCase()}`]) {
      assert.equal(verifySignature(bad, BODY, 'whsec_test', { now: T }), false, bad)
    }
  })

  test('tolerates spaces around entries', () => {
    assert.equal(verifySignature(`t=${T}, v1=${sign('whsec_test', T, BODY)}`, BODY, 'whsec_test', { now: T }), true)
  })
})
