// A DNS server on 127.0.0.1 (UDP, port 0) for tests: svc reaches it through DNS_SERVERS, and test code
// (mailauth's DKIM verifier) through a node:dns Resolver pointed at it. Its zone is a plain object the
// test edits as it goes: publish a record, remove it, and the next query sees the change. Names absent
// from the zone are NXDOMAIN; a CNAME answers every type at its name, followed by the target's records.
import dgram from 'node:dgram'
import { Resolver } from 'node:dns/promises'
import type { TestContext } from 'node:test'
import dnsPacket, { type Answer, type Packet } from 'dns-packet'

export interface ZoneEntry {
  TXT?: string[]
  MX?: Array<{ exchange: string; priority: number }>
  CNAME?: string
  A?: string[]
}

export interface TestDns {
  /** `127.0.0.1:<port>`: the value for DNS_SERVERS. */
  server: string
  zone: Map<string, ZoneEntry>
  /** Adds to the name's records. */
  publish(name: string, entry: ZoneEntry): void
  /** `(name, type) => answers`, the shape of dns.resolve: what mailauth's `resolver` option takes. */
  resolve: (name: string, type: string) => Promise<unknown>
  queries: number
  /** Zones that never answer: a query for a name at or under one is dropped (counted in `dropped`). */
  silent: Set<string>
  dropped: number
}

/** A TXT value in character-strings of at most 255 bytes, as DNS carries it. */
function chunks (value: string): Buffer[] {
  const bytes = Buffer.from(value)
  const out: Buffer[] = []
  for (let i = 0; i < bytes.length; i += 255) out.push(bytes.subarray(i, i + 255))
  return out.length > 0 ? out : [Buffer.alloc(0)]
}

export async function startDnsServer (t: Pick<TestContext, 'after'>): Promise<TestDns> {
  const zone = new Map<string, ZoneEntry>()
  const socket = dgram.createSocket('udp4')
  const dns: TestDns = {
    server: '',
    zone,
    queries: 0,
    silent: new Set(),
    dropped: 0,
    publish (name, entry) {
      const key = name.toLowerCase()
      const had = zone.get(key) ?? {}
      zone.set(key, {
        ...had,
        ...(entry.TXT ? { TXT: [...(had.TXT ?? []), ...entry.TXT] } : {}),
        ...(entry.MX ? { MX: [...(had.MX ?? []), ...entry.MX] } : {}),
        ...(entry.CNAME ? { CNAME: entry.CNAME } : {}),
        ...(entry.A ? { A: [...(had.A ?? []), ...entry.A] } : {}),
      })
    },
    resolve: async () => [],
  }

  const answersFor = (name: string, type: string, depth = 0): Answer[] | null => {
    const entry = zone.get(name.toLowerCase())
    if (entry === undefined) return null
    if (entry.CNAME !== undefined && type !== 'CNAME' && depth < 5) {
      const rest = answersFor(entry.CNAME, type, depth + 1) ?? []
      return [{ type: 'CNAME', name, ttl: 60, class: 'IN', data: entry.CNAME }, ...rest]
    }
    switch (type) {
      case 'TXT': return (entry.TXT ?? []).map((v) => ({ type: 'TXT', name, ttl: 60, class: 'IN', data: chunks(v) }))
      case 'MX': return (entry.MX ?? []).map((m) => ({ type: 'MX', name, ttl: 60, class: 'IN', data: { preference: m.priority, exchange: m.exchange } }))
      case 'CNAME': return entry.CNAME !== undefined ? [{ type: 'CNAME', name, ttl: 60, class: 'IN', data: entry.CNAME }] : []
      case 'A': return (entry.A ?? []).map((a) => ({ type: 'A', name, ttl: 60, class: 'IN', data: a }))
      default: return []
    }
  }

  socket.on('message', (msg, rinfo) => {
    let query: Packet
    try {
      query = dnsPacket.decode(msg)
    } catch {
      return
    }
    dns.queries++
    const q = query.questions?.[0]
    if (q === undefined) return
    const asked = q.name.toLowerCase()
    for (const z of dns.silent) {
      if (asked === z || asked.endsWith(`.${z}`)) {
        dns.dropped++
        return
      }
    }
    const answers = answersFor(q.name, q.type)
    const response = dnsPacket.encode({
      id: query.id,
      type: 'response',
      flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | dnsPacket.AUTHORITATIVE_ANSWER | (answers === null ? 3 : 0), // rcode 3: NXDOMAIN
      questions: [q],
      answers: answers ?? [],
    })
    socket.send(response, rinfo.port, rinfo.address)
  })
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve))
  dns.server = `127.0.0.1:${socket.address().port}`
  const resolver = new Resolver({ timeout: 2000, tries: 1 })
  resolver.setServers([dns.server])
  dns.resolve = (name, type) => resolver.resolve(name, type as 'TXT')
  t.after(() => new Promise<void>((resolve) => socket.close(() => resolve())))
  return dns
}
