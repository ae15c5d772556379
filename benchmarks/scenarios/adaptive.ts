// Deliveries that adapt (issue 21): svc as a child process against receivers scripted in this process on
// loopback, each as the issue describes it. Events are written into svc's data directory by this process
// while svc runs (svc notices other processes' writes), as sends would make them.
//
// - cap4:       a receiver that takes 4 requests at once (200 after 20 ms), 429 without Retry-After past
//               that; 1,000 email.sent events stored before svc starts. Its own limit allows 200/s, so all
//               1,000 in 5 s; the target is 2 × that, with at most 10 % of attempts refused.
// - ratelimit:  1,000 events to a webhook with rateLimit 50: the most arrivals in any one second (target ≤ 55).
// - outage:     the receiver answers 503 (no Retry-After) for 40 s while 300 events arrive, then 2xx while
//               200 more do; how long after its return the 300 of the outage are all delivered (target ≤ 20 s).
// - unreliable: 150 events/s for 2 minutes to four webhooks: two healthy, one failing 30 % of first
//               attempts at random (500; the second attempt succeeds), one answering 20 % of requests 429
//               with Retry-After: 1; how long after the load's end each has every event (target ≤ 4 min).
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { iso } from '../../src/domain/clock.js'
import { eventPayload, type EventRecord, type EventType } from '../../src/domain/events.js'
import { deliveryId, newId } from '../../src/domain/ids.js'
import { limitsOf } from '../../src/domain/plans.js'
import { newWebhookSecret, sealWebhookSecret } from '../../src/domain/secrets.js'
import { log, QUICK, results } from '../lib/context.js'
import { sleep } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { deliveryCounts, removeDir, Seeder, startSvc, stopSvc, SVC_SECRET, tempDataDir } from '../lib/svc.js'

type Answer = { status: number; headers?: Record<string, string>; delayMs?: number }

/** One scripted receiver path: what it answered, when, and the deliveries it took (2xx). */
class Path {
  requests = 0
  refused = 0
  readonly delivered = new Map<string, number>()
  readonly arrivals: number[] = []
  inFlight = 0
  constructor (readonly answer: (deliveryId: string, path: Path) => Answer) {}
}

async function receiver (paths: Record<string, Path>): Promise<{ origin: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const path = paths[(req.url ?? '/').split('?')[0]!]
      if (!path) { res.statusCode = 404; res.end(); return }
      const id = String(req.headers['x-svc-delivery'] ?? '')
      path.requests += 1
      path.arrivals.push(Date.now())
      const a = path.answer(id, path)
      if (a.status < 200 || a.status >= 300) path.refused += 1
      path.inFlight += 1
      const finish = () => {
        path.inFlight -= 1
        if (a.status >= 200 && a.status < 300 && !path.delivered.has(id)) path.delivered.set(id, Date.now())
        res.writeHead(a.status, a.headers ?? {})
        res.end()
      }
      if (a.delayMs) setTimeout(finish, a.delayMs)
      else finish()
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}

async function hook (seeder: Seeder, accountId: string, url: string, rateLimit: number | null = null): Promise<string> {
  const now = iso(Date.now())
  const id = newId('wh')
  const r = await seeder.store.insertWebhook({
    id, accountId, url, events: ['email.sent'], secret: sealWebhookSecret(SVC_SECRET, id, newWebhookSecret()), previousSecret: null, previousSecretExpiresAt: null,
    status: 'enabled', rateLimit, createdAt: now, updatedAt: now,
  }, limitsOf('pro').webhooks)
  if (r !== 'created') throw new Error('seeding: webhook refused')
  return id
}

async function emit (seeder: Seeder, accountId: string, n: number, type: EventType = 'email.sent'): Promise<string[]> {
  const events: EventRecord[] = []
  for (let i = 0; i < n; i++) {
    const e = { id: newId('evt'), accountId, emailId: newId('em'), type, recipient: `someone${i}@example.com`, occurredAt: iso(Date.now()) }
    events.push({ ...e, payload: eventPayload(e) })
  }
  await seeder.store.insertEvents(events)
  return events.map((e) => e.id)
}

