// `node dist/benchmarks/event-reads.js` (after `npm run build`): what the delivery engine's read of new
// events costs the main thread on the SQLite store, per event, two ways: read back from the events table,
// and taken from the rows this process has just committed (src/store/sqlite/recent-events.ts, used while
// an engine listens). Each round writes 20,000 email.sent events for an account with one webhook, 100 to
// a write as the API does, then reads them all through readEvents in pages of 50 under the routing lease,
// as a busy engine does. CPU time of the read loop only; 4 alternating pairs after a warm-up pair.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eventPayload, type EventRecord } from '../src/domain/events.js'
import { newId } from '../src/domain/ids.js'
import type { RoutingPosition } from '../src/store/deliveries.js'
import { openSqliteStore } from '../src/store/sqlite/index.js'

const EVENTS = 20_000
const PAGE = 50

async function round (cached: boolean): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-event-reads-'))
  const store = openSqliteStore({ dataDir: dir })
  try {
    const stop = cached ? store.subscribe(() => {}) : () => {}
    const now = Date.now()
    const accountId = newId('acct')
    await store.createAccount({ id: accountId, email: `${accountId}@example.test`, passwordHash: 'x', plan: 'pro', createdAt: new Date(now).toISOString() })
    await store.insertWebhook({
      id: newId('wh'), accountId, url: 'https://hooks.example.test/in', events: ['email.sent'], secret: 'whsec_bench',
      previousSecret: null, previousSecretExpiresAt: null, status: 'enabled', rateLimit: null, createdAt: new Date(now).toISOString(), updatedAt: new Date(now).toISOString(),
    }, 100)
    for (let i = 0; i < EVENTS; i += 100) {
      const batch: EventRecord[] = []
      for (let j = 0; j < 100; j++) {
        const e = { id: newId('evt', now), accountId, emailId: newId('em', now), type: 'email.sent' as const, recipient: `reader-${i + j}@example.net`, occurredAt: new Date(now).toISOString() }
        batch.push({ ...e, payload: eventPayload(e) })
      }
      await store.insertEvents(batch)
    }
    const before = process.cpuUsage()
    let read = 0
    let routing: RoutingPosition | undefined
    for (;;) {
      const got = await store.readEvents({ owner: 'bench', now, leaseUntil: now + 600_000, limit: PAGE, ...(routing ? { routing } : {}) })
      if (got.routing === null) throw new Error('the routing lease was not taken')
      routing = got.routing
      if (got.events === 0) break
      read += got.events
    }
    const used = process.cpuUsage(before)
    if (read !== EVENTS) throw new Error(`read ${read} of ${EVENTS} events`)
    stop()
    return (used.user + used.system) / read
  } finally {
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

await round(false)
await round(true)
const table: number[][] = [[], []]
for (let i = 0; i < 4; i++) {
  table[0]!.push(await round(false))
  table[1]!.push(await round(true))
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
console.log('| events read | CPU µs per event, each pair | median |')
console.log('|---|---|---|')
console.log(`| from the table | ${table[0]!.map((x) => x.toFixed(2)).join(', ')} | ${median(table[0]!).toFixed(2)} |`)
console.log(`| from the rows just committed | ${table[1]!.map((x) => x.toFixed(2)).join(', ')} | ${median(table[1]!).toFixed(2)} |`)
