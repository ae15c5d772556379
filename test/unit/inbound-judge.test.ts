// A received message judged within its bounds (src/mail/inbound/examine.ts), in this thread with a fake
// resolver that records what is asked: thousands of signatures cost ten lookups and the first one still
// passes; a chain of too many ARC sets fails unverified; a header block over the bound is not read; and
// one message's lookups are counted, each name asked once.
import assert from 'node:assert/strict'
import { generateKeyPairSync } from 'node:crypto'
import { describe, test } from 'node:test'
import nodemailer from 'nodemailer'
import { dnsBudgetEnd, judge, limitedResolver, type Lookup } from '../../src/mail/inbound/examine.js'
import { SIGNATURE_BOUNDS } from '../../src/mail/inbound/signature-bounds.js'

const { privateKey, publicKey } = generateKeyPairSync('rsa', {
  modulusLength: 2048,
  publicKeyEncoding: { type: 'spki', format: 'der' },
  privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
})

/** A DNS zone as `(name, type) => records`, recording every question. */
function fakeDns (): Lookup & { asked: string[] } {
  const zone = new Map<string, string[][]>([
    ['TXT s1._domainkey.customer.example', [[`v=DKIM1; k=rsa; p=${Buffer.from(publicKey).toString('base64')}`]]],
    ['TXT customer.example', [['v=spf1 ip4:192.0.2.1 -all']]],
    ['TXT _dmarc.customer.example', [['v=DMARC1; p=reject']]],
  ])
  const asked: string[] = []
  const lookup = async (name: string, type: string) => {
    asked.push(`${type} ${name}`)
    const records = zone.get(`${type} ${name}`)
    if (records === undefined) throw Object.assign(new Error(`queryTxt ENOTFOUND ${name}`), { code: 'ENOTFOUND' })
    return records
  }
  return Object.assign(lookup, { asked })
}

async function signed (): Promise<Buffer> {
  const t = nodemailer.createTransport({
    streamTransport: true, buffer: true, newline: 'windows',
    dkim: { domainName: 'customer.example', keySelector: 's1', privateKey },
  })
  const info = await t.sendMail({ from: 'customer@customer.example', to: 'support@example.com', subject: 'Hello', text: 'A body.\r\n'.repeat(100) })
  return info.message as Buffer
}

/** `raw` with `extra` header text right after its first field (nodemailer puts its DKIM-Signature first). */
function withFields (raw: Buffer, extra: string): Buffer {
  const text = raw.toString('latin1')
  let end = text.indexOf('\r\n') + 2
  while (text[end] === ' ' || text[end] === '\t') end = text.indexOf('\r\n', end) + 2
  return Buffer.from(text.slice(0, end) + extra + text.slice(end), 'latin1')
}

const envelope = { ip: '192.0.2.1', helo: 'mail.customer.example', sender: 'customer@customer.example', mta: 'mx.svc.test' }

