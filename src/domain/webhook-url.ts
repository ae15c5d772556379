// The SSRF guard for webhook URLs. A webhook URL is chosen by an account holder and fetched by our
// servers, so in production it must never reach the machine itself, the private network it sits on, or
// the cloud metadata service. It runs when a webhook is created and again at every delivery, because
// DNS answers can change between the two (the sender calls these functions from its connect-time lookup).
import { lookup } from 'node:dns/promises'
import { isIP } from 'node:net'
import ipaddr from 'ipaddr.js'

export interface ResolvedAddress { address: string; family: 4 | 6 }
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>

// verbatim: keep the resolver's order (it already prefers what the host can reach), no IPv4 reordering.
export const systemResolver: Resolver = async (hostname) => {
  const found = await lookup(hostname, { all: true, verbatim: true })
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }))
}

type Address = ipaddr.IPv4 | ipaddr.IPv6

interface Range {
  readonly address: Address
  readonly prefix: number
}

export interface CidrList {
  /** The entries in canonical form, for logs and error messages. */
  readonly entries: readonly string[]
  readonly ranges: readonly Range[]
}

export interface UrlPolicy { production: boolean; allowedCidrs: CidrList }
export type UrlVerdict = { ok: true; url: URL } | { ok: false; reason: string }

export const MAX_URL_LENGTH = 2048
/** WEBHOOK_ALLOWED_CIDRS is bounded before it is split: every delivery's connect compares against it. */
export const MAX_CIDR_LIST_LENGTH = 16_384
export const MAX_CIDR_ENTRIES = 512
/** Longer than any textual IPv6 address with a zone index an interface name allows. */
const MAX_ADDRESS_LENGTH = 64

// ---------------------------------------------------------------------------------------------------
// Addresses are parsed and matched by ipaddr.js. Only canonical textual forms are accepted (node:net's
// isIP decides, before ipaddr.js sees the text): the WHATWG URL parser has already turned `127.1`,
// `0x7f000001` and friends into dotted quads, and resolvers return canonical text, so anything else is
// unrecognised and refused, and the guard fails closed. (ipaddr.js alone would read `127.1` as an
// address.)

function parseAddress (text: string): Address | null {
  if (text.length > MAX_ADDRESS_LENGTH || isIP(text) === 0) return null
  try {
    return ipaddr.parse(text)
  } catch {
    return null
  }
}

function inRange (address: Address, range: Range): boolean {
  return address.kind() === range.address.kind() && address.match(range.address, range.prefix)
}

function formatRange (range: Range): string {
  // ipaddr.js prints IPv6 as RFC 5952 text (lower case, the longest zero run compressed).
  return `${range.address.toString()}/${range.prefix}`
}

/** Text from the configuration, quoted for an error message and cut short when it is long. */
function quote (text: string): string {
  return JSON.stringify(text.length > 60 ? `${text.slice(0, 60)}…` : text)
}

function parseRange (entry: string): Range | string {
  const slash = entry.indexOf('/')
  const addrText = slash === -1 ? entry : entry.slice(0, slash)
  const address = parseAddress(addrText)
  if (!address) return `${quote(addrText)} is not an IPv4 or IPv6 address`
  const max = address.kind() === 'ipv4' ? 32 : 128
  let prefix = max
  if (slash !== -1) {
    const prefixText = entry.slice(slash + 1)
    if (!/^\d{1,3}$/.test(prefixText) || Number(prefixText) > max) {
      return `prefix length must be a whole number from 0 to ${max}`
    }
    prefix = Number(prefixText)
  }
  // `10.1.2.3/8` is ambiguous (a typo for /32, or for 10.0.0.0/8?); asking is cheaper than guessing
  // wrong about what the internet may reach.
  const cidr = `${address.toString()}/${prefix}`
  const network = address.kind() === 'ipv4'
    ? ipaddr.IPv4.networkAddressFromCIDR(cidr)
    : ipaddr.IPv6.networkAddressFromCIDR(cidr)
  if (network.toString() !== address.toString()) {
    return `it has bits set after the prefix; did you mean ${network.toString()}/${prefix}?`
  }
  return { address, prefix }
}

