// The inbound listener's slots on real parts (svc's listener on loopback, raw sockets and nodemailer as
// senders): NOOP is not activity, a connection and a transaction have a maximum age, senders are counted
// per network, a newcomer takes the slot of an idle connection, and STARTTLS works with the operator's
// certificate. Limits are set small through the listener's options so that each test takes a second or two.
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import net from 'node:net'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import nodemailer from 'nodemailer'
import type { InboundMail } from '../../src/mail/inbound/listener.js'
import { startServer, type TestServer } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

const TLS_DIR = new URL('../../../test/fixtures/tls/', import.meta.url)
const CERT = fileURLToPath(new URL('relay-cert.pem', TLS_DIR))
const KEY = fileURLToPath(new URL('relay-key.pem', TLS_DIR))
const COMPLAINTS = 'complaints@bounces.svc.test'
const REPORT = 'From: a@example.net\r\nTo: complaints@bounces.svc.test\r\nSubject: hello\r\n\r\nNot a report.\r\n'

interface Listener { server: TestServer; port: number; inbound: InboundMail }

async function listener (t: Parameters<typeof startServer>[0], inbound: Record<string, number>, env: Record<string, string> = {}): Promise<Listener> {
  const server = await startServer(t, {
    env: { INBOUND_SMTP_PORT: '0', INBOUND_SMTP_HOST: '127.0.0.1', COMPLAINTS_ADDRESS: COMPLAINTS, ...env },
    deps: { inbound },
  })
  const found = server.service.components.find((c) => c.name === 'inbound-smtp') as unknown as InboundMail
  return { server, port: found.port, inbound: found }
}

/** A raw SMTP client: every line the server wrote, and whether the server closed. */
class Raw {
  readonly lines: string[] = []
  closed = false
  private text = ''
  private noops: NodeJS.Timeout | undefined
  readonly socket: net.Socket

  constructor (port: number, localAddress: string) {
    this.socket = net.connect({ port, host: '127.0.0.1', localAddress })
    this.socket.on('data', (chunk) => {
      this.text += String(chunk)
      let end: number
      while ((end = this.text.indexOf('\n')) >= 0) {
        this.lines.push(this.text.slice(0, end).trim())
        this.text = this.text.slice(end + 1)
      }
    })
    this.socket.on('error', () => {})
    this.socket.on('close', () => {
      this.closed = true
      clearInterval(this.noops)
    })
  }

  /** Waits for the first line (220 or 421), or the close. */
  async greeting (): Promise<string> {
    return waitFor('a greeting', () => this.lines[0] ?? (this.closed ? '(closed)' : undefined))
  }

  async command (line: string): Promise<string> {
    const before = this.lines.length
    this.socket.write(`${line}\r\n`)
    return waitFor(`an answer to ${line}`, () => this.lines[before] ?? (this.closed ? '(closed)' : undefined))
  }

  /** Keeps sending NOOP every `everyMs` (a client holding its slot) until the server closes. */
  loopNoop (everyMs: number): void {
    this.noops = setInterval(() => { if (!this.socket.destroyed) this.socket.write('NOOP\r\n') }, everyMs)
  }

  async untilClosed (): Promise<void> {
    await waitFor('the server to close the connection', () => this.closed)
  }

  destroy (): void {
    clearInterval(this.noops)
    this.socket.destroy()
  }
}

async function metric (server: TestServer, outcome: string): Promise<number> {
  const text = (await server.client().get('/metrics')).text
  const line = text.split('\n').find((l) => l.startsWith(`svc_inbound_messages_total{kind="connection",outcome="${outcome}"}`))
  return line === undefined ? 0 : Number(line.split(' ').at(-1))
}

async function deliver (port: number, localAddress: string, extra: Record<string, unknown> = {}): Promise<string> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, ignoreTLS: true, logger: false, localAddress, ...extra })
  try {
    const info = await transport.sendMail({ envelope: { from: 'a@example.net', to: [COMPLAINTS] }, raw: REPORT })
    return info.response
  } finally {
    transport.close()
  }
}

