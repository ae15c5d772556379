// Attachments on the way out, part by part: the message in pieces that every copy shares, DATA over
// pieces (dot-stuffing across them), the relay's SIZE heard and obeyed (the pool with the fakes of its own
// tests, a connection against a scripted relay on loopback), and the text part written from html.
import assert from 'node:assert/strict'
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto'
import net from 'node:net'
import { test } from 'node:test'
import fc from 'fast-check'
import { dkimVerify } from 'mailauth'
import { simpleParser } from 'mailparser'
import { ByteBudget } from '../../src/domain/byte-budget.js'
import { base64Body } from '../../src/mail/attachments.js'
import { htmlToText } from '../../src/mail/html-text.js'
import { mimeTemplate } from '../../src/mail/mime.js'
import { SmtpConnection, type Envelope, type TransactionReplies } from '../../src/mail/smtp-connection.js'
import { SmtpPool, type PoolConnection } from '../../src/mail/smtp-pool.js'
import { dataBlock, dataChunks } from '../../src/mail/smtp-reply.js'
import type { OutgoingMessage } from '../../src/mail/transport.js'

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')

test('base64Body is base64 in lines of 76 characters, CRLF between them', () => {
  // Around a line, the encoding block (57 × 512 bytes) and a view into a larger buffer.
  for (const n of [0, 1, 2, 3, 56, 57, 58, 114, 1000, 29_183, 29_184, 29_185, 65_536, 1_048_583]) {
    const bytes = randomBytes(n + 5).subarray(3, n + 3)
    const body = base64Body(bytes).toString('latin1')
    const lines = body.split('\r\n')
    assert.ok(lines.every((l) => l.length <= 76))
    assert.ok(lines.slice(0, -1).every((l) => l.length === 76))
    assert.deepEqual(Buffer.from(lines.join(''), 'base64'), Buffer.from(bytes))
    assert.equal(body, Buffer.from(bytes).toString('base64').replace(/(.{76})(?=.)/g, '$1\r\n'), `${n} bytes`)
  }
})

test('dataChunks carries the same bytes as dataBlock, however the message is cut, dots at the cuts included', () => {
  const piece = fc.constantFrom('.', '..', '\r', '\n', '\r\n', '\r\n.', 'a', 'line', ' ', '.\r\n', '\r\n..x')
  fc.assert(fc.property(fc.array(piece, { maxLength: 40 }), fc.array(fc.integer({ min: 0, max: 200 }), { maxLength: 8 }), (pieces, cuts) => {
    const whole = Buffer.from(pieces.join(''), 'latin1')
    const at = [...new Set(cuts.map((c) => Math.min(c, whole.length)))].sort((a, b) => a - b)
    const chunks: Buffer[] = []
    let from = 0
    for (const c of at) { chunks.push(whole.subarray(from, c)); from = c }
    chunks.push(whole.subarray(from))
    assert.equal(Buffer.concat(dataChunks(chunks)).toString('latin1'), dataBlock(whole).toString('latin1'))
  }), { numRuns: 500 })
  assert.equal(Buffer.concat(dataChunks([])).toString(), '\r\n.\r\n')
})

function message (over: Partial<OutgoingMessage> = {}): OutgoingMessage {
  return {
    messageId: 'em_files0', from: 'Shop <shop@files.example>', to: ['a@example.net'], cc: [], bcc: [], subject: 'Files',
    html: '<p>Hi <img src="cid:logo"></p>', text: 'Hi', headers: { 'List-Unsubscribe': '<https://u.example/x>' }, ...over,
  }
}

