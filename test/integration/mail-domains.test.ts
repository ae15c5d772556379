// Sender domains on real parts: the API, the DNS records checked through a DNS server on loopback
// (DNS_SERVERS), the re-check that notices a record gone, sends refused from unverified domains, and mail
// relayed to a real SMTP server on loopback whose DKIM signature a third-party verifier (mailauth)
// accepts against the record svc published, with a VERP Return-Path.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { dkimVerify } from 'mailauth'
import { startDnsServer } from '../helpers/dns-server.js'
import { publishRecords, verifiedDomain, type ShownRecord } from '../helpers/domains.js'
import { TEST_SECRET, errorOf, signedUp, startServer } from '../helpers/server.js'
import { systemClock } from '../../src/domain/clock.js'
import { createDns } from '../../src/domain/dns.js'
import { createDomainService } from '../../src/app/domains.js'
import { sender } from '../helpers/sending.js'
import { header, startSmtpSink } from '../helpers/smtp-sink.js'
import { waitFor } from '../helpers/wait.js'

async function setup (t: Parameters<typeof startServer>[0], env: Record<string, string> = {}, deps: NonNullable<Parameters<typeof startServer>[1]>['deps'] = {}) {
  const dns = await startDnsServer(t)
  const sink = await startSmtpSink()
  const server = await startServer(t, {
    env: { DNS_SERVERS: dns.server, SMTP_URL: sink.url, PUBLIC_URL: 'https://mail.svc.test', MAIL_FROM: 'svc <no-reply@svc.test>', ...env },
    deps: { mailer: { retryDelaysMs: [50, 50], random: () => 0.5 }, ...deps },
  })
  t.after(() => sink.close())
  return { dns, sink, server }
}

function byPurpose (records: ShownRecord[], purpose: string): ShownRecord {
  const r = records.find((x) => x.purpose === purpose)
  assert.ok(r, `a ${purpose} record`)
  return r
}

