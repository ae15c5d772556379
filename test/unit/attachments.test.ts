// The rules of attachments without a server: file names, content types, the executable policy, strict
// base64 and the email's allowance.
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { describe, test } from 'node:test'
import {
  DEFAULT_ATTACHMENTS_MAX_BYTES, MAX_ATTACHMENTS, MAX_FILENAME_LENGTH, checkAttachments, cleanFilename, contentTypeFor, decodeBase64Strict,
  executableReason, extensionOf, type AttachmentInput,
} from '../../src/domain/attachments.js'

const limits = { maxBytes: DEFAULT_ATTACHMENTS_MAX_BYTES, maxCount: MAX_ATTACHMENTS }
const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64')

describe('file names', () => {
  test('lose any path, control and direction characters, and the dots and spaces at either end', () => {
    assert.equal(cleanFilename('invoice.pdf'), 'invoice.pdf')
    assert.equal(cleanFilename('/etc/passwd'), 'passwd')
    assert.equal(cleanFilename('..\\..\\windows\\system32\\evil.pdf'), 'evil.pdf')
    assert.equal(cleanFilename('../../x.pdf'), 'x.pdf')
    // A header smuggled into a name ends at its slash: the path goes, and the line break with it.
    assert.equal(cleanFilename('report\r\nContent-Type: text/html.pdf'), 'html.pdf')
    assert.equal(/[\r\n]/.test(cleanFilename('a\r\nb.pdf')), false)
    assert.equal(cleanFilename('a\r\nb.pdf'), 'ab.pdf')
    assert.equal(cleanFilename('a\u0000b\u007f\u0085c.txt'), 'abc.txt')
    assert.equal(cleanFilename('invoice\u202Efdp.exe'), 'invoicefdp.exe')
    assert.equal(cleanFilename('line\u2028sep.txt'), 'linesep.txt')
    assert.equal(cleanFilename('what?*:<>|".txt'), 'what.txt')
    assert.equal(cleanFilename('  ..hidden. . '), 'hidden')
    assert.equal(cleanFilename('run.exe.'), 'run.exe')
    assert.equal(cleanFilename('a\tb   c.txt'), 'a b c.txt')
    assert.equal(cleanFilename('Rechnung März 2026.pdf'), 'Rechnung März 2026.pdf')
    assert.equal(cleanFilename('請求書.pdf'), '請求書.pdf')
    for (const empty of ['', '/', 'dir/', '...', ' . ', '\r\n', '\u202E']) assert.equal(cleanFilename(empty), '')
  })

  test('a long name is cut to the limit, by code point, keeping its extension', () => {
    const long = cleanFilename(`${'ä'.repeat(400)}.pdf`)
    assert.equal([...long].length, MAX_FILENAME_LENGTH)
    assert.ok(long.endsWith('.pdf'))
    const emoji = cleanFilename('😀'.repeat(300))
    assert.equal([...emoji].length, MAX_FILENAME_LENGTH)
    assert.equal(emoji, '😀'.repeat(MAX_FILENAME_LENGTH))
  })
})

