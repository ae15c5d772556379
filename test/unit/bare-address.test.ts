// The bare-address fast path (an input that is already a plain address skips nodemailer's parser) must
// give what the parser gives, for every input: compared here over generated inputs, the parser's own
// special characters included.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import addressparser from 'nodemailer/lib/addressparser/index.js'
import { bareAddress, envelopeRecipients, isPlainAddress, simulatorOutcome } from '../../src/mail/transport.js'

function parsed (input: string): string {
  const first = addressparser(input, { flatten: true }).find((a) => a.address !== '')
  return (first?.address ?? '').trim().toLowerCase()
}

function parsedAll (entries: string[]): string[] {
  const seen = new Set<string>()
  for (const e of entries) for (const { address } of addressparser(e, { flatten: true })) if (address.trim() !== '') seen.add(address.trim().toLowerCase())
  return [...seen]
}

// A small deterministic generator (no Math.random: a failure is reproducible).
function* inputs (n: number): Generator<string> {
  const atext = "abcXYZ019!#$%&'*+-/=?^_`{|}~."
  const special = '@<>",;:()[]\\ \t\r\nÄé\u0000'
  let seed = 42
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(next() * 24)
    let s = ''
    for (let j = 0; j < len; j++) {
      const r = next()
      s += r < 0.1 ? '@' : r < 0.2 ? special[Math.floor(next() * special.length)] : atext[Math.floor(next() * atext.length)]
    }
    yield s
  }
}

describe('bare addresses', () => {
  test('plain addresses are recognised; anything the parser would read differently is not', () => {
    for (const ok of ['a@b', 'A.B+tag@Example.COM', "o'brien@example.ie", 'x!#$%&*/=?^_`{|}~-@y.z']) assert.ok(isPlainAddress(ok), ok)
    for (const no of ['', '@b', 'a@', 'a@@b', 'a@b@c', 'Ann <a@b>', '"a"@b', 'a @b', 'a@b,c@d', 'g: a@b;', 'a(c)@b', 'jöe@b', 'a@[1.2.3.4]', 'a\r\n@b']) {
      assert.equal(isPlainAddress(no), false, JSON.stringify(no))
    }
  })

  test('the fast path gives what nodemailer\'s parser gives, over 20,000 generated inputs', () => {
    let plain = 0
    for (const input of inputs(20_000)) {
      if (isPlainAddress(input)) plain++
      assert.equal(bareAddress(input), parsed(input), JSON.stringify(input))
      assert.deepEqual(envelopeRecipients({ to: [input], cc: [], bcc: [] }), parsedAll([input]), JSON.stringify(input))
    }
    assert.ok(plain > 1000, `the generator exercised the fast path (${plain} plain inputs)`)
  })

  test('simulator addresses still answer for themselves, in any case', () => {
    assert.equal(simulatorOutcome('Delivered+x@Simulator.Test')?.recipient, 'delivered+x@simulator.test')
    assert.equal(simulatorOutcome('Bob <bounced@simulator.test>')?.outcome, 'bounced')
    assert.equal(simulatorOutcome('someone@example.com'), null)
  })

  test('a hostile megabyte is checked in one pass', () => {
    const big = 'a'.repeat(1024 * 1024) + '@example.com'
    assert.ok(isPlainAddress(big))
    assert.equal(isPlainAddress('a@'.repeat(512 * 1024)), false)
    assert.equal(bareAddress(big), big)
  })
})
