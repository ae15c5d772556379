// `node dist/benchmarks/scheduled-claims.js` (after `npm run build`; `--scheduled=N` for another count than
// 1,000,000): whether emails scheduled for later slow what is due now, on SQLite. Two stores, one empty and
// one holding N emails scheduled over the next 30 days (written straight into the table in one
// transaction, rows as acceptEmails writes them), each given the same work through the store's API:
//
// - accept: 2,000 emails sent at once, 100 to a write (each write fsynced, as a send's);
// - claim:  those 2,000, due now, claimed 64 at a time by a mailer until none is left (each claim a write;
//           each claim's emails are then recorded delivered, untimed, as a mailer records its attempts);
// - idle:   1,000 claims with nothing due (a mailer's poll), and 1,000 nextDueAt look-aheads;
// - burst:  10,000 more emails all due at the same millisecond, claimed 64 at a time.
//
// Medians over 3 alternating rounds (empty, scheduled, empty, …) after a warm-up of each. The query plans
// of the claim and the look-ahead are printed too: each must read emails_due from its start up to now,
// never the rows scheduled behind it.
import Database from 'better-sqlite3'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { newId } from '../src/domain/ids.js'
import type { EmailRecord } from '../src/store/emails.js'
import { openSqliteStore, type SqliteStore } from '../src/store/sqlite/index.js'

const SCHEDULED = Number(/^--scheduled=(\d+)$/.exec(process.argv.find((a) => a.startsWith('--scheduled=')) ?? '')?.[1] ?? 1_000_000)
const DUE = 2_000
const BURST = 10_000
const PER_WRITE = 100
const CLAIM = 64
const IDLE = 1_000
const HORIZON_MS = 30 * 86_400_000

function email (accountId: string, n: number, at: number, due = at): EmailRecord {
  const iso = new Date(at).toISOString()
  const to = `reader-${n}@example.net`
  return {
    id: newId('em', at), accountId, from: 'Sender <sender@example.com>', to: [to], cc: [], bcc: [], replyTo: [],
    subject: 'A short note', html: '<p>Hello <a href="https://example.com/offer">there</a></p>', text: null, headers: {}, tags: [], suppressed: [],
    recipients: [{ address: to, state: 'pending' }], status: 'queued', attempts: 0, nextAttemptAt: new Date(due).toISOString(),
    leaseOwner: null, leaseExpiresAt: null, leaseToken: 0, lastError: null, createdAt: iso, updatedAt: iso,
    scheduledAt: null, metadata: {}, tracking: { opens: true, clicks: true }, unsubscribe: true,
  }
}

interface Figures { acceptMs: number; claimMs: number; idleUs: number; lookUs: number; burstMs: number }

