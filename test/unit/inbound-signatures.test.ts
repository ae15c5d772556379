// The bound on a received message's signatures (src/mail/inbound/signature-bounds.ts): what it counts is
// what mailauth would check (its own header reader is the reference, on random header blocks built from
// the bytes that matter), what it leaves out is the DKIM-Signature fields past the bound and nothing else
// (one byte of each one's name changed, no byte moved), and a hostile megabyte of header costs one pass.
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { describe, test } from 'node:test'
import fc from 'fast-check'
import { boundSignatures, SIGNATURE_BOUNDS, type SignatureBounds } from '../../src/mail/inbound/signature-bounds.js'

const MEGABYTE = 1024 * 1024
const require = createRequire(import.meta.url)
const { MessageParser } = require('mailauth/lib/dkim/message-parser.js') as { MessageParser: new () => NodeJS.WritableStream & { messageHeaders(h: unknown): Promise<void>; nextChunk(c: Buffer): Promise<void> } }
const { writeToStream } = require('mailauth/lib/tools.js') as { writeToStream: (stream: unknown, input: Buffer) => Promise<void> }

interface Read { fields: Array<{ key: string | null; line: string }>; body: Buffer }

/** A field left out: the first letter of its name made an X, so that no verifier takes it for a signature. */
const renamed = (line: string) => line.replace(/^(\s*)[A-Za-z]/, '$1X')

/** The header fields and the body as mailauth's DKIM verifier reads them. */
async function mailauthReads (raw: Buffer): Promise<Read> {
  const read: Read = { fields: [], body: Buffer.alloc(0) }
  const body: Buffer[] = []
  const parser = new MessageParser()
  parser.messageHeaders = async (headers) => {
    read.fields = (headers as { parsed: Array<{ key: string | null; line: Buffer }> }).parsed.map((h) => ({ key: h.key, line: h.line.toString('latin1') }))
  }
  parser.nextChunk = async (chunk) => { body.push(Buffer.from(chunk)) }
  await writeToStream(parser, raw)
  read.body = Buffer.concat(body)
  return read
}

const ARC = ['arc-seal', 'arc-message-signature', 'arc-authentication-results']
const bounds = (over: Partial<SignatureBounds>): SignatureBounds => ({ ...SIGNATURE_BOUNDS, ...over })
const latin1 = (s: string) => Buffer.from(s, 'latin1')

