// What receiving parses, each with a hostile megabyte: message ids in In-Reply-To and References, the
// recipient, the content type and file name of an attachment, the bounds put on a parsed message, and
// mailparser itself on shapes meant to hurt (deep nesting, thousands of parts, one endless header).
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import {
  LIMITS, attachmentDisposition, authResult, boundMessage, byAccount, cut, safeContentType, splitRecipient, type ParsedMessage,
} from '../../src/app/received.js'
import { lastMessageIds, messageIds, readMessage } from '../../src/mail/inbound/receiving.js'

const MEGABYTE = 1024 * 1024

describe('message ids', () => {
  test('in order from the start, last first from the end; unclosed and oversized ones skipped', () => {
    assert.deepEqual(messageIds('<a@x> junk <b@y>'), ['<a@x>', '<b@y>'])
    assert.deepEqual(lastMessageIds('<a@x> <b@y> <c@z>', 2), ['<c@z>', '<b@y>'])
    assert.deepEqual(messageIds(['<a@x>', '<b@y>']), ['<a@x>', '<b@y>'])
    assert.deepEqual(messageIds('<unclosed'), [])
    assert.deepEqual(lastMessageIds('unopened>'), [])
    assert.deepEqual(messageIds(`<${'x'.repeat(2000)}> <ok@x>`), ['<ok@x>'])
  })

  test('a hostile megabyte of each shape: bounded output', () => {
    const shapes = ['<'.repeat(MEGABYTE), '>'.repeat(MEGABYTE), '<>'.repeat(MEGABYTE / 2), `<${'a'.repeat(MEGABYTE)}`, '<a@b> '.repeat(MEGABYTE / 6)]
    for (const s of shapes) {
      assert.ok(messageIds(s).length <= LIMITS.messageIds)
      assert.ok(lastMessageIds(s).length <= LIMITS.messageIds)
    }
    assert.equal(messageIds('<a@b> '.repeat(MEGABYTE / 6)).length, LIMITS.messageIds)
  })
})

describe('recipients, content types, file names, verdicts', () => {
  test('a recipient splits into a lower-case local part and domain; anything else is no address', () => {
    assert.deepEqual(splitRecipient('Support@Example.COM'), { local: 'support', domain: 'example.com' })
    assert.deepEqual(splitRecipient('a@b@example.com'), { local: 'a@b', domain: 'example.com' })
    assert.deepEqual(splitRecipient('Info@Bücher.example.'), { local: 'info', domain: 'xn--bcher-kva.example' })
    for (const bad of ['', '@example.com', 'a@', 'no-at', 'a b@example.com', `${'a'.repeat(MEGABYTE)}@example.com`]) assert.equal(splitRecipient(bad), null, bad.slice(0, 20))
  })

  test('content types are type/subtype or application/octet-stream', () => {
    assert.equal(safeContentType('Application/PDF'), 'application/pdf')
    assert.equal(safeContentType('image/svg+xml'), 'image/svg+xml')
    for (const bad of ['text/html\r\nX-Evil: 1', 'text', '', '/x', `text/${'a'.repeat(MEGABYTE)}`, 'a/'.repeat(MEGABYTE / 2)]) {
      assert.equal(safeContentType(bad), 'application/octet-stream', bad.slice(0, 20))
    }
  })

  test('Content-Disposition is always an attachment, with a name that cannot break the header', () => {
    assert.equal(attachmentDisposition('a.pdf', 'att_1'), 'attachment; filename="a.pdf"; filename*=UTF-8\'\'a.pdf')
    assert.equal(attachmentDisposition(null, 'att_1'), 'attachment; filename="att_1"; filename*=UTF-8\'\'att_1')
    const evil = attachmentDisposition('x"; filename=evil.html\r\nSet-Cookie: a=b', 'att_1')
    assert.doesNotMatch(evil, /[\r\n]/)
    assert.equal(evil.split('"').length, 3, 'one quoted name only')
    assert.match(attachmentDisposition('März ✓.txt', 'att_1'), /^attachment; filename="M_rz _\.txt"; filename\*=UTF-8''M%C3%A4rz%20%E2%9C%93\.txt$/)
  })

  test('verdicts are one of the known words, else none', () => {
    assert.equal(authResult('PASS'), 'pass')
    assert.equal(authResult('softfail'), 'softfail')
    assert.equal(authResult('<script>'), 'none')
    assert.equal(authResult(undefined), 'none')
  })

  test('cut never splits a surrogate pair', () => {
    assert.deepEqual(cut('ab😀', 3), { value: 'ab', cut: true })
    assert.deepEqual(cut('abc', 3), { value: 'abc', cut: false })
  })
})

