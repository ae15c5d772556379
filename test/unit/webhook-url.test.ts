import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import {
  blockedReason,
  checkUrlShape,
  checkWebhookUrl,
  parseCidrList,
  type ResolvedAddress,
  type Resolver,
  type UrlPolicy,
} from '../../src/domain/webhook-url.js'

const none = parseCidrList('')
const production: UrlPolicy = { production: true, allowedCidrs: none }
const development: UrlPolicy = { production: false, allowedCidrs: none }

/** A resolver with a fixed table that records which names it was asked for. */
function fixedResolver (table: Record<string, string[]>): Resolver & { asked: string[] } {
  const asked: string[] = []
  const resolve = async (hostname: string): Promise<ResolvedAddress[]> => {
    asked.push(hostname)
    const addresses = table[hostname]
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' })
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
  }
  return Object.assign(resolve, { asked })
}

function refusal (verdict: { ok: boolean; reason?: string }): string {
  assert.equal(verdict.ok, false, 'expected the URL to be refused')
  return verdict.reason ?? ''
}

describe('parseCidrList', () => {
  test('empty text is an empty list', () => {
    assert.deepEqual(parseCidrList('').entries, [])
    assert.deepEqual(parseCidrList('  ').entries, [])
  })

  test('parses IPv4 and IPv6 ranges and single addresses, tolerating spaces and a trailing comma', () => {
    const list = parseCidrList(' 10.0.0.0/8, fd00::/8,192.168.1.10 , 2001:DB8:0:0::/64,')
    assert.deepEqual(list.entries, ['10.0.0.0/8', 'fd00::/8', '192.168.1.10/32', '2001:db8::/64'])
  })

  test('names the bad entry in the error', () => {
    assert.throws(() => parseCidrList('10.0.0.0/8, banana/3'), /"banana\/3".*"banana" is not an IPv4 or IPv6 address/)
    assert.throws(() => parseCidrList('10.0.0.0/33'), /"10\.0\.0\.0\/33".*0 to 32/)
    assert.throws(() => parseCidrList('fd00::/129'), /"fd00::\/129".*0 to 128/)
    assert.throws(() => parseCidrList('10.0.0.0/x'), /"10\.0\.0\.0\/x"/)
    assert.throws(() => parseCidrList('127.1/8'), /"127\.1\/8"/)
  })

  test('refuses a range with bits after the prefix and suggests the intended one', () => {
    assert.throws(() => parseCidrList('10.1.2.3/8'), /"10\.1\.2\.3\/8".*did you mean 10\.0\.0\.0\/8\?/)
    assert.throws(() => parseCidrList('fd12:3456::1/16'), /did you mean fd12::\/16\?/)
  })
})