describe('sender domains', () => {
  test('POST /api/domains answers with the records to publish; the key is svc\'s own and its private half is never shown', async (t) => {
    const { server } = await setup(t)
    const { client } = await signedUp(server)
    const res = await client.post('/api/domains', { name: 'Example.COM.' })
    assert.equal(res.status, 201, res.text)
    const d = res.body.data
    assert.equal(d.name, 'example.com')
    assert.equal(d.status, 'pending')
    assert.match(d.id, /^dom_/)
    assert.ok(Date.parse(d.createdAt) > 0)
    const dkim = byPurpose(d.records, 'dkim')
    assert.equal(dkim.type, 'TXT')
    assert.match(dkim.name, /^svc[0-9a-f]{8}\._domainkey\.example\.com$/)
    assert.match(dkim.value, /^v=DKIM1; k=rsa; p=[A-Za-z0-9+/=]{300,}$/)
    assert.equal(dkim.status, 'pending')
    assert.deepEqual(byPurpose(d.records, 'return_path'), { type: 'MX', name: 'bounces.example.com', value: 'mail.svc.test', priority: 10, purpose: 'return_path', required: true, status: 'pending' })
    assert.equal(byPurpose(d.records, 'spf').name, 'bounces.example.com')
    assert.match(byPurpose(d.records, 'spf').value, /^v=spf1 a:127\.0\.0\.1 ~all$|^v=spf1 ip4:127\.0\.0\.1 ~all$/)
    assert.equal(byPurpose(d.records, 'dmarc').name, '_dmarc.example.com')
    assert.equal(byPurpose(d.records, 'dmarc').required, false)

    const list = await client.get('/api/domains')
    assert.deepEqual(list.body.data.map((x: { id: string }) => x.id), [d.id])
    const one = await client.get(`/api/domains/${d.id}`)
    assert.equal(one.status, 200)
    for (const text of [res.text, list.text, one.text]) {
      assert.doesNotMatch(text, /PRIVATE KEY|privateKey|v1\.[A-Za-z0-9_-]{16}\./)
    }
    // Another account sees none of it.
    const other = await signedUp(server)
    assert.equal((await other.client.get(`/api/domains/${d.id}`)).status, 404)
    assert.deepEqual((await other.client.get('/api/domains')).body.data, [])
    // Cookie routes: no session, no domains.
    assert.equal((await server.client().get('/api/domains')).status, 401)
  })

  test('names are validated and normalised: IDN to punycode, lower case; duplicates 409; the Free plan allows one', async (t) => {
    const { server } = await setup(t)
    const { client } = await signedUp(server)
    for (const bad of ['localhost', '127.0.0.1', '-bad.example.com', 'a..example.com', 'exa mple.com', `${'a'.repeat(64)}.com`, `${'a.'.repeat(130)}com`, 'example.123', 'x'.repeat(5000)]) {
      const res = await client.post('/api/domains', { name: bad })
      assert.equal(res.status, 400, `${bad.slice(0, 40)}: ${res.text}`)
      assert.equal(errorOf(res).code, 'validation_error')
    }
    const idn = await client.post('/api/domains', { name: 'BÜCHER.example' })
    assert.equal(idn.status, 201, idn.text)
    assert.equal(idn.body.data.name, 'xn--bcher-kva.example')
    const dup = await client.post('/api/domains', { name: 'xn--bcher-kva.example' })
    // Already added: said so, before the plan's limit (the Free plan's one domain is this one).
    assert.equal(dup.status, 409)
    assert.equal(errorOf(dup).code, 'domain_exists')
    const another = await client.post('/api/domains', { name: 'another.example' })
    assert.equal(another.status, 403)
    assert.equal(errorOf(another).code, 'plan_limit_reached')
    assert.equal((await client.delete(`/api/domains/${idn.body.data.id}`)).status, 200)
    assert.equal((await client.get(`/api/domains/${idn.body.data.id}`)).status, 404)
    assert.equal((await client.delete(`/api/domains/${idn.body.data.id}`)).status, 404)

    // Pro: ten, and a name twice is a conflict.
    const me = await client.get('/api/account')
    await server.store.setAccountPlan(me.body.data.id, 'pro')
    assert.equal((await client.post('/api/domains', { name: 'one.example' })).status, 201)
    const again = await client.post('/api/domains', { name: 'ONE.example' })
    assert.equal(again.status, 409)
    assert.equal(errorOf(again).code, 'domain_exists')
  })

  test('verify: the records answered by DNS make it verified; a record that disappears makes it failed, now and in the background', async (t) => {
    const { server, dns } = await setup(t, {}, { domainChecker: { intervalMs: 50, tickMs: 50 } })
    const { client } = await signedUp(server)
    const created = (await client.post('/api/domains', { name: 'example.org' })).body.data

    // Nothing published: pending, every record failed.
    let res = await client.post(`/api/domains/${created.id}/verify`)
    assert.equal(res.status, 200, res.text)
    assert.equal(res.body.data.status, 'pending')
    assert.deepEqual(res.body.data.records.map((r: ShownRecord) => r.status), ['failed', 'failed', 'failed', 'failed'])

    // Only DKIM: still pending.
    publishRecords(dns, created.records, ['dkim'])
    res = await client.post(`/api/domains/${created.id}/verify`)
    assert.equal(res.body.data.status, 'pending')
    assert.equal(byPurpose(res.body.data.records, 'dkim').status, 'verified')

    // The required ones: verified (DMARC is a suggestion).
    publishRecords(dns, created.records, ['return_path', 'spf'])
    res = await client.post(`/api/domains/${created.id}/verify`)
    assert.equal(res.body.data.status, 'verified', res.text)
    assert.equal(byPurpose(res.body.data.records, 'dmarc').status, 'failed')
    assert.ok(res.body.data.verifiedAt)

    // A DKIM record with another key does not count.
    const dkimName = byPurpose(created.records, 'dkim').name
    dns.zone.set(dkimName, { TXT: ['v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwrong'] })
    res = await client.post(`/api/domains/${created.id}/verify`)
    assert.equal(res.body.data.status, 'failed')
    assert.equal(byPurpose(res.body.data.records, 'dkim').status, 'failed')

    // Back, then gone again: the background re-check notices without anyone asking.
    dns.zone.delete(dkimName)
    publishRecords(dns, created.records, ['dkim'])
    assert.equal((await client.post(`/api/domains/${created.id}/verify`)).body.data.status, 'verified')
    dns.zone.delete('bounces.example.org')
    await waitFor('the background check to fail the domain', async () => {
      const d = (await client.get(`/api/domains/${created.id}`)).body.data
      return d.status === 'failed' && byPurpose(d.records, 'return_path').status === 'failed' ? d : false
    })
  })

  test('a DNS server that does not answer leaves the statuses as they were', async (t) => {
    const { server, dns } = await setup(t)
    const { client } = await signedUp(server)
    const d = await verifiedDomain(client, dns, 'steady.example')
    // The same rules and store, asking a port nobody answers on: nothing is learned, nothing changes.
    const deaf = createDomainService({
      store: server.store, clock: systemClock, secret: TEST_SECRET, dns: createDns(['127.0.0.1:9'], { timeoutMs: 200, tries: 1 }),
      settings: { bounceDomain: undefined, mxHost: 'mail.svc.test', spfMechanism: 'ip4:127.0.0.1' }, requireVerified: false,
    })
    const account = (await client.get('/api/account')).body.data.id
    const after = await deaf.verify(account, d.id)
    assert.equal(after.status, 'verified')
    assert.deepEqual(after.records.map((r) => r.status), d.records.map((r) => r.status))
  })
})