/**
 * Parses a comma-separated list of CIDR ranges such as `10.0.0.0/8, fd00::/8`. A bare address means that
 * one address. Empty text (or empty entries, as in a trailing comma) contributes nothing.
 */
export function parseCidrList (text: string): CidrList {
  if (text.length > MAX_CIDR_LIST_LENGTH) {
    throw new Error(`the CIDR list is ${text.length} characters long; at most ${MAX_CIDR_LIST_LENGTH} are accepted`)
  }
  const ranges: Range[] = []
  for (const raw of text.split(',')) {
    const entry = raw.trim()
    if (entry === '') continue
    if (ranges.length === MAX_CIDR_ENTRIES) {
      throw new Error(`the CIDR list has more than ${MAX_CIDR_ENTRIES} ranges; merge them into wider ones`)
    }
    const result = parseRange(entry)
    if (typeof result === 'string') {
      throw new Error(`invalid CIDR range ${quote(entry)}: ${result} (expected a list like "10.0.0.0/8, fd00::/8")`)
    }
    ranges.push(result)
  }
  return { entries: ranges.map(formatRange), ranges }
}

function rangeOf (cidr: string): Range {
  const result = parseRange(cidr)
  if (typeof result === 'string') throw new Error(`built-in range ${cidr}: ${result}`)
  return result
}

// ---------------------------------------------------------------------------------------------------
// The blocklist. First match wins, so single addresses come before the ranges that contain them.

const METADATA = 'cloud metadata address'
const RESERVED = 'reserved address'

const IPV4_BLOCKED: ReadonlyArray<[Range, string]> = ([
  ['169.254.169.254/32', METADATA], // AWS, GCP, Azure, Oracle, OpenStack
  ['100.100.100.200/32', METADATA], // Alibaba Cloud
  ['0.0.0.0/8', 'unspecified address'], // "this network": 0.0.0.0 connects to the local host on Linux
  ['127.0.0.0/8', 'loopback address'],
  ['10.0.0.0/8', 'private address'],
  ['172.16.0.0/12', 'private address'],
  ['192.168.0.0/16', 'private address'],
  ['169.254.0.0/16', 'link-local address'],
  ['100.64.0.0/10', 'carrier-grade NAT address'],
  ['255.255.255.255/32', 'broadcast address'],
  ['224.0.0.0/4', 'multicast address'],
  ['192.0.0.0/24', RESERVED], // IETF protocol assignments
  ['192.0.2.0/24', RESERVED], // TEST-NET-1
  ['192.88.99.0/24', RESERVED], // former 6to4 relay anycast
  ['198.18.0.0/15', RESERVED], // benchmarking
  ['198.51.100.0/24', RESERVED], // TEST-NET-2
  ['203.0.113.0/24', RESERVED], // TEST-NET-3
  ['240.0.0.0/4', RESERVED],
] as const).map(([cidr, reason]) => [rangeOf(cidr), reason])

const IPV6_BLOCKED: ReadonlyArray<[Range, string]> = ([
  ['fd00:ec2::254/128', METADATA], // AWS over IPv6
  ['::/128', 'unspecified address'],
  ['::1/128', 'loopback address'],
  ['fc00::/7', 'private address'], // unique local (RFC 4193)
  ['fec0::/10', 'private address'], // deprecated site-local, still routed inside some networks
  ['fe80::/10', 'link-local address'],
  ['ff00::/8', 'multicast address'],
  ['::/8', RESERVED], // what is left of it once the IPv4-embedding forms are handled
  ['100::/64', RESERVED], // discard-only
  ['64:ff9b:1::/48', RESERVED], // local-use NAT64: where the IPv4 sits is up to the network
  ['2001::/23', RESERVED], // IETF protocol assignments, including Teredo tunnels to any IPv4
  ['2001:db8::/32', RESERVED], // documentation
  ['3fff::/20', RESERVED], // documentation (RFC 9637)
] as const).map(([cidr, reason]) => [rangeOf(cidr), reason])