describe('blockedReason', () => {
  const cases: Array<[string, string | null]> = [
    // loopback
    ['127.0.0.1', 'loopback address'],
    ['127.255.255.254', 'loopback address'],
    ['::1', 'loopback address'],
    // RFC 1918 and RFC 4193
    ['10.0.0.1', 'private address'],
    ['172.16.0.0', 'private address'],
    ['172.31.255.255', 'private address'],
    ['192.168.1.1', 'private address'],
    ['fc00::1', 'private address'],
    ['fd12:3456:789a::1', 'private address'],
    ['fec0::1', 'private address'],
    // link-local, CGNAT, unspecified
    ['169.254.1.1', 'link-local address'],
    ['fe80::1', 'link-local address'],
    ['fe80::1%eth0', 'link-local address'],
    ['febf::1', 'link-local address'],
    ['100.64.0.1', 'carrier-grade NAT address'],
    ['100.127.255.255', 'carrier-grade NAT address'],
    ['0.0.0.0', 'unspecified address'],
    ['0.1.2.3', 'unspecified address'],
    ['::', 'unspecified address'],
    // cloud metadata
    ['169.254.169.254', 'cloud metadata address'],
    ['fd00:ec2::254', 'cloud metadata address'],
    ['100.100.100.200', 'cloud metadata address'],
    // multicast and broadcast
    ['224.0.0.1', 'multicast address'],
    ['239.255.255.250', 'multicast address'],
    ['ff02::1', 'multicast address'],
    ['255.255.255.255', 'broadcast address'],
    // documentation, benchmarking, reserved
    ['192.0.0.8', 'reserved address'],
    ['192.0.2.1', 'reserved address'],
    ['198.18.0.1', 'reserved address'],
    ['198.19.255.255', 'reserved address'],
    ['198.51.100.7', 'reserved address'],
    ['203.0.113.9', 'reserved address'],
    ['240.0.0.1', 'reserved address'],
    ['2001:db8::1', 'reserved address'],
    ['100::1', 'reserved address'],
    // public addresses, including the neighbours of blocked ranges
    ['8.8.8.8', null],
    ['1.1.1.1', null],
    ['172.15.255.255', null],
    ['172.32.0.0', null],
    ['100.63.255.255', null],
    ['100.128.0.0', null],
    ['169.253.255.255', null],
    ['198.20.0.0', null],
    ['2606:4700:4700::1111', null],
    ['2a00:1450:4001:80b::200e', null],
  ]
  for (const [address, expected] of cases) {
    test(`${address} → ${expected ?? 'allowed'}`, () => {
      assert.equal(blockedReason(address, none), expected)
    })
  }

  const embedded: Array<[string, string | null]> = [
    ['::ffff:127.0.0.1', 'loopback address'], // IPv4-mapped, dotted
    ['::ffff:7f00:1', 'loopback address'], // IPv4-mapped, hex
    ['0:0:0:0:0:ffff:a00:1', 'private address'],
    ['::ffff:169.254.169.254', 'cloud metadata address'],
    ['::127.0.0.1', 'loopback address'], // IPv4-compatible
    ['::a00:1', 'private address'],
    ['::ffff:0:7f00:1', 'loopback address'], // IPv4-translated
    ['64:ff9b::127.0.0.1', 'loopback address'], // NAT64
    ['64:ff9b::a9fe:a9fe', 'cloud metadata address'],
    ['2002:7f00:1::', 'loopback address'], // 6to4
    ['2002:c0a8:101::1', 'private address'],
    ['::ffff:8.8.8.8', null],
    ['64:ff9b::808:808', null],
    ['2002:808:808::1', null],
  ]
  for (const [address, expected] of embedded) {
    test(`embedded IPv4 ${address} → ${expected ?? 'allowed'}`, () => {
      assert.equal(blockedReason(address, none), expected)
    })
  }

  test('text that is not a canonical address is refused, not guessed at', () => {
    for (const text of ['localhost', '127.1', '0x7f000001', '', '1.2.3.4.5', '::ffff:300.1.1.1']) {
      assert.equal(blockedReason(text, none), 'unrecognised address', text)
    }
  })

  test('allowed ranges open exactly what they cover, also through embedded IPv4', () => {
    const allowed = parseCidrList('10.0.0.0/8, fd00:1::/32')
    assert.equal(blockedReason('10.20.30.40', allowed), null)
    assert.equal(blockedReason('::ffff:10.20.30.40', allowed), null)
    assert.equal(blockedReason('fd00:1::5', allowed), null)
    assert.equal(blockedReason('192.168.1.1', allowed), 'private address')
    assert.equal(blockedReason('fd00:2::5', allowed), 'private address')
    assert.equal(blockedReason('127.0.0.1', allowed), 'loopback address')
  })

  test('a broad allowed range does not open a cloud metadata address; that one address does', () => {
    assert.equal(blockedReason('169.254.169.254', parseCidrList('169.254.0.0/16')), 'cloud metadata address')
    assert.equal(blockedReason('169.254.10.10', parseCidrList('169.254.0.0/16')), null)
    assert.equal(blockedReason('100.100.100.200', parseCidrList('100.64.0.0/10')), 'cloud metadata address')
    assert.equal(blockedReason('100.100.100.100', parseCidrList('100.64.0.0/10')), null)
    assert.equal(blockedReason('169.254.169.254', parseCidrList('169.254.169.254/32')), null)
    assert.equal(blockedReason('::ffff:169.254.169.254', parseCidrList('::ffff:0:0/96')), 'cloud metadata address')
    assert.equal(blockedReason('::ffff:10.0.0.1', parseCidrList('::ffff:0:0/96')), null)
  })
})

