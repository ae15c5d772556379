import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { generateKeyPairSync } from 'node:crypto'
import net, { type AddressInfo } from 'node:net'
import { dkimVerify } from 'mailauth'
import { simpleParser } from 'mailparser'
import { Registry } from 'prom-client'
import { SMTPServer } from 'smtp-server'
import { COMPOSE_IN_THREAD_CHARS } from '../../src/mail/compose-pool.js'
import { MessageBuildError } from '../../src/mail/compose.js'
import { createSmtpTransport, parseSmtpUrl } from '../../src/mail/smtp-transport.js'
import { SIMULATOR, type OutgoingMessage, type RecipientResult } from '../../src/mail/transport.js'

interface Received {
  mailFrom: string
  rcptTo: string[]
  raw: string
}

/** Temporary or permanent failures the sink plays, chosen by the recipient's local part. */
function smtpError(message: string, responseCode: number): Error {
  const err = new Error(message) as Error & { responseCode: number }
  err.responseCode = responseCode
  return err
}

interface Sink {
  port: number
  received: Received[]
  connections: number
  /** Messages taken on each connection (by session id), and the MAIL commands refused with 421 for the limit. */
  perConnection: Map<string, number>
  refusedForLimit: number
  close(): Promise<void>
}

async function startSink(opts: { password?: string; hidePipelining?: boolean; authMethods?: string[]; maxPerConnection?: number } = {}): Promise<Sink> {
  const sink: Sink = { port: 0, received: [], connections: 0, perConnection: new Map(), refusedForLimit: 0, close: async () => {} }
  const server = new SMTPServer({
    ...(opts.hidePipelining === true ? { hidePIPELINING: true } : {}),
    ...(opts.authMethods !== undefined ? { authMethods: opts.authMethods } : {}),
    authOptional: opts.password === undefined,
    allowInsecureAuth: true,
    // Loopback only: no certificate to offer, so STARTTLS is not advertised at all.
    disabledCommands: ['STARTTLS'],
    logger: false,
    onConnect(_session, cb) {
      sink.connections++
      cb()
    },
    onAuth(auth, _session, cb) {
      if (auth.username === 'svc' && auth.password === opts.password) cb(null, { user: 'svc' })
      else cb(smtpError('authentication failed', 535))
    },
    onMailFrom(address, session, cb) {
      if (address.address.startsWith('blocked')) return cb(smtpError('sender address not allowed', 553))
      // As Exim does past smtp_accept_max_per_connection: the next MAIL is refused with 421, and the connection closed.
      if (opts.maxPerConnection !== undefined && (sink.perConnection.get(session.id) ?? 0) >= opts.maxPerConnection) {
        sink.refusedForLimit++
        return cb(smtpError('too many messages in this connection', 421))
      }
      cb()
    },
    onRcptTo(address, _session, cb) {
      const local = address.address.split('@')[0] ?? ''
      if (local.startsWith('nosuch')) return cb(smtpError('no such user', 550))
      if (local.startsWith('busy')) return cb(smtpError('mailbox busy, try again later', 451))
      if (local.startsWith('shutdown')) return cb(smtpError('service shutting down', 421))
      cb()
    },
    onData(stream, session, cb) {
      const chunks: Buffer[] = []
      stream.on('data', (c: Buffer) => chunks.push(c))
      stream.on('end', () => {
        const rcptTo = session.envelope.rcptTo.map((a) => a.address)
        const mailFrom = session.envelope.mailFrom === false ? '' : session.envelope.mailFrom.address
        if (rcptTo.some((a) => a.startsWith('spamtrap'))) return cb(smtpError('message content rejected', 554))
        if (rcptTo.some((a) => a.startsWith('greylist'))) return cb(smtpError('greylisted, come back later', 451))
        sink.received.push({ mailFrom, rcptTo, raw: Buffer.concat(chunks).toString('utf8') })
        sink.perConnection.set(session.id, (sink.perConnection.get(session.id) ?? 0) + 1)
        cb(null, 'queued as 42')
      })
    },
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  sink.port = (server.server.address() as AddressInfo).port
  sink.close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve())
    })
  return sink
}

function message(over: Partial<OutgoingMessage> = {}): OutgoingMessage {
  return {
    messageId: 'em_test1',
    from: 'Sender <sender@mail.example.com>',
    to: ['alice@example.net'],
    cc: [],
    bcc: [],
    subject: 'Hello',
    html: '<p>Hi</p>',
    text: 'Hi',
    headers: {},
    ...over,
  }
}

function headerBlock(raw: string): string {
  const end = raw.indexOf('\r\n\r\n')
  return end < 0 ? raw : raw.slice(0, end)
}

/** Header lines as they appear, continuation lines folded back onto their header. */
function headerLines(raw: string): string[] {
  return headerBlock(raw).replace(/\r\n[ \t]+/g, ' ').split('\r\n')
}

function header(raw: string, name: string): string | undefined {
  const prefix = name.toLowerCase() + ':'
  return headerLines(raw)
    .find((l) => l.toLowerCase().startsWith(prefix))
    ?.slice(prefix.length)
    .trim()
}

function byRecipient(results: RecipientResult[]): Record<string, RecipientResult> {
  return Object.fromEntries(results.map((r) => [r.recipient, r]))
}

/** A port nothing listens on: bind one, then give it back. */
async function closedPort(): Promise<number> {
  const s = net.createServer()
  s.listen(0, '127.0.0.1')
  await once(s, 'listening')
  const port = (s.address() as AddressInfo).port
  await new Promise<void>((resolve) => s.close(() => resolve()))
  return port
}

