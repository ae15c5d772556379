// `node dist/benchmarks/store-writes.js` (after `npm run build`): what the pipeline's store writes cost on
// SQLite, per email, with the WAL checkpoints in their own thread (the default) and inline (SQLite's own,
// in the committing thread). Through the store's API, as the pipeline calls it: each round accepts 20,000
// emails 100 to a write (each leased to this node, with its email.sent event), records each one's attempt
// (delivered, with its email.delivered event) 100 to a commit, then reads the email.sent events and writes
// their first deliveries' outcomes for the account's one webhook, 100 to a write.
//
// Two figures per email: the main thread's busy time (event-loop utilization, so waits for the disk are
// left out) and the process's CPU time, all threads (the checkpoint thread included). 4 alternating pairs
// after a warm-up pair; medians.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { eventPayload, type EventRecord, type EventType } from '../src/domain/events.js'
import { newId } from '../src/domain/ids.js'
import type { DeliveryOutcome, RoutingPosition } from '../src/store/deliveries.js'
import type { EmailAttempt, EmailRecord } from '../src/store/emails.js'
import { openSqliteStore } from '../src/store/sqlite/index.js'

const EMAILS = 20_000
const PER_WRITE = 100
const OWNER = 'bench-node'
const HTML = '<p>Hello reader, a short note with <a href="https://example.com/offer?id=1">one link</a> in it.</p>'

function event (accountId: string, emailId: string, type: EventType, recipient: string, at: number): EventRecord {
  const base = { id: newId('evt', at), emailId, type, recipient, occurredAt: new Date(at).toISOString() }
  return { ...base, accountId, payload: eventPayload(base) }
}

function email (accountId: string, n: number, at: number): EmailRecord {
  const iso = new Date(at).toISOString()
  const to = `reader-${n}@example.net`
  return {
    id: newId('em', at), accountId, from: 'Sender <sender@example.com>', to: [to], cc: [], bcc: [], replyTo: [],
    subject: 'A short note', html: HTML, text: null, headers: {}, tags: [], suppressed: [],
    recipients: [{ address: to, state: 'pending' }], status: 'queued', attempts: 0, nextAttemptAt: iso,
    leaseOwner: OWNER, leaseExpiresAt: at + 60_000, leaseToken: 1, lastError: null, createdAt: iso, updatedAt: iso,
  }
}

async function round (checkpoints: 'thread' | 'inline'): Promise<{ main: number; cpu: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-store-writes-'))
  const store = openSqliteStore({ dataDir: dir, checkpoints })
  try {
    const stop = store.subscribe(() => {})
    const start = Date.now()
    const accountId = newId('acct')
    const created = new Date(start).toISOString()
    await store.createAccount({ id: accountId, email: `${accountId}@example.test`, passwordHash: 'x', plan: 'pro', createdAt: created })
    const webhookId = newId('wh')
    await store.insertWebhook({
      id: webhookId, accountId, url: 'https://hooks.example.test/in', events: ['email.sent'], secret: 'whsec_bench',
      previousSecret: null, previousSecretExpiresAt: null, status: 'enabled', rateLimit: null, createdAt: created, updatedAt: created,
    }, 100)

    const elu = performance.eventLoopUtilization()
    const cpu = process.cpuUsage()
    let routing: RoutingPosition | undefined
    for (let n = 0; n < EMAILS; n += PER_WRITE) {
      const now = Date.now()
      const emails = Array.from({ length: PER_WRITE }, (_, i) => email(accountId, n + i, now))
      const sent = emails.map((e) => event(accountId, e.id, 'email.sent', e.recipients[0]!.address, now))
      const accepted = await store.acceptEmails({ emails, events: sent })
      if (accepted.outcome !== 'accepted') throw new Error(`accept: ${accepted.outcome}`)
      // The records: asked for together, they share one commit, as the mailer's batches do.
      const records = await Promise.all(emails.map((e) => store.recordEmailAttempt({
        emailId: e.id, owner: OWNER, leaseToken: 1, recipients: [{ address: e.recipients[0]!.address, state: 'delivered' }],
        status: 'delivered', attempts: 1, nextAttemptAt: null, lastError: null, at: new Date(now).toISOString(),
        events: [event(accountId, e.id, 'email.delivered', e.recipients[0]!.address, now)], suppressions: [],
      } satisfies EmailAttempt)))
      if (records.some((r) => !r)) throw new Error('an attempt was not recorded')
      // The engine: this write's email.sent events, and their first deliveries' outcomes.
      const read = await store.readEvents({ owner: OWNER, now, leaseUntil: now + 60_000, limit: PER_WRITE * 2, ...(routing ? { routing } : {}) })
      if (read.routing === null) throw new Error('the routing lease was not taken')
      routing = read.routing
      const outcomes: DeliveryOutcome[] = read.work.map((w) => ({ kind: 'succeeded', id: w.id, webhookId: w.webhookId, lease: w.lease, ...(w.origin ? { origin: w.origin } : {}), at: now, statusCode: 200, durationMs: 3 }))
      await store.recordOutcomes(outcomes, { now, autoDisableMs: 86_400_000, routed: { owner: OWNER, token: routing.token, through: routing.through } })
    }
    const used = process.cpuUsage(cpu)
    const busy = performance.eventLoopUtilization(elu)
    stop()
    return { main: (busy.active * 1000) / EMAILS, cpu: (used.user + used.system) / EMAILS }
  } finally {
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
await round('thread')
await round('inline')
const runs: Record<'thread' | 'inline', Array<{ main: number; cpu: number }>> = { thread: [], inline: [] }
for (let i = 0; i < 4; i++) {
  runs.inline.push(await round('inline'))
  runs.thread.push(await round('thread'))
}
console.log('| checkpoints | main thread µs per email, each pair | median | process CPU µs per email (all threads), each pair | median |')
console.log('|---|---|---|---|---|')
for (const mode of ['inline', 'thread'] as const) {
  const main = runs[mode].map((r) => r.main)
  const cpu = runs[mode].map((r) => r.cpu)
  console.log(`| ${mode} | ${main.map((x) => x.toFixed(1)).join(', ')} | ${median(main).toFixed(1)} | ${cpu.map((x) => x.toFixed(1)).join(', ')} | ${median(cpu).toFixed(1)} |`)
}