describe('checkUrlShape', () => {
  test('requires an absolute URL', () => {
    assert.match(refusal(checkUrlShape('/hooks', development)), /absolute URL/)
    assert.match(refusal(checkUrlShape('hooks.example.com/x', development)), /absolute URL/)
    assert.match(refusal(checkUrlShape('', development)), /required/)
  })

  test('limits the length to 2048 characters', () => {
    const base = 'https://hooks.example.com/'
    const fits = base + 'a'.repeat(2048 - base.length)
    assert.equal(checkUrlShape(fits, production).ok, true)
    assert.match(refusal(checkUrlShape(fits + 'a', production)), /at most 2048 characters/)
    // Characters that get percent-encoded count as what is stored.
    assert.match(refusal(checkUrlShape(base + ' '.repeat(1000) + 'x', production)), /at most 2048 characters/)
  })

  test('allows only http and https', () => {
    for (const raw of ['ftp://example.com/', 'file:///etc/passwd', 'javascript:alert(1)', 'gopher://example.com/', 'ws://example.com/']) {
      assert.match(refusal(checkUrlShape(raw, development)), /must use http or https/, raw)
      assert.match(refusal(checkUrlShape(raw, production)), /must use https/, raw)
    }
  })

  test('refuses credentials in the URL', () => {
    assert.match(refusal(checkUrlShape('https://user@hooks.example.com/', production)), /username or password/)
    assert.match(refusal(checkUrlShape('https://user:pw@hooks.example.com/', development)), /username or password/)
    assert.match(refusal(checkUrlShape('https://:pw@hooks.example.com/', production)), /username or password/)
  })

  test('development allows http and localhost', () => {
    for (const raw of ['http://localhost:3000/hooks', 'http://127.0.0.1:8080/', 'http://[::1]/', 'https://10.0.0.5/']) {
      const verdict = checkUrlShape(raw, development)
      assert.equal(verdict.ok, true, raw)
    }
  })

  test('production allows https only', () => {
    assert.match(refusal(checkUrlShape('http://hooks.example.com/', production)), /must use https/)
    const verdict = checkUrlShape('https://Hooks.Example.com/in?x=1', production)
    assert.ok(verdict.ok)
    assert.equal(verdict.url.href, 'https://hooks.example.com/in?x=1')
  })
})