describe('SMTP transport against a real SMTP server', () => {
  let sink: Sink
  let transport: ReturnType<typeof createSmtpTransport>

  before(async () => {
    sink = await startSink()
    transport = createSmtpTransport(`smtp://127.0.0.1:${sink.port}`, { connectionTimeoutMs: 5_000 })
  })
  after(async () => {
    await transport.close()
    await sink.close()
  })

  test('an accepted message is delivered to every recipient, with the final 250 reply', async () => {
    const before = sink.received.length
    const results = await transport.send(
      message({ to: ['Alice <Alice@Example.net>'], cc: ['carol@example.net'], bcc: ['dave@example.net'] }),
    )
    assert.deepEqual(
      results.map((r) => [r.recipient, r.outcome, r.code]),
      [
        ['alice@example.net', 'delivered', 250],
        ['carol@example.net', 'delivered', 250],
        ['dave@example.net', 'delivered', 250],
      ],
    )
    assert.match(results[0]?.response ?? '', /queued as 42/)
    const got = sink.received.slice(before)
    assert.equal(got.length, 1)
    assert.deepEqual(got[0]?.rcptTo, ['alice@example.net', 'carol@example.net', 'dave@example.net'])
    assert.equal(got[0]?.mailFrom, 'sender@mail.example.com')
    // Bcc recipients get the mail but nobody sees them in the headers.
    assert.equal(header(got[0]?.raw ?? '', 'Bcc'), undefined)
    assert.doesNotMatch(headerBlock(got[0]?.raw ?? ''), /dave@example\.net/)
  })

  test('the Message-ID is ours, on the sender domain, even when a custom header tries to set one', async () => {
    const before = sink.received.length
    await transport.send(message({ messageId: 'em_abc123', headers: { 'Message-ID': '<forged@evil.test>' } }))
    const raw = sink.received[before]?.raw ?? ''
    assert.equal(header(raw, 'Message-ID'), '<em_abc123@mail.example.com>')
    assert.equal(headerLines(raw).filter((l) => /^message-id:/i.test(l)).length, 1)
  })

  test('custom headers and List-Unsubscribe arrive as given', async () => {
    const before = sink.received.length
    await transport.send(
      message({
        replyTo: ['support@example.com'],
        headers: {
          'X-Campaign': 'spring-2026',
          'List-Unsubscribe': '<https://svc.example.com/t/u/abc.def>',
          'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
        },
      }),
    )
    const raw = sink.received[before]?.raw ?? ''
    assert.equal(header(raw, 'X-Campaign'), 'spring-2026')
    assert.equal(header(raw, 'List-Unsubscribe'), '<https://svc.example.com/t/u/abc.def>')
    assert.equal(header(raw, 'List-Unsubscribe-Post'), 'List-Unsubscribe=One-Click')
    assert.equal(header(raw, 'Reply-To'), 'support@example.com')
  })

  test('CR/LF in the subject or a header value cannot inject a header line', async () => {
    const before = sink.received.length
    const results = await transport.send(
      message({
        subject: 'Hi\r\nBcc: victim@evil.test\r\nX-Injected: subject',
        headers: { 'X-Note': 'ok\r\nX-Injected: header\nReply-To: thief@evil.test' },
      }),
    )
    assert.equal(results.length, 1)
    const got = sink.received[before]
    assert.ok(got)
    const lines = headerLines(got.raw)
    assert.deepEqual(lines.filter((l) => /^(bcc|x-injected|reply-to):/i.test(l)), [])
    assert.deepEqual(got.rcptTo, ['alice@example.net'])
    // The text is still there, just inside the header it was given in.
    assert.match(header(got.raw, 'Subject') ?? '', /Bcc: victim@evil\.test/)
  })

  test('a header name that is not a field-name is refused before anything is sent', async () => {
    const before = sink.received.length
    await assert.rejects(
      transport.send(message({ headers: { 'X-Bad\r\nBcc': 'victim@evil.test' } })),
      /invalid header name/,
    )
    assert.equal(sink.received.length, before)
  })

  test('a recipient refused with 550 at RCPT bounces with the code and the server text', async () => {
    const results = await transport.send(message({ to: ['nosuch@example.net'] }))
    assert.equal(results.length, 1)
    assert.equal(results[0]?.outcome, 'bounced')
    assert.equal(results[0]?.code, 550)
    assert.match(results[0]?.response ?? '', /no such user/)
  })

  test('a recipient refused with 451 at RCPT is deferred for a retry', async () => {
    const results = await transport.send(message({ to: ['busy@example.net'] }))
    assert.deepEqual(
      results.map((r) => [r.recipient, r.outcome, r.code]),
      [['busy@example.net', 'deferred', 451]],
    )
    assert.match(results[0]?.response ?? '', /try again later/)
  })

  test('mixed recipients: accepted ones are delivered, refused ones bounced or deferred', async () => {
    const before = sink.received.length
    const results = byRecipient(
      await transport.send(
        message({ to: ['alice@example.net', 'nosuch@example.net'], cc: ['busy@example.net'], bcc: ['bob@example.net'] }),
      ),
    )
    assert.equal(results['alice@example.net']?.outcome, 'delivered')
    assert.equal(results['bob@example.net']?.outcome, 'delivered')
    assert.equal(results['nosuch@example.net']?.outcome, 'bounced')
    assert.equal(results['nosuch@example.net']?.code, 550)
    assert.equal(results['busy@example.net']?.outcome, 'deferred')
    assert.equal(results['busy@example.net']?.code, 451)
    assert.equal(sink.received.length, before + 1)
    assert.deepEqual(sink.received[before]?.rcptTo, ['alice@example.net', 'bob@example.net'])
  })

  test('when every RCPT is refused, each recipient gets its own outcome', async () => {
    const results = byRecipient(await transport.send(message({ to: ['nosuch1@example.net', 'busy1@example.net'] })))
    assert.equal(results['nosuch1@example.net']?.outcome, 'bounced')
    assert.equal(results['busy1@example.net']?.outcome, 'deferred')
  })

  test('a message refused with 5xx after DATA bounces every recipient', async () => {
    const results = await transport.send(message({ to: ['spamtrap@example.net', 'alice@example.net'] }))
    assert.deepEqual(
      results.map((r) => [r.recipient, r.outcome, r.code]),
      [
        ['spamtrap@example.net', 'bounced', 554],
        ['alice@example.net', 'bounced', 554],
      ],
    )
    assert.match(results[0]?.response ?? '', /content rejected/)
  })

  test('a message refused with 4xx after DATA is deferred for every recipient', async () => {
    const results = await transport.send(message({ to: ['greylist@example.net'] }))
    assert.deepEqual(
      results.map((r) => [r.outcome, r.code]),
      [['deferred', 451]],
    )
  })

  test('a refused sender (5xx at MAIL FROM) defers instead of bouncing the recipients', async () => {
    const results = await transport.send(message({ from: 'blocked@mail.example.com', to: ['alice@example.net'] }))
    assert.deepEqual(
      results.map((r) => [r.recipient, r.outcome, r.code]),
      [['alice@example.net', 'deferred', 553]],
    )
    assert.match(results[0]?.response ?? '', /sender address not allowed/)
  })

  test('a 421 that closes the connection defers the message, and the next send still works', async () => {
    const results = await transport.send(message({ to: ['shutdown@example.net', 'alice@example.net'] }))
    assert.deepEqual(
      results.map((r) => r.outcome),
      ['deferred', 'deferred'],
    )
    const next = await transport.send(message({ to: ['alice@example.net'] }))
    assert.equal(next[0]?.outcome, 'delivered')
  })

  test('simulator addresses get their outcome and never reach the server', async () => {
    const before = sink.received.length
    const results = await transport.send(
      message({
        to: ['alice@example.net', SIMULATOR.delivered],
        cc: [SIMULATOR.bounced],
        bcc: [SIMULATOR.complained],
      }),
    )
    assert.deepEqual(
      results.map((r) => [r.recipient, r.outcome]),
      [
        ['alice@example.net', 'delivered'],
        [SIMULATOR.delivered, 'delivered'],
        [SIMULATOR.bounced, 'bounced'],
        [SIMULATOR.complained, 'complained'],
      ],
    )
    assert.equal(results[2]?.code, 550)
    assert.equal(sink.received.length, before + 1)
    assert.deepEqual(sink.received[before]?.rcptTo, ['alice@example.net'])
  })

  test('a send to simulator addresses only opens no connection', async () => {
    const s = await startSink()
    const t = createSmtpTransport(`smtp://127.0.0.1:${s.port}`)
    try {
      const results = await t.send(message({ to: [SIMULATOR.delivered, 'Bounced@Simulator.test'] }))
      assert.deepEqual(
        results.map((r) => [r.recipient, r.outcome]),
        [
          [SIMULATOR.delivered, 'delivered'],
          [SIMULATOR.bounced, 'bounced'],
        ],
      )
      assert.equal(s.connections, 0)
      assert.equal(s.received.length, 0)
    } finally {
      await t.close()
      await s.close()
    }
  })

  test('consecutive sends reuse one pooled connection', async () => {
    const s = await startSink()
    const t = createSmtpTransport(`smtp://127.0.0.1:${s.port}`, { maxConnections: 1 })
    try {
      for (let i = 0; i < 3; i++) {
        const r = await t.send(message({ messageId: `em_pool${i}` }))
        assert.equal(r[0]?.outcome, 'delivered')
      }
      assert.equal(s.received.length, 3)
      assert.equal(s.connections, 1)
    } finally {
      await t.close()
      await s.close()
    }
  })
})