/** Emits `perSecond` events a second for `seconds`, in 10 slices a second. */
async function steady (seeder: Seeder, accountId: string, perSecond: number, seconds: number, ids: string[] = []): Promise<number> {
  const start = Date.now()
  let sent = 0
  for (let slice = 1; slice <= seconds * 10; slice++) {
    const due = Math.round((perSecond * slice) / 10)
    ids.push(...await emit(seeder, accountId, due - sent))
    sent = due
    const wait = start + slice * 100 - Date.now()
    if (wait > 0) await sleep(wait)
  }
  return sent
}

async function until (what: string, done: () => boolean, capMs: number): Promise<boolean> {
  const deadline = Date.now() + capMs
  while (!done()) {
    if (Date.now() > deadline) {
      log(`    ! gave up waiting for ${what} after ${fmt(capMs / 1000)} s`)
      return false
    }
    await sleep(20)
  }
  return true
}

function mostInOneSecond (times: number[]): number {
  const t = times.slice().sort((a, b) => a - b)
  let most = 0
  for (let i = 0, j = 0; i < t.length; i++) {
    while (t[i]! - t[j]! >= 1000) j++
    most = Math.max(most, i - j + 1)
  }
  return most
}

/** One svc run on a fresh data directory: `seed` before the start, `drive` while it runs. */
async function withSvc<T> (label: string, paths: Record<string, Path>, seed: (seeder: Seeder, accountId: string, origin: string) => Promise<void>,
  drive: (seeder: Seeder, accountId: string) => Promise<T>, env: Record<string, string> = {}): Promise<T> {
  const dir = tempDataDir()
  const rx = await receiver(paths)
  const seeder = new Seeder(dir, rx.origin)
  try {
    const account = await seeder.account()
    await seed(seeder, account, rx.origin)
    const svc = await startSvc(dir, env, label)
    try {
      return await drive(seeder, account)
    } finally {
      await stopSvc(svc)
      const counts = deliveryCounts(dir)
      log(`    deliveries by status: ${JSON.stringify(counts.byStatus)}`)
    }
  } finally {
    await seeder.close()
    await rx.close()
    removeDir(dir)
  }
}

export async function cap4 (): Promise<{ seconds: number; refusedShare: number; delivered: number }> {
  const N = 1000
  log(`- cap4: a receiver taking 4 requests at once (200 after 20 ms, else 429), ${fmt(N)} email.sent events stored before the start`)
  const p = new Path((_id, path) => (path.inFlight >= 4 ? { status: 429 } : { status: 200, delayMs: 20 }))
  const out = await withSvc('cap4', { '/cap4': p }, async (seeder, account, origin) => {
    await hook(seeder, account, `${origin}/cap4`)
    await emit(seeder, account, N)
  }, async () => {
    await until('every event at the 4-at-once receiver', () => p.delivered.size >= N, 120_000)
    const first = p.arrivals[0] ?? NaN
    const last = Math.max(...p.delivered.values())
    return { seconds: (last - first) / 1000, refusedShare: p.refused / p.requests, delivered: p.delivered.size }
  })
  log(`    ${fmt(out.delivered)} delivered in ${fmt(out.seconds, 1)} s (its own limit: ${fmt(N / 200, 1)} s); ${fmt(p.requests)} attempts, ${fmt(out.refusedShare * 100, 1)} % refused`)
  results.cap4 = { ...out, attempts: p.requests, ownLimitSeconds: N / 200, targetSeconds: (2 * N) / 200 }
  return out
}

export async function ratelimit (): Promise<{ mostInOneSecond: number; delivered: number }> {
  const N = QUICK ? 300 : 1000
  log(`- ratelimit: ${fmt(N)} events to a webhook with rateLimit 50 (a fast receiver)`)
  const p = new Path(() => ({ status: 200 }))
  const out = await withSvc('ratelimit', { '/paced': p }, async (seeder, account, origin) => {
    await hook(seeder, account, `${origin}/paced`, 50)
    await emit(seeder, account, N)
  }, async () => {
    await until('every event at the rate-limited receiver', () => p.delivered.size >= N, 120_000)
    return { mostInOneSecond: mostInOneSecond(p.arrivals), delivered: p.delivered.size }
  })
  log(`    ${fmt(out.delivered)} delivered; at most ${out.mostInOneSecond} arrivals in one second (limit 50, target ≤ 55)`)
  results.ratelimit = { ...out, rateLimit: 50, events: N }
  return out
}