describe('a parsed message is bounded', () => {
  test('megabytes of every field are cut to the documented sizes, with flags', () => {
    const big = 'x'.repeat(MEGABYTE)
    const parsed: ParsedMessage = {
      from: big, to: Array.from({ length: 10_000 }, (_, i) => `u${i}@x`), cc: [big], subject: big, text: big, html: big,
      headers: Array.from({ length: 10_000 }, () => ({ name: big, value: big })), messageId: big, replyIds: [],
      attachments: Array.from({ length: 1000 }, (_, i) => ({ filename: `${big}\r\n${i}`, contentType: big, content: Buffer.alloc(1) })),
    }
    const m = boundMessage(parsed)
    assert.equal(m.from.length, LIMITS.from)
    assert.equal(m.to.length, LIMITS.addresses)
    assert.equal(m.cc[0]!.length, LIMITS.address)
    assert.equal(m.subject.length, LIMITS.subject)
    assert.equal(m.text!.length, LIMITS.text)
    assert.equal(m.textTruncated, true)
    assert.equal(m.html!.length, LIMITS.html)
    assert.equal(m.htmlTruncated, true)
    assert.equal(m.headers.length, LIMITS.headers)
    assert.ok(m.headers.every((h) => h.name.length <= 100 && h.value.length <= LIMITS.headerValue))
    assert.equal(m.messageId!.length, LIMITS.headerValue)
    assert.equal(m.attachments.length, LIMITS.attachments)
    assert.equal(m.contents.length, LIMITS.attachments)
    assert.ok(m.attachments.every((a) => a.filename!.length <= LIMITS.filename && !/[\r\n]/.test(a.filename!) && a.contentType === 'application/octet-stream'))
    assert.deepEqual(m.attachments.map((a) => a.id).slice(0, 3), ['att_1', 'att_2', 'att_3'])
  })

  test('mailparser on hostile shapes: deep nesting, 3,000 parts, a megabyte-long folded header, a megabyte of boundary-like lines', async () => {
    const nested = (depth: number) => {
      const head = 'From: a@x\r\nSubject: deep\r\nMIME-Version: 1.0\r\n'
      let body = ''
      for (let i = 0; i < depth; i++) {
        body += `${i === 0 ? '' : `--b${i - 1}\r\n`}Content-Type: multipart/mixed; boundary="b${i}"\r\n\r\n`
      }
      body += `--b${depth - 1}\r\nContent-Type: text/plain\r\n\r\ninner\r\n`
      return head + body
    }
    const parts = ['From: a@x', 'Subject: many', 'MIME-Version: 1.0', 'Content-Type: multipart/mixed; boundary="q"', '']
    for (let i = 0; i < 3000; i++) parts.push('--q', `Content-Type: application/octet-stream; name="f${i}.bin"`, 'Content-Disposition: attachment', 'Content-Transfer-Encoding: base64', '', 'AAEC')
    parts.push('--q--', '')
    const folded = `From: a@x\r\nSubject: ${'word\r\n '.repeat(MEGABYTE / 7)}end\r\n\r\nbody\r\n`
    const boundaries = `From: a@x\r\nContent-Type: multipart/mixed; boundary="z"\r\n\r\n${'--z\r\n'.repeat(MEGABYTE / 5)}`
    for (const [name, raw] of [['deep', nested(2000)], ['parts', parts.join('\r\n')], ['folded', folded], ['boundaries', boundaries]] as const) {
      assert.ok(raw.length <= 2 * MEGABYTE, name)
      let parsed: ParsedMessage | undefined
      try {
        parsed = await readMessage(Buffer.from(raw))
      } catch (err) {
        // A refusal is fine (the listener answers 554); a hang or a crash is not.
        assert.ok(err instanceof Error, name)
        continue
      }
      const m = boundMessage(parsed)
      assert.ok(m.attachments.length <= LIMITS.attachments, name)
      assert.ok(m.subject.length <= LIMITS.subject, name)
    }
  })
})

describe('one message per transaction and account', () => {
  test('the targets of every RCPT become one message per account, its recipients in order, each once', () => {
    const t = (accountId: string, domainId: string, recipient: string) => ({ accountId, domainId, recipient })
    assert.deepEqual(byAccount([
      t('acct_a', 'dom_1', 'sales@one.example'), t('acct_b', 'dom_9', 'sales@one.example'), t('acct_a', 'dom_2', 'info@two.example'),
      t('acct_a', 'dom_1', 'sales@one.example'), t('acct_b', 'dom_9', 'jobs@one.example'),
    ]), [
      { accountId: 'acct_a', domainId: 'dom_1', recipients: ['sales@one.example', 'info@two.example'] },
      { accountId: 'acct_b', domainId: 'dom_9', recipients: ['sales@one.example', 'jobs@one.example'] },
    ])
    assert.deepEqual(byAccount([]), [])
  })
})