test('the files are encoded once: every copy\'s pieces share the same buffers, and each copy is whole and DKIM-signed', async () => {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 1024 })
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()
  const spki = publicKey.export({ type: 'spki', format: 'der' }).toString('base64')
  const pdf = randomBytes(200_000)
  const png = randomBytes(3000)
  const msg = message({
    dkim: { domainName: 'files.example', keySelector: 'svc', privateKey: pem },
    attachments: [
      { filename: 'Fäktura 7.pdf', contentType: 'application/pdf', content: pdf },
      { filename: 'logo.png', contentType: 'image/png', contentId: 'logo', content: png },
    ],
  })
  const template = await mimeTemplate(msg)
  assert.ok(template.parts !== undefined)
  const copies = await Promise.all(['a', 'b', 'c'].map((who) => template.parts!({
    html: `<p>Hi ${who} <img src="cid:logo"> <a href="https://t.example/${who}">x</a></p>`,
    headers: { 'List-Unsubscribe': `<https://u.example/${who}>` },
  })))
  const big = copies.map((parts) => parts.find((p) => p.length > 200_000)!)
  assert.ok(big[0] !== undefined)
  assert.ok(big[0] === big[1] && big[1] === big[2], 'one encoded buffer for every copy')
  const resolver = async (name: string) => {
    if (name === 'svc._domainkey.files.example') return [[`v=DKIM1; k=rsa; p=${spki}`]]
    throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' })
  }
  for (const [i, parts] of copies.entries()) {
    const raw = Buffer.concat(parts)
    const parsed = await simpleParser(raw, { keepCidLinks: true })
    assert.match(String(parsed.html), new RegExp(`Hi ${'abc'[i]}`))
    const file = parsed.attachments.find((a) => a.contentType === 'application/pdf')!
    assert.equal(file.filename, 'Fäktura 7.pdf')
    assert.equal(sha256(file.content), sha256(pdf))
    const logo = parsed.attachments.find((a) => a.contentType === 'image/png')!
    assert.equal(logo.contentId, '<logo>')
    assert.equal(sha256(logo.content), sha256(png))
    const verdict = await dkimVerify(raw, { resolver })
    assert.equal((verdict.results[0] as { status: { result: string } }).status.result, 'pass', `copy ${i}`)
  }
  // render() is the same bytes, whole.
  assert.deepEqual(await template.render(undefined), Buffer.concat(await template.parts(undefined)))
})

/** A pool connection of the pool's own tests, which says what SIZE its relay advertised. */
class SizedConnection implements PoolConnection {
  sent = 0
  readonly depth = 1
  constructor (readonly maxSize: number) {}
  async send (_envelope: Envelope): Promise<TransactionReplies> {
    this.sent++
    return { mail: { code: 250, text: '250 ok' }, rcpt: [{ code: 250, text: '250 ok' }], data: { code: 354, text: '354 go' }, final: { code: 250, text: '250 ok' } }
  }
  quit (): void {}
  onClose (): void {}
}

test('the pool knows the relay\'s SIZE once a connection has heard it', async () => {
  const pool = new SmtpPool({ max: 2, idleMs: 0, open: async () => new SizedConnection(5000) })
  assert.equal(pool.maxSize, 0, 'nothing known before a connection')
  await pool.send({ from: 'a@x.test', to: ['b@x.test'] }, [Buffer.from('a'), Buffer.from('b')])
  assert.equal(pool.maxSize, 5000)
  pool.close()
})

/** A scripted relay on loopback: EHLO advertises SIZE `limit`; records every line it is sent. */
async function scriptedRelay (limit: number): Promise<{ port: number; lines: string[]; close(): Promise<void> }> {
  const lines: string[] = []
  const sockets = new Set<net.Socket>()
  const server = net.createServer((socket) => {
    sockets.add(socket)
    let buffered = ''
    let inData = false
    socket.write('220 relay ready\r\n')
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1')
      let nl: number
      while ((nl = buffered.indexOf('\r\n')) >= 0) {
        const line = buffered.slice(0, nl)
        buffered = buffered.slice(nl + 2)
        if (inData) {
          if (line === '.') { inData = false; socket.write('250 queued\r\n') }
          continue
        }
        lines.push(line)
        if (/^EHLO/i.test(line)) socket.write(`250-relay\r\n250-SIZE ${limit}\r\n250 8BITMIME\r\n`)
        else if (/^DATA/i.test(line)) { inData = true; socket.write('354 go\r\n') }
        else if (/^QUIT/i.test(line)) { socket.end('221 bye\r\n') }
        else socket.write('250 ok\r\n')
      }
    })
    socket.on('error', () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    port: (server.address() as net.AddressInfo).port,
    lines,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve())
      for (const socket of sockets) socket.destroy()
    }),
  }
}

