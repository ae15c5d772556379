import assert from 'node:assert/strict'
import { test } from 'node:test'
import { simpleParser } from 'mailparser'
import MailComposer from 'nodemailer/lib/mail-composer/index.js'
import { composedFields, mimeTemplate, plainFields } from '../../src/mail/mime.js'
import type { OutgoingMessage } from '../../src/mail/transport.js'

function message (over: Partial<OutgoingMessage>): OutgoingMessage {
  return {
    messageId: 'em_shape0', from: 'Jöhn Sender <news@shapes.example>', to: ['a@example.net'], cc: [], bcc: [],
    subject: 'Hello', html: '<p>Hi</p>', text: 'Hi', headers: { 'X-Campaign': 'autumn', 'List-Unsubscribe': '<https://u.example/x>' }, ...over,
  }
}

/** Header fields, unfolded, by lower-case name. */
function fields (raw: string): Map<string, string> {
  const head = raw.slice(0, raw.indexOf('\r\n\r\n')).replace(/\r\n[ \t]/g, ' ')
  return new Map(head.split('\r\n').map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l]))
}

async function composed (msg: OutgoingMessage): Promise<Map<string, string>> {
  const mail = { messageId: `<${msg.messageId}@shapes.example>`, from: msg.from, to: msg.to, cc: msg.cc, subject: msg.subject, text: 'x' }
  return fields((await new MailComposer(mail).compile().build()).toString('latin1'))
}

test('the second message of a shape carries its own To, Cc, Subject and Message-ID, written as MailComposer writes them', async () => {
  const first = (await (await mimeTemplate(message({ cc: ['x@example.net'], subject: 'First' }))).render(undefined)).toString('latin1')
  const second = message({
    messageId: 'em_shape1', to: ['Ännä Ünïcode <anna@example.net>', 'b@example.net'], cc: ['"Quoted, Name" <c@example.net>'],
    subject: 'Ünïcode subject that is long enough to be folded over more than one line by the composer, twice over',
    html: '<p>Second</p>', text: 'Second',
  })
  const raw = (await (await mimeTemplate(second)).render(undefined)).toString('latin1')
  const mine = fields(raw)
  // The same shape: the first message's text, boundary and all, with the second's own fields.
  assert.equal(mine.get('content-type'), fields(first).get('content-type'))
  const theirs = await composed(second)
  for (const name of ['to', 'cc', 'subject', 'message-id']) assert.equal(mine.get(name), theirs.get(name), name)
  const parsed = await simpleParser(raw)
  assert.equal(parsed.subject, second.subject)
  assert.equal(parsed.messageId, '<em_shape1@shapes.example>')
  assert.deepEqual((Array.isArray(parsed.to) ? parsed.to : [parsed.to]).flatMap((t) => t!.value.map((v) => [v.name, v.address])), [['Ännä Ünïcode', 'anna@example.net'], ['', 'b@example.net']])
  assert.equal(parsed.text?.trim(), 'Second')
  assert.equal(parsed.html, '<p>Second</p>')
  assert.equal(parsed.headers.get('x-campaign'), 'autumn')
  assert.equal(mine.get('from'), fields((await (await mimeTemplate(message({}))).render(undefined)).toString('latin1')).get('from'))
})

test('messages of different shapes never share a template: other headers, no Cc, no text part', async () => {
  await (await mimeTemplate(message({}))).render(undefined)
  const otherHeaders = (await (await mimeTemplate(message({ messageId: 'em_s2', headers: { 'X-Campaign': 'winter' } }))).render(undefined)).toString('latin1')
  assert.match(otherHeaders, /X-Campaign: winter/)
  assert.doesNotMatch(otherHeaders, /autumn|List-Unsubscribe/)
  const withCc = (await (await mimeTemplate(message({ messageId: 'em_s3', cc: ['c@example.net'] }))).render(undefined)).toString('latin1')
  const noCc = (await (await mimeTemplate(message({ messageId: 'em_s4' }))).render(undefined)).toString('latin1')
  assert.match(withCc, /\r\nCc: c@example\.net\r\n/)
  assert.doesNotMatch(noCc, /\r\nCc:/)
  const htmlOnly = await simpleParser((await (await mimeTemplate(message({ messageId: 'em_s5', text: undefined }))).render(undefined)))
  assert.equal(htmlOnly.html, '<p>Hi</p>')
  assert.equal(htmlOnly.text ?? '', 'Hi', 'the text part mailparser derives from the html, not a stale one')
})

test('a thousand messages of one shape: each arrives with its own recipient and subject', async () => {
  const boundaries = new Set<string>()
  for (let i = 0; i < 1000; i++) {
    const raw = (await (await mimeTemplate(message({ messageId: `em_k${i}`, to: [`r${i}@example.net`], subject: `Message ${i}` }))).render(undefined)).toString('latin1')
    const f = fields(raw)
    assert.equal(f.get('to'), `To: r${i}@example.net`)
    assert.equal(f.get('subject'), `Subject: Message ${i}`)
    assert.equal(f.get('message-id'), `Message-ID: <em_k${i}@shapes.example>`)
    boundaries.add(f.get('content-type')!)
  }
  assert.equal(boundaries.size, 1, 'one template for the thousand')
})

test('the plain fields written without MimeNode are exactly what MimeNode writes, over many inputs', () => {
  let rnd = 7
  const next = (n: number) => { rnd = (rnd * 1103515245 + 12345) % 2147483648; return rnd % n }
  const ascii = (n: number) => Array.from({ length: n }, () => String.fromCharCode(0x20 + next(95))).join('')
  let plain = 0
  for (let i = 0; i < 3000; i++) {
    const subject = i % 7 === 0 ? `Word ${'x'.repeat(next(70))}` : i % 11 === 0 ? ` lead and  double ${i} ` : ascii(next(80))
    const addresses = Array.from({ length: 1 + next(3) }, (_, j) => (i % 13 === 0 ? `Name ${j} <n${j}@example.com>` : `user.${i}+${j}@mail-${j}.example.com`))
    const msg = message({ messageId: `em_${ascii(6).replace(/[^a-z0-9]/gi, 'q')}${i}`, subject, to: addresses, cc: i % 2 === 0 ? [`cc${i}@example.org`] : [] })
    const fast = plainFields(msg)
    if (fast === undefined) continue
    plain++
    const slow = composedFields(msg)
    assert.deepEqual([...fast.keys()].sort(), [...slow.keys()].sort(), JSON.stringify(subject))
    for (const [k, v] of fast) {
      if (k === 'date') assert.match(v, /^Date: [A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} \+0000$/)
      else assert.equal(v, slow.get(k), `${k} of ${JSON.stringify(subject)}`)
    }
  }
  assert.ok(plain > 1000, `the plain path was taken ${plain} times`)
})

test('a hostile megabyte subject or recipient list takes the composed path at once, and is written whole', async () => {
  const subject = 'a '.repeat(512 * 1024)
  assert.equal(plainFields(message({ subject })), undefined)
  assert.equal(plainFields(message({ to: Array.from({ length: 50_000 }, (_, i) => `r${i}@example.com`) })), undefined)
  const raw = (await (await mimeTemplate(message({ messageId: 'em_big', subject: 'x'.repeat(1 << 20) }))).render(undefined)).toString('latin1')
  assert.equal(fields(raw).get('subject')?.replace(/ /g, ''), `Subject:${'x'.repeat(1 << 20)}`)
})
