// `node dist/benchmarks/filter-routing.js` (after `npm run build`): what webhook filters (issue 37) cost the
// delivery engine's read of new events on the SQLite store, per event, on the main thread. Each round
// stores 20,000 sent emails, one email.sent event each (100 to a write, as the API does), for an account
// with 10 webhooks, then reads them all through readEvents in pages of 50 under the routing lease, as a
// busy engine does (an engine listening, so the rows just written are read from memory). Four ways:
//   none     no webhook has a filter;
//   route    every webhook has a filter (a domain and a tag) that every email matches, and each event
//            carries its email's route, as svc makes it;
//   lookup   the same filters, events without a route (stored before routes were): each email is read;
//   lookup50 the same with a 50 KiB html part in every email (its tags sit after it in the row).
// CPU time of the read loop only; every way once as a warm-up, then 3 alternating rounds; the median.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eventPayload, type EventRecord } from '../src/domain/events.js'
import { newId } from '../src/domain/ids.js'
import { eventRoute, type WebhookFilter } from '../src/domain/webhook-filter.js'
import type { RoutingPosition } from '../src/store/deliveries.js'
import type { EmailRecord } from '../src/store/emails.js'
import { openSqliteStore } from '../src/store/sqlite/index.js'

const EVENTS = 20_000
const HOOKS = 10
const PAGE = 50
const FROM = 'Shop <orders@shop.example>'
const TAGS = [{ name: 'tenant', value: 't-1' }, { name: 'kind', value: 'receipt' }]
const FILTER: WebhookFilter = { domains: ['shop.example'], tags: [{ name: 'kind', value: 'receipt' }] }

type Way = 'none' | 'route' | 'lookup' | 'lookup50'
const WAYS: Way[] = ['none', 'route', 'lookup', 'lookup50']

async function round (way: Way): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-filter-routing-'))
  const store = openSqliteStore({ dataDir: dir })
  try {
    const stop = store.subscribe(() => {})
    const now = Date.now()
    const at = new Date(now).toISOString()
    const accountId = newId('acct')
    await store.createAccount({ id: accountId, email: `${accountId}@example.test`, passwordHash: 'x', plan: 'pro', createdAt: at })
    for (let h = 0; h < HOOKS; h++) {
      await store.insertWebhook({
        id: newId('wh'), accountId, url: `https://hooks.example.test/${h}`, events: ['email.sent'], secret: 'whsec_bench', previousSecret: null,
        previousSecretExpiresAt: null, status: 'enabled', rateLimit: null, filter: way === 'none' ? null : FILTER, createdAt: at, updatedAt: at,
      }, 100)
    }
    const html = way === 'lookup50' ? `<p>${'x'.repeat(50 * 1024)}</p>` : '<p>Hi</p>'
    for (let i = 0; i < EVENTS; i += 100) {
      const emails: EmailRecord[] = []
      const events: EventRecord[] = []
      for (let j = 0; j < 100; j++) {
        const to = `reader-${i + j}@example.net`
        const email: EmailRecord = {
          id: newId('em', now), accountId, from: FROM, to: [to], cc: [], bcc: [], replyTo: [], subject: 'Hi', html, text: null, headers: {}, tags: TAGS,
          suppressed: [], recipients: [{ address: to, state: 'delivered' }], status: 'delivered', attempts: 1, nextAttemptAt: null, leaseOwner: null,
          leaseExpiresAt: null, leaseToken: 0, lastError: null, createdAt: at, updatedAt: at,
        }
        const e = { id: newId('evt', now), accountId, emailId: email.id, type: 'email.sent' as const, recipient: to, occurredAt: at }
        emails.push(email)
        events.push({ ...e, payload: eventPayload(e), ...(way === 'route' ? { route: eventRoute(FROM, TAGS) } : {}) })
      }
      await store.acceptEmails({ emails, events })
    }
    const before = process.cpuUsage()
    let read = 0
    let made = 0
    let routing: RoutingPosition | undefined
    for (;;) {
      const got = await store.readEvents({ owner: 'bench', now, leaseUntil: now + 600_000, limit: PAGE, ...(routing ? { routing } : {}) })
      if (got.routing === null) throw new Error('the routing lease was not taken')
      routing = got.routing
      if (got.events === 0) break
      read += got.events
      made += got.work.length
    }
    const used = process.cpuUsage(before)
    if (read !== EVENTS || made !== EVENTS * HOOKS) throw new Error(`${way}: read ${read} of ${EVENTS} events, made ${made} of ${EVENTS * HOOKS} first attempts`)
    stop()
    return (used.user + used.system) / read
  } finally {
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
for (const way of WAYS) await round(way)
const got = new Map<Way, number[]>(WAYS.map((w) => [w, []]))
for (let r = 0; r < 3; r++) for (const way of WAYS) got.get(way)!.push(await round(way))
console.log(`readEvents, ${EVENTS} events × ${HOOKS} webhooks, pages of ${PAGE}: main-thread CPU µs per event (median of 3; each round)`)
for (const way of WAYS) {
  const xs = got.get(way)!
  console.log(`  ${way.padEnd(9)} ${median(xs).toFixed(1).padStart(6)}   (${xs.map((x) => x.toFixed(1)).join(', ')})`)
}