describe('sending from a domain', () => {
  test('REQUIRE_VERIFIED_DOMAIN: a from on no verified domain of the account is refused with 422 domain_not_verified', async (t) => {
    const { server, dns, sink } = await setup(t, { REQUIRE_VERIFIED_DOMAIN: 'true' })
    const s = await sender(server)
    const refused = await s.send({ from: 'Shop <shop@example.com>', to: 'alice@example.net', subject: 'Hi', text: 'Hi' })
    assert.equal(refused.status, 422, refused.text)
    const e = errorOf(refused)
    assert.equal(e.code, 'domain_not_verified')
    assert.deepEqual(e.details?.map((d) => d.path), ['body.from'])
    // The default sender (MAIL_FROM) is held to the same rule.
    assert.equal(errorOf(await s.send({ to: 'alice@example.net', subject: 'Hi', text: 'Hi' })).code, 'domain_not_verified')
    // Pending is not enough.
    const pending = (await s.client.post('/api/domains', { name: 'example.com' })).body.data
    assert.equal((await s.send({ from: 'shop@example.com', to: 'alice@example.net', subject: 'Hi', text: 'Hi' })).status, 422)
    publishRecords(dns, pending.records)
    assert.equal((await s.client.post(`/api/domains/${pending.id}/verify`)).body.data.status, 'verified')
    const ok = await s.send({ from: 'shop@example.com', to: 'alice@example.net', subject: 'Hi', text: 'Hi' })
    assert.equal(ok.status, 202, ok.text)
    // A batch is refused whole when one of its senders is not verified.
    const batch = await s.batch([
      { from: 'shop@example.com', to: 'bob@example.net', subject: 'a', text: 'a' },
      { from: 'shop@elsewhere.example', to: 'bob@example.net', subject: 'b', text: 'b' },
    ])
    assert.equal(batch.status, 422)
    assert.deepEqual(errorOf(batch).details?.map((d) => d.path), ['body[1].from'])
    await s.settled(ok.body.data.id)
    assert.equal(sink.received.length, 1)
  })

  test('mail from a verified domain is DKIM-signed (relaxed/relaxed) and verifies against the published record; the Return-Path is VERP', async (t) => {
    const { server, dns, sink } = await setup(t)
    const s = await sender(server)
    await verifiedDomain(s.client, dns, 'example.com')
    const res = await s.send({
      from: 'Shop <shop@example.com>', to: ['Alice <alice@example.net>', 'bob@example.net'], subject: 'Your order ✓', html: '<p>Thanks</p>', text: 'Thanks',
    })
    assert.equal(res.status, 202, res.text)
    const email = await s.settled(res.body.data.id)
    assert.equal(email.status, 'delivered')
    assert.equal(sink.received.length, 2, 'one transaction per recipient: the Return-Path names the recipient')
    const senders = new Set<string>()
    for (const m of sink.received) {
      assert.equal(m.rcptTo.length, 1)
      assert.match(m.mailFrom, /^b\+[a-z2-7]{40}@bounces\.example\.com$/)
      senders.add(m.mailFrom)
      const sig = header(m.raw, 'DKIM-Signature')
      assert.ok(sig, 'a DKIM-Signature header')
      const flat = sig.replace(/\s+/g, '')
      assert.match(flat, /c=relaxed\/relaxed/)
      assert.match(flat, /d=example\.com/)
      const h = /(?:^|;)h=([^;]+)/.exec(flat)![1]!.toLowerCase().split(':')
      for (const name of ['from', 'to', 'subject', 'date', 'message-id', 'list-unsubscribe', 'list-unsubscribe-post']) assert.ok(h.includes(name), `h= covers ${name}`)
      const verdict = await dkimVerify(Buffer.from(m.raw), { resolver: dns.resolve as never })
      const result = verdict.results[0] as { status: { result: string; aligned?: string }; signingDomain: string }
      assert.equal(result.status.result, 'pass', JSON.stringify(verdict.results))
      assert.equal(result.signingDomain, 'example.com')
    }
    assert.equal(senders.size, 2)

    // Change one signed byte (the subject): the same verifier fails it (the test can fail).
    const tampered = sink.received[0]!.raw.replace(/^Subject: /m, 'Subject: X')
    assert.notEqual(tampered, sink.received[0]!.raw)
    const bad = await dkimVerify(Buffer.from(tampered), { resolver: dns.resolve as never })
    assert.notEqual((bad.results[0] as { status: { result: string } }).status.result, 'pass')
  })

  test('mail from an unverified domain (development) is not signed and keeps its from as envelope sender; BOUNCE_DOMAIN gives it a VERP one', async (t) => {
    const { server, sink } = await setup(t)
    const s = await sender(server)
    const a = await s.send({ from: 'shop@unverified.example', to: 'alice@example.net', subject: 'x', text: 'x' })
    await s.settled(a.body.data.id)
    assert.equal(sink.received[0]!.mailFrom, 'shop@unverified.example')
    assert.equal(header(sink.received[0]!.raw, 'DKIM-Signature'), undefined)

    const other = await setup(t, { BOUNCE_DOMAIN: 'bounces.svc.test' })
    const s2 = await sender(other.server)
    const b = await s2.send({ from: 'shop@unverified.example', to: 'alice@example.net', subject: 'x', text: 'x' })
    await s2.settled(b.body.data.id)
    assert.match(other.sink.received[0]!.mailFrom, /^b\+[a-z2-7]{40}@bounces\.svc\.test$/)
    // With BOUNCE_DOMAIN a domain's bounce subdomain is a CNAME to it.
    const d = (await s2.client.post('/api/domains', { name: 'example.com' })).body.data
    assert.deepEqual(byPurpose(d.records, 'return_path'), { type: 'CNAME', name: 'bounces.example.com', value: 'bounces.svc.test', purpose: 'return_path', required: true, status: 'pending' })
    publishRecords(other.dns, d.records)
    // The SPF record lives on BOUNCE_DOMAIN (the operator's); the check reaches it through the CNAME.
    const verified = (await s2.client.post(`/api/domains/${d.id}/verify`)).body.data
    assert.equal(verified.status, 'verified', JSON.stringify(verified.records))
  })
})
