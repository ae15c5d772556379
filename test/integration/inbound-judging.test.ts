// The judging of received mail (src/mail/inbound/judging.ts) on real parts, without the listener: its
// worker thread (workers/inbound.ts), a DNS server on loopback with a zone that never answers
// (silent.example), and messages DKIM-signed by nodemailer.
//
// - a job ended at its deadline strands nothing queued behind it: the next message is judged on a new
//   thread, with its real verdicts;
// - the thread stops after idleMs without a message and starts again with the next; none is left after close();
// - a sender cannot turn DMARC's fail into temperror with slow lookups: ten signatures whose selectors are
//   in the silent zone spend the DNS budget (half the deadline), and DMARC is still judged before the deadline.
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type { FastifyBaseLogger } from 'fastify'
import { Judging, type JudgingTuning } from '../../src/mail/inbound/judging.js'
import { dkimKey, signedMessage, type SenderKey } from '../helpers/dkim.js'
import { startDnsServer, type TestDns } from '../helpers/dns-server.js'
import { waitFor } from '../helpers/wait.js'

const quiet = { info () {}, warn () {}, error () {}, debug () {}, child () { return quiet } } as unknown as FastifyBaseLogger
const IP = '192.0.2.1'

let dns: TestDns
let customer: SenderKey
let silent: SenderKey
const closing: Array<() => Promise<void>> = []

function judging (tuning: JudgingTuning): Judging {
  const j = new Judging({ dnsServers: [dns.server], mta: 'mx.svc.test', logger: quiet, ...tuning })
  closing.push(() => j.close())
  return j
}

const envelope = (sender: string) => ({ ip: IP, helo: 'mail.example', sender })

describe('judging received mail', () => {
  const stops: Array<() => unknown> = []
  before(async () => {
    dns = await startDnsServer({ after: (fn: () => unknown) => { stops.push(fn) } })
    dns.silent.add('silent.example')
    customer = dkimKey(dns, 'customer.example', 's1')
    dns.publish('customer.example', { TXT: [`v=spf1 ip4:${IP} -all`] })
    dns.publish('_dmarc.customer.example', { TXT: ['v=DMARC1; p=reject'] })
    silent = dkimKey(null, 'silent.example', 's1')
  })
  after(async () => {
    for (const close of closing) await close()
    for (const stop of stops.reverse()) await stop()
  })

  test('a job ended at its deadline strands nothing queued behind it: the next message is judged on a new thread', async () => {
    const DEADLINE_MS = 4000
    // One thread, two jobs: the second waits for the thread the first holds. A lookup would wait past the deadline.
    const j = judging({ deadlineMs: DEADLINE_MS, lookupTimeoutMs: 10_000, maxJobs: 2, threads: 1 })
    const stuck = await signedMessage({ from: 'customer@silent.example', to: 'support@example.com', subject: 'stuck', text: 'Hello.' }, silent)
    const fine = await signedMessage({ from: 'customer@customer.example', to: 'support@example.com', subject: 'fine', text: 'Hello.' }, customer)
    const dropped = dns.dropped
    const startedAt = Date.now()
    const first = j.examine(stuck, envelope('customer@silent.example'))
    await waitFor('the first message to wait on the silent zone', () => dns.dropped > dropped)
    // Three quarters of the first one's deadline gone: the second is queued for the thread, with three
    // quarters of its own deadline still to run once the first is ended (a new thread's start and the
    // judging fit in that on a busy machine; half of 3 s did not always).
    await waitFor('three quarters of the first deadline', () => Date.now() - startedAt >= DEADLINE_MS * 0.75)
    const second = j.examine(fine, envelope('customer@customer.example'))

    const a = await first
    assert.notEqual(a, 'unreadable')
    assert.deepEqual(a !== 'unreadable' && a.authentication, { spf: 'temperror', dkim: 'temperror', dmarc: 'temperror', arc: null })
    const b = await second
    assert.notEqual(b, 'unreadable')
    assert.deepEqual(b !== 'unreadable' && b.authentication, { spf: 'pass', dkim: 'pass', dmarc: 'pass', arc: null }, 'judged, not stranded')
  })

  test('the thread stops once idle and starts again with the next message; close() leaves none', async () => {
    const j = judging({ idleMs: 200 })
    const fine = await signedMessage({ from: 'customer@customer.example', to: 'support@example.com', subject: 'fine', text: 'Hello.' }, customer)
    const a = await j.examine(fine, envelope('customer@customer.example'))
    assert.equal(a !== 'unreadable' && a.authentication.dkim, 'pass')
    assert.equal(j.threadIds.length, 1)
    await waitFor('the idle thread to stop', () => j.threadIds.length === 0)
    const b = await j.examine(fine, envelope('customer@customer.example'))
    assert.equal(b !== 'unreadable' && b.authentication.dkim, 'pass')
    const stuck = await signedMessage({ from: 'customer@silent.example', to: 'support@example.com', subject: 'stuck', text: 'Hello.' }, silent)
    const dropped = dns.dropped
    const pending = j.examine(stuck, envelope('customer@silent.example'))
    await waitFor('the message to wait on the silent zone', () => dns.dropped > dropped)
    const refused = assert.rejects(pending, { responseCode: 451 })
    await j.close()
    await refused
    assert.deepEqual(j.threadIds, [])
  })

  test('ten selectors in a zone that never answers: the DNS budget runs out, DMARC is still judged (fail), not temperror', async () => {
    const DEADLINE_MS = 5000
    // One try of 1 s per lookup, one after the other: ten would take 10 s, past the deadline.
    const j = judging({ deadlineMs: DEADLINE_MS, lookupTimeoutMs: 1000 })
    // The thread started first, so that its start (slow on a busy machine) is not taken from the deadline.
    const fine = await signedMessage({ from: 'customer@customer.example', to: 'support@example.com', subject: 'fine', text: 'Hello.' }, customer)
    const warm = await j.examine(fine, envelope('customer@customer.example'))
    assert.equal(warm !== 'unreadable' && warm.authentication.dkim, 'pass')
    // A spoof of customer.example (p=reject) from an address its SPF does not list, signed by silent.example.
    const raw = (await signedMessage({ from: 'customer@customer.example', to: 'support@example.com', subject: 'spoof', text: 'Hello.' }, silent)).toString('latin1')
    const bh = /bh=([^;]+);/.exec(raw)![1]!
    let end = raw.indexOf('\r\n') + 2
    while (raw[end] === ' ' || raw[end] === '\t') end = raw.indexOf('\r\n', end) + 2
    const more = Array.from({ length: 9 }, (_, i) => `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=silent.example; s=t${i}; h=from; bh=${bh}; b=AAAA\r\n`).join('')
    const message = Buffer.from(raw.slice(0, end) + more + raw.slice(end), 'latin1')
    const dropped = dns.dropped
    const judged = await j.examine(message, { ip: '198.51.100.9', helo: 'spoofer.example', sender: 'customer@customer.example' })
    assert.notEqual(judged, 'unreadable')
    const verdicts = judged !== 'unreadable' ? judged.authentication : null
    assert.equal(verdicts?.dmarc, 'fail', JSON.stringify(verdicts))
    assert.equal(verdicts?.dkim, 'temperror')
    assert.ok(dns.dropped - dropped < 10, `${dns.dropped - dropped} lookups in the silent zone: not all ten`)
  })
})