describe('checkWebhookUrl in production', () => {
  // Every odd way to write loopback must be caught; the resolver would say "public" if it were asked.
  const loopbackSpellings = [
    'https://127.0.0.1/',
    'https://127.1/',
    'https://0x7f000001/',
    'https://2130706433/',
    'https://017700000001/',
    'https://0177.0.0.1/',
    'https://0x7f.1/',
    'https://%31%32%37.0.0.1/',
    'https://127.0.0.1./',
    'https://[::ffff:127.0.0.1]/',
    'https://[::ffff:7f00:1]/',
    'https://[::127.0.0.1]/',
    'https://[64:ff9b::127.0.0.1]/',
    'https://[2002:7f00:1::]/',
    'https://[::1]/',
    'https://[0:0:0:0:0:0:0:1]/',
    'https://localhost/',
    'https://localhost./',
    'https://LOCALHOST/',
    'https://LocalHost:8443/',
    'https://foo.localhost/',
    'https://a.b.localhost./',
  ]
  for (const raw of loopbackSpellings) {
    test(`${raw} is loopback`, async () => {
      const resolver = fixedResolver({ localhost: ['93.184.216.34'], 'foo.localhost': ['93.184.216.34'] })
      const reason = refusal(await checkWebhookUrl(raw, production, resolver))
      assert.match(reason, /^webhook URL points to a loopback address/)
      assert.deepEqual(resolver.asked, [], 'a literal or localhost host is judged without DNS')
    })
  }

  test('0 and 0.0.0.0 are the unspecified address', async () => {
    const resolver = fixedResolver({})
    assert.equal(refusal(await checkWebhookUrl('https://0/', production, resolver)), 'webhook URL points to an unspecified address')
    assert.equal(refusal(await checkWebhookUrl('https://0.0.0.0/', production, resolver)), 'webhook URL points to an unspecified address')
    assert.equal(refusal(await checkWebhookUrl('https://[::]/', production, resolver)), 'webhook URL points to an unspecified address')
  })

  test('literal private, link-local and metadata hosts are refused', async () => {
    const resolver = fixedResolver({})
    assert.equal(refusal(await checkWebhookUrl('https://10.1.2.3/', production, resolver)), 'webhook URL points to a private address')
    assert.equal(refusal(await checkWebhookUrl('https://169.254.169.254/latest/meta-data/', production, resolver)), 'webhook URL points to a cloud metadata address')
    assert.equal(refusal(await checkWebhookUrl('https://[fe80::1]/', production, resolver)), 'webhook URL points to a link-local address')
    assert.equal(refusal(await checkWebhookUrl('https://[fd00:ec2::254]/', production, resolver)), 'webhook URL points to a cloud metadata address')
  })

  test('a public literal address passes without DNS', async () => {
    const resolver = fixedResolver({})
    const verdict = await checkWebhookUrl('https://93.184.216.34/hook', production, resolver)
    assert.ok(verdict.ok)
    assert.deepEqual(verdict.addresses, [{ address: '93.184.216.34', family: 4 }])
    assert.deepEqual(resolver.asked, [])
  })

  test('a name whose addresses are all public passes, with the addresses it resolved to', async () => {
    const resolver = fixedResolver({ 'hooks.example.com': ['93.184.216.34', '2606:2800:220:1::1'] })
    const verdict = await checkWebhookUrl('https://hooks.example.com/in', production, resolver)
    assert.ok(verdict.ok)
    assert.equal(verdict.url.hostname, 'hooks.example.com')
    assert.deepEqual(verdict.addresses?.map((a) => a.address), ['93.184.216.34', '2606:2800:220:1::1'])
    assert.deepEqual(resolver.asked, ['hooks.example.com'])
  })

  test('every resolved address must pass: one private address among public ones refuses the name', async () => {
    const resolver = fixedResolver({ 'mixed.example.com': ['93.184.216.34', '10.0.0.7'] })
    const reason = refusal(await checkWebhookUrl('https://mixed.example.com/', production, resolver))
    assert.equal(reason, 'webhook URL resolves to a private address')
    assert.doesNotMatch(reason, /10\.0\.0\.7/, 'the internal address is not disclosed')
  })

  test('names that resolve to blocked addresses are refused with the kind of address', async () => {
    const resolver = fixedResolver({
      'lo.example.com': ['127.0.0.1'],
      'lo6.example.com': ['::1'],
      'mapped.example.com': ['::ffff:127.0.0.1'],
      'meta.example.com': ['169.254.169.254'],
      'cgnat.example.com': ['100.64.1.1'],
    })
    const reasonFor = async (host: string): Promise<string> =>
      refusal(await checkWebhookUrl(`https://${host}/`, production, resolver))
    assert.equal(await reasonFor('lo.example.com'), 'webhook URL resolves to a loopback address')
    assert.equal(await reasonFor('lo6.example.com'), 'webhook URL resolves to a loopback address')
    assert.equal(await reasonFor('mapped.example.com'), 'webhook URL resolves to a loopback address')
    assert.equal(await reasonFor('meta.example.com'), 'webhook URL resolves to a cloud metadata address')
    assert.equal(await reasonFor('cgnat.example.com'), 'webhook URL resolves to a carrier-grade NAT address')
  })

  test('a name that does not resolve is refused', async () => {
    const failing = fixedResolver({})
    assert.equal(
      refusal(await checkWebhookUrl('https://nowhere.example.com/', production, failing)),
      'webhook URL host nowhere.example.com does not resolve (ENOTFOUND)',
    )
    const empty = fixedResolver({ 'empty.example.com': [] })
    assert.equal(
      refusal(await checkWebhookUrl('https://empty.example.com/', production, empty)),
      'webhook URL host empty.example.com does not resolve to any address',
    )
  })

  test('an address that is not an IP address is refused', async () => {
    const resolver: Resolver = async () => [{ address: 'not-an-ip', family: 4 }]
    assert.equal(
      refusal(await checkWebhookUrl('https://odd.example.com/', production, resolver)),
      'webhook URL resolves to an unrecognised address',
    )
  })

  test('allowed CIDRs let an operator reach internal receivers, and nothing else', async () => {
    const policy: UrlPolicy = { production: true, allowedCidrs: parseCidrList('10.0.0.0/8, 127.0.0.0/8') }
    const resolver = fixedResolver({ 'internal.corp': ['10.1.2.3'], 'other.corp': ['192.168.0.5'] })
    assert.equal((await checkWebhookUrl('https://internal.corp/hook', policy, resolver)).ok, true)
    assert.equal((await checkWebhookUrl('https://10.9.9.9/hook', policy, resolver)).ok, true)
    assert.equal((await checkWebhookUrl('https://127.0.0.1/hook', policy, resolver)).ok, true)
    assert.equal(refusal(await checkWebhookUrl('https://other.corp/', policy, resolver)), 'webhook URL resolves to a private address')
    assert.match(refusal(await checkWebhookUrl('http://internal.corp/hook', policy, resolver)), /must use https/)
  })

  test('localhost is resolved like any name once loopback is allowed, and ::1 must then be allowed too', async () => {
    const resolver = fixedResolver({ localhost: ['::1', '127.0.0.1'] })
    const v4Only: UrlPolicy = { production: true, allowedCidrs: parseCidrList('127.0.0.0/8') }
    assert.equal(refusal(await checkWebhookUrl('https://localhost/', v4Only, resolver)), 'webhook URL resolves to a loopback address')
    const both: UrlPolicy = { production: true, allowedCidrs: parseCidrList('127.0.0.0/8, ::1/128') }
    assert.equal((await checkWebhookUrl('https://localhost/', both, resolver)).ok, true)
  })
})