/** A data directory with an account, and `scheduled` emails due over the next 30 days from `from`. */
async function prepare (scheduled: number, from: number): Promise<{ dir: string; accountId: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-scheduled-'))
  const store = openSqliteStore({ dataDir: dir })
  const accountId = newId('acct')
  await store.createAccount({ id: accountId, email: `${accountId}@example.test`, passwordHash: 'x', plan: 'pro', createdAt: new Date(from).toISOString() })
  await store.close()
  if (scheduled > 0) {
    const db = new Database(join(dir, 'svc.db'))
    db.pragma('journal_mode = WAL')
    const step = HORIZON_MS / scheduled
    const t0 = performance.now()
    // One statement: a recursive count, each row an email scheduled `step` after the one before.
    db.prepare(`
      WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
      INSERT INTO emails (id, account_id, from_address, to_addresses, cc_addresses, bcc_addresses, reply_to, subject, html, text,
        headers, tags, suppressed, recipients, status, attempts, next_attempt_at, lease_owner, lease_expires_at, lease_token,
        last_error, created_at, updated_at, scheduled_at, metadata, track_opens, track_clicks, unsubscribe)
      SELECT 'em_sched_' || printf('%08d', i), ?, 'Sender <sender@example.com>', json_array('r' || i || '@example.net'), '[]', '[]', '[]',
        'Later', '<p>Later</p>', NULL, '{}', '[{"name":"kind","value":"reminder"}]', '[]',
        json_array(json_object('address', 'r' || i || '@example.net', 'state', 'pending')), 'scheduled', 0,
        strftime('%Y-%m-%dT%H:%M:%fZ', (? + 60000 + i * ?) / 1000.0, 'unixepoch'), NULL, NULL, 0, NULL, ?, ?,
        strftime('%Y-%m-%dT%H:%M:%fZ', (? + 60000 + i * ?) / 1000.0, 'unixepoch'), '{"orderId":"ord"}', 1, 1, 1
      FROM n`).run(scheduled, accountId, from, step, new Date(from).toISOString(), new Date(from).toISOString(), from, step)
    console.log(`# ${scheduled.toLocaleString('en')} scheduled emails written in ${((performance.now() - t0) / 1000).toFixed(1)} s`)
    db.pragma('wal_checkpoint(TRUNCATE)')
    db.close()
  }
  return { dir, accountId }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!

/**
 * Claims 64 at a time until none is due; each claim's emails are then recorded delivered (as a mailer
 * does, so that what is in flight stays bounded), untimed. Returns the claims' own time and the count.
 */
async function claimAll (store: SqliteStore, owner: string): Promise<{ ms: number; claimed: number; claims: number }> {
  let claimed = 0
  let claims = 0
  let ms = 0
  for (;;) {
    const now = Date.now()
    const t = performance.now()
    const got = await store.claimDueEmails({ owner, dueBy: new Date(now).toISOString(), now, leaseUntil: now + 600_000, limit: CLAIM })
    ms += performance.now() - t
    if (got.length === 0) return { ms, claimed, claims }
    claims++
    claimed += got.length
    const at = new Date().toISOString()
    await Promise.all(got.map((e) => store.recordEmailAttempt({
      emailId: e.id, owner, leaseToken: e.leaseToken, recipients: e.recipients.map((r) => ({ ...r, state: 'delivered' as const })),
      status: 'delivered', attempts: 1, nextAttemptAt: null, lastError: null, at, events: [], suppressions: [],
    })))
  }
}

async function round (dir: string, accountId: string, n: number): Promise<Figures> {
  const store = openSqliteStore({ dataDir: dir })
  try {
    // accept: sends due at once, 100 to a write.
    let t = performance.now()
    for (let i = 0; i < DUE; i += PER_WRITE) {
      const now = Date.now()
      const r = await store.acceptEmails({ emails: Array.from({ length: PER_WRITE }, (_, j) => email(accountId, n * 1e6 + i + j, now)), events: [] })
      if (r.outcome !== 'accepted') throw new Error(r.outcome)
    }
    const acceptMs = (performance.now() - t) / (DUE / PER_WRITE)
    // claim: each claim of 64 until none is due.
    const due = await claimAll(store, `bench-${n}`)
    const claimMs = due.ms / due.claims
    if (due.claimed !== DUE) throw new Error(`claimed ${due.claimed} of ${DUE}`)
    // idle: a poll with nothing due, and the look-ahead.
    t = performance.now()
    for (let i = 0; i < IDLE; i++) {
      const now = Date.now()
      const got = await store.claimDueEmails({ owner: 'idle', dueBy: new Date(now).toISOString(), now, leaseUntil: now + 600_000, limit: CLAIM })
      if (got.length > 0) throw new Error('nothing should be due')
    }
    const idleUs = ((performance.now() - t) * 1000) / IDLE
    t = performance.now()
    for (let i = 0; i < IDLE; i++) await store.nextDueAt(new Date().toISOString())
    const lookUs = ((performance.now() - t) * 1000) / IDLE
    // burst: many due at the same millisecond.
    const at = Date.now()
    for (let i = 0; i < BURST; i += 500) {
      const r = await store.acceptEmails({ emails: Array.from({ length: 500 }, (_, j) => email(accountId, n * 1e6 + DUE + i + j, at - 1000, at)), events: [] })
      if (r.outcome !== 'accepted') throw new Error(r.outcome)
    }
    while (Date.now() <= at) await new Promise((resolve) => setTimeout(resolve, 1))
    const burst = await claimAll(store, `burst-${n}`)
    const burstMs = burst.ms / burst.claims
    if (burst.claimed !== BURST) throw new Error(`claimed ${burst.claimed} of ${BURST}`)
    return { acceptMs, claimMs, idleUs, lookUs, burstMs }
  } finally {
    await store.close()
  }
}

const from = Date.now()
const empty = await prepare(0, from)
const full = await prepare(SCHEDULED, from)
try {
  {
    const db = new Database(join(full.dir, 'svc.db'), { readonly: true })
    const plan = (sql: string, ...args: unknown[]) => (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...args) as Array<{ detail: string }>).map((r) => r.detail).join('; ')
    const nowMs = Date.now()
    const now = new Date(nowMs).toISOString()
    console.log(`# claim plan: ${plan('SELECT id FROM emails WHERE next_attempt_at <= ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?) ORDER BY next_attempt_at LIMIT ?', now, nowMs, CLAIM)}`)
    console.log(`# look-ahead plan: ${plan('SELECT next_attempt_at FROM emails WHERE next_attempt_at > ? ORDER BY next_attempt_at LIMIT 1', now)}`)
    db.close()
  }
  let n = 0
  await round(empty.dir, empty.accountId, ++n)
  await round(full.dir, full.accountId, ++n)
  const runs: Record<'empty' | 'full', Figures[]> = { empty: [], full: [] }
  for (let i = 0; i < 3; i++) {
    runs.empty.push(await round(empty.dir, empty.accountId, ++n))
    runs.full.push(await round(full.dir, full.accountId, ++n))
  }
  console.log(`| store | accept, ms per write of ${PER_WRITE} | claim, ms per claim of ${CLAIM} (${DUE} due) | idle poll, µs | look-ahead, µs | burst, ms per claim of ${CLAIM} (${BURST.toLocaleString('en')} due at once) |`)
  console.log('|---|---|---|---|---|---|')
  for (const [name, label] of [['empty', 'empty'], ['full', `${SCHEDULED.toLocaleString('en')} scheduled`]] as const) {
    const f = (k: keyof Figures, digits: number) => median(runs[name].map((r) => r[k])).toFixed(digits)
    console.log(`| ${label} | ${f('acceptMs', 2)} | ${f('claimMs', 2)} | ${f('idleUs', 1)} | ${f('lookUs', 1)} | ${f('burstMs', 2)} |`)
  }
} finally {
  rmSync(empty.dir, { recursive: true, force: true })
  rmSync(full.dir, { recursive: true, force: true })
}
