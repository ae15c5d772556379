// One SMTP dialogue for both modes (src/mail/smtp-dialogue.ts): the commands and the reading of their
// answers on their own, then a connection against a scripted relay on loopback, with PIPELINING and
// without, giving the same replies per recipient.
import assert from 'node:assert/strict'
import net from 'node:net'
import { test } from 'node:test'
import { SmtpConnection, type TransactionReplies } from '../../src/mail/smtp-connection.js'
import { conclude, goesOn, transactionCommands } from '../../src/mail/smtp-dialogue.js'
import type { SmtpReply } from '../../src/mail/smtp-reply.js'

const r = (code: number): SmtpReply => ({ code, text: `${code} x` })

test('the commands: MAIL FROM with SIZE when offered and SMTPUTF8 only for an address that needs it, a RCPT TO each, DATA', () => {
  const envelope = { from: 'a@x.test', to: ['b@x.test', 'c@x.test'] }
  assert.deepEqual(transactionCommands(envelope, { size: 120, smtputf8: true }), [
    'MAIL FROM:<a@x.test> SIZE=120\r\n', 'RCPT TO:<b@x.test>\r\n', 'RCPT TO:<c@x.test>\r\n', 'DATA\r\n',
  ])
  assert.equal(transactionCommands(envelope, { size: undefined, smtputf8: true })[0], 'MAIL FROM:<a@x.test>\r\n')
  const utf8 = { from: 'a@x.test', to: ['jörg@x.test'] }
  assert.equal(transactionCommands(utf8, { size: 9, smtputf8: true })[0], 'MAIL FROM:<a@x.test> SIZE=9 SMTPUTF8\r\n')
  assert.equal(transactionCommands(utf8, { size: 9, smtputf8: false })[0], 'MAIL FROM:<a@x.test> SIZE=9\r\n')
})

test('one by one: nothing after a refused MAIL FROM, no DATA without an accepted recipient', () => {
  assert.equal(goesOn([], 2), true)
  assert.equal(goesOn([r(553)], 2), false)
  assert.equal(goesOn([r(250)], 2), true)
  assert.equal(goesOn([r(250), r(550)], 2), true)
  assert.equal(goesOn([r(250), r(550), r(451)], 2), false)
  assert.equal(goesOn([r(250), r(550), r(250)], 2), true)
  assert.equal(goesOn([r(250)], 0), false)
})

test('the answers read the same whichever way they were asked', () => {
  // Pipelined, every answer; one by one, those asked for.
  assert.deepEqual(conclude([r(250), r(250), r(550), r(354)], 2), { replies: { mail: r(250), rcpt: [r(250), r(550)], data: r(354) }, next: 'message' })
  assert.deepEqual(conclude([r(553), r(503), r(503), r(503)], 2), { replies: { mail: r(553), rcpt: [r(503), r(503)], data: r(503) }, next: 'done' })
  assert.deepEqual(conclude([r(553)], 2), { replies: { mail: r(553), rcpt: [r(553), r(553)] }, next: 'done' })
  assert.deepEqual(conclude([r(250), r(550), r(451), r(554)], 2), { replies: { mail: r(250), rcpt: [r(550), r(451)], data: r(554) }, next: 'reset' })
  assert.deepEqual(conclude([r(250), r(550), r(451)], 2), { replies: { mail: r(250), rcpt: [r(550), r(451)] }, next: 'reset' })
  assert.deepEqual(conclude([r(250), r(550), r(354)], 1), { replies: { mail: r(250), rcpt: [r(550)], data: r(354) }, next: 'empty' })
  assert.throws(() => conclude([], 1))
})

interface Relay { port: number; lines: string[]; faults: string[]; close(): Promise<void> }

/**
 * A scripted relay. With `pipelining` it advertises PIPELINING and holds its answers to MAIL and RCPT until
 * DATA (RFC 2920 lets it): a client that waited for each answer would wait forever. Without, a command that
 * arrives before the one before it was answered is recorded as a fault. The sender blocked@ is refused 553,
 * nosuch@ 550, busy@ 451; DATA with no recipient is 503, or 354 with `dataWithoutRecipient`, and the empty
 * message then 554.
 */
