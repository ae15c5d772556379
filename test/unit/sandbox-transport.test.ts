import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { createSandboxTransport } from '../../src/mail/sandbox-transport.js'
import { draftMessage } from '../../src/mail/compose.js'
import { verifyTrackingToken } from '../../src/mail/tracking.js'
import type { EmailRecord } from '../../src/store/emails.js'
import {
  SIMULATOR,
  formatMessageId,
  isSimulatorAddress,
  simulatorOutcome,
  type OutgoingMessage,
} from '../../src/mail/transport.js'

function message(over: Partial<OutgoingMessage> = {}): OutgoingMessage {
  return {
    messageId: 'em_1',
    from: 'Sender <sender@mail.example.com>',
    to: ['alice@example.net'],
    cc: [],
    bcc: [],
    subject: 'Hello',
    text: 'Hi',
    headers: {},
    ...over,
  }
}

describe('sandbox transport', () => {
  test('delivers nothing anywhere, answers every recipient once, lower-cased and deduplicated', async () => {
    const t = createSandboxTransport()
    const results = await t.send(
      message({ to: ['Alice <ALICE@example.net>', 'bob@example.net'], cc: ['alice@example.net'], bcc: ['carol@example.net'] }),
    )
    assert.deepEqual(results, [
      { recipient: 'alice@example.net', outcome: 'delivered', response: 'sandbox: not sent' },
      { recipient: 'bob@example.net', outcome: 'delivered', response: 'sandbox: not sent' },
      { recipient: 'carol@example.net', outcome: 'delivered', response: 'sandbox: not sent' },
    ])
    await t.close()
  })

  test('honours the simulator addresses', async () => {
    const t = createSandboxTransport()
    const results = await t.send(
      message({ to: [SIMULATOR.delivered, SIMULATOR.bounced, SIMULATOR.complained, 'bounced+label@simulator.test'] }),
    )
    assert.deepEqual(
      results.map((r) => [r.recipient, r.outcome, r.code]),
      [
        [SIMULATOR.delivered, 'delivered', 250],
        [SIMULATOR.bounced, 'bounced', 550],
        [SIMULATOR.complained, 'complained', 250],
        ['bounced+label@simulator.test', 'bounced', 550],
      ],
    )
  })

  test('keeps only the last N messages for inspection, as copies', async () => {
    const t = createSandboxTransport({ keep: 2 })
    for (let i = 0; i < 5; i++) await t.send(message({ messageId: `em_${i}` }))
    const kept = t.sent()
    assert.deepEqual(
      kept.map((m) => m.messageId),
      ['em_3', 'em_4'],
    )
    kept[0]?.to.push('mallory@example.net')
    assert.deepEqual(t.sent()[0]?.to, ['alice@example.net'])
  })
})

