import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { dsnSuppresses, enhancedStatus, refusalSuppresses, statusCode, statusSuppresses } from '../../src/domain/refusals.js'

const MEGABYTE = 1024 * 1024

describe('enhanced status codes', () => {
  test('read from a reply as svc keeps it, with or without its reply code, first line only', () => {
    assert.equal(enhancedStatus('550 5.1.1 <a@b.net>: user unknown'), '5.1.1')
    assert.equal(enhancedStatus('550-5.1.1 The email account does not exist\n550 5.1.1 more'), '5.1.1')
    assert.equal(enhancedStatus('5.7.1 rejected'), '5.7.1')
    assert.equal(enhancedStatus('550 5.01.010 padded'), '5.1.10')
    assert.equal(enhancedStatus('550 no such user'), null)
    assert.equal(enhancedStatus('550 mailbox 5.1.1 later in the text'), null)
    assert.equal(enhancedStatus('550 5.1.1.1 not a code'), null)
    assert.equal(enhancedStatus('550 6.1.1 no such class'), null)
    assert.equal(enhancedStatus(''), null)
  })

  test('a hostile megabyte is read in constant time and gives nothing', () => {
    assert.equal(enhancedStatus(' '.repeat(MEGABYTE) + '550 5.1.1 x'), null)
    assert.equal(enhancedStatus('550 ' + '5.'.repeat(MEGABYTE)), null)
    assert.equal(statusCode('5.1.'.repeat(MEGABYTE)), null)
  })
})

describe('which refusals suppress the address', () => {
  test('a bad mailbox, system or address, or a disabled mailbox: suppressed, at any stage', () => {
    for (const status of ['5.1.0', '5.1.1', '5.1.2', '5.1.3', '5.1.6', '5.1.10', '5.2.1']) {
      assert.ok(statusSuppresses(status), status)
      assert.ok(refusalSuppresses(550, `550 ${status} no`, 'recipient'), status)
      assert.ok(refusalSuppresses(550, `550 ${status} no`, 'message'), status)
    }
  })

  test('content, policy, a full mailbox, a large message, the sender or the system: not suppressed, whatever the reply code', () => {
    for (const status of ['5.7.1', '5.7.26', '5.6.0', '5.2.2', '5.2.3', '5.1.7', '5.1.8', '5.3.4', '5.4.4', '5.5.2']) {
      assert.equal(statusSuppresses(status), false, status)
      assert.equal(refusalSuppresses(550, `550 ${status} no`, 'recipient'), false, status)
    }
  })

  test('without an enhanced code: 550, 551 and 553 to RCPT TO suppress; any refusal of the message does not; nor does a 4xx', () => {
    assert.ok(refusalSuppresses(550, '550 no such user', 'recipient'))
    assert.ok(refusalSuppresses(551, '551 user not local', 'recipient'))
    assert.ok(refusalSuppresses(553, '553 mailbox name not allowed', 'recipient'))
    assert.equal(refusalSuppresses(552, '552 exceeded storage', 'recipient'), false)
    assert.equal(refusalSuppresses(554, '554 transaction failed', 'recipient'), false)
    assert.equal(refusalSuppresses(550, '550 rejected', 'message'), false)
    assert.equal(refusalSuppresses(450, '450 4.1.1 try later', 'recipient'), false)
  })
})

describe('bounce reports (DSN)', () => {
  test('a specific Status decides; 5.0.0 defers to the remote reply in the Diagnostic-Code', () => {
    assert.ok(dsnSuppresses('5.1.1', 'smtp; 550 5.1.1 user unknown'))
    assert.ok(dsnSuppresses('5.1.10', ''))
    assert.equal(dsnSuppresses('5.7.1', 'smtp; 550 5.7.1 rejected as spam'), false)
    assert.equal(dsnSuppresses('5.2.2', 'smtp; 552 5.2.2 mailbox full'), false)
    // Exim's catch-all Status, with the remote server's word beside it.
    assert.ok(dsnSuppresses('5.0.0', 'smtp; 550 5.1.1 No such user here'))
    assert.ok(dsnSuppresses('5.0.0', 'SMTP;550 no such user'))
    assert.equal(dsnSuppresses('5.0.0', 'smtp; 554 5.7.1 Service unavailable; client host blocked'), false)
    assert.equal(dsnSuppresses('5.0.0', 'smtp; 552 message too big'), false)
    // Nothing more specific: a permanent failure of that recipient, suppressed as before.
    assert.ok(dsnSuppresses('5.0.0', ''))
    assert.ok(dsnSuppresses('5.0.0', 'X-Postfix; host said something'))
  })

  test('a hostile megabyte of diagnostic is read in constant time', () => {
    assert.ok(dsnSuppresses('5.0.0', 'smtp; ' + ' '.repeat(MEGABYTE) + '554 5.7.1 x'))
    assert.equal(dsnSuppresses('5.0.0', 'smtp; 554 ' + '5.'.repeat(MEGABYTE)), false)
  })
})
