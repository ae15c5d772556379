import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { addressKey, ConnectionLife, type ConnectionLimits } from '../../src/domain/inbound-limits.js'

describe('addressKey: the sender a connecting address counts as', () => {
  test('IPv6 counts per /64: every address of one /64 is one sender, the next /64 another', () => {
    const a = addressKey('2001:db8:1:2:aaaa:bbbb:cccc:dddd')
    assert.equal(a, '2001:db8:1:2::/64')
    assert.equal(addressKey('2001:db8:1:2::1'), a)
    assert.equal(addressKey('2001:0DB8:0001:0002:ffff:ffff:ffff:ffff'), a, 'any spelling')
    assert.equal(addressKey('2001:db8:1:3::1'), '2001:db8:1:3::/64')
    assert.equal(addressKey('::1'), '::/64')
    assert.equal(addressKey('fe80::1%eth0'), 'fe80::/64', 'a zone is not part of the network')
  })

  test('IPv4 is the address by default, the prefix the operator chose otherwise', () => {
    assert.equal(addressKey('198.51.100.7'), '198.51.100.7/32')
    assert.notEqual(addressKey('198.51.100.7'), addressKey('198.51.100.8'))
    assert.equal(addressKey('198.51.100.7', { ipv4: 24, ipv6: 64 }), '198.51.100.0/24')
    assert.equal(addressKey('198.51.100.250', { ipv4: 24, ipv6: 64 }), '198.51.100.0/24')
    assert.equal(addressKey('198.51.101.1', { ipv4: 24, ipv6: 64 }), '198.51.101.0/24')
    assert.equal(addressKey('198.51.100.7', { ipv4: 20, ipv6: 64 }), '198.51.96.0/20', 'a prefix inside a byte')
    assert.equal(addressKey('203.0.113.9', { ipv4: 16, ipv6: 48 }), '203.0.0.0/16')
    assert.equal(addressKey('2001:db8:1:2::1', { ipv4: 32, ipv6: 48 }), '2001:db8:1::/48')
  })

  test('an IPv4-mapped IPv6 address counts as the IPv4 address it carries', () => {
    assert.equal(addressKey('::ffff:198.51.100.7'), '198.51.100.7/32')
    assert.equal(addressKey('::ffff:c633:6407'), '198.51.100.7/32')
    assert.equal(addressKey('::ffff:198.51.100.7', { ipv4: 24, ipv6: 64 }), addressKey('198.51.100.99', { ipv4: 24, ipv6: 64 }))
  })

  test('text that is not an address in canonical form is its own key (ipaddr.js alone would read 10 as 0.0.0.10)', () => {
    assert.equal(addressKey(''), '')
    assert.equal(addressKey('10'), '10')
    assert.equal(addressKey('0x0a000001'), '0x0a000001')
    assert.equal(addressKey('not an address'), 'not an address')
  })
})

const LIMITS: ConnectionLimits = { idleMs: 30_000, maxAgeMs: 300_000, transactionMs: 600_000, usefulMails: 3, usefulRcpts: 20, dataGraceMs: 10_000, dataBytesPerSecond: 1024 }