describe('SMTP transport connection faults', () => {
  test('connection refused defers every real recipient and still answers simulator ones', async () => {
    const port = await closedPort()
    const t = createSmtpTransport(`smtp://127.0.0.1:${port}`, { connectionTimeoutMs: 5_000 })
    try {
      const results = await t.send(message({ to: ['alice@example.net', SIMULATOR.bounced] }))
      assert.deepEqual(
        results.map((r) => [r.recipient, r.outcome]),
        [
          ['alice@example.net', 'deferred'],
          [SIMULATOR.bounced, 'bounced'],
        ],
      )
      assert.match(results[0]?.response ?? '', /ECONNREFUSED/)
    } finally {
      await t.close()
    }
  })

  test('a server that never greets times out as deferred', async () => {
    const silent = net.createServer(() => {})
    const sockets = new Set<net.Socket>()
    silent.on('connection', (s) => sockets.add(s))
    silent.listen(0, '127.0.0.1')
    await once(silent, 'listening')
    const port = (silent.address() as AddressInfo).port
    const t = createSmtpTransport(`smtp://127.0.0.1:${port}`, { connectionTimeoutMs: 200, pool: false })
    try {
      const results = await t.send(message())
      assert.equal(results[0]?.outcome, 'deferred')
      assert.match(results[0]?.response ?? '', /^ETIMEDOUT: /)
    } finally {
      await t.close()
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => silent.close(() => resolve()))
    }
  })
})

describe('SMTP credentials', () => {
  const password = 'correct horse battery staple'

  test('authenticates with the URL credentials and never exposes the password', async () => {
    const s = await startSink({ password })
    const t = createSmtpTransport(`smtp://svc:${encodeURIComponent(password)}@127.0.0.1:${s.port}`)
    try {
      const results = await t.send(message())
      assert.equal(results[0]?.outcome, 'delivered')
      assert.equal(s.received.length, 1)
      assert.doesNotMatch(JSON.stringify(results), /horse/)
      assert.doesNotMatch(JSON.stringify(t), /horse/)
    } finally {
      await t.close()
      await s.close()
    }
  })

  test('a refused login is deferred (our account, not the recipient) and does not echo the password', async () => {
    const s = await startSink({ password })
    const t = createSmtpTransport(`smtp://svc:wrong-password-xyz@127.0.0.1:${s.port}`)
    try {
      const results = await t.send(message())
      assert.equal(results[0]?.outcome, 'deferred')
      assert.equal(results[0]?.code, 535)
      assert.doesNotMatch(JSON.stringify(results), /wrong-password-xyz/)
      assert.equal(s.received.length, 0)
    } finally {
      await t.close()
      await s.close()
    }
  })

  test('a malformed URL is refused without repeating it', () => {
    assert.throws(
      () => createSmtpTransport('smtp://svc:s3cret-pw@exa mple.com'),
      (err: Error) => !err.message.includes('s3cret-pw'),
    )
    assert.throws(() => parseSmtpUrl('http://svc:s3cret-pw@example.com'), (err: Error) => !err.message.includes('s3cret-pw'))
    assert.deepEqual(parseSmtpUrl('smtps://u%40x:p%3Aw@relay.example.com'), {
      host: 'relay.example.com',
      port: 465,
      secure: true,
      user: 'u@x',
      pass: 'p:w',
      requireTLS: false,
    })
  })
})

