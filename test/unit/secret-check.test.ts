// The check value of the store's secret (src/domain/secret-check.ts), and the start-up rule that uses it
// (src/app/secret-check.ts) against a store that only keeps a value.
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, test } from 'node:test'
import { OtherSecretError, requireStoreSecret } from '../../src/app/secret-check.js'
import { judgeBackupSecret, otherSecretMessage, secretCheckValue, secretMatchesCheck } from '../../src/domain/secret-check.js'

const A = 'secret-a-0123456789-abcdefghijklmnopqrstuv'
const B = 'secret-b-0123456789-abcdefghijklmnopqrstuv'

describe('secret check value', () => {
  test('the same secret gives the same value, another secret another one; neither holds the secret or its plain hash', () => {
    const a = secretCheckValue(A)
    assert.equal(secretCheckValue(A), a)
    assert.notEqual(secretCheckValue(B), a)
    assert.match(a, /^v1\.[A-Za-z0-9_-]{43}$/)
    assert.equal(a.includes(A), false)
    for (const encoding of ['hex', 'base64', 'base64url'] as const) {
      assert.equal(a.includes(createHash('sha256').update(A).digest(encoding)), false, `not the plain SHA-256 (${encoding})`)
    }
  })

  test('a value matches its own secret only', () => {
    assert.equal(secretMatchesCheck(A, secretCheckValue(A)), true)
    assert.equal(secretMatchesCheck(B, secretCheckValue(A)), false)
  })

  test('values in another form match no secret, without throwing', () => {
    const good = secretCheckValue(A)
    const body = good.slice(3)
    for (const bad of ['', 'v1', 'v1.', `v2.${body}`, body, `v1.${body}A`, `v1.${body.slice(0, -1)}`, `v1.${'*'.repeat(43)}`, `v1.${body}.x`, `V1.${body}`, 'v1.' + 'A'.repeat(1_000_000)]) {
      assert.equal(secretMatchesCheck(A, bad), false, JSON.stringify(bad.slice(0, 60)))
    }
  })

  test('a backup: matched, unchecked (no value), other, unknown (no secret here)', () => {
    assert.equal(judgeBackupSecret(A, secretCheckValue(A)), 'matched')
    assert.equal(judgeBackupSecret(A, null), 'unchecked')
    assert.equal(judgeBackupSecret(undefined, null), 'unchecked')
    assert.equal(judgeBackupSecret(B, secretCheckValue(A)), 'other')
    assert.equal(judgeBackupSecret(undefined, secretCheckValue(A)), 'unknown')
  })

  test('the message names SVC_SECRET and DATA_DIR/secret and where this svc\'s secret comes from', () => {
    assert.equal(otherSecretMessage('the SQLite store in /srv/data (DATA_DIR)', { kind: 'env' }),
      'the SQLite store in /srv/data (DATA_DIR) was written under another secret than this svc\'s (from SVC_SECRET): ' +
      'set SVC_SECRET (or, without it, DATA_DIR/secret) to the secret it was written with')
    assert.match(otherSecretMessage('the store', { kind: 'file', path: '/srv/data/secret' }), /\(from \/srv\/data\/secret, as SVC_SECRET is not set\)/)
  })
})

/** A store that keeps one value, as the adapters do (insert unless present). */
function fakeStore (initial: string | null = null) {
  let value = initial
  const writes: string[] = []
  return {
    writes,
    get value () { return value },
    secretCheck: async () => value,
    initSecretCheck: async (v: string) => {
      writes.push(v)
      value ??= v
      return value
    },
  }
}

describe('requireStoreSecret', () => {
  test('a store with no value gets this secret\'s, and then matches it', async () => {
    const store = fakeStore()
    assert.equal(await requireStoreSecret(store, A, 'the store', { kind: 'env' }), 'written')
    assert.equal(store.value, secretCheckValue(A))
    assert.equal(await requireStoreSecret(store, A, 'the store', { kind: 'env' }), 'matched')
    assert.equal(store.writes.length, 1, 'written once')
  })

  test('a store written under another secret is refused, and its value is left alone', async () => {
    const store = fakeStore(secretCheckValue(A))
    await assert.rejects(requireStoreSecret(store, B, 'the SQLite store in /x (DATA_DIR)', { kind: 'env' }), (err: Error) => {
      assert.ok(err instanceof OtherSecretError)
      assert.match(err.message, /^the SQLite store in \/x \(DATA_DIR\) was written under another secret .*SVC_SECRET.*DATA_DIR\/secret/)
      assert.equal(err.message.includes(A) || err.message.includes(B) || err.message.includes(secretCheckValue(A).slice(3)), false, 'no secret, no check value')
      return true
    })
    assert.deepEqual(store.writes, [])
    assert.equal(store.value, secretCheckValue(A))
  })

  test('when another process wrote its value between the read and the write, the kept value is the one compared', async () => {
    const store = fakeStore()
    const racing = { ...store, secretCheck: async () => null, initSecretCheck: async (v: string) => { await store.initSecretCheck(secretCheckValue(B)); return store.initSecretCheck(v) } }
    await assert.rejects(requireStoreSecret(racing, A, 'the store', { kind: 'env' }), OtherSecretError)
  })
})