/**
 * The IPv4 address an IPv6 address stands for, when the network would deliver it to that IPv4. Each
 * form is one range (ipaddr.js matches it); where the IPv4 sits inside it is the form's own rule.
 */
const EMBEDDING: ReadonlyArray<[Range, number]> = ([
  ['::ffff:0:0/96', 12], // mapped: ::ffff:a.b.c.d
  ['::ffff:0:0:0/96', 12], // translated (RFC 2765): ::ffff:0:a.b.c.d
  ['::/96', 12], // compatible (deprecated): ::a.b.c.d; :: and ::1 are judged as themselves
  ['64:ff9b::/96', 12], // NAT64 well-known prefix
  ['2002::/16', 2], // 6to4: 2002:AABB:CCDD::/48
] as const).map(([cidr, offset]) => [rangeOf(cidr), offset])

const UNSPECIFIED6 = ipaddr.parse('::')
const LOOPBACK6 = ipaddr.parse('::1')

function embeddedIPv4 (address: ipaddr.IPv6): ipaddr.IPv4 | null {
  if (address.match(UNSPECIFIED6, 128) || address.match(LOOPBACK6, 128)) return null
  const form = EMBEDDING.find(([range]) => inRange(address, range))
  if (!form) return null
  const bytes = address.toByteArray()
  return new ipaddr.IPv4(bytes.slice(form[1], form[1] + 4))
}

function allowedBy (address: Address, allowed: CidrList, reason: string): boolean {
  // Metadata endpoints hand out cloud credentials. Allowing a broad range (100.64.0.0/10 for a
  // Tailscale network, 169.254.0.0/16) must not open them by accident: only a range of that one
  // address does.
  const single = address.kind() === 'ipv4' ? 32 : 128
  return allowed.ranges.some((r) => inRange(address, r) && (reason !== METADATA || r.prefix === single))
}

function judge (address: Address, allowed: CidrList): string | null {
  if (address.kind() === 'ipv6') {
    const v4 = embeddedIPv4(address as ipaddr.IPv6)
    if (v4) {
      const inner = judge(v4, allowed)
      return inner === null || allowedBy(address, allowed, inner) ? null : inner
    }
  }
  const table = address.kind() === 'ipv4' ? IPV4_BLOCKED : IPV6_BLOCKED
  const hit = table.find(([range]) => inRange(address, range))
  if (!hit || allowedBy(address, allowed, hit[1])) return null
  return hit[1]
}

/**
 * Why an address may not be reached in production, or null when it may. `allowed` overrides the
 * blocklist (internal receivers the operator vouches for). Text that is not a canonical IP address is
 * refused rather than guessed at.
 */
export function blockedReason (address: string, allowed: CidrList): string | null {
  const parsed = parseAddress(address)
  if (!parsed) return 'unrecognised address'
  return judge(parsed, allowed)
}

// ---------------------------------------------------------------------------------------------------
// URL checks

function withArticle (phrase: string): string {
  return /^[aeiou]/i.test(phrase) ? `an ${phrase}` : `a ${phrase}`
}

/** `[::1]` → `::1`; names and IPv4 pass through. */
function bareHost (hostname: string): string {
  return hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname
}

/** `localhost`, `localhost.`, `api.localhost`: RFC 6761 reserves the whole tree for loopback. */
function isLocalhostName (hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.+$/, '')
  return name === 'localhost' || name.endsWith('.localhost')
}

/**
 * Everything that can be decided without DNS: syntax, scheme, credentials, length, and in production the
 * host when it is an IP literal or a localhost name. Names are left to `checkWebhookUrl`.
 */