describe('judging within bounds', () => {
  test('the signed message passes SPF, DKIM and DMARC', async () => {
    const dns = fakeDns()
    assert.deepEqual(await judge(await signed(), { ...envelope, resolver: dns }), { spf: 'pass', dkim: 'pass', dmarc: 'pass', arc: null })
  })

  test('3000 DKIM-Signature fields after the real one: ten verified (ten lookups), the first passes', async () => {
    const raw = await signed()
    const real = raw.toString('latin1')
    const bh = /bh=([^;]+);/.exec(real)![1]!
    // Each with the message's own body hash and its own selector: every one verified would be a lookup.
    const junk = Array.from({ length: 3000 }, (_, i) => `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=junk${i}.example; s=s${i}; h=from; bh=${bh}; b=AAAA\r\n`).join('')
    const dns = fakeDns()
    const verdicts = await judge(withFields(raw, junk), { ...envelope, resolver: dns })
    assert.equal(verdicts.dkim, 'pass')
    assert.equal(verdicts.dmarc, 'pass')
    const keys = dns.asked.filter((q) => q.includes('._domainkey.'))
    assert.equal(keys.length, SIGNATURE_BOUNDS.dkim, 'the first ten signatures, the real one among them')
    assert.ok(keys.includes('TXT s1._domainkey.customer.example'))
  })

  test('a signature field over the size bound is neither verified nor looked up; the real one still passes', async () => {
    // The reviewer's shape within the line bound: thousands of header lines and an h= list of 150,000 names.
    const lines = 'X: y\r\n'.repeat(SIGNATURE_BOUNDS.headerLines - 100)
    const raw = await signed()
    // The message's own body hash: verified, it would be looked up.
    const bh = /bh=([^;]+);/.exec(raw.toString('latin1'))![1]!
    const hostile = `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=junk.example; s=huge; h=${'q:'.repeat(150_000)}from; bh=${bh}; b=AAAA\r\n`
    const dns = fakeDns()
    const verdicts = await judge(withFields(raw, lines + hostile), { ...envelope, resolver: dns })
    assert.equal(verdicts.dkim, 'pass')
    assert.equal(verdicts.dmarc, 'pass')
    assert.deepEqual(dns.asked.filter((q) => q.includes('._domainkey.')), ['TXT s1._domainkey.customer.example'])
  })

  test('eleven ARC sets: arc fails, and no seal is looked up', async () => {
    const sets = Array.from({ length: 11 }, (_, i) => [
      `ARC-Seal: i=${i + 1}; a=rsa-sha256; cv=${i === 0 ? 'none' : 'pass'}; d=arc${i}.example; s=a; b=AAAA\r\n`,
      `ARC-Message-Signature: i=${i + 1}; a=rsa-sha256; c=relaxed/relaxed; d=arc${i}.example; s=a; h=from; bh=AAAA; b=AAAA\r\n`,
      `ARC-Authentication-Results: i=${i + 1}; mx.arc${i}.example; spf=pass\r\n`,
    ].join('')).join('')
    const dns = fakeDns()
    const verdicts = await judge(withFields(await signed(), sets), { ...envelope, resolver: dns })
    assert.equal(verdicts.arc, 'fail')
    assert.equal(verdicts.dkim, 'pass')
    assert.deepEqual(dns.asked.filter((q) => q.includes('._domainkey.arc')), [])
  })

  test('a header block over the bound is not read: DKIM and DMARC permerror, SPF still judged', async () => {
    const folded = `X-Long: a\r\n${' b\r\n'.repeat(SIGNATURE_BOUNDS.headerLines)}`
    const verdicts = await judge(withFields(await signed(), folded), { ...envelope, resolver: fakeDns() })
    assert.deepEqual(verdicts, { spf: 'pass', dkim: 'permerror', dmarc: 'permerror', arc: null })
  })

  test('lookups per message: each name and type once, and none past the cap (a temporary failure)', async () => {
    const dns = fakeDns()
    const resolve = limitedResolver(dns, { maxLookups: 2 })
    await assert.rejects(resolve('a.example', 'TXT'), { code: 'ENOTFOUND' })
    await assert.rejects(resolve('A.example', 'TXT'), { code: 'ENOTFOUND' })
    assert.deepEqual(await resolve('customer.example', 'TXT'), [['v=spf1 ip4:192.0.2.1 -all']])
    await assert.rejects(resolve('b.example', 'TXT'), { code: 'ELOOKUPLIMIT' })
    assert.deepEqual(dns.asked, ['TXT a.example', 'TXT customer.example'])
    assert.equal(resolve.count, 2)
    // mailauth takes the cap for a DNS failure: a temporary error, not a verdict on the sender.
    const capped = await judge(await signed(), { ...envelope, resolver: limitedResolver(fakeDns(), { maxLookups: 0 }) })
    assert.equal(capped.dkim, 'temperror')
    assert.equal(capped.spf, 'temperror')
  })

  test('a DNS time budget: past it, new lookups fail at once (a temporary failure) but DMARC\'s own; names asked before still answer', async () => {
    const dns = fakeDns()
    let now = 1000
    const resolve = limitedResolver(dns, { maxLookups: 64, until: 6000, now: () => now })
    assert.deepEqual(await resolve('customer.example', 'TXT'), [['v=spf1 ip4:192.0.2.1 -all']])
    now = 5999
    await assert.rejects(resolve('a.example', 'TXT'), { code: 'ENOTFOUND' })
    now = 6000
    await assert.rejects(resolve('s9._domainkey.b.example', 'TXT'), { code: 'EDNSBUDGET' })
    assert.deepEqual(await resolve('customer.example', 'TXT'), [['v=spf1 ip4:192.0.2.1 -all']], 'asked before: the same answer')
    assert.deepEqual(await resolve('_dmarc.customer.example', 'TXT'), [['v=DMARC1; p=reject']], 'DMARC is still looked up')
    assert.deepEqual(dns.asked, ['TXT customer.example', 'TXT a.example', 'TXT _dmarc.customer.example'])

    // Half of what is left when the judgement begins.
    assert.equal(dnsBudgetEnd(11_000, 1000), 6000)
    assert.equal(dnsBudgetEnd(11_000, 9000), 10_000)
    assert.equal(dnsBudgetEnd(11_000, 12_000), 12_000, 'past the deadline: spent')

    // Spent before the judgement begins: DKIM and SPF are temperror, DMARC is judged (no aligned pass: fail).
    const late = await judge(await signed(), { ...envelope, resolver: limitedResolver(fakeDns(), { maxLookups: 64, until: 0 }) })
    assert.deepEqual(late, { spf: 'temperror', dkim: 'temperror', dmarc: 'fail', arc: null })
  })
})