export async function outage (): Promise<{ drainSeconds: number; delivered: number }> {
  const DOWN_S = 40
  log(`- outage: 503 for ${DOWN_S} s while 300 events arrive, then 2xx while 200 more do`)
  let down = true
  const p = new Path(() => (down ? { status: 503 } : { status: 200, delayMs: 2 }))
  let webhookId = ''
  const out = await withSvc('outage', { '/outage': p }, async (seeder, account, origin) => {
    webhookId = await hook(seeder, account, `${origin}/outage`)
  }, async (seeder, account) => {
    const events: string[] = []
    await steady(seeder, account, 300 / DOWN_S, DOWN_S, events)
    // The backlog: the deliveries of the events stored while it was down (a delivery's id is made from its
    // event's and its webhook's).
    const backlog = events.map((e) => deliveryId(e, webhookId))
    down = false
    const back = Date.now()
    const after = steady(seeder, account, 20, 10)
    await until('the backlog delivered', () => backlog.every((id) => p.delivered.has(id)), 300_000)
    const backlogDone = Math.max(...backlog.map((id) => p.delivered.get(id) ?? NaN))
    await after
    await until('every event delivered', () => p.delivered.size >= 500, 120_000)
    return { drainSeconds: (backlogDone - back) / 1000, delivered: p.delivered.size }
  })
  log(`    the first 300 delivered ${fmt(out.drainSeconds, 1)} s after the receiver's return (target ≤ 20 s); ${fmt(out.delivered)} in all`)
  results.outage = { ...out, downSeconds: DOWN_S, attemptsWhileDown: p.requests }
  return out
}

export async function unreliable (): Promise<Record<string, number>> {
  const RATE = 150
  const SECONDS = QUICK ? 30 : 120
  log(`- unreliable: ${RATE} events/s for ${SECONDS} s to four webhooks (2 healthy, 30 % flaky first attempts, 20 % 429 + Retry-After: 1)`)
  const first = new Set<string>()
  const paths = {
    '/healthy-1': new Path(() => ({ status: 200, delayMs: 2 })),
    '/healthy-2': new Path(() => ({ status: 200, delayMs: 2 })),
    '/flaky': new Path((id) => {
      if (first.has(id)) return { status: 200, delayMs: 2 }
      first.add(id)
      return Math.random() < 0.3 ? { status: 500 } : { status: 200, delayMs: 2 }
    }),
    '/throttled': new Path(() => (Math.random() < 0.2 ? { status: 429, headers: { 'retry-after': '1' } } : { status: 200, delayMs: 2 })),
  }
  const out = await withSvc('unreliable', paths, async (seeder, account, origin) => {
    for (const path of Object.keys(paths)) await hook(seeder, account, `${origin}${path}`)
  }, async (seeder, account) => {
    const sent = await steady(seeder, account, RATE, SECONDS)
    const end = Date.now()
    const after: Record<string, number> = { events: sent }
    for (const [name, p] of Object.entries(paths)) {
      const ok = await until(`every event at ${name}`, () => p.delivered.size >= sent, 6 * 60_000)
      after[name] = ok ? (Math.max(...p.delivered.values()) - end) / 1000 : NaN
      log(`    ${name}: ${fmt(p.delivered.size)} of ${fmt(sent)}, ${ok ? `the last ${fmt(Math.max(0, after[name]), 1)} s after the load's end` : 'INCOMPLETE'}; ${fmt(p.requests)} requests, ${fmt(p.refused)} refused`)
    }
    return after
  })
  results.unreliable = { ...out, ratePerSecond: RATE, seconds: SECONDS, requests: Object.fromEntries(Object.entries(paths).map(([k, p]) => [k, p.requests])) }
  return out
}
