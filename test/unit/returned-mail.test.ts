// The parsers returning mail goes through, each with a hostile megabyte: the VERP token, the report field
// reader, the header scan, and the domain-name rules; and the DSN verdicts.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { normaliseDomainName } from '../../src/app/domains.js'
import { open, seal } from '../../src/domain/secrets.js'
import { newId } from '../../src/domain/ids.js'
import { addressField, classifyDsn, emailIdOfMessageId, statusCode } from '../../src/domain/returned-mail.js'
import { makeVerpToken, parseVerpAddress, readVerpToken, TOKEN_CHARS, verpAddress, verpKey } from '../../src/domain/verp.js'
import { LIMITS, readFieldBlocks, scanHeaderFields } from '../../src/mail/inbound/fields.js'

const KEY = verpKey('test-secret-0123456789-abcdefghijklmnop')
const MEGABYTE = 1024 * 1024

describe('VERP tokens', () => {
  test('round trip; case-insensitive; any changed character, another key or another shape is refused', () => {
    const id = newId('em')
    const token = makeVerpToken(KEY, id, 7)
    assert.equal(token.length, TOKEN_CHARS)
    assert.match(token, /^[a-z2-7]+$/)
    assert.deepEqual(readVerpToken(KEY, token), { emailId: id, recipientIndex: 7 })
    assert.deepEqual(readVerpToken(KEY, token.toUpperCase()), { emailId: id, recipientIndex: 7 })
    for (let i = 0; i < token.length; i++) {
      const other = token[i] === 'a' ? 'b' : 'a'
      assert.equal(readVerpToken(KEY, token.slice(0, i) + other + token.slice(i + 1)), null, `position ${i}`)
    }
    assert.equal(readVerpToken(verpKey('another-secret-0123456789-abcdefghijkl'), token), null)
    const address = verpAddress(KEY, id, 0, 'bounces.example.com')
    assert.ok(address.length <= 64 + 1 + 'bounces.example.com'.length)
    assert.deepEqual(parseVerpAddress(KEY, address), { emailId: id, recipientIndex: 0 })
    assert.deepEqual(parseVerpAddress(KEY, address.toUpperCase()), { emailId: id, recipientIndex: 0 })
    assert.equal(parseVerpAddress(KEY, 'alice@example.com'), 'not_verp')
    assert.equal(parseVerpAddress(KEY, 'b+abc@example.com'), 'forged')
    assert.equal(parseVerpAddress(KEY, `b+${token.slice(1)}é@example.com`), 'forged')
  })

  test('a hostile megabyte is refused without being read', () => {
    const huge = 'b+' + 'a'.repeat(MEGABYTE) + '@example.com'
    assert.equal(parseVerpAddress(KEY, huge), 'not_verp')
    assert.equal(readVerpToken(KEY, 'a'.repeat(MEGABYTE)), null)
    assert.equal(parseVerpAddress(KEY, '@'.repeat(MEGABYTE)), 'not_verp')
  })
})