test('a connection declares the size in MAIL FROM, and refuses a message over the relay\'s SIZE without a command', async (t) => {
  const relay = await scriptedRelay(1000)
  t.after(() => relay.close())
  const conn = await SmtpConnection.open({ host: '127.0.0.1', port: relay.port, secure: false, requireTLS: false, connectionTimeoutMs: 5000, socketTimeoutMs: 5000 })
  t.after(() => conn.quit())
  assert.equal(conn.maxSize, 1000)
  const envelope = { from: 'a@x.test', to: ['b@x.test'] }
  const small = await conn.send(envelope, [Buffer.from('Subject: a\r\n\r\n'), Buffer.from('body\r\n')])
  assert.equal(small.final?.code, 250)
  assert.ok(relay.lines.includes('MAIL FROM:<a@x.test> SIZE=20'), relay.lines.join(' | '))
  const before = relay.lines.length
  const big = await conn.send(envelope, [Buffer.alloc(600, 0x61), Buffer.alloc(600, 0x62)])
  assert.deepEqual(big.tooLarge, { size: 1200, limit: 1000 })
  assert.equal(big.mail.code, 552)
  assert.match(big.mail.text, /at most 1000 bytes/)
  assert.equal(big.final, undefined)
  assert.equal(relay.lines.length, before, 'not a command more')
  // The connection is still good for the next message.
  assert.equal((await conn.send(envelope, Buffer.from('x\r\n'))).final?.code, 250)
})

test('html to text: words, paragraphs, lists, links as text; hidden parts left out', () => {
  assert.equal(htmlToText('<p>Hello, <b>Jane</b>.</p><p><a href="https://shop.example.com/o/7">Your order</a></p>'),
    'Hello, Jane.\n\nYour order [https://shop.example.com/o/7]')
  assert.equal(htmlToText('<ul><li>one</li><li>two</li></ul>'), '- one\n- two')
  assert.equal(htmlToText('a<br>b<br><br>c'), 'a\nb\n\nc')
  assert.equal(htmlToText('<head><title>T</title><style>p{}</style></head><script>x()</script><p>Tom &amp; Jerry&nbsp;&lt;3</p>'), 'Tom & Jerry <3')
  assert.equal(htmlToText('<a href="https://x.example/">https://x.example/</a> <a href="mailto:h@x.example">h@x.example</a>'), 'https://x.example/ h@x.example')
  assert.equal(htmlToText('<a href="javascript:alert(1)">click</a>'), 'click')
  assert.equal(htmlToText('<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>'), 'a b\nc d')
  assert.equal(htmlToText('<pre>  x\n    y</pre>'), '  x\n    y')
  assert.equal(htmlToText(''), '')
})

test('html to text: a hostile megabyte is read in one pass, and the text is no longer than about the html', () => {
  const mb = 1 << 20
  const cases = [
    '<div>'.repeat(mb / 5),
    '<b>'.repeat(mb / 6) + 'x' + '</b>'.repeat(mb / 8),
    '<a href="https://e.example/">'.repeat(mb / 30),
    `<a href="${'h'.repeat(mb)}">x</a>`,
    `<img alt="${'a'.repeat(mb)}">`,
    '<p>' + '&amp;'.repeat(mb / 5),
    '<li>'.repeat(mb / 4),
    '<!--'.repeat(mb / 4),
    '<'.repeat(mb),
    '<br>'.repeat(mb / 4),
  ]
  for (const html of cases) {
    const text = htmlToText(html)
    assert.ok(text.length <= html.length, `${html.slice(0, 20)}…: ${text.length} > ${html.length}`)
  }
})

test('the mailer\'s budget of attachment bytes: waits in order, lets one oversized email through alone', async () => {
  const budget = new ByteBudget(100)
  const order: string[] = []
  await budget.take(60)
  const b = budget.take(50).then(() => order.push('b'))
  const c = budget.take(10).then(() => order.push('c'))
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepEqual(order, [], 'b does not fit; c waits behind it')
  budget.give(60)
  await Promise.all([b, c])
  assert.deepEqual(order, ['b', 'c'])
  assert.equal(budget.held, 60)
  budget.give(50)
  budget.give(10)
  await budget.take(500)
  assert.equal(budget.held, 500, 'alone, larger than the budget')
  let small = false
  const after = budget.take(1).then(() => { small = true })
  await new Promise((resolve) => setImmediate(resolve))
  assert.equal(small, false)
  budget.give(500)
  await after
  assert.equal(budget.held, 1)
})