describe('ConnectionLife: how long a connection may stay', () => {
  test('a connection that only says NOOP (or RSET, HELP…: no hook sees them) is idle after idleMs', () => {
    const life = new ConnectionLife(0, LIMITS)
    assert.equal(life.overdue(29_999), null)
    assert.equal(life.overdue(30_000), 'idle')
    assert.equal(life.idleFor(30_000), 30_000)
  })

  test('MAIL, RCPT, DATA and STARTTLS are activity', () => {
    const life = new ConnectionLife(0, LIMITS)
    life.secured(20_000)
    assert.equal(life.overdue(49_999), null)
    assert.ok(life.mail(40_000))
    life.rcpt(60_000)
    assert.equal(life.overdue(89_999), null)
    assert.equal(life.overdue(90_000), 'idle', 'MAIL and RCPT then nothing')
  })

  test('DATA is not idle however long it takes, within transactionMs from MAIL FROM', () => {
    const life = new ConnectionLife(0, LIMITS)
    life.mail(1000)
    life.rcpt(1000)
    life.data(2000)
    // A slow message, at 2 KiB a second (above the floor).
    for (let t = 3000; t <= 500_000; t += 1000) life.received(t, 2048)
    assert.equal(life.overdue(500_000), null, 'a slow message, still within its transaction')
    assert.equal(life.idleFor(500_000), 0, 'never evicted in DATA')
    assert.equal(life.overdue(601_000), 'transaction_age')
  })

  test('a DATA slower than the floor after its grace is overdue and may be evicted; one at the floor is neither', () => {
    // About 500 bytes a second, from DATA at 1 s.
    const slow = new ConnectionLife(0, LIMITS)
    slow.mail(0)
    slow.rcpt(0)
    slow.data(1000)
    let slowAt = 1000
    const until = (end: number) => { for (let t = slowAt + 100; t <= end; t += 100) slow.received(t, 51); slowAt = end }
    until(10_900)
    assert.equal(slow.overdue(10_999), null, 'within the grace')
    assert.equal(slow.idleFor(10_999), 0)
    until(11_000)
    assert.equal(slow.overdue(11_000), 'slow_data')
    assert.equal(slow.idleFor(11_000), 10_000, 'evictable: as idle as its time in DATA')
    until(41_000)
    assert.equal(slow.overdue(41_000), 'slow_data')

    // 1 KiB a second: however long, within transactionMs.
    const steady = new ConnectionLife(0, LIMITS)
    steady.mail(0)
    steady.rcpt(0)
    steady.data(0)
    for (let t = 1000; t <= 500_000; t += 1000) steady.received(t, 1024)
    assert.equal(steady.overdue(500_000), null)
    assert.equal(steady.idleFor(500_000), 0)

    // A burst, then silence: the average is what counts.
    const burst = new ConnectionLife(0, LIMITS)
    burst.mail(0)
    burst.rcpt(0)
    burst.data(0)
    burst.received(10, 20 * 1024)
    assert.equal(burst.overdue(19_999), null)
    assert.equal(burst.overdue(20_001), 'slow_data')

    // Every byte in, waiting for svc's answer (the judgement): not the sender's slowness.
    const answered = new ConnectionLife(0, LIMITS)
    answered.mail(0)
    answered.rcpt(0)
    answered.data(0)
    answered.received(100, 2000)
    answered.dataEnd(200)
    assert.equal(answered.overdue(60_000), null)
    assert.equal(answered.idleFor(60_000), 0)
    assert.equal(answered.overdue(600_000), 'transaction_age')
  })

  test('after DATA the idle clock starts when the transaction ends', () => {
    const life = new ConnectionLife(0, LIMITS)
    life.mail(0)
    life.rcpt(0)
    life.data(0)
    life.ended(200_000)
    assert.equal(life.inTransaction, false)
    assert.equal(life.overdue(229_999), null)
    assert.equal(life.overdue(230_000), 'idle')
  })

  test('MAIL/RSET loops: only the first usefulMails MAILs without a DATA count', () => {
    const life = new ConnectionLife(0, LIMITS)
    let now = 0
    for (let i = 0; i < 10; i++) {
      now += 10_000
      assert.ok(life.mail(now))
      life.ended(now) // RSET
    }
    // The third MAIL (at 30 s) was the last to count.
    assert.equal(life.overdue(59_999), null)
    assert.equal(life.overdue(60_000), 'idle')
  })

  test('RCPT loops: only the first usefulRcpts of a transaction count', () => {
    const life = new ConnectionLife(0, LIMITS)
    life.mail(0)
    for (let i = 1; i <= 100; i++) life.rcpt(i * 1000)
    assert.equal(life.overdue(49_999), null)
    assert.equal(life.overdue(50_000), 'idle')
  })

  test('a DATA lets MAIL count again', () => {
    const life = new ConnectionLife(0, LIMITS)
    for (let i = 0; i < 5; i++) { life.mail(i); life.ended(i) }
    life.mail(10); life.rcpt(10); life.data(10); life.ended(20)
    assert.ok(life.mail(25_000))
    assert.equal(life.overdue(54_999), null)
  })

  test('past maxAgeMs: closed between transactions, refused a new MAIL; a transaction begun before may finish', () => {
    const busy = new ConnectionLife(0, LIMITS)
    busy.mail(290_000)
    busy.rcpt(290_000)
    busy.data(291_000)
    busy.received(300_000, 1024 * 1024)
    assert.equal(busy.overdue(400_000), null, 'in DATA past the age')
    busy.ended(400_000)
    assert.equal(busy.overdue(400_000), 'age')
    assert.equal(busy.mail(400_000), false)

    const early = new ConnectionLife(0, LIMITS)
    early.mail(10_000)
    early.ended(10_000)
    assert.equal(early.overdue(300_000), 'age')
  })
})