/** A DKIM key for example.com (selector s1) and a resolver that publishes it: no DNS server is asked. */
function signingDomain () {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'der' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  })
  const record = `v=DKIM1; k=rsa; p=${publicKey.toString('base64')}`
  const resolver = async (name: string, type: string): Promise<string[][]> => {
    if (type === 'TXT' && name.toLowerCase() === 's1._domainkey.example.com') return [[record]]
    throw Object.assign(new Error(`no ${type} record for ${name}`), { code: 'ENOTFOUND' })
  }
  return { dkim: { domainName: 'example.com', keySelector: 's1', privateKey }, resolver }
}

async function dkimResult (raw: string, resolver: (name: string, type: string) => Promise<string[][]>): Promise<{ result: string; signingDomain?: string }> {
  const verdict = await dkimVerify(Buffer.from(raw), { resolver })
  const first = verdict.results[0] as { status: { result: string }; signingDomain?: string } | undefined
  return { result: first?.status.result ?? 'none', signingDomain: first?.signingDomain }
}

async function rendered (registry: Registry): Promise<Record<string, number>> {
  const metric = await registry.getSingleMetric('svc_mail_rendered_total')?.get()
  return Object.fromEntries((metric?.values ?? []).map((v) => [String(v.labels.what), v.value]))
}

function headerNames (raw: string): string[] {
  return headerLines(raw).map((l) => l.slice(0, l.indexOf(':')).toLowerCase())
}

/** About 200 KiB of html and 200 KiB of text, each line numbered so that a lost or reordered line shows. */
function largeBodies (): { html: string; text: string } {
  const html = `<html><body>${Array.from({ length: 2000 }, (_, i) => `<p>paragraph ${i}: caf\u00e9 na\u00efve \u2713 ${'lorem ipsum dolor '.repeat(5)}</p>`).join('\n')}</body></html>`
  const text = Array.from({ length: 2000 }, (_, i) => `line ${i}: caf\u00e9 na\u00efve \u2713 ${'lorem ipsum dolor '.repeat(5)}`).join('\n')
  assert.ok(html.length + text.length >= COMPOSE_IN_THREAD_CHARS && html.length > 190_000 && text.length > 190_000)
  return { html, text }
}

