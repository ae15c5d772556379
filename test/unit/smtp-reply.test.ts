import assert from 'node:assert/strict'
import { test } from 'node:test'
import { dataBlock, MAX_REPLY_BYTES, ReplyReader, replyLines, SmtpProtocolError } from '../../src/mail/smtp-reply.js'

test('one chunk with a pipelined group of answers gives each reply, in order', () => {
  const r = new ReplyReader()
  const got = r.push('250 2.1.0 Ok\r\n250 2.1.5 Ok\r\n550 5.1.1 no such user\r\n354 End data with <CR><LF>.<CR><LF>\r\n')
  assert.deepEqual(got.map((x) => x.code), [250, 250, 550, 354])
  assert.equal(got[2]!.text, '550 5.1.1 no such user')
})

test('a multi-line reply is one reply, whichever chunk boundaries it arrives across', () => {
  const whole = '250-relay.example Hello\r\n250-PIPELINING\r\n250-SIZE 10240000\r\n250 AUTH PLAIN LOGIN\r\n220 next\r\n'
  for (let cut = 1; cut < whole.length; cut += 7) {
    const r = new ReplyReader()
    const got = [...r.push(whole.slice(0, cut)), ...r.push(whole.slice(cut))]
    assert.deepEqual(got.map((x) => x.code), [250, 220], `cut at ${cut}`)
    assert.deepEqual(replyLines(got[0]!), ['relay.example Hello', 'PIPELINING', 'SIZE 10240000', 'AUTH PLAIN LOGIN'])
  }
})

test('a bare LF ends a line too, and a code alone is a reply', () => {
  const r = new ReplyReader()
  assert.deepEqual(r.push('250\n221 bye\n').map((x) => x.text), ['250', '221 bye'])
})

test('what is not SMTP is refused: no code, a code out of range, a bad separator, codes that change mid-reply', () => {
  for (const bad of ['hello\r\n', '999 what\r\n', '250_x\r\n', '250-a\r\n354 b\r\n', '\r\n']) {
    assert.throws(() => new ReplyReader().push(bad), SmtpProtocolError, JSON.stringify(bad))
  }
})

test('a hostile megabyte without a line end, or in endless continuation lines, is refused once it passes the bound', () => {
  const r = new ReplyReader()
  assert.throws(() => { for (let i = 0; i < 16; i++) r.push('2'.repeat(64 * 1024)) }, /longer than 64 KiB/)
  const c = new ReplyReader()
  const line = '250-' + 'x'.repeat(996) + '\r\n'
  assert.throws(() => c.push(line.repeat(1024)), /longer than 64 KiB/)
  // Many short replies are fine: the bound is per reply.
  const many = new ReplyReader().push('250 ok\r\n'.repeat(Math.ceil((1 << 20) / 8)))
  assert.equal(many.length, Math.ceil((1 << 20) / 8))
  assert.ok(MAX_REPLY_BYTES >= 512)
})

test('DATA: a line that starts with a dot gets a second one, and the end-of-data line follows', () => {
  const out = dataBlock(Buffer.from('.first\r\nmiddle\r\n.\r\n..two\r\nlast\r\n')).toString('latin1')
  assert.equal(out, '..first\r\nmiddle\r\n..\r\n...two\r\nlast\r\n.\r\n')
})

test('DATA: a message without a final CRLF gets one before the end-of-data line', () => {
  assert.equal(dataBlock(Buffer.from('a\r\nb')).toString('latin1'), 'a\r\nb\r\n.\r\n')
  assert.equal(dataBlock(Buffer.alloc(0)).toString('latin1'), '\r\n.\r\n')
})

test('DATA: a hostile megabyte of dot lines is stuffed in one pass, every line intact', () => {
  const raw = Buffer.from('.\r\n'.repeat(350_000))
  const out = dataBlock(raw)
  assert.equal(out.length, raw.length + 350_000 + 3)
  assert.ok(out.subarray(0, 8).equals(Buffer.from('..\r\n..\r\n')))
  assert.ok(out.subarray(out.length - 7).equals(Buffer.from('..\r\n.\r\n')))
})

test('a code must be three digits, 2xx to 5xx; the replies before a bad line in the same chunk are kept on the error', () => {
  for (const bad of ['2e2 ok\r\n', '+25 ok\r\n', '1.5e2\r\n', '600 no\r\n', '199 no\r\n']) {
    assert.throws(() => new ReplyReader().push(bad), SmtpProtocolError, JSON.stringify(bad))
  }
  try {
    new ReplyReader().push('250 ok\r\n354 go\r\nnot smtp\r\n250 never\r\n')
    assert.fail('a bad line is refused')
  } catch (err) {
    assert.ok(err instanceof SmtpProtocolError)
    assert.deepEqual(err.replies.map((r) => r.code), [250, 354])
  }
})