describe('sandbox transport writing to a directory', () => {
  const scratch = (t: { after(fn: () => void): void }) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'svc-sandbox-'))
    t.after(() => rmSync(dir, { recursive: true, force: true }))
    return dir
  }
  const logger = () => {
    const lines: string[] = []
    return { lines, info: (m: string) => { lines.push(`info ${m}`) }, warn: (m: string) => { lines.push(`warn ${m}`) } }
  }

  test('writes <id>.eml, and <id>.html when there is HTML, readable by the owner only; says where once', async (t) => {
    const dir = path.join(scratch(t), 'sandbox')
    const log = logger()
    const tr = createSandboxTransport({ dir, logger: log })
    await tr.send(message({
      messageId: 'em_1', html: '<p>Hi <a href="http://127.0.0.1:3000/t/c/x.y">there</a></p>',
      headers: { 'List-Unsubscribe': '<http://127.0.0.1:3000/t/u/a.b>', 'X-Campaign': 'spring' },
    }))
    await tr.send(message({ messageId: 'em_2' }))
    // Written off the send's path, a moment later (or when asked).
    await tr.flush()
    assert.deepEqual(readdirSync(dir).sort(), ['em_1.eml', 'em_1.html', 'em_2.eml'])
    const eml = readFileSync(path.join(dir, 'em_1.eml'), 'utf8')
    assert.match(eml, /^Message-ID: <em_1@mail\.example\.com>$/m)
    assert.match(eml, /^X-Campaign: spring$/m)
    assert.match(eml, /^List-Unsubscribe: <http:\/\/127\.0\.0\.1:3000\/t\/u\/a\.b>$/m)
    const html = readFileSync(path.join(dir, 'em_1.html'), 'utf8')
    assert.ok(html.endsWith('<p>Hi <a href="http://127.0.0.1:3000/t/c/x.y">there</a></p>'), 'the HTML as sent, links unchanged')
    assert.match(html, /<a href="http:\/\/127\.0\.0\.1:3000\/t\/u\/a\.b">its unsubscribe link<\/a>/)
    assert.equal(statSync(path.join(dir, 'em_1.eml')).mode & 0o777, 0o600)
    assert.equal(log.lines.length, 1)
    assert.match(log.lines[0]!, new RegExp(`^info sandbox: every email is written to ${dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} `))
  })

  test('keeps the newest N messages, counting what an earlier run left', async (t) => {
    const dir = scratch(t)
    writeFileSync(path.join(dir, 'em_0.eml'), 'left by an earlier run')
    writeFileSync(path.join(dir, 'em_0.html'), 'left by an earlier run')
    writeFileSync(path.join(dir, 'notes.txt'), 'not ours')
    const tr = createSandboxTransport({ dir, keepFiles: 3 })
    // Concurrent sends, as the mailer makes them.
    await Promise.all([1, 2, 3, 4, 5].map((i) => tr.send(message({ messageId: `em_${i}`, html: `<p>${i}</p>` }))))
    await tr.flush()
    assert.deepEqual(readdirSync(dir).sort(), ['em_3.eml', 'em_3.html', 'em_4.eml', 'em_4.html', 'em_5.eml', 'em_5.html', 'notes.txt'])
    assert.throws(() => createSandboxTransport({ dir, keepFiles: 0 }), /keepFiles/)
  })

  test('at volume, a send touches no file: only the newest N of a round are written, in the background', async (t) => {
    const dir = scratch(t)
    const tr = createSandboxTransport({ dir, keepFiles: 3, writeDelayMs: 60_000 })
    for (let i = 10; i < 60; i++) await tr.send(message({ messageId: `em_${i}`, html: `<p>${i}</p>` }))
    assert.deepEqual(readdirSync(dir), [], 'nothing written by the sends themselves')
    await tr.close()
    assert.deepEqual(readdirSync(dir).sort(), ['em_57.eml', 'em_57.html', 'em_58.eml', 'em_58.html', 'em_59.eml', 'em_59.html'])
  })

  test('the kept messages and files carry no functions: a message with per-recipient copies is kept as its first copy', async (t) => {
    const dir = scratch(t)
    const tr = createSandboxTransport({ dir, keep: 5 })
    await tr.send(message({ messageId: 'em_c1', html: '<p>first</p>', copy: () => ({ headers: {} }), returnPath: (r) => r }))
    assert.equal(tr.sent()[0]?.html, '<p>first</p>')
    assert.equal(tr.sent()[0]?.copy, undefined)
    await tr.flush()
    assert.ok(readFileSync(path.join(dir, 'em_c1.html'), 'utf8').endsWith('<p>first</p>'))
  })

  test('drafts: the same answers as send, and a copy made only for the emails written, naming its recipient', async (t) => {
    const dir = scratch(t)
    const copies = { publicUrl: 'http://127.0.0.1:3000', secret: 'a sandbox test secret of some length' }
    const tr = createSandboxTransport({ dir, keep: 0, keepFiles: 2, writeDelayMs: 60_000, copies })
    const email = (i: number, to: string): EmailRecord => ({
      id: `em_${String(i).padStart(28, '0')}`, accountId: 'acc_1', from: 'Sender <sender@mail.example.com>', to: [to], cc: [], bcc: [],
      replyTo: [], subject: `Hello ${i}`, html: `<p>Hi <a href="https://example.com/docs">docs</a></p>`, text: null, headers: {},
      tags: [], recipients: [{ address: to, state: 'pending' }], status: 'queued', attempts: 0, nextAttemptAt: null, lastError: null,
      createdAt: new Date().toISOString(), updatedAt: new Date().toISOString(),
    } as unknown as EmailRecord)
    // The first three name a recipient too long for a tracking token: making their copies would throw.
    // They are not among the newest two, so no copy of them is ever made, and their sends answer as usual.
    const long = `${'x'.repeat(64)}@${'d'.repeat(60)}.${'e'.repeat(60)}.${'f'.repeat(60)}.${'g'.repeat(60)}.example`
    const answers = []
    for (let i = 1; i <= 5; i++) {
      const to = i <= 3 ? long : `r${i}@example.net`
      answers.push(await tr.sendDraft!(draftMessage(email(i, to), copies)))
    }
    assert.deepEqual(answers.map((a) => a.map((r) => [r.recipient, r.outcome])), [1, 2, 3, 4, 5].map((i) => [[i <= 3 ? long : `r${i}@example.net`, 'delivered']]))
    assert.deepEqual(await tr.sendDraft!(draftMessage(email(6, 'bounced@simulator.test'), copies)).then((a) => a.map((r) => r.outcome)), ['bounced'])
    assert.deepEqual(readdirSync(dir), [], 'nothing written by the sends themselves')
    await tr.close()
    const written = readdirSync(dir).sort()
    assert.deepEqual(written, [`${email(5, '').id}.eml`, `${email(5, '').id}.html`, `${email(6, '').id}.eml`, `${email(6, '').id}.html`])
    const html = readFileSync(path.join(dir, `${email(5, '').id}.html`), 'utf8')
    const click = /href="http:\/\/127\.0\.0\.1:3000\/t\/c\/([^"]+)"/.exec(html)?.[1]
    assert.ok(click, 'the link is tracked')
    assert.equal(verifyTrackingToken(copies.secret, click, 'click')?.recipient, 'r5@example.net')
    assert.match(readFileSync(path.join(dir, `${email(5, '').id}.eml`), 'utf8'), /^List-Unsubscribe:\s+<http:\/\/127\.0\.0\.1:3000\/t\/u\//m)
    assert.equal(typeof createSandboxTransport({ keep: 0 }).sendDraft, 'undefined', 'no drafts without what copies are made with')
  })

  test('a directory it cannot write to fails no send; it says so once', async (t) => {
    const file = path.join(scratch(t), 'a-file')
    writeFileSync(file, '')
    const log = logger()
    const tr = createSandboxTransport({ dir: file, logger: log })
    for (let i = 0; i < 3; i++) {
      const [r] = await tr.send(message({ messageId: `em_${i}` }))
      assert.equal(r?.outcome, 'delivered')
      await tr.flush()
    }
    assert.equal(log.lines.length, 1)
    assert.match(log.lines[0]!, /^warn sandbox: could not write the email to /)
  })
})

describe('simulator and Message-ID helpers', () => {
  test('simulator addresses are recognised case-insensitively and nothing else is', () => {
    assert.equal(isSimulatorAddress('Delivered@Simulator.TEST'), true)
    assert.equal(isSimulatorAddress('Bob <complained@simulator.test>'), true)
    assert.equal(isSimulatorAddress('someone@simulator.test'), false)
    assert.equal(isSimulatorAddress('delivered@simulator.test.example.com'), false)
    assert.equal(simulatorOutcome('alice@example.net'), null)
  })

  test('the Message-ID uses the sender domain', () => {
    assert.equal(formatMessageId({ messageId: 'em_9', from: 'News <news@Mail.Example.com>' }), '<em_9@mail.example.com>')
  })
})
