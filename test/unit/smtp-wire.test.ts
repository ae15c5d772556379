import assert from 'node:assert/strict'
import { test } from 'node:test'
import { draftMessage, MessageBuildError, personalize, type MessageDraft } from '../../src/mail/compose.js'
import { MessageChannel, receiveMessageOnPort } from 'node:worker_threads'
import { movedBytes } from '../../src/mail/smtp-thread.js'
import { draftToWire, fromWire, toWire, type RelayJob } from '../../src/mail/smtp-wire.js'
import { verifyTrackingToken } from '../../src/mail/tracking.js'
import type { EmailRecord } from '../../src/store/emails.js'
import type { OutgoingMessage } from '../../src/mail/transport.js'

const base: OutgoingMessage = {
  messageId: 'em_1', from: 'News <news@example.com>', to: ['Ann <ann@example.com>'], cc: ['bob@example.com'], bcc: ['delivered@simulator.test'],
  subject: 'Hello', html: '<p>first copy</p>', headers: { 'X-Tag': 'a' },
}

test('a message without per-recipient parts crosses as it is', () => {
  const wire = toWire(base)
  assert.deepEqual(wire, base)
  const back = fromWire(structuredClone(wire))
  assert.equal(back.copy, undefined)
  assert.equal(back.returnPath, undefined)
  assert.deepEqual(back, base)
})

test('each real recipient\'s copy and envelope sender are made once, before crossing, and answered from the data after', () => {
  const made: string[] = []
  const msg: OutgoingMessage = {
    ...base,
    copy: (r) => { made.push(r); return { html: `<p>${r}</p>`, headers: { 'List-Unsubscribe': `<https://svc.test/u/${r}>` } } },
    returnPath: (r) => `bounce+${r.split('@')[0]}@bounces.example.com`,
  }
  const wire = toWire(msg)
  assert.equal(typeof (wire as { copy?: unknown }).copy, 'undefined', 'no function crosses')
  // structuredClone is what postMessage does: it throws on a function.
  const back = fromWire(structuredClone(wire))
  assert.deepEqual(made, ['ann@example.com', 'bob@example.com'], 'the simulator address gets no copy (it never reaches the relay)')
  assert.deepEqual(back.copy!('bob@example.com'), { html: '<p>bob@example.com</p>', headers: { 'List-Unsubscribe': '<https://svc.test/u/bob@example.com>' } })
  assert.equal(back.returnPath!('ann@example.com'), 'bounce+ann@bounces.example.com')
  assert.equal(back.returnPath!('someone-else@example.com'), 'news@example.com', 'an unknown recipient falls back to the From address')
  assert.throws(() => back.copy!('stranger@example.com'), MessageBuildError, 'a recipient without a copy is never sent another\'s')
  assert.throws(() => back.copy!('__proto__'), MessageBuildError)
})

test('a copy that cannot be made fails the whole message before anything crosses', () => {
  const msg: OutgoingMessage = { ...base, copy: () => { throw new MessageBuildError('making the List-Unsubscribe link failed (TypeError)') } }
  assert.throws(() => toWire(msg), MessageBuildError)
})

test('a draft crosses as data, and the copies made from it in the SMTP thread are the ones the mailer would have made', () => {
  const email = {
    id: 'em_draft1', accountId: 'acc_1', from: 'News <news@example.com>', to: ['ann@example.com', 'bob@example.com'], cc: [], bcc: [],
    replyTo: [], subject: 'Hi', html: '<p><a href="https://example.com/a">a</a></p>', text: null, headers: {},
    recipients: [{ address: 'ann@example.com', state: 'pending' }, { address: 'bob@example.com', state: 'pending' }],
    createdAt: '2026-11-26T00:00:00.000Z',
  } as unknown as EmailRecord
  const opts = { publicUrl: 'https://svc.test', secret: 'a tracking secret of some length' }
  const draft = draftMessage(email, opts)
  const withPaths: MessageDraft = { ...draft, msg: { ...draft.msg, returnPath: (r) => `bounce+${r.split('@')[0]}@b.example.com` } }
  const wire = structuredClone(draftToWire(withPaths))
  const there = personalize({ ...wire.draft, msg: fromWire(wire.msg) }, opts)
  assert.equal(there.returnPath!('bob@example.com'), 'bounce+bob@b.example.com')
  for (const r of ['ann@example.com', 'bob@example.com']) {
    const copy = there.copy!(r)
    assert.match(copy.headers['List-Unsubscribe'] ?? '', /^<https:\/\/svc\.test\//)
    const token = /\/([A-Za-z0-9_-]{40,})/.exec(copy.headers['List-Unsubscribe']!)![1]!
    assert.equal(verifyTrackingToken(opts.secret, token, 'unsubscribe')?.recipient, r, 'each copy names its own recipient')
    assert.match(copy.html ?? '', /https:\/\/svc\.test\//)
  }
  assert.throws(() => draftToWire({ ...draft, msg: { ...draft.msg, copy: () => ({ headers: {} }) } }), TypeError)
})

test('large attachment bytes that are the whole of their buffer move to the SMTP thread, once each; views and small files are copied', () => {
  const big = Buffer.alloc(100 * 1024, 1)
  const view = Buffer.alloc(200 * 1024, 2).subarray(1024)
  const small = Buffer.alloc(1024, 3)
  const file = (content: Uint8Array) => ({ filename: 'a.bin', contentType: 'application/octet-stream', content })
  const jobs: RelayJob[] = [
    { id: 1, msg: toWire({ ...base, attachments: [file(big), file(view), file(small)] }) },
    { id: 2, msg: toWire({ ...base, attachments: [file(big)] }) },
    { id: 3, msg: toWire(base) },
  ]
  const moved = movedBytes(jobs)
  assert.deepEqual(moved, [big.buffer])
  // What the port does with the list: the moved bytes arrive whole, and the sender's copy is left empty.
  const { port1, port2 } = new MessageChannel()
  try {
    port1.postMessage(jobs, moved)
    const got = receiveMessageOnPort(port2)?.message as RelayJob[]
    assert.equal(got[0]!.msg.attachments![0]!.content.byteLength, 100 * 1024)
    assert.equal(got[0]!.msg.attachments![1]!.content.byteLength, 199 * 1024)
    assert.equal(got[1]!.msg.attachments![0]!.content[0], 1)
    assert.equal(big.byteLength, 0)
    assert.equal(view.byteLength, 199 * 1024)
  } finally {
    port1.close()
  }
})