describe('SMTP transport: a message is built once, and made per recipient from it', () => {
  let sink: Sink
  let registry: Registry
  let transport: ReturnType<typeof createSmtpTransport>
  const { dkim, resolver } = signingDomain()
  const { html, text } = largeBodies()
  const unsubscribe = {
    'List-Unsubscribe': '<https://svc.example.com/t/u/abc.def>',
    'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
    'X-Campaign': 'spring-2026',
  }

  before(async () => {
    sink = await startSink()
    registry = new Registry()
    transport = createSmtpTransport(`smtp://127.0.0.1:${sink.port}`, { connectionTimeoutMs: 5_000, registry })
  })
  after(async () => {
    await transport.close()
    await sink.close()
  })

  test('a 400 KiB message arrives whole, signed once with a DKIM signature that verifies, with the headers of a small one', async () => {
    const before = sink.received.length
    const counted = await rendered(registry)
    const results = await transport.send(message({
      messageId: 'em_large1', from: 'Shop <shop@example.com>', to: ['Alice <alice@example.net>'], cc: ['carol@example.net'],
      replyTo: ['support@example.com'], subject: 'Your order \u2713', html, text, headers: unsubscribe, dkim,
    }))
    assert.deepEqual(results.map((r) => [r.recipient, r.outcome, r.code]), [['alice@example.net', 'delivered', 250], ['carol@example.net', 'delivered', 250]])
    assert.equal(sink.received.length, before + 1)
    const got = sink.received[before]!
    assert.equal(got.mailFrom, 'shop@example.com')
    assert.deepEqual(got.rcptTo, ['alice@example.net', 'carol@example.net'])

    assert.deepEqual(await dkimResult(got.raw, resolver), { result: 'pass', signingDomain: 'example.com' })
    assert.equal(headerNames(got.raw).filter((n) => n === 'dkim-signature').length, 1, 'exactly one DKIM-Signature')
    const flat = header(got.raw, 'DKIM-Signature')!.replace(/\s+/g, '')
    assert.match(flat, /c=relaxed\/relaxed/)
    assert.match(flat, /s=s1;/)
    const h = /(?:^|;)h=([^;]+)/.exec(flat)![1]!.toLowerCase().split(':')
    for (const name of ['from', 'to', 'cc', 'subject', 'date', 'message-id', 'reply-to', 'list-unsubscribe', 'list-unsubscribe-post']) assert.ok(h.includes(name), `h= covers ${name}`)

    const parsed = await simpleParser(got.raw)
    assert.equal(parsed.html, html)
    assert.equal(parsed.text, text)
    assert.equal(parsed.subject, 'Your order \u2713')
    assert.equal(parsed.messageId, '<em_large1@example.com>')
    assert.equal(header(got.raw, 'List-Unsubscribe'), unsubscribe['List-Unsubscribe'])
    assert.equal(header(got.raw, 'Reply-To'), 'support@example.com')
    assert.equal(header(got.raw, 'X-Campaign'), 'spring-2026')

    const small = sink.received.length
    await transport.send(message({
      messageId: 'em_small1', from: 'Shop <shop@example.com>', to: ['Alice <alice@example.net>'], cc: ['carol@example.net'],
      replyTo: ['support@example.com'], subject: 'Your order \u2713', html: '<p>caf\u00e9</p>', text: 'caf\u00e9', headers: unsubscribe, dkim,
    }))
    assert.deepEqual(headerNames(sink.received[small]!.raw), headerNames(got.raw))
    const now = await rendered(registry)
    assert.equal((now.template ?? 0) - (counted.template ?? 0), 2)
  })

  test('with VERP and no copies, each of 3 recipients gets its own MAIL FROM and the same bytes, made once', async () => {
    const before = sink.received.length
    const counted = await rendered(registry)
    const recipients = ['alice@example.net', 'bob@example.net', 'carol@example.net']
    const results = await transport.send(message({
      messageId: 'em_verp1', from: 'Shop <shop@example.com>', to: recipients, html, text, headers: unsubscribe, dkim,
      returnPath: (r) => `b+${r.split('@')[0]}@bounces.example.com`,
    }))
    assert.deepEqual(results.map((r) => [r.recipient, r.outcome]), recipients.map((r) => [r, 'delivered']))
    const got = sink.received.slice(before)
    assert.equal(got.length, 3, 'one transaction per recipient')
    assert.deepEqual(
      got.map((m) => [m.mailFrom, m.rcptTo]).sort(),
      recipients.map((r) => [`b+${r.split('@')[0]}@bounces.example.com`, [r]]),
    )
    assert.equal(got[1]!.raw, got[0]!.raw, 'the same bytes in every transaction')
    assert.equal(got[2]!.raw, got[0]!.raw, 'the same bytes in every transaction')
    assert.deepEqual(await dkimResult(got[0]!.raw, resolver), { result: 'pass', signingDomain: 'example.com' })
    const now = await rendered(registry)
    assert.equal((now.copy ?? 0) - (counted.copy ?? 0), 1, 'made once for three transactions')
  })

  test('with copies, each recipient gets their own List-Unsubscribe and html, each signed, the rest the same', async () => {
    const before = sink.received.length
    const recipients = ['alice@example.net', 'bob@example.net', 'carol@example.net']
    const copyOf = (r: string) => ({
      html: `<p>Hello ${r} \u2713</p><a href="https://svc.example.com/t/c/${r}">link</a>`,
      headers: { 'List-Unsubscribe': `<https://svc.example.com/t/u/${r}>` },
    })
    const results = await transport.send(message({
      messageId: 'em_copies1', from: 'Shop <shop@example.com>', to: recipients.slice(0, 2), bcc: recipients.slice(2), html: 'unused', text: 'Thanks \u2713',
      headers: { ...unsubscribe }, dkim, copy: copyOf,
    }))
    assert.deepEqual(results.map((r) => r.outcome), ['delivered', 'delivered', 'delivered'])
    const got = sink.received.slice(before)
    assert.equal(got.length, 3)
    for (const m of got) {
      assert.equal(m.rcptTo.length, 1)
      const r = m.rcptTo[0]!
      assert.equal(header(m.raw, 'List-Unsubscribe'), `<https://svc.example.com/t/u/${r}>`)
      const parsed = await simpleParser(m.raw)
      assert.equal(parsed.html, copyOf(r).html)
      assert.equal(parsed.text, 'Thanks \u2713')
      assert.equal(header(m.raw, 'X-Campaign'), 'spring-2026')
      assert.doesNotMatch(m.raw, /^bcc:/im, 'Bcc is never a header')
      assert.deepEqual(await dkimResult(m.raw, resolver), { result: 'pass', signingDomain: 'example.com' })
    }
    // The verifier can fail: one changed byte of the unsubscribe link and the signature no longer holds.
    const tampered = got[0]!.raw.replace(/t\/u\/([a-z])/, (_m, c: string) => `t/u/${c === 'a' ? 'b' : 'a'}`)
    assert.notEqual(tampered, got[0]!.raw)
    assert.notEqual((await dkimResult(tampered, resolver)).result, 'pass')
  })

  test('a body that names a file is refused as a build failure, quoting nothing, and the next message goes out', async () => {
    const before = sink.received.length
    // Bodies come from API requests: a path must never be read.
    await assert.rejects(
      transport.send(message({ html: { path: '/etc/passwd' } as never, text })),
      (err: Error) => err instanceof MessageBuildError && err.message === 'rendering the MIME message failed (a body is not text)',
    )
    assert.equal(sink.received.length, before, 'nothing was sent')
    const next = await transport.send(message({ messageId: 'em_after1', html, text, dkim }))
    assert.equal(next[0]?.outcome, 'delivered')
    assert.doesNotMatch(sink.received[before]!.raw, /root:/)
  })

  test('a signing domain that cannot be signed for is a build failure, not a crash', async () => {
    const before = sink.received.length
    const hostile = { ...dkim, domainName: `${'a'.repeat(3000)}\u{10FFFF}.example.com` }
    await assert.rejects(
      transport.send(message({ html, text, dkim: hostile })),
      (err: Error) => err instanceof MessageBuildError && err.message === 'signing the message failed (the DKIM domain or selector is not plain ASCII)',
    )
    assert.equal(sink.received.length, before)
    const next = await transport.send(message({ messageId: 'em_after2', html, text, dkim }))
    assert.equal(next[0]?.outcome, 'delivered')
    assert.equal((await dkimResult(sink.received[before]!.raw, resolver)).result, 'pass')
  })
})

