// The bare-address fast path (an input that is already a plain address skips nodemailer's parser) must
// give what the parser gives, for every input: compared here over generated inputs, the parser's own
// special characters included.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import addressparser from 'nodemailer/lib/addressparser/index.js'
import { formatAddress, isPlainAddress, parseAddress } from '../../src/domain/addresses.js'
import { bareAddress, envelopeRecipients, simulatorOutcome } from '../../src/mail/transport.js'

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

// Inputs shaped like addresses (a local part, @, dotted labels) with a stray character now and then: most
// are valid, so both of parseAddress's paths are exercised.
function* addressLike (n: number): Generator<string> {
  const local = "abcXYZ019!#$%&'*+-/=?^_`{|}~"
  const label = 'abz09-'
  const stray = '@<>",;:()[]\\ .Äé'
  let seed = 7
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31
  const pick = (chars: string, len: number) => { let s = ''; for (let i = 0; i < len; i++) s += chars[Math.floor(next() * chars.length)]; return s }
  for (let i = 0; i < n; i++) {
    let s = pick(local, 1 + Math.floor(next() * 8))
    if (next() < 0.3) s += '.' + pick(local, 1 + Math.floor(next() * 4))
    s += '@' + pick(label, 1 + Math.floor(next() * 6)) + '.' + pick('abcxyz', 2 + Math.floor(next() * 3))
    if (next() < 0.2) {
      const at = Math.floor(next() * s.length)
      s = s.slice(0, at) + pick(stray, 1) + s.slice(at)
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

  test('parseAddress skips its read-back only where the read-back could not refuse: over 20,000 generated inputs and their display-name forms', () => {
    let fast = 0
    let accepted = 0
    for (const input of addressLike(20_000)) {
      for (const form of [input, `Ann <${input}>`, `"A, B" <${input}>`]) {
        const got = parseAddress(form)
        if ('error' in got) continue
        accepted++
        // What parseAddress answered must be what a full read-back of its header form confirms.
        const back = addressparser(formatAddress(got), { flatten: true })
        assert.equal(back.length, 1, JSON.stringify(form))
        assert.equal(back[0]!.address.toLowerCase(), got.address, JSON.stringify(form))
        assert.equal(back[0]!.name || null, got.name, JSON.stringify(form))
        if (got.name === null && isPlainAddress(got.address)) fast++
      }
    }
    assert.ok(fast > 5000 && accepted - fast > 5000, `the generator reached the fast path (${fast}) and the full check (${accepted - fast})`)
    // Refusals are unchanged by it: a second address, a group, an unbalanced name.
    for (const bad of ['a@b.c, d@e.f', 'g: a@b.c;', '"Ann <a@b.c>', 'a@b.c>']) assert.ok('error' in parseAddress(bad), bad)
    assert.deepEqual(parseAddress('  Someone@Example.COM '), { name: null, address: 'someone@example.com' })
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