export function checkUrlShape (raw: string, policy: UrlPolicy): UrlVerdict {
  if (typeof raw !== 'string' || raw.length === 0) return { ok: false, reason: 'webhook URL is required' }
  if (raw.length > MAX_URL_LENGTH) {
    return { ok: false, reason: `webhook URL must be at most ${MAX_URL_LENGTH} characters` }
  }
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return { ok: false, reason: 'webhook URL must be an absolute URL' }
  }
  // Percent-encoding can lengthen what gets stored and sent, so the limit holds for both forms.
  if (url.href.length > MAX_URL_LENGTH) {
    return { ok: false, reason: `webhook URL must be at most ${MAX_URL_LENGTH} characters` }
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return { ok: false, reason: policy.production ? 'webhook URL must use https' : 'webhook URL must use http or https' }
  }
  if (url.username !== '' || url.password !== '') {
    return { ok: false, reason: 'webhook URL must not contain a username or password' }
  }
  if (url.hostname === '') return { ok: false, reason: 'webhook URL must have a host' }
  if (!policy.production) return { ok: true, url }

  if (url.protocol !== 'https:') return { ok: false, reason: 'webhook URL must use https' }
  const host = bareHost(url.hostname)
  if (isIP(host) !== 0) {
    const reason = blockedReason(host, policy.allowedCidrs)
    return reason ? { ok: false, reason: `webhook URL points to ${withArticle(reason)}` } : { ok: true, url }
  }
  // A localhost name is loopback whatever a resolver says, unless loopback is explicitly allowed, in
  // which case resolution decides like for any other name.
  if (isLocalhostName(host) && blockedReason('127.0.0.1', policy.allowedCidrs) !== null) {
    return { ok: false, reason: 'webhook URL points to a loopback address (localhost)' }
  }
  return { ok: true, url }
}

/** `unresolved` tells a DNS failure (worth retrying as is) from a refusal. */
export type HostVerdict = { ok: true; addresses: ResolvedAddress[] } | { ok: false; reason: string; unresolved?: true }

/** Resolution alone, with the refusal a name that does not resolve gets. No judging. */
export async function resolveHost (hostname: string, resolver: Resolver): Promise<HostVerdict> {
  const host = bareHost(hostname)
  const family = isIP(host)
  if (family !== 0) return { ok: true, addresses: [{ address: host, family: family === 6 ? 6 : 4 }] }
  let addresses: ResolvedAddress[]
  try {
    addresses = await resolver(host)
  } catch (err) {
    const code = (err as { code?: unknown } | null)?.code
    const suffix = typeof code === 'string' ? ` (${code})` : ''
    return { ok: false, reason: `webhook URL host ${host} does not resolve${suffix}`, unresolved: true }
  }
  if (!Array.isArray(addresses) || addresses.length === 0) {
    return { ok: false, reason: `webhook URL host ${host} does not resolve to any address`, unresolved: true }
  }
  return { ok: true, addresses }
}

/**
 * Resolves a host name and judges every address it resolves to. One bad address refuses the host: a
 * connection may go to any of them. This is what the sender runs at connect time, so the address it
 * connects to is one that was checked.
 */
export async function checkHost (hostname: string, allowed: CidrList, resolver: Resolver): Promise<HostVerdict> {
  const literal = isIP(bareHost(hostname)) !== 0
  const resolved = await resolveHost(hostname, resolver)
  if (!resolved.ok) return resolved
  for (const a of resolved.addresses) {
    const reason = blockedReason(a.address, allowed)
    if (reason) return { ok: false, reason: `webhook URL ${literal ? 'points to' : 'resolves to'} ${withArticle(reason)}` }
  }
  return resolved
}

/** The full check for a webhook URL: shape, then in production the addresses its host resolves to. */
export async function checkWebhookUrl (
  raw: string,
  policy: UrlPolicy,
  resolver: Resolver,
): Promise<UrlVerdict & { addresses?: ResolvedAddress[] }> {
  const shape = checkUrlShape(raw, policy)
  if (!shape.ok || !policy.production) return shape
  const host = await checkHost(shape.url.hostname, policy.allowedCidrs, resolver)
  if (!host.ok) return { ok: false, reason: host.reason }
  return { ok: true, url: shape.url, addresses: host.addresses }
}
