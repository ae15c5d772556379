// Sender domains in tests: add one through the API, publish the records svc shows on the loopback DNS
// server, and verify it.
import assert from 'node:assert/strict'
import type { Client } from './server.js'
import type { TestDns } from './dns-server.js'

export interface ShownRecord { type: string; name: string; value: string; priority?: number; purpose: string; required: boolean; status: string }

/** Publishes every record (or those whose purpose is in `only`) as svc shows it. */
export function publishRecords (dns: TestDns, records: ShownRecord[], only?: string[]): void {
  for (const r of records) {
    if (only !== undefined && !only.includes(r.purpose)) continue
    if (r.type === 'TXT') dns.publish(r.name, { TXT: [r.value] })
    else if (r.type === 'MX') dns.publish(r.name, { MX: [{ exchange: r.value, priority: r.priority ?? 10 }] })
    else if (r.type === 'CNAME') dns.publish(r.name, { CNAME: r.value })
  }
}

/** Adds `name`, publishes its records and verifies it; returns the verified domain. */
export async function verifiedDomain (client: Client, dns: TestDns, name: string): Promise<{ id: string; name: string; records: ShownRecord[] }> {
  const created = await client.post('/api/domains', { name })
  assert.equal(created.status, 201, created.text)
  publishRecords(dns, created.body.data.records)
  const verified = await client.post(`/api/domains/${created.body.data.id}/verify`)
  assert.equal(verified.status, 200, verified.text)
  assert.equal(verified.body.data.status, 'verified', verified.text)
  return verified.body.data
}
