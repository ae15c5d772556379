import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { createSandboxTransport } from '../../src/mail/sandbox-transport.js'
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