describe('SMTP over TLS (svc\'s own client: STARTTLS, smtps, requireTLS)', () => {
  const TLS_DIR = new URL('../../../test/fixtures/tls/', import.meta.url)
  const cert = readFileSync(new URL('relay-cert.pem', TLS_DIR))
  const key = readFileSync(new URL('relay-key.pem', TLS_DIR))
  const password = 'tls only secret'

  /** A relay with a certificate for 127.0.0.1 that takes a login only once TLS is up. */
  async function tlsSink (opts: { secure?: boolean; offerStartTls?: boolean }): Promise<Sink & { secured: boolean[] }> {
    const sink = { port: 0, received: [] as Received[], connections: 0, perConnection: new Map<string, number>(), refusedForLimit: 0, secured: [] as boolean[], close: async () => {} }
    const server = new SMTPServer({
      secure: opts.secure ?? false, key, cert, logger: false,
      ...(opts.offerStartTls === false ? { disabledCommands: ['STARTTLS'] } : {}),
      onAuth (auth, session, cb) {
        if (auth.username === 'svc' && auth.password === password && session.secure) cb(null, { user: 'svc' })
        else cb(smtpError('authentication failed', 535))
      },
      onData (stream, session, cb) {
        const chunks: Buffer[] = []
        stream.on('data', (c: Buffer) => chunks.push(c))
        stream.on('end', () => {
          sink.secured.push(session.secure)
          sink.received.push({ mailFrom: session.envelope.mailFrom === false ? '' : session.envelope.mailFrom.address, rcptTo: session.envelope.rcptTo.map((a) => a.address), raw: Buffer.concat(chunks).toString('utf8') })
          cb(null, 'queued over tls')
        })
      },
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    sink.port = (server.server.address() as AddressInfo).port
    sink.close = () => new Promise<void>((resolve) => server.close(() => resolve()))
    return sink
  }

  test('STARTTLS is used when the relay offers it, and the login goes over TLS', async () => {
    const s = await tlsSink({})
    const t = createSmtpTransport(`smtp://svc:${encodeURIComponent(password)}@127.0.0.1:${s.port}`, { tls: { ca: cert } })
    try {
      const results = await t.send(message())
      assert.equal(results[0]?.outcome, 'delivered', results[0]?.response)
      assert.deepEqual(s.secured, [true])
      assert.match(s.received[0]!.raw, /Subject: Hello/)
    } finally {
      await t.close()
      await s.close()
    }
  })

  test('smtps: TLS from the first byte', async () => {
    const s = await tlsSink({ secure: true })
    const t = createSmtpTransport(`smtps://svc:${encodeURIComponent(password)}@127.0.0.1:${s.port}`, { tls: { ca: cert } })
    try {
      const results = await t.send(message())
      assert.equal(results[0]?.outcome, 'delivered', results[0]?.response)
      assert.deepEqual(s.secured, [true])
    } finally {
      await t.close()
      await s.close()
    }
  })

  test('a certificate svc cannot verify is refused: deferred, nothing sent, no password on the wire', async () => {
    const s = await tlsSink({})
    const t = createSmtpTransport(`smtp://svc:${encodeURIComponent(password)}@127.0.0.1:${s.port}`)
    try {
      const results = await t.send(message())
      assert.equal(results[0]?.outcome, 'deferred')
      assert.match(results[0]?.response ?? '', /^ETLS: /)
      assert.equal(s.received.length, 0)
    } finally {
      await t.close()
      await s.close()
    }
  })

  test('requireTLS with a relay that does not offer STARTTLS: deferred before any login or mail', async () => {
    const s = await tlsSink({ offerStartTls: false })
    const t = createSmtpTransport(`smtp://svc:${encodeURIComponent(password)}@127.0.0.1:${s.port}?requireTLS=true`, { tls: { ca: cert } })
    try {
      const results = await t.send(message())
      assert.equal(results[0]?.outcome, 'deferred')
      assert.match(results[0]?.response ?? '', /does not offer STARTTLS/)
      assert.equal(s.received.length, 0)
    } finally {
      await t.close()
      await s.close()
    }
  })
})

describe('SMTP pipelining against a real server', () => {
  test('a hundred messages over two connections arrive whole, once each, in transactions of their own', async () => {
    const s = await startSink()
    const t = createSmtpTransport(`smtp://127.0.0.1:${s.port}`, { maxConnections: 2 })
    try {
      const results = await Promise.all(Array.from({ length: 100 }, (_, i) => t.send(message({
        messageId: `em_pipe${i}`, to: [`r${i}@example.net`], text: `.line ${i} starts with a dot\r\n.\r\nand one that is only a dot`,
      }))))
      assert.ok(results.every((r) => r[0]?.outcome === 'delivered'))
      assert.equal(s.received.length, 100)
      assert.equal(s.connections, 2)
      const byRcpt = new Map(s.received.map((m) => [m.rcptTo.join(), m]))
      for (let i = 0; i < 100; i++) {
        const got = byRcpt.get(`r${i}@example.net`)
        assert.ok(got, `r${i} arrived`)
        const parsed = await simpleParser(got.raw)
        assert.equal(parsed.text?.trim(), `.line ${i} starts with a dot\n.\nand one that is only a dot`)
      }
    } finally {
      await t.close()
      await s.close()
    }
  })
})

describe('SMTP with a relay that takes only so many messages on one connection', () => {
  const relayed = (sink: Sink) => new Set(sink.received.map((m) => m.rcptTo.join()))

  test('its 421 at the next MAIL costs nothing: each refused message goes out at once on a fresh connection', async () => {
    const s = await startSink({ maxPerConnection: 10 })
    // No retirement of svc's own: every connection runs into the relay's limit.
    const t = createSmtpTransport(`smtp://127.0.0.1:${s.port}`, { maxConnections: 2, connectionLimits: { maxMessages: 0, maxAgeMs: 0 } })
    try {
      const results = await Promise.all(Array.from({ length: 60 }, (_, i) => t.send(message({ messageId: `em_lim${i}`, to: [`r${i}@example.net`] }))))
      assert.deepEqual(results.map((r) => r[0]).filter((o) => o?.outcome !== 'delivered'), [], 'none deferred')
      assert.ok(s.refusedForLimit >= 4, `the relay refused MAIL at its limit (${s.refusedForLimit} times)`)
      assert.equal(s.received.length, 60, 'each message arrived once')
      assert.equal(relayed(s).size, 60)
      assert.ok([...s.perConnection.values()].every((n) => n <= 10))
    } finally {
      await t.close()
      await s.close()
    }
  })

  test('with maxMessages under the relay\'s limit, svc retires each connection first and the relay never has to refuse', async () => {
    const s = await startSink({ maxPerConnection: 10 })
    const t = createSmtpTransport(`smtp://127.0.0.1:${s.port}`, { maxConnections: 2, connectionLimits: { maxMessages: 8, maxAgeMs: 0 } })
    try {
      const results = await Promise.all(Array.from({ length: 60 }, (_, i) => t.send(message({ messageId: `em_ret${i}`, to: [`r${i}@example.net`] }))))
      assert.ok(results.every((r) => r[0]?.outcome === 'delivered'))
      assert.equal(s.refusedForLimit, 0)
      assert.equal(s.received.length, 60)
      assert.equal(relayed(s).size, 60)
      assert.ok([...s.perConnection.values()].every((n) => n <= 8), JSON.stringify([...s.perConnection.values()]))
      assert.ok(s.connections >= 8, `60 messages at 8 a connection take at least 8 connections (${s.connections})`)
    } finally {
      await t.close()
      await s.close()
    }
  })
})

describe('SMTP with a relay that does not pipeline, or logs in with AUTH LOGIN only', () => {
  test('without PIPELINING, one command at a time: the same outcomes, and many messages waiting their turn on one connection', async () => {
    const s = await startSink({ hidePipelining: true })
    const t = createSmtpTransport(`smtp://127.0.0.1:${s.port}`, { maxConnections: 1 })
    try {
      const mixed = byRecipient(await t.send(message({ to: ['alice@example.net', 'nosuch@example.net'], cc: ['busy@example.net'] })))
      assert.equal(mixed['alice@example.net']?.outcome, 'delivered')
      assert.equal(mixed['nosuch@example.net']?.code, 550)
      assert.equal(mixed['busy@example.net']?.code, 451)
      assert.deepEqual(s.received[0]?.rcptTo, ['alice@example.net'])
      const refused = await t.send(message({ from: 'blocked@mail.example.com', to: ['alice@example.net'] }))
      assert.deepEqual(refused.map((r) => [r.outcome, r.code]), [['deferred', 553]])
      const none = await t.send(message({ to: ['nosuch2@example.net'] }))
      assert.deepEqual(none.map((r) => [r.outcome, r.code]), [['bounced', 550]])
      const many = await Promise.all(Array.from({ length: 20 }, (_, i) => t.send(message({ messageId: `em_seq${i}`, to: [`s${i}@example.net`] }))))
      assert.ok(many.every((r) => r[0]?.outcome === 'delivered'))
      assert.equal(s.received.length, 21)
      assert.equal(s.connections, 1)
    } finally {
      await t.close()
      await s.close()
    }
  })

  test('AUTH LOGIN when the relay offers no PLAIN', async () => {
    const password = 'login only pw'
    const s = await startSink({ password, authMethods: ['LOGIN'] })
    const t = createSmtpTransport(`smtp://svc:${encodeURIComponent(password)}@127.0.0.1:${s.port}`)
    try {
      const results = await t.send(message())
      assert.equal(results[0]?.outcome, 'delivered', results[0]?.response)
      assert.equal(s.received.length, 1)
    } finally {
      await t.close()
      await s.close()
    }
  })
})

describe('SMTP with a relay that stalls', () => {
  const answerAll = (line: string) => {
    const cmd = line.toUpperCase()
    if (cmd.startsWith('EHLO')) return ehloPipelining()
    if (cmd === 'DATA') return '354 go ahead\r\n'
    if (cmd === 'QUIT') return '221 bye\r\n'
    return '250 ok\r\n'
  }

  test('silence after the message past the end limit is a timeout: deferred with ETIMEDOUT, and the next message goes out on a fresh connection', async () => {
    // It answers everything, but goes silent after the first connection's message.
    const relay = await scriptedRelay(answerAll, (connection) => (connection === 1 ? '' : '250 2.0.0 queued\r\n'))
    const t = createSmtpTransport(`smtp://127.0.0.1:${relay.port}`, { socketTimeoutMs: 300, dataEndTimeoutMs: 300, maxConnections: 1 })
    try {
      const stalled = await t.send(message())
      assert.equal(stalled[0]?.outcome, 'deferred')
      assert.match(stalled[0]?.response ?? '', /^ETIMEDOUT: no answer to the end of a message/)
      const next = await t.send(message({ messageId: 'em_after_stall' }))
      assert.equal(next[0]?.outcome, 'delivered', next[0]?.response)
      assert.equal(relay.connections(), 2)
    } finally {
      await t.close()
      await relay.close()
    }
  })

  test('a relay slow to answer the end of a message (scanning it, say) is waited for past the command limit: delivered once, not deferred and sent again', async () => {
    // The reply to the final dot comes well after the command limit (200 ms) and within the end limit.
    const relay = await scriptedRelay(answerAll, () => ({ delayMs: 1_000, reply: '250 2.0.0 queued after a scan\r\n' }))
    const t = createSmtpTransport(`smtp://127.0.0.1:${relay.port}`, { socketTimeoutMs: 200, dataEndTimeoutMs: 30_000, maxConnections: 1 })
    try {
      const slow = await t.send(message())
      assert.equal(slow[0]?.outcome, 'delivered', slow[0]?.response)
      assert.match(slow[0]?.response ?? '', /queued after a scan/)
      // Commands are held to their own limit again afterwards: the same connection carries the next message.
      const next = await t.send(message({ messageId: 'em_after_scan' }))
      assert.equal(next[0]?.outcome, 'delivered', next[0]?.response)
      assert.equal(relay.connections(), 1)
      assert.equal(relay.lines.filter((l) => l.endsWith('DATA')).length, 2)
    } finally {
      await t.close()
      await relay.close()
    }
  })

  test('silence on a command keeps the command limit, however long the end limit is', async () => {
    const relay = await scriptedRelay((line) => (line.toUpperCase().startsWith('RCPT') ? '' : answerAll(line)))
    const t = createSmtpTransport(`smtp://127.0.0.1:${relay.port}`, { socketTimeoutMs: 300, dataEndTimeoutMs: 600_000, maxConnections: 1 })
    try {
      const stalled = await t.send(message())
      assert.equal(stalled[0]?.outcome, 'deferred')
      assert.match(stalled[0]?.response ?? '', /^ETIMEDOUT: no answer from the relay for 300 ms/)
    } finally {
      await t.close()
      await relay.close()
    }
  })
})

/**
 * A relay written by hand, one connection at a time: `answer` says what to reply to each command line
 * ('' for nothing, null to hang up), and the message's end is answered 250 unless `afterData` says otherwise
 * (a reply, '' for nothing, null to hang up, or a reply written after a delay).
 */
async function scriptedRelay (
  answer: (line: string, connection: number) => string | null,
  afterData: (connection: number) => string | null | { delayMs: number; reply: string } = () => '250 2.0.0 queued\r\n',
) {
  const lines: string[] = []
  let connections = 0
  const sockets = new Set<net.Socket>()
  const server = net.createServer((socket) => {
    const n = ++connections
    sockets.add(socket)
    let inData = false
    let buffered = ''
    socket.on('error', () => {})
    socket.write('220 scripted.test ESMTP\r\n')
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1')
      for (;;) {
        if (inData) {
          const end = buffered.indexOf('\r\n.\r\n')
          if (end < 0) return
          buffered = buffered.slice(end + 5)
          inData = false
          const reply = afterData(n)
          if (reply === null) { socket.destroy(); return }
          if (typeof reply === 'string') socket.write(reply)
          else setTimeout(() => { if (!socket.destroyed) socket.write(reply.reply) }, reply.delayMs)
          continue
        }
        const nl = buffered.indexOf('\r\n')
        if (nl < 0) return
        const line = buffered.slice(0, nl)
        buffered = buffered.slice(nl + 2)
        lines.push(`${n} ${line}`)
        const reply = answer(line, n)
        if (reply === null) { socket.destroy(); return }
        if (line.toUpperCase() === 'DATA' && reply.startsWith('354')) inData = true
        socket.write(reply)
      }
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    port: (server.address() as AddressInfo).port,
    lines,
    connections: () => connections,
    close: async () => {
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

const ehloPipelining = (extra = '') => `250-scripted.test\r\n${extra}250 PIPELINING\r\n`

describe('SMTP faults a real relay can produce (found in review)', () => {
  test('a STARTTLS handshake that never happens ends at the connection timeout, and the next send is answered too', async () => {
    const relay = await scriptedRelay((line) => {
      const cmd = line.toUpperCase()
      if (cmd.startsWith('EHLO')) return '250-scripted.test\r\n250-STARTTLS\r\n250 PIPELINING\r\n'
      if (cmd === 'STARTTLS') return '220 go ahead\r\n' // and then silence: no TLS from this relay
      return '250 ok\r\n'
    })
    const t = createSmtpTransport(`smtp://127.0.0.1:${relay.port}`, { connectionTimeoutMs: 300, pool: false })
    try {
      for (let i = 0; i < 2; i++) {
        const results = await t.send(message({ messageId: `em_tls_stall${i}` }))
        assert.equal(results[0]?.outcome, 'deferred')
        assert.match(results[0]?.response ?? '', /^(ETIMEDOUT|ETLS): /)
      }
      // The EHLO name is a domain name or an address literal, never a bare word.
      const ehlo = relay.lines.find((l) => l.split(' ')[1]?.toUpperCase() === 'EHLO')!
      assert.match(ehlo.split(' ')[2]!, /^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|\[(?:IPv6:)?[0-9A-Fa-f:.]+\])$/)
    } finally {
      await t.close()
      await relay.close()
    }
  })

  test('a refusal of one recipient is not carried over to a later message when the relay idles the connection out', async () => {
    const relay = await scriptedRelay((line, connection) => {
      const cmd = line.toUpperCase()
      if (cmd.startsWith('EHLO')) return ehloPipelining()
      // The first connection goes away without a word at its second transaction.
      if (cmd.startsWith('MAIL FROM') && connection === 1 && relay.lines.filter((l) => l.startsWith('1 MAIL')).length === 2) return null
      if (cmd.startsWith('RCPT TO:<BOB@')) return '550 5.1.1 <bob@other-tenant.example>: user unknown\r\n'
      if (cmd === 'DATA') return '354 go ahead\r\n'
      return '250 ok\r\n'
    })
    const t = createSmtpTransport(`smtp://127.0.0.1:${relay.port}`, { maxConnections: 1 })
    try {
      const first = byRecipient(await t.send(message({ to: ['bob@other-tenant.example', 'carol@example.net'] })))
      assert.equal(first['bob@other-tenant.example']?.outcome, 'bounced')
      assert.equal(first['carol@example.net']?.outcome, 'delivered')
      const second = await t.send(message({ messageId: 'em_after_idle', to: ['dave@example.net'] }))
      assert.equal(second[0]?.outcome, 'delivered', second[0]?.response)
      assert.doesNotMatch(JSON.stringify(second), /bob|other-tenant/)
      assert.equal(relay.connections(), 2, 'tried once more, on a fresh connection')
    } finally {
      await t.close()
      await relay.close()
    }
  })

  test('the replies that came before a line that is not SMTP still count: a message the relay took is not sent again', async () => {
    const relay = await scriptedRelay((line) => {
      const cmd = line.toUpperCase()
      if (cmd.startsWith('EHLO')) return ehloPipelining()
      if (cmd === 'DATA') return '354 go ahead\r\n'
      return '250 ok\r\n'
    }, () => '250 2.0.0 queued\r\nthis is not smtp\r\n')
    const t = createSmtpTransport(`smtp://127.0.0.1:${relay.port}`, { maxConnections: 1 })
    try {
      const results = await t.send(message())
      assert.equal(results[0]?.outcome, 'delivered', results[0]?.response)
      assert.equal(relay.lines.filter((l) => / DATA$/i.test(l)).length, 1)
    } finally {
      await t.close()
      await relay.close()
    }
  })

  test('an EHLO name with a line break in the URL is refused at start, and AUTH\'s base64 forms of the password are scrubbed', async () => {
    assert.throws(() => parseSmtpUrl('smtp://relay.example.com?name=a%0d%0aRSET'), /name must be a domain name/)
    assert.equal(parseSmtpUrl('smtp://relay.example.com?name=%5B192.0.2.1%5D').name, '[192.0.2.1]')
    // A relay that repeats what it was sent in its refusal.
    const relay = await scriptedRelay((line) => {
      if (line.toUpperCase().startsWith('EHLO')) return '250-scripted.test\r\n250 AUTH PLAIN\r\n'
      if (line.toUpperCase().startsWith('AUTH')) return `535 5.7.8 refused: ${line}\r\n`
      return '250 ok\r\n'
    })
    const t = createSmtpTransport(`smtp://svc:${encodeURIComponent('echoed secret 42')}@127.0.0.1:${relay.port}`)
    try {
      const results = await t.send(message())
      assert.equal(results[0]?.outcome, 'deferred')
      assert.equal(results[0]?.code, 535)
      const blob = Buffer.from('\0svc\0echoed secret 42').toString('base64')
      assert.ok(relay.lines.some((l) => l.includes(blob)), 'the relay got the PLAIN blob')
      assert.doesNotMatch(JSON.stringify(results), new RegExp(`${blob.replace(/[+/=]/g, '.')}|echoed secret`))
      assert.match(results[0]?.response ?? '', /\*\*\*/)
    } finally {
      await t.close()
      await relay.close()
    }
  })
})