describe('counting signatures', () => {
  test('DKIM-Signature in any case, spaced or folded before its colon; not a longer name, not in the body', () => {
    const raw = latin1([
      'DKIM-Signature: v=1; d=a.example',
      'dkim-signature : v=1',
      'DKIM-SIGNATURE\r\n\t: v=1; folded before the colon',
      'DKIM-Signature:v=1;\r\n  b=continued',
      'X-DKIM-Signature: no',
      'DKIM-Signatures: no',
      'DKIM-Signature-X: no',
      'ARC-Seal: i=1', 'ARC-Seal: i=2', 'arc-message-signature: i=1', 'ARC-Authentication-Results: i=1',
      'From: a@b.example',
      '',
      'DKIM-Signature: in the body',
      '',
    ].join('\r\n'))
    const b = boundSignatures(raw)
    assert.equal(b.dkim, 4)
    assert.equal(b.arcSets, 2)
    assert.equal(b.dkimDropped, 0)
    assert.equal(b.message, raw, 'nothing past the bound: the message itself')
    assert.equal(b.headerOver, false)
    assert.equal(b.arcOver, false)
  })

  test('past the bound: the first N kept, the rest renamed in place (XKIM-Signature), every other byte as it was', async () => {
    const sig = (i: number, name = 'DKIM-Signature') => `${name}: v=1; a=rsa-sha256; d=d${i}.example; s=s${i};\r\n\tbh=AAAA; b=BBBB${i}\r\n`
    const head = `Received: from x\r\n${sig(0)}From: a@b.example\r\n${sig(1)}${sig(2)}Subject: hi\r\n${sig(3)}${sig(4)}`
    const raw = latin1(`${head}\r\nbody line\r\nDKIM-Signature: body\r\n`)
    const b = boundSignatures(raw, bounds({ dkim: 2 }))
    assert.equal(b.dkim, 5)
    assert.equal(b.dkimDropped, 3)
    const x = 'XKIM-Signature'
    assert.equal(b.message.toString('latin1'), `Received: from x\r\n${sig(0)}From: a@b.example\r\n${sig(1)}${sig(2, x)}Subject: hi\r\n${sig(3, x)}${sig(4, x)}\r\nbody line\r\nDKIM-Signature: body\r\n`)
    assert.equal(b.message.length, raw.length)
    assert.equal(raw.toString('latin1'), `${head}\r\nbody line\r\nDKIM-Signature: body\r\n`, 'the message itself is not changed')
    const before = await mailauthReads(raw)
    const after = await mailauthReads(b.message)
    assert.deepEqual(after.body, before.body)
    assert.deepEqual(after.fields.filter((f) => f.key === 'dkim-signature').map((f) => f.line), before.fields.filter((f) => f.key === 'dkim-signature').slice(0, 2).map((f) => f.line))
  })

  test('ARC sets past the bound are flagged', () => {
    const sets = (n: number) => Array.from({ length: n }, (_, i) => `ARC-Seal: i=${i + 1}\r\nARC-Message-Signature: i=${i + 1}\r\nARC-Authentication-Results: i=${i + 1}\r\n`).join('')
    assert.equal(boundSignatures(latin1(`${sets(10)}From: a@b\r\n\r\nx`)).arcOver, false)
    const over = boundSignatures(latin1(`${sets(11)}From: a@b\r\n\r\nx`))
    assert.equal(over.arcSets, 11)
    assert.equal(over.arcOver, true)
  })

  test('agrees with mailauth\'s own reading of random header blocks, before and after the cut', async () => {
    // The bytes that decide where a field starts and ends, what its name is, and where the header ends.
    const piece = fc.constantFrom(
      'DKIM-Signature', 'dkim-SIGNATURE', 'ARC-Seal', 'arc-message-signature', 'ARC-Authentication-Results', 'From', 'x',
      ':', ': v=1', ' ', '\t', '\v', '\f', '\xa0', '\r', '\n', '\r\n', '\r\n', '\n\n', '\r\n\r\n', '\r\r\n', '\n\r\n', 'body',
    )
    await fc.assert(fc.asyncProperty(fc.array(piece, { maxLength: 60 }), fc.integer({ min: 1, max: 3 }), async (pieces, keep) => {
      const raw = latin1(pieces.join(''))
      const b = boundSignatures(raw, bounds({ dkim: keep }))
      const before = await mailauthReads(raw)
      const keys = before.fields.map((f) => f.key)
      assert.equal(b.headerOver, false)
      assert.equal(b.dkim, keys.filter((k) => k === 'dkim-signature').length, JSON.stringify(pieces))
      assert.equal(b.arcSets, Math.max(...ARC.map((name) => keys.filter((k) => k === name).length)), JSON.stringify(pieces))
      const after = await mailauthReads(b.message)
      let dkimSeen = 0
      // Exactly what mailauth read before, but for the signatures past the bound: renamed, nothing moved.
      const expected = before.fields.map((f) => f.key !== 'dkim-signature' || ++dkimSeen <= keep
        ? f
        : { key: 'xkim-signature', line: renamed(f.line) })
      assert.deepEqual(after.fields, expected, JSON.stringify(pieces))
      assert.deepEqual(after.body, before.body, JSON.stringify(pieces))
    }), {
      seed: 38,
      numRuns: 500,
      // Found by a random run: removing the second field moved a bare LF next to the end of the header block.
      examples: [[['DKIM-Signature', '\r\r\n', 'DKIM-Signature', '\n\n', '\n\r\n'], 1]],
    })
  })
})

