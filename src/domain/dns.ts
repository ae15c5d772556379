// One DNS resolver for the whole process, from DNS_SERVERS (`ip` or `ip:port`, comma-separated; empty:
// the system's). Sender-domain checks read TXT, MX and CNAME records through it, and the webhook SSRF
// guard (webhook-url.ts) and the delivery threads resolve webhook hosts through it, so tests can point
// everything at a DNS server on loopback and never touch public DNS.
import { Resolver as DnsResolver } from 'node:dns/promises'
import { systemResolver, type ResolvedAddress, type Resolver } from './webhook-url.js'

export interface MxAnswer { exchange: string; priority: number }

export interface Dns {
  /** The servers asked, as given (empty: the system's). */
  readonly servers: readonly string[]
  /** Each TXT record at `name` as one string (its character-strings joined); [] when there is none. */
  txt(name: string): Promise<string[]>
  /** [] when there is none. */
  mx(name: string): Promise<MxAnswer[]>
  /** The CNAME target(s) at `name`, lower case without the trailing dot; [] when there is none. */
  cname(name: string): Promise<string[]>
  /** Addresses of a host, for the webhook URL guard and the delivery threads. */
  readonly hosts: Resolver
}

// "This name has no such record" (not a failure of DNS itself): the answer is simply empty.
const ABSENT = new Set(['ENOTFOUND', 'ENODATA', 'NXDOMAIN', 'ENONAME'])

function isAbsent (err: unknown): boolean {
  return typeof err === 'object' && err !== null && ABSENT.has(String((err as { code?: unknown }).code))
}

async function orEmpty<T> (query: Promise<T[]>): Promise<T[]> {
  try {
    return await query
  } catch (err) {
    if (isAbsent(err)) return []
    throw err
  }
}

const bare = (name: string) => name.toLowerCase().replace(/\.$/, '')

/**
 * The resolver for `servers`. Lookups that find nothing resolve with []; a DNS failure (timeout,
 * SERVFAIL, refused) rejects, so that callers can tell "the record is gone" from "DNS is down".
 */
export function createDns (servers: readonly string[], opts: { timeoutMs?: number; tries?: number } = {}): Dns {
  const resolver = new DnsResolver({ timeout: opts.timeoutMs ?? 3000, tries: opts.tries ?? 2 })
  if (servers.length > 0) resolver.setServers([...servers])
  // Without DNS_SERVERS, host names go through getaddrinfo as before (/etc/hosts, the system's order).
  const hosts: Resolver = servers.length === 0
    ? systemResolver
    : async (hostname) => {
      const [v4, v6] = await Promise.allSettled([resolver.resolve4(hostname), resolver.resolve6(hostname)])
      const found: ResolvedAddress[] = []
      if (v4.status === 'fulfilled') for (const address of v4.value) found.push({ address, family: 4 })
      if (v6.status === 'fulfilled') for (const address of v6.value) found.push({ address, family: 6 })
      if (found.length > 0) return found
      // Both failed or both empty: the first real failure, else "not found" as getaddrinfo says it.
      const failure = [v4, v6].find((r) => r.status === 'rejected' && !isAbsent(r.reason))
      if (failure?.status === 'rejected') throw failure.reason
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND', hostname })
    }
  return {
    servers: [...servers],
    txt: async (name) => (await orEmpty(resolver.resolveTxt(name))).map((chunks) => chunks.join('')),
    mx: async (name) => (await orEmpty(resolver.resolveMx(name))).map((m) => ({ exchange: bare(m.exchange), priority: m.priority })),
    cname: async (name) => (await orEmpty(resolver.resolveCname(name))).map(bare),
    hosts,
  }
}