describe('the report field reader', () => {
  test('blocks, folded lines, lower-case names, first value wins', () => {
    const blocks = readFieldBlocks('Reporting-MTA: dns; mx.example.net\r\n\r\nFinal-Recipient: rfc822; A@Example.net\r\nAction: failed\r\nStatus: 5.1.1\r\nDiagnostic-Code: smtp; 550 5.1.1\r\n    user unknown\r\nAction: delivered\r\n')
    assert.equal(blocks.length, 2)
    assert.equal(blocks[0]!.get('reporting-mta'), 'dns; mx.example.net')
    assert.equal(blocks[1]!.get('action'), 'failed')
    assert.equal(blocks[1]!.get('diagnostic-code'), 'smtp; 550 5.1.1 user unknown')
  })

  test('hostile megabytes: one endless line, a million folds, a million blocks, no colons', () => {
    const inputs = [
      'Action: ' + 'x'.repeat(MEGABYTE),
      'Diagnostic-Code: a\n' + ' b\n'.repeat(MEGABYTE / 3),
      'A: b\n\n'.repeat(MEGABYTE / 6),
      'x'.repeat(MEGABYTE),
      ':'.repeat(MEGABYTE),
      'F: v\n'.repeat(MEGABYTE / 5),
    ]
    for (const input of inputs) {
      const blocks = readFieldBlocks(input)
      assert.ok(blocks.length <= LIMITS.blocks)
      for (const b of blocks) {
        assert.ok(b.size <= LIMITS.fieldsPerBlock)
        for (const v of b.values()) assert.ok(v.length <= LIMITS.value)
      }
    }
    assert.deepEqual(scanHeaderFields('x'.repeat(MEGABYTE), ['message-id']), [])
    assert.deepEqual(scanHeaderFields('\n'.repeat(MEGABYTE), ['message-id']), [])
    assert.equal(scanHeaderFields('Message-ID: <a@b>\n'.repeat(MEGABYTE / 18), ['message-id']).length, 20)
    assert.equal(statusCode('5.'.repeat(MEGABYTE)), null)
    assert.equal(addressField('a@'.repeat(MEGABYTE)), null)
    assert.equal(emailIdOfMessageId('<em_' + '0'.repeat(MEGABYTE)), null)
  })
})

describe('DSN verdicts', () => {
  const block = (fields: Record<string, string>) => new Map(Object.entries(fields))
  test('failed + 5.x.x bounces; delayed or 4.x.x delays; delivered is nothing; the worst recipient wins', () => {
    assert.deepEqual(classifyDsn([block({ 'reporting-mta': 'dns; x' }), block({ action: 'failed', status: '5.1.1', 'final-recipient': 'rfc822; A@B.net', 'diagnostic-code': 'smtp; 550 no' })]),
      { kind: 'bounce', status: '5.1.1', diagnostic: 'smtp; 550 no', recipient: 'a@b.net' })
    assert.equal(classifyDsn([block({ action: 'failed', status: '4.2.2' })]).kind, 'delay')
    assert.equal(classifyDsn([block({ action: 'Delayed', status: '4.4.1' })]).kind, 'delay')
    assert.equal(classifyDsn([block({ action: 'delivered', status: '2.0.0' })]).kind, 'none')
    assert.equal(classifyDsn([block({ action: 'failed' })]).kind, 'none')
    assert.equal(classifyDsn([block({ action: 'delayed', status: '4.4.1' }), block({ action: 'failed', status: '5.7.1' })]).kind, 'bounce')
    assert.equal(statusCode('5.1.10 (RecipientNotFound)'), '5.1.10')
    assert.equal(emailIdOfMessageId('<em_0123456789abcdef0123456789ab@example.com>'), 'em_0123456789abcdef0123456789ab')
    assert.equal(emailIdOfMessageId('<something@example.com>'), null)
  })
})

describe('domain names and sealed keys', () => {
  test('normalised or refused', () => {
    assert.deepEqual(normaliseDomainName(' Example.COM. '), { name: 'example.com' })
    assert.deepEqual(normaliseDomainName('bücher.example'), { name: 'xn--bcher-kva.example' })
    for (const bad of ['', 'com', '1.2.3.4', '[::1]', 'a_b.example', '-a.example', 'a-.example', 'a..b', 'x'.repeat(MEGABYTE)]) {
      assert.ok('error' in normaliseDomainName(bad), bad.slice(0, 20))
    }
  })

  test('a sealed key opens only with its secret and on its own domain', () => {
    const sealed = seal('secret-one-0123456789-abcdefghijklmnop', 'dkim private key', 'dom_1', 'PEM')
    assert.doesNotMatch(sealed, /PEM/)
    assert.equal(open('secret-one-0123456789-abcdefghijklmnop', 'dkim private key', 'dom_1', sealed), 'PEM')
    assert.throws(() => open('secret-two-0123456789-abcdefghijklmnop', 'dkim private key', 'dom_1', sealed))
    assert.throws(() => open('secret-one-0123456789-abcdefghijklmnop', 'dkim private key', 'dom_2', sealed))
  })
})