async function scriptedRelay (opts: { pipelining: boolean; dataWithoutRecipient?: boolean }): Promise<Relay> {
  const lines: string[] = []
  const faults: string[] = []
  const sockets = new Set<net.Socket>()
  const server = net.createServer((socket) => {
    sockets.add(socket)
    let buffered = ''
    let inData = false
    let mail: 'none' | 'ok' | 'refused' = 'none'
    let accepted = 0
    let held = ''
    const answer = (reply: string, group = true) => {
      if (opts.pipelining && !group) held += reply
      else {
        socket.write(held + reply)
        held = ''
      }
    }
    socket.write('220 relay ready\r\n')
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1')
      let nl: number
      let inChunk = 0
      while ((nl = buffered.indexOf('\r\n')) >= 0) {
        const line = buffered.slice(0, nl)
        buffered = buffered.slice(nl + 2)
        if (inData) {
          if (line === '.') {
            inData = false
            answer(accepted > 0 ? '250 queued\r\n' : '554 no valid recipients\r\n')
            mail = 'none'
          }
          continue
        }
        lines.push(line)
        if (!opts.pipelining && ++inChunk > 1) faults.push(`"${line}" came before the answer to the command before it`)
        const cmd = line.toUpperCase()
        if (cmd.startsWith('EHLO')) answer(`250-relay\r\n${opts.pipelining ? '250-PIPELINING\r\n' : ''}250 SIZE 100000\r\n`)
        else if (cmd.startsWith('MAIL FROM:')) {
          mail = line.includes('<blocked@') ? 'refused' : 'ok'
          accepted = 0
          answer(mail === 'ok' ? '250 sender ok\r\n' : '553 sender not allowed\r\n', false)
        } else if (cmd.startsWith('RCPT TO:')) {
          if (mail !== 'ok') answer('503 need MAIL first\r\n', false)
          else if (line.includes('<nosuch')) answer('550 no such user\r\n', false)
          else if (line.includes('<busy')) answer('451 try later\r\n', false)
          else {
            accepted++
            answer('250 recipient ok\r\n', false)
          }
        } else if (cmd === 'DATA') {
          if (mail !== 'ok') answer('503 need MAIL first\r\n')
          else if (accepted === 0 && opts.dataWithoutRecipient !== true) answer('503 no valid recipients\r\n')
          else {
            inData = true
            answer('354 go ahead\r\n')
          }
        } else if (cmd === 'RSET') {
          mail = 'none'
          answer('250 reset\r\n')
        } else if (cmd === 'QUIT') socket.end('221 bye\r\n')
        else answer('250 ok\r\n')
      }
    })
    socket.on('error', () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    port: (server.address() as net.AddressInfo).port,
    lines,
    faults,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve())
      for (const socket of sockets) socket.destroy()
    }),
  }
}

const codes = (t: TransactionReplies) => ({
  mail: t.mail.code, rcpt: t.rcpt.map((x) => x.code), data: t.data?.code, final: t.final?.code,
})

const message = Buffer.from('Subject: hi\r\n\r\n.a line with a dot\r\n')