describe('checkWebhookUrl in development', () => {
  test('allows http, localhost and private hosts without resolving anything', async () => {
    const resolver = fixedResolver({})
    for (const raw of ['http://localhost:3000/hooks', 'http://127.0.0.1:9000/', 'http://10.0.0.8/', 'http://unresolvable.test/']) {
      const verdict = await checkWebhookUrl(raw, development, resolver)
      assert.equal(verdict.ok, true, raw)
    }
    assert.deepEqual(resolver.asked, [])
  })

  test('still refuses what is malformed', async () => {
    const resolver = fixedResolver({})
    assert.match(refusal(await checkWebhookUrl('ftp://localhost/', development, resolver)), /http or https/)
    assert.match(refusal(await checkWebhookUrl('http://u:p@localhost/', development, resolver)), /username or password/)
  })
})

describe('hostile input', () => {
  const megabyte = 1024 * 1024

  test('a megabyte-long host is refused quickly by its length, and a megabyte "address" is unrecognised', async () => {
    const resolver = fixedResolver({})
    const host = 'a'.repeat(megabyte)
    assert.match(refusal(await checkWebhookUrl(`https://${host}/`, production, resolver)), /at most 2048 characters/)
    assert.deepEqual(resolver.asked, [])
    for (const text of ['1'.repeat(megabyte), ':'.repeat(megabyte), `::ffff:${'1.'.repeat(megabyte / 2)}1`, `fe80::1%${'e'.repeat(megabyte)}`]) {
      assert.equal(blockedReason(text, none), 'unrecognised address')
    }
    // A resolver that answers with a megabyte of text gets the same refusal, not a crash.
    const odd: Resolver = async () => [{ address: `1${'0'.repeat(megabyte)}`, family: 4 }]
    assert.equal(refusal(await checkWebhookUrl('https://odd.example.com/', production, odd)), 'webhook URL resolves to an unrecognised address')
  })

  test('a megabyte-long CIDR list is refused by its length before it is split, naming the limit', () => {
    const list = Array.from({ length: megabyte / 12 }, (_, i) => `10.${(i >> 8) & 255}.${i & 255}.0/24`).join(',')
    assert.ok(list.length > megabyte / 2)
    assert.throws(() => parseCidrList(list), /at most 16384 are accepted/)
    assert.throws(() => parseCidrList(' '.repeat(megabyte)), /at most 16384/)
    assert.throws(() => parseCidrList(`${'9'.repeat(megabyte)}/8`), /at most 16384/)
  })

  test('a list within the length limit but with too many ranges is refused; the largest allowed list works', () => {
    const ranges = (n: number) => Array.from({ length: n }, (_, i) => `10.${(i >> 8) & 255}.${i & 255}.0/24`).join(',')
    assert.throws(() => parseCidrList(ranges(513)), /more than 512 ranges/)
    const allowed = parseCidrList(ranges(512))
    assert.equal(allowed.entries.length, 512)
    assert.equal(blockedReason('10.1.255.9', allowed), null)
    assert.equal(blockedReason('10.2.0.9', allowed), 'private address')
    // An entry whose text is long is refused as not an address (it is never handed to the parser).
    assert.throws(() => parseCidrList(`${'1'.repeat(10_000)}/8`), (err: Error) => /is not an IPv4 or IPv6 address/.test(err.message) && err.message.length < 300)
  })
})