describe('a hostile megabyte of header', () => {
  test('nearly a megabyte of DKIM-Signature fields: counted in one pass, ten kept, the body as it was; a megabyte is over the bound', async () => {
    const line = `DKIM-Signature: v=1; d=x.example; s=s; bh=AAAA; b=${'A'.repeat(190)}\r\n`
    assert.equal(boundSignatures(latin1(`${line.repeat(MEGABYTE / line.length)}\r\nbody`)).headerOver, true)
    const n = SIGNATURE_BOUNDS.headerLines - 2
    assert.ok(n * line.length > 0.9 * MEGABYTE)
    const raw = latin1(`${line.repeat(n)}From: a@b.example\r\n\r\n${'body\r\n'.repeat(1000)}`)
    const b = boundSignatures(raw)
    assert.equal(b.headerOver, false)
    assert.equal(b.dkim, n)
    assert.equal(b.dkimDropped, b.dkim - SIGNATURE_BOUNDS.dkim)
    const after = await mailauthReads(b.message)
    assert.equal(after.fields.filter((f) => f.key === 'dkim-signature').length, SIGNATURE_BOUNDS.dkim)
    assert.ok(b.message.subarray(-6000).equals(raw.subarray(-6000)))
  })

  test('a header block over the bounds is not judged: too many lines, too many bytes, or one line with no end', () => {
    // Folded lines cost mailauth the square of their number to join.
    assert.equal(boundSignatures(latin1(`X-A: 1\r\n${' x\r\n'.repeat(MEGABYTE / 4 - 4)}\r\nbody`)).headerOver, true)
    // An empty first line does not end mailauth's header block (mailparser reads the rest as the body).
    assert.equal(boundSignatures(latin1(`\r\n${'X: y\r\n'.repeat(MEGABYTE / 6)}\r\nbody`)).headerOver, true)
    assert.equal(boundSignatures(latin1(`X: ${'a'.repeat(MEGABYTE)}\r\n\r\nbody`)).headerOver, true)
    assert.equal(boundSignatures(latin1('a'.repeat(MEGABYTE + 10))).headerOver, true)
    const lines = boundSignatures(latin1(`${'X: y\r\n'.repeat(SIGNATURE_BOUNDS.headerLines - 1)}\r\nbody`))
    assert.equal(lines.headerOver, false, 'just under the line bound')
  })

  test('a signature field over fieldBytes is not verified: the reviewer\'s 300 KB h= list; the ones kept stay under signatureBytes together', async () => {
    // mailauth matches each name of h= against every header line: 150,000 names by 15,000 lines held a
    // thread for seconds. Such a header is now over the line bound, and such a field over the field bound.
    const hostile = (names: number) => `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=example.com; s=s; h=${'q:'.repeat(names)}from; bh=AAAA; b=AAAA\r\n`
    const reviewers = latin1(`From: a@example.com\r\n${'X: y\r\n'.repeat(15_000)}${hostile(150_000)}\r\nbody\r\n`)
    assert.equal(boundSignatures(reviewers).headerOver, true)

    const under = latin1(`From: a@example.com\r\n${'X: y\r\n'.repeat(SIGNATURE_BOUNDS.headerLines - 10)}${hostile(150_000)}\r\nbody\r\n`)
    const b = boundSignatures(under)
    assert.equal(b.headerOver, false)
    assert.equal(b.dkim, 1)
    assert.equal(b.dkimDropped, 1)
    assert.equal(b.oversized, 1)
    assert.equal(b.message.length, under.length)
    const keys = (await mailauthReads(b.message)).fields.map((f) => f.key)
    assert.ok(!keys.includes('dkim-signature'), 'no signature left to verify')
    assert.ok(keys.includes('xkim-signature'))

    // fieldBytes counts the field whole, its line end included: at the bound it is verified, past it not.
    const sized = (bytes: number) => {
      const head = 'DKIM-Signature: v=1; d=x.example; s=s; b='
      return `${head}${'A'.repeat(bytes - head.length - 2)}\r\n`
    }
    const F = SIGNATURE_BOUNDS.fieldBytes
    assert.equal(sized(F).length, F)
    const edge = boundSignatures(latin1(`${sized(F)}${sized(F + 1)}From: a@b\r\n\r\nx`))
    assert.deepEqual([edge.dkim, edge.dkimDropped, edge.oversized], [2, 1, 1])
    assert.equal(edge.message.subarray(F, F + 4).toString('latin1'), 'XKIM')

    // Together at most signatureBytes: five of 7 KiB and a small one; the fifth does not fit, the small one does.
    const seven = sized(7 * 1024)
    const small = sized(200)
    const total = boundSignatures(latin1(`${seven.repeat(5)}${small}From: a@b\r\n\r\nx`))
    assert.equal(total.dkim, 6)
    assert.equal(total.dkimDropped, 1)
    assert.equal(total.oversized, 0)
    const read = (await mailauthReads(total.message)).fields.map((f) => f.key)
    assert.deepEqual(read.slice(0, 6), ['dkim-signature', 'dkim-signature', 'dkim-signature', 'dkim-signature', 'xkim-signature', 'dkim-signature'])

    // An ARC field over the bound: renamed too, and the chain is not verified (arc fails).
    const ams = `ARC-Message-Signature: i=1; a=rsa-sha256; d=a.example; s=a; h=${'q:'.repeat(F)}from; bh=AAAA; b=AAAA\r\n`
    const arc = boundSignatures(latin1(`ARC-Seal: i=1; cv=none; d=a.example; s=a; b=AAAA\r\n${ams}ARC-Authentication-Results: i=1; mx.a.example\r\nFrom: a@b\r\n\r\nx`))
    assert.equal(arc.arcSets, 1)
    assert.equal(arc.arcOver, true)
    assert.equal(arc.oversized, 1)
    assert.ok((await mailauthReads(arc.message)).fields.some((f) => f.key === 'xrc-message-signature'))
  })

  test('megabytes of the bytes that matter: no field, no end, bounded answers', () => {
    for (const s of [':'.repeat(MEGABYTE), ' '.repeat(MEGABYTE), '\r'.repeat(MEGABYTE), '\n'.repeat(MEGABYTE), 'DKIM-Signature'.repeat(MEGABYTE / 14), '\xa0\r\n'.repeat(MEGABYTE / 3)]) {
      const b = boundSignatures(latin1(s))
      assert.ok(b.dkim <= 1 && b.arcSets === 0, JSON.stringify(s.slice(0, 10)))
    }
  })
})