describe('inbound connections (issue 38)', () => {
  test('30 NOOP-looping connections from one network do not keep another sender out', async (t) => {
    // 127.0.0.2 … 127.0.0.31 are one /24 here, as the addresses of one IPv6 /64 are one sender always.
    const { port, server } = await listener(t, {}, { INBOUND_IPV4_PREFIX: '24' })
    const crowd = Array.from({ length: 30 }, (_, i) => new Raw(port, `127.0.0.${i + 2}`))
    t.after(() => { for (const c of crowd) c.destroy() })
    const greetings = await Promise.all(crowd.map((c) => c.greeting()))
    for (const c of crowd) c.loopNoop(50)
    assert.equal(greetings.filter((g) => g.startsWith('220')).length, 5, 'the network holds its share (connectionsPerAddress), not every slot')
    assert.equal(greetings.filter((g) => g.startsWith('421')).length, 25)
    // Another network gets in, and its mail is taken.
    assert.match(await deliver(port, '127.0.1.2'), /^250 /)
    assert.ok(await metric(server, 'refused') >= 25)
  })

  test('a connection that only sends NOOP is closed after the idle limit, though it never falls silent', async (t) => {
    const { port, server } = await listener(t, { idleMs: 400 })
    const c = new Raw(port, '127.0.0.2')
    t.after(() => c.destroy())
    assert.match(await c.greeting(), /^220 /)
    assert.match(await c.command('EHLO client.example'), /^250/)
    c.loopNoop(50)
    await c.untilClosed()
    assert.ok(c.lines.filter((l) => l.startsWith('250 OK')).length >= 2, 'NOOPs were answered meanwhile')
    assert.match(c.lines.at(-1)!, /^421 4\.4\.2 /)
    assert.equal(await metric(server, 'idle'), 1)
  })

  test('a connection past its maximum age is closed with 421 4.4.2, however busy', async (t) => {
    const { port, server } = await listener(t, { maxAgeMs: 500 })
    const c = new Raw(port, '127.0.0.2')
    t.after(() => c.destroy())
    assert.match(await c.greeting(), /^220 /)
    assert.match(await c.command('EHLO client.example'), /^250/)
    // MAIL and RSET, over and over, well within the idle limit (30 s): only the age ends it.
    while (!c.closed) {
      const answer = await c.command('MAIL FROM:<a@example.net>')
      if (!answer.startsWith('250')) break
      await c.command('RSET')
    }
    await c.untilClosed()
    assert.match(c.lines.at(-1)!, /^421 4\.4\.2 /)
    assert.equal(await metric(server, 'age'), 1)
  })

  test('a transaction that trickles its DATA is closed at the transaction\'s maximum age', async (t) => {
    const { port, server } = await listener(t, { transactionMs: 600 })
    const c = new Raw(port, '127.0.0.2')
    t.after(() => c.destroy())
    assert.match(await c.greeting(), /^220 /)
    await c.command('EHLO client.example')
    assert.match(await c.command('MAIL FROM:<a@example.net>'), /^250/)
    assert.match(await c.command(`RCPT TO:<${COMPLAINTS}>`), /^250/)
    assert.match(await c.command('DATA'), /^354/)
    const trickle = setInterval(() => { if (!c.socket.destroyed) c.socket.write('x') }, 30)
    t.after(() => clearInterval(trickle))
    await c.untilClosed()
    assert.match(c.lines.at(-1)!, /^421 4\.4\.2 /)
    assert.equal(await metric(server, 'transaction_age'), 1)
  })

  test('a DATA that trickles below the rate floor is closed once its grace is over, long before the transaction\'s age', async (t) => {
    const { port, server, inbound } = await listener(t, { dataGraceMs: 300 })
    const c = new Raw(port, '127.0.0.2')
    t.after(() => c.destroy())
    assert.match(await c.greeting(), /^220 /)
    await c.command('EHLO client.example')
    assert.match(await c.command('MAIL FROM:<a@example.net>'), /^250/)
    assert.match(await c.command(`RCPT TO:<${COMPLAINTS}>`), /^250/)
    assert.match(await c.command('DATA'), /^354/)
    // A byte every 30 ms: about 33 bytes a second, against a floor of 1 KiB a second.
    const trickle = setInterval(() => { if (!c.socket.destroyed) c.socket.write('x') }, 30)
    t.after(() => clearInterval(trickle))
    await c.untilClosed()
    assert.match(c.lines.at(-1)!, /^421 4\.4\.2 /)
    assert.equal(await metric(server, 'slow_data'), 1)
    assert.equal(await metric(server, 'transaction_age'), 0)
    assert.equal(inbound.openCount, 0, 'its slot is free')
  })

  test('20 refused recipients on one connection, across transactions: the next RCPT is answered 421 and the connection closed', async (t) => {
    const { port, server } = await listener(t, {})
    const c = new Raw(port, '127.0.0.2')
    t.after(() => c.destroy())
    assert.match(await c.greeting(), /^220 /)
    await c.command('EHLO client.example')
    for (const transaction of [0, 1]) {
      assert.match(await c.command('MAIL FROM:<a@example.net>'), /^250/)
      for (let i = 0; i < 10; i++) assert.match(await c.command(`RCPT TO:<nobody${transaction}-${i}@elsewhere.example>`), /^550 /)
      assert.match(await c.command('RSET'), /^250/)
    }
    assert.match(await c.command('MAIL FROM:<a@example.net>'), /^250/)
    // Even an address it would take: the connection has guessed enough.
    assert.match(await c.command(`RCPT TO:<${COMPLAINTS}>`), /^421 4\.7\.0 /)
    await c.untilClosed()
    assert.equal(await metric(server, 'refused_rcpts'), 1)
    // Another connection is not held to it.
    assert.match(await deliver(port, '127.0.0.2'), /^250 /)
  })

  test('when every slot is taken, a newcomer takes the slot of a connection that moves no mail', async (t) => {
    const { port, server, inbound } = await listener(t, { maxClients: 4, connectionsPerAddress: 2, evictIdleMs: 300 })
    const holders = ['127.0.0.2', '127.0.0.2', '127.0.0.3', '127.0.0.3'].map((a) => new Raw(port, a))
    t.after(() => { for (const c of holders) c.destroy() })
    for (const c of holders) assert.match(await c.greeting(), /^220 /)
    for (const c of holders) c.loopNoop(50)
    assert.equal(inbound.openCount, 4)
    // Once they have been idle evictIdleMs, a newcomer's mail is taken: it put one of them out.
    await waitFor('a newcomer admitted', async () => {
      const n = new Raw(port, '127.0.0.4')
      const line = await n.greeting()
      n.destroy()
      return line.startsWith('220')
    })
    await waitFor('an evicted holder', () => holders.some((c) => c.closed))
    const evicted = holders.find((c) => c.closed)!
    assert.match(evicted.lines.at(-1)!, /^421 4\.4\.2 /)
    assert.ok(await metric(server, 'evicted') >= 1)
    assert.match(await deliver(port, '127.0.0.5'), /^250 /)
  })

  test('evictions within one network leave its count right: round after round, its connections still get in', async (t) => {
    const { port, inbound } = await listener(t, { maxClients: 2, connectionsPerAddress: 3, evictIdleMs: 150 })
    const opened: Raw[] = []
    t.after(() => { for (const c of opened) c.destroy() })
    const connect = (): Raw => {
      const c = new Raw(port, '127.0.0.2')
      opened.push(c)
      return c
    }
    // Each round, the same address fills both slots, then a third connection of its own puts one of them
    // out. A count left behind by an eviction would add up until the address is refused for good.
    for (let round = 1; round <= 5; round++) {
      const holders = [connect(), connect()]
      for (const c of holders) assert.match(await c.greeting(), /^220 /, `round ${round}: a holder`)
      const newcomer = await waitFor(`round ${round}: the newcomer admitted or refused for its address`, async () => {
        const n = connect()
        const line = await n.greeting()
        if (line.startsWith('220') || /from your address/.test(line)) return { n, line }
        n.destroy()
        return undefined
      })
      assert.match(newcomer.line, /^220 /, `round ${round}: the newcomer`)
      await waitFor('an evicted holder', () => holders.some((c) => c.closed))
      for (const c of [...holders, newcomer.n]) c.destroy()
      await waitFor('every connection let go', () => inbound.openCount === 0)
    }
    assert.match(await deliver(port, '127.0.0.2'), /^250 /)
  })

  test('STARTTLS with INBOUND_TLS_CERT/KEY: a message delivered over TLS verified against the certificate', async (t) => {
    const { port, server } = await listener(t, {}, { INBOUND_TLS_CERT: CERT, INBOUND_TLS_KEY: KEY })
    const c = new Raw(port, '127.0.0.2')
    t.after(() => c.destroy())
    await c.greeting()
    await c.command('EHLO client.example')
    await waitFor('the EHLO lines', () => c.lines.some((l) => l.startsWith('250 ')))
    assert.ok(c.lines.some((l) => /^250[- ]STARTTLS$/.test(l)), 'offered')
    c.destroy()

    // requireTLS: nodemailer sends nothing unless the upgrade succeeds, and the CA is the test certificate itself.
    const response = await deliver(port, '127.0.0.3', { ignoreTLS: false, requireTLS: true, tls: { ca: readFileSync(CERT) } })
    assert.match(response, /^250 /)
    const text = (await server.client().get('/metrics')).text
    assert.match(text, /svc_inbound_messages_total\{kind="other",outcome="ignored"\} 1/)
  })

  test('without the certificate STARTTLS is not offered, and a sender that requires it does not deliver', async (t) => {
    const { port } = await listener(t, {})
    const c = new Raw(port, '127.0.0.2')
    t.after(() => c.destroy())
    await c.greeting()
    await c.command('EHLO client.example')
    await waitFor('the EHLO lines', () => c.lines.some((l) => l.startsWith('250 ')))
    assert.ok(!c.lines.some((l) => /STARTTLS/.test(l)))
    assert.match(await c.command('STARTTLS'), /^5\d\d /)
    await assert.rejects(deliver(port, '127.0.0.3', { ignoreTLS: false, requireTLS: true }))
  })
})