describe('content types by extension', () => {
  test('the common kinds, case-insensitive, and octet-stream for the rest', () => {
    assert.equal(contentTypeFor('invoice.pdf'), 'application/pdf')
    assert.equal(contentTypeFor('LOGO.PNG'), 'image/png')
    assert.equal(contentTypeFor('photo.jpeg'), 'image/jpeg')
    assert.equal(contentTypeFor('photo.jpg'), 'image/jpeg')
    assert.equal(contentTypeFor('data.csv'), 'text/csv')
    assert.equal(contentTypeFor('invite.ics'), 'text/calendar')
    assert.equal(contentTypeFor('sheet.xlsx'), 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet')
    assert.equal(contentTypeFor('archive.tar.gz'), 'application/gzip')
    assert.equal(contentTypeFor('README'), 'application/octet-stream')
    assert.equal(contentTypeFor('.bashrc'), 'application/octet-stream')
    assert.equal(contentTypeFor('file.unknownext'), 'application/octet-stream')
    assert.equal(extensionOf('a.b.C'), 'c')
    assert.equal(extensionOf('trailing.'), '')
  })
})

describe('the executable policy', () => {
  test('programs and scripts that mailbox providers refuse are named, whatever the case', () => {
    for (const name of ['setup.exe', 'run.BAT', 'x.cmd', 'x.com', 'x.cpl', 'x.js', 'x.jse', 'x.msc', 'x.msi', 'x.scr', 'x.vbs', 'x.jar', 'x.ps1', 'x.lnk', 'x.iso', 'x.hta', 'x.reg']) {
      assert.ok(executableReason(name, 'application/octet-stream') !== null, name)
    }
    assert.match(executableReason('setup.exe', 'application/octet-stream')!, /\.exe files are programs/)
  })

  test('the last extension counts; documents and archives pass', () => {
    for (const name of ['invoice.pdf', 'exe.pdf', 'setup.exe.pdf', 'photo.png', 'archive.zip', 'notes.txt', 'README', 'data.json', 'style.css']) {
      assert.equal(executableReason(name, contentTypeFor(name)), null, name)
    }
    assert.ok(executableReason('invoice.pdf.exe', 'application/pdf') !== null)
  })

  test('a program content type is refused under any name', () => {
    assert.match(executableReason('invoice.pdf', 'application/x-msdownload')!, /program type/)
    assert.ok(executableReason('a.bin', 'Application/Java-Archive') !== null)
  })

  test('checkAttachments refuses them as not_allowed, naming the file', () => {
    const r = checkAttachments([{ filename: 'C:\\temp\\setup.exe', content: b64('MZ') }], limits)
    assert.ok('problems' in r)
    assert.deepEqual(r.problems.map((p) => [p.path, p.kind]), [['attachments[0].filename', 'not_allowed']])
    assert.match(r.problems[0]!.message, /"setup\.exe" is refused/)
  })
})

describe('strict base64', () => {
  test('decodes the standard alphabet with padding and refuses everything else', () => {
    assert.deepEqual(decodeBase64Strict(''), Buffer.alloc(0))
    assert.deepEqual(decodeBase64Strict('QQ=='), Buffer.from('A'))
    assert.deepEqual(decodeBase64Strict('QUI='), Buffer.from('AB'))
    assert.deepEqual(decodeBase64Strict('QUJD'), Buffer.from('ABC'))
    const bytes = randomBytes(1000)
    assert.deepEqual(decodeBase64Strict(bytes.toString('base64')), bytes)
    for (const bad of ['QQ', 'QQ=', 'Q===', 'QR==', 'QU I=', 'QUI=\n', 'Q\nI=', 'QUI-', 'QU_=', 'QUJD!A==', '=QUI', 'QQ==QQ==', 'ä===', 'QUJ\u0000']) {
      assert.equal(decodeBase64Strict(bad), null, JSON.stringify(bad))
    }
    // base64url is another alphabet.
    assert.equal(decodeBase64Strict(Buffer.from([0xfb, 0xff]).toString('base64url') + '='), null)
    // Checked a block at a time: a file over several blocks decodes whole, and a wrong character is found
    // in any block, the last one included, and where a block ends.
    const large = randomBytes(200_001)
    const text = large.toString('base64')
    assert.deepEqual(decodeBase64Strict(text), large)
    for (const at of [0, 65_535, 65_536, 131_072, text.length - 5]) {
      const broken = `${text.slice(0, at)}-${text.slice(at + 1)}`
      assert.equal(decodeBase64Strict(broken), null, `a URL-alphabet character at ${at}`)
    }
  })

  test('a hostile megabyte is answered at once, whatever is wrong with it', () => {
    const mb = 1024 * 1024
    const cases = [
      'A'.repeat(mb - 1) + '!',
      '='.repeat(mb),
      'A'.repeat(mb / 2) + '='.repeat(mb / 2),
      ' '.repeat(mb),
      'QQ==\n'.repeat(mb / 5),
      '\u0000'.repeat(mb),
      'ÿ'.repeat(mb),
      'A'.repeat(mb - 4) + 'QR==',
    ]
    for (const hostile of cases) assert.equal(decodeBase64Strict(hostile), null)
    assert.equal(decodeBase64Strict('A'.repeat(mb))?.length, (mb / 4) * 3)
  })
})

describe('checkAttachments', () => {
  test('decodes, hashes and types each attachment, inline ones with their content id', () => {
    const pdf = randomBytes(3000)
    const r = checkAttachments([
      { filename: 'invoice.pdf', content: pdf.toString('base64') },
      { filename: 'logo.PNG', content: b64('png'), contentId: 'logo@shop' },
      { filename: 'data', content: b64('x'), contentType: 'Text/CSV' },
    ], limits)
    assert.ok('attachments' in r)
    assert.deepEqual(r.attachments.map((a) => a.meta), [
      { filename: 'invoice.pdf', contentType: 'application/pdf', size: 3000, sha256: createHash('sha256').update(pdf).digest('hex') },
      { filename: 'logo.PNG', contentType: 'image/png', size: 3, sha256: createHash('sha256').update('png').digest('hex'), contentId: 'logo@shop' },
      { filename: 'data', contentType: 'text/csv', size: 1, sha256: createHash('sha256').update('x').digest('hex') },
    ])
    assert.deepEqual(r.attachments[0]!.content, pdf)
    assert.deepEqual(checkAttachments(undefined, limits), { attachments: [] })
  })

  test('names every bad field: empty names, bad types, content ids, base64', () => {
    const r = checkAttachments([
      { filename: '/', content: b64('x') },
      { filename: 'a.txt', content: b64('x'), contentType: 'text/plain; charset=utf-8' },
      { filename: 'b.png', content: b64('x'), contentId: '<logo>' },
      { filename: 'c.png', content: b64('x'), contentId: 'same' },
      { filename: 'd.png', content: b64('x'), contentId: 'same' },
      { filename: 'e.txt', content: 'not base64!' },
    ], limits)
    assert.ok('problems' in r)
    assert.deepEqual(r.problems.map((p) => p.path), [
      'attachments[0].filename', 'attachments[1].contentType', 'attachments[2].contentId', 'attachments[4].contentId', 'attachments[5].content',
    ])
    assert.ok(r.problems.every((p) => p.kind === 'invalid'))
  })

  test('over the allowance: refused as too_large with the limit named, before anything is decoded', () => {
    const small = { maxBytes: 1000, maxCount: 3 }
    const over = checkAttachments([{ filename: 'a.bin', content: b64(randomBytes(600)) }, { filename: 'b.bin', content: b64(randomBytes(600)) }], small)
    assert.ok('problems' in over)
    assert.equal(over.problems[0]!.kind, 'too_large')
    assert.match(over.problems[0]!.message, /at most 1,000 bytes of attachments/)
    // Not even valid base64: the size alone refuses it.
    const hostile = checkAttachments([{ filename: 'a.bin', content: '!'.repeat(4000) }], small)
    assert.ok('problems' in hostile)
    assert.equal(hostile.problems[0]!.kind, 'too_large')
    const exact = checkAttachments([{ filename: 'a.bin', content: b64(randomBytes(1000)) }], small)
    assert.ok('attachments' in exact)
    const many: AttachmentInput[] = Array.from({ length: 4 }, (_, i) => ({ filename: `${i}.txt`, content: b64('x') }))
    const count = checkAttachments(many, small)
    assert.ok('problems' in count)
    assert.match(count.problems[0]!.message, /at most 3 attachments/)
  })
})