for (const pipelining of [true, false]) {
  const mode = pipelining ? 'with PIPELINING' : 'one command at a time'

  test(`${mode}: each recipient gets the relay's own reply, and the connection carries the next transaction`, async (t) => {
    const relay = await scriptedRelay({ pipelining })
    t.after(() => relay.close())
    const conn = await SmtpConnection.open({ host: '127.0.0.1', port: relay.port, secure: false, requireTLS: false, connectionTimeoutMs: 5000, socketTimeoutMs: 5000 })
    t.after(() => conn.quit())
    assert.equal(conn.depth, pipelining ? 2 : 1)

    const mixed = await conn.send({ from: 'a@x.test', to: ['alice@x.test', 'nosuch@x.test', 'busy@x.test'] }, message)
    assert.deepEqual(codes(mixed), { mail: 250, rcpt: [250, 550, 451], data: 354, final: 250 })
    assert.ok(relay.lines.includes(`MAIL FROM:<a@x.test> SIZE=${message.length}`), relay.lines.join(' | '))

    // A refused sender: every recipient has the refusal that stopped the transaction, nothing is reset.
    relay.lines.length = 0
    const refused = await conn.send({ from: 'blocked@x.test', to: ['alice@x.test', 'bob@x.test'] }, message)
    assert.equal(refused.mail.code, 553)
    assert.equal(refused.final, undefined)
    if (pipelining) {
      assert.deepEqual(codes(refused), { mail: 553, rcpt: [503, 503], data: 503, final: undefined })
      assert.deepEqual(relay.lines.map((l) => l.split(':')[0]), ['MAIL FROM', 'RCPT TO', 'RCPT TO', 'DATA'])
    } else {
      assert.deepEqual(codes(refused), { mail: 553, rcpt: [553, 553], data: undefined, final: undefined })
      assert.deepEqual(relay.lines.map((l) => l.split(':')[0]), ['MAIL FROM'])
    }

    // No recipient accepted: the transaction the relay opened is reset, no message sent.
    relay.lines.length = 0
    const none = await conn.send({ from: 'a@x.test', to: ['nosuch@x.test', 'busy@x.test'] }, message)
    assert.deepEqual(none.rcpt.map((x) => x.code), [550, 451])
    assert.equal(none.final, undefined)
    assert.deepEqual(relay.lines.map((l) => l.split(':')[0]), pipelining
      ? ['MAIL FROM', 'RCPT TO', 'RCPT TO', 'DATA', 'RSET']
      : ['MAIL FROM', 'RCPT TO', 'RCPT TO', 'RSET'])
    assert.equal(none.data?.code, pipelining ? 503 : undefined)

    // Two given at once: answered in order, each with its own replies.
    const [first, second] = await Promise.all([
      conn.send({ from: 'a@x.test', to: ['one@x.test'] }, message),
      conn.send({ from: 'a@x.test', to: ['nosuch@x.test', 'two@x.test'] }, message),
    ].map((p) => p.catch((err: unknown) => err)))
    if (pipelining) {
      assert.deepEqual(codes(first as TransactionReplies), { mail: 250, rcpt: [250], data: 354, final: 250 })
      assert.deepEqual(codes(second as TransactionReplies), { mail: 250, rcpt: [550, 250], data: 354, final: 250 })
    } else {
      // One at a time: the second is refused by the connection (the pool never gives it more than depth).
      assert.deepEqual(codes(first as TransactionReplies), { mail: 250, rcpt: [250], data: 354, final: 250 })
      assert.match((second as Error).message, /at most 1 transactions at once/)
    }
    assert.equal(conn.sent, pipelining ? 5 : 4)
    assert.deepEqual(relay.faults, [])
  })
}

test('with PIPELINING, a relay that takes DATA with no recipient gets an empty message, and its refusal is the answer', async (t) => {
  const relay = await scriptedRelay({ pipelining: true, dataWithoutRecipient: true })
  t.after(() => relay.close())
  const conn = await SmtpConnection.open({ host: '127.0.0.1', port: relay.port, secure: false, requireTLS: false, connectionTimeoutMs: 5000, socketTimeoutMs: 5000 })
  t.after(() => conn.quit())
  const none = await conn.send({ from: 'a@x.test', to: ['nosuch@x.test'] }, message)
  assert.deepEqual(codes(none), { mail: 250, rcpt: [550], data: 354, final: 554 })
  const next = await conn.send({ from: 'a@x.test', to: ['alice@x.test'] }, message)
  assert.deepEqual(codes(next), { mail: 250, rcpt: [250], data: 354, final: 250 })
})
