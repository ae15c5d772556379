// Many scheduled emails due in the same second (issue 37, "At scale"): N emails (100,000; 10,000 with
// --quick) sent through POST /api/send/batch (100 a request, 4 requests in flight, one recipient each, the
// small html part of the mail scenarios), every one with the same `scheduledAt`, a whole second T far
// enough ahead that all are accepted before it. svc runs as in the mail-over-SMTP scenario, on a fresh SQLite
// file, its SMTP_URL at the discarding relay. Measured:
//
// - none goes out before T: the relay's first arrival is after T (the relay is reset before T);
// - the drain: T → first and T → last message at the relay, and the rate after T (N ÷ (last − T)) against
//   the relay's own rate in the same run: nodemailer's pooled transport (the smtp scenario's peer, svc's pool
//   size) sending N plain messages to the same relay; and against svc's own rate without a schedule (N sent
//   at once, the smtp scenario's plain figure: first POST → last message);
// - lease contention: the mailer's claims (svc_store_operation_duration_seconds{op="claimDueEmails"}: calls
//   and time), those that found something (svc_mail_stage_seconds{stage="claim"} counts only those, so the
//   rest found nothing due or unleased), store errors (svc_store_errors_total: a SQLITE_BUSY past the busy
//   timeout would show there), and svc's "lease … lost" warnings; each second of the drain: arrivals, claims,
//   empty claims;
// - svc's CPU while the mail waits (from the last 202 to just before T), and per email over the drain;
// - the store after svc stopped: the emails by status, and attempts beyond one per email.
//
// Then the same with two svc processes on the same data directory (distinct NODE_IDs, all roles each, the
// batches alternating between their APIs): two mailers drain the same queue through one SQLite file, each
// with its own pool of SMTP_POOL_SIZE connections.
import type { ChildProcess } from 'node:child_process'
import Database from 'better-sqlite3'
import { join } from 'node:path'
import { batchBodies, costOf, CpuWatch, log, notes, postBatches, QUICK, recordCost, recordCpu, reportLogged, results, startSvc, stopSvc, type CpuReport } from '../lib/context.js'
import { ask, sleep, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { removeDir, Seeder, tempDataDir, type SvcProcess } from '../lib/svc.js'
import { relayHas, SMTP_CONNECTIONS, SMTP_WARMUP, type RelayStats, warmUp } from './smtp.js'

/** The emails due at once, and how far ahead of the first POST their time is set (room to accept them all, then a wait). */
const SIZE = QUICK ? { emails: 10_000, leadMs: 20_000 } : { emails: 100_000, leadMs: 75_000 }
/** At least this long between the last 202 and T, else the idle figure is not measured. */
const MIN_IDLE_MS = 3000

/** The counters this scenario reads from each svc's /metrics, summed over the nodes. */
interface Counters {
  claims: number; claimSeconds: number; claimsWithEmails: number; nextDue: number
  records: number; recordSeconds: number; renewals: number; storeErrors: number
  /** Flushes of the WAL to disk (fdatasync) and their time, which every durable write and each record waits for. */
  flushes: number; flushSeconds: number
  /** Not a counter: the longest event-loop delay of any node since its /metrics was last read (prom-client resets it at each read). */
  lagMax: number
}

const metric = (text: string, re: RegExp): number => {
  let n = 0
  for (const m of text.matchAll(re)) n += Number(m[1])
  return n
}

async function counters (nodes: SvcProcess[]): Promise<Counters> {
  const out: Counters = { claims: 0, claimSeconds: 0, claimsWithEmails: 0, nextDue: 0, records: 0, recordSeconds: 0, renewals: 0, storeErrors: 0, flushes: 0, flushSeconds: 0, lagMax: 0 }
  for (const svc of nodes) {
    const text = await (await fetch(`${svc.origin}/metrics`, { signal: AbortSignal.timeout(5000) })).text()
    out.claims += metric(text, /^svc_store_operation_duration_seconds_count\{op="claimDueEmails"\} ([0-9.e+-]+)$/gm)
    out.claimSeconds += metric(text, /^svc_store_operation_duration_seconds_sum\{op="claimDueEmails"\} ([0-9.e+-]+)$/gm)
    out.claimsWithEmails += metric(text, /^svc_mail_stage_seconds_count\{stage="claim"\} ([0-9.e+-]+)$/gm)
    out.nextDue += metric(text, /^svc_store_operation_duration_seconds_count\{op="nextDueAt"\} ([0-9.e+-]+)$/gm)
    out.records += metric(text, /^svc_store_operation_duration_seconds_count\{op="recordEmailAttempt"\} ([0-9.e+-]+)$/gm)
    out.recordSeconds += metric(text, /^svc_store_operation_duration_seconds_sum\{op="recordEmailAttempt"\} ([0-9.e+-]+)$/gm)
    out.renewals += metric(text, /^svc_store_operation_duration_seconds_count\{op="renewEmailLeases"\} ([0-9.e+-]+)$/gm)
    out.storeErrors += metric(text, /^svc_store_errors_total\{[^}]*\} ([0-9.e+-]+)$/gm)
    out.flushes += metric(text, /^svc_store_disk_flush_seconds_count ([0-9.e+-]+)$/gm)
    out.flushSeconds += metric(text, /^svc_store_disk_flush_seconds_sum ([0-9.e+-]+)$/gm)
    out.lagMax = Math.max(out.lagMax, metric(text, /^nodejs_eventloop_lag_max_seconds ([0-9.e+-]+)$/gm))
  }
  return out
}

const minus = (a: Counters, b: Counters): Counters => ({
  ...Object.fromEntries(Object.keys(a).map((k) => [k, a[k as keyof Counters] - b[k as keyof Counters]])) as unknown as Counters,
  lagMax: a.lagMax,
})

export interface BurstRun {
  nodes: number
  emails: number
  /** The POSTs: seconds from the first to the last answer, emails accepted a second, statuses. */
  acceptSeconds: number; acceptRate: number; statuses: Record<string, number>
  /** From the last 202 to T, in seconds. */
  leadSeconds: number
  /** Relay arrival − T, in ms, of the first and the last message (a negative first: one went early). */
  firstAfterMs: number; lastAfterMs: number
  arrived: number
  /** Messages at the relay before T: those there half a second before it, at least 1 if the first came before T (should be 0). */
  beforeT: number
  /** N ÷ (last − T), and N ÷ (last − first), emails a second. */
  rate: number; rateFromFirst: number
  /** svc's CPU (share of one core, all nodes) while the mail waited, and its main thread(s); the polls meanwhile. */
  idle: { seconds: number; cpu: number; main: number; claims: number; nextDue: number } | null
  /** Over the drain (T to the last record): the mailers' claims, those that found nothing, time per claim. */
  claims: number; emptyClaims: number; claimMeanMs: number; recordMeanMs: number; storeErrors: number
  /** Over the drain: the WAL's flushes to disk (all nodes) and their mean time, in ms. */
  flushes: number; flushMeanMs: number
  /** svc's warnings and errors, by message (lease lost, busy…). */
  logged: Record<string, number>
  /** svc's CPU µs per email over the drain, all nodes and threads. */
  cpuPerEmailUs: number
  /** Each second after T: messages at the relay, claims, claims that found nothing, the longest event-loop delay of a node (ms). */
  perSecond: Array<{ s: number; messages: number; claims: number; empty: number; lagMaxMs: number }>
  /** The longest event-loop delay of any node over the drain, in ms. */
  lagMaxMs: number
  /** The scheduled emails by status in the store after svc stopped, and their attempts beyond one per email. */
  byStatus: Record<string, number>; extraAttempts: number
  /** Other work on the machine during the drain, in cores. */
  foreign: number
}

export interface ScheduledBurstFigures {
  emails: number
  /** The relay's rate: nodemailer's pooled transport sending N plain messages, emails/s. */
  relayRate: number
  /** svc's rate without a schedule: N emails sent at once, first POST → last at the relay, emails/s. */
  immediateRate: number
  one?: BurstRun
  two?: BurstRun
}

function storeState (dir: string): { byStatus: Record<string, number>; extraAttempts: number } {
  const db = new Database(join(dir, 'svc.db'), { readonly: true })
  try {
    // The scheduled emails only (the warm-up's are not).
    const rows = db.prepare('SELECT status, count(*) AS n, sum(max(attempts - 1, 0)) AS extra FROM emails WHERE scheduled_at IS NOT NULL GROUP BY status').all() as Array<{ status: string; n: number; extra: number }>
    return { byStatus: Object.fromEntries(rows.map((r) => [r.status, r.n])), extraAttempts: rows.reduce((n, r) => n + (r.extra ?? 0), 0) }
  } finally {
    db.close()
  }
}

const cpuOfAll = (report: CpuReport, names: string[]): { total: number; main: number } =>
  names.reduce((acc, n) => ({ total: acc.total + (report[n]?.total ?? 0), main: acc.main + (report[n]?.main ?? 0) }), { total: 0, main: 0 })

async function svcRun (relay: ChildProcess, port: number, count: number, nodeCount: number): Promise<BurstRun> {
  const label = `scheduled-burst-${nodeCount}`
  const dir = tempDataDir()
  const seeder = new Seeder(dir, 'http://127.0.0.1:9')
  const account = await seeder.account()
  const key = await seeder.apiKey(account)
  await seeder.close()
  const nodes: SvcProcess[] = []
  try {
    const env = { SMTP_URL: `smtp://127.0.0.1:${port}`, SMTP_POOL_SIZE: String(SMTP_CONNECTIONS) }
    for (let i = 0; i < nodeCount; i++) nodes.push(await startSvc(dir, { ...env, NODE_ID: `bench-${i + 1}` }, nodeCount > 1 ? `${label}-node${i + 1}` : label))
    // Each node's mailer and SMTP pool warmed as in the smtp scenario: its own sends, unmeasured.
    for (const [i, svc] of nodes.entries()) await warmUp(relay, svc.origin, key, SMTP_WARMUP, `${label} node ${i + 1}`)
    const names = nodes.map((_, i) => `svc${i + 1}`)
    const pids = Object.fromEntries(nodes.map((n, i) => [names[i]!, n.pid]))

    // T: a whole second, far enough ahead for every POST to be answered before it.
    const t0 = Date.now()
    const T = Math.ceil((t0 + SIZE.leadMs) / 1000) * 1000
    const scheduledAt = new Date(T).toISOString()
    const bodies = batchBodies(count).map((b) => JSON.stringify((JSON.parse(b) as Array<Record<string, unknown>>).map((e) => ({ ...e, scheduledAt }))))
    let next = 0
    const statuses: Record<string, number> = {}
    await Promise.all(Array.from({ length: 4 }, async (_, lane) => {
      while (next < bodies.length) {
        const i = next++
        // Two nodes: the batches alternate between their APIs, as behind a load balancer.
        const origin = nodes[(i + lane) % nodes.length]!.origin
        const res = await fetch(`${origin}/api/send/batch`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key }, body: bodies[i]! })
        await res.arrayBuffer()
        statuses[res.status] = (statuses[res.status] ?? 0) + 1
      }
    }))
    const accepted = Date.now()
    const acceptSeconds = (accepted - t0) / 1000
    log(`    ${label}: ${fmt(count)} emails scheduled for ${scheduledAt} accepted in ${fmt(acceptSeconds, 1)} s (${fmt(count / acceptSeconds)}/s; statuses ${JSON.stringify(statuses)}), ` +
      `${fmt((T - accepted) / 1000, 1)} s before T`)
    if ((statuses['202'] ?? 0) * 100 < count) notes.push(`${label}: only ${fmt((statuses['202'] ?? 0) * 100)} of ${fmt(count)} emails were accepted (statuses ${JSON.stringify(statuses)})`)
    await ask(relay, { type: 'reset' })

    // The wait: svc's CPU from a moment after the last 202 to a moment before T.
    let idle: BurstRun['idle'] = null
    if (T - accepted >= MIN_IDLE_MS) {
      await sleep(1000)
      const c0 = await counters(nodes)
      const watch = new CpuWatch(pids)
      await sleep(Math.max(0, T - 500 - Date.now()))
      const report = watch.stop()
      const c1 = minus(await counters(nodes), c0)
      const cpu = cpuOfAll(report, names)
      const seconds = report[names[0]!]!.seconds
      idle = { seconds, cpu: cpu.total, main: cpu.main, claims: c1.claims, nextDue: c1.nextDue }
      log(`    while the mail waits (${fmt(seconds, 1)} s): svc ${fmt(cpu.total * 100, 1)} % of a core (main thread${nodeCount > 1 ? 's' : ''} ${fmt(cpu.main * 100, 1)} %), ` +
        `${fmt(c1.claims / seconds, 1)} claims/s and ${fmt(c1.nextDue / seconds, 1)} look-aheads/s`)
    } else {
      log(`    ! ${label}: the last 202 came ${fmt((T - accepted) / 1000, 1)} s before T: the wait is not measured`)
      notes.push(`${label}: the POSTs ended ${fmt((T - accepted) / 1000, 1)} s before T (lead ${SIZE.leadMs / 1000} s): svc's CPU while mail waits was not measured`)
      await sleep(Math.max(0, T - 500 - Date.now()))
    }
    const before = await ask<RelayStats>(relay, { type: 'stats' })
    const c0 = await counters(nodes)
    const watch = new CpuWatch(pids)
    await sleep(Math.max(0, T - Date.now()))

    // The drain: the relay polled every 100 ms, the metrics every second, until every email is in.
    const perSecond: BurstRun['perSecond'] = []
    let last = c0
    let lastMessages = before.messages
    let counted = before.messages
    let s: RelayStats = before
    let lastChange = Date.now()
    const stallMs = QUICK ? 10_000 : 20_000
    for (let tick = 1; ; tick++) {
      await sleep(Math.max(0, T + tick * 100 - Date.now()))
      s = await ask<RelayStats>(relay, { type: 'stats' })
      if (s.messages !== lastMessages) lastChange = Date.now()
      if (tick % 10 === 0 || s.messages >= count) {
        const c = await counters(nodes)
        const d = minus(c, last)
        perSecond.push({ s: Math.ceil(tick / 10), messages: s.messages - counted, claims: d.claims, empty: d.claims - d.claimsWithEmails, lagMaxMs: c.lagMax * 1000 })
        last = c
        counted = s.messages
      }
      lastMessages = s.messages
      if (s.messages >= count) break
      if (Date.now() - lastChange > stallMs) {
        log(`    ! ${label}: no message at the relay for ${stallMs / 1000} s, at ${fmt(s.messages)} of ${fmt(count)}`)
        break
      }
    }
    // The last outcomes are recorded before the counters are read.
    await relayHas(relay, count, label)
    await sleep(500)
    const report = watch.stop()
    const drain = minus(await counters(nodes), c0)
    s = await ask<RelayStats>(relay, { type: 'stats' })
    const foreign = recordCpu(label, report)
    // The nodes' CPU together, as one svc (main: their main threads; other: every other thread).
    const perNode = nodes.map((n, i) => costOf({ [names[i]!]: report[names[i]!]! }, s.messages, { name: names[i]!, pid: n.pid, deliveryTids: [] })[names[i]!]!)
    const svcCost = perNode.reduce((a, c) => ({ total: a.total + c.total, main: a.main + c.main, delivery: 0, other: a.other! + c.other! }), { total: 0, main: 0, delivery: 0, other: 0 })
    recordCost({ what: `scheduled burst: ${fmt(count)} due at once, ${nodeCount} node${nodeCount > 1 ? 's' : ''} (svc)`, per: 'email', count: s.messages, procs: { svc: svcCost } })
    const firstAfterMs = s.messages > 0 ? s.first - T : NaN
    const lastAfterMs = s.messages > 0 ? s.last - T : NaN
    const run: Omit<BurstRun, 'byStatus' | 'extraAttempts' | 'logged'> = {
      nodes: nodeCount, emails: count, acceptSeconds, acceptRate: count / acceptSeconds, statuses, leadSeconds: (T - accepted) / 1000,
      firstAfterMs, lastAfterMs, arrived: s.messages, beforeT: Math.max(before.messages, firstAfterMs < 0 ? 1 : 0),
      rate: s.messages / (lastAfterMs / 1000), rateFromFirst: s.messages > 1 ? (s.messages - 1) / ((s.last - s.first) / 1000) : NaN,
      idle, claims: drain.claims, emptyClaims: drain.claims - drain.claimsWithEmails,
      claimMeanMs: drain.claims > 0 ? drain.claimSeconds * 1000 / drain.claims : NaN,
      recordMeanMs: drain.records > 0 ? drain.recordSeconds * 1000 / drain.records : NaN,
      storeErrors: drain.storeErrors, flushes: drain.flushes, flushMeanMs: drain.flushes > 0 ? drain.flushSeconds * 1000 / drain.flushes : NaN, cpuPerEmailUs: svcCost.total, perSecond, lagMaxMs: Math.max(drain.lagMax * 1000, ...perSecond.map((p) => p.lagMaxMs)), foreign,
    }
    log(`    ${label}: ${fmt(s.messages)}/${fmt(count)} at the relay, ${fmt(before.messages)} before T; first ${fmt(firstAfterMs)} ms after T, last ${fmt(lastAfterMs / 1000, 2)} s after T: ` +
      `${fmt(run.rate)} emails/s from T (${fmt(run.rateFromFirst)}/s from the first); svc ${fmt(run.cpuPerEmailUs)} µs CPU per email`)
    log(`      claims over the drain: ${fmt(drain.claims)} (${fmt(run.emptyClaims)} found nothing), ${fmt(run.claimMeanMs, 2)} ms each; records ${fmt(drain.records)}, ${fmt(run.recordMeanMs, 2)} ms each; ` +
      `WAL flushes ${fmt(drain.flushes)}, ${fmt(run.flushMeanMs, 2)} ms each; store errors ${fmt(drain.storeErrors)}; lease renewals ${fmt(drain.renewals)}; longest event-loop delay ${fmt(run.lagMaxMs)} ms`)
    log(`      each second after T (messages / claims / empty / event-loop max ms): ${perSecond.map((p) => `${fmt(p.messages)}/${p.claims}/${p.empty}/${fmt(p.lagMaxMs)}`).join(' ')}`)
    const logged: Record<string, number> = {}
    for (const [i, svc] of nodes.splice(0).entries()) {
      await stopSvc(svc)
      for (const [m, n] of Object.entries(reportLogged(nodeCount > 1 ? `${label} node ${i + 1}` : label, svc))) logged[m] = (logged[m] ?? 0) + n
    }
    const state = storeState(dir)
    log(`      in the store after stop: ${JSON.stringify(state.byStatus)}, ${fmt(state.extraAttempts)} attempts beyond the first`)
    if (before.messages > 0 || firstAfterMs < 0) notes.push(`${label}: ${fmt(before.messages)} messages reached the relay before T (first ${fmt(firstAfterMs)} ms after T)`)
    if (s.messages > count) notes.push(`${label}: the relay received ${fmt(s.messages - count)} messages more than the ${fmt(count)} emails (sent twice)`)
    if (s.messages < count) notes.push(`${label}: only ${fmt(s.messages)} of ${fmt(count)} reached the relay`)
    return { ...run, logged, ...state }
  } finally {
    for (const svc of nodes) await stopSvc(svc)
    removeDir(dir)
  }
}

/**
 * svc's own rate on the path without a schedule, in the same run: N emails sent at once (the smtp scenario's
 * plain figure: from the first POST to the last message at the relay, the API accepting meanwhile).
 */
async function immediateRun (relay: ChildProcess, port: number, count: number): Promise<number> {
  const label = 'scheduled-burst-immediate'
  const dir = tempDataDir()
  const seeder = new Seeder(dir, 'http://127.0.0.1:9')
  const key = await seeder.apiKey(await seeder.account())
  await seeder.close()
  const svc = await startSvc(dir, { SMTP_URL: `smtp://127.0.0.1:${port}`, SMTP_POOL_SIZE: String(SMTP_CONNECTIONS) }, label)
  try {
    await warmUp(relay, svc.origin, key, SMTP_WARMUP, label)
    const watch = new CpuWatch({ svc: svc.pid })
    const started = Date.now()
    const statuses = await postBatches(svc.origin, key, batchBodies(count), 4)
    const s = await relayHas(relay, count, label)
    const report = watch.stop()
    recordCpu(label, report)
    recordCost({ what: `scheduled burst: svc's rate without a schedule, ${fmt(count)} sent at once (svc)`, per: 'email', count: s.messages, procs: costOf(report, s.messages, { name: 'svc', pid: svc.pid, deliveryTids: [] }) })
    const rate = s.messages / ((s.last - started) / 1000)
    log(`    svc without a schedule: ${fmt(count)} sent at once: ${fmt(rate)} emails/s, first POST → last at the relay (${fmt(s.messages)} at the relay; statuses ${JSON.stringify(statuses)})`)
    return rate
  } finally {
    await stopSvc(svc)
    reportLogged(label, svc)
    removeDir(dir)
  }
}

async function peerRun (peer: ChildProcess, relay: ChildProcess, port: number, count: number): Promise<number> {
  await ask(relay, { type: 'reset' })
  const watch = new CpuWatch({ peer: peer.pid })
  const r = await ask<Msg>(peer, { type: 'send', port, count, connections: SMTP_CONNECTIONS, from: 'svc <no-reply@localhost>' }, 600_000)
  const report = watch.stop()
  const s = await ask<RelayStats>(relay, { type: 'stats' })
  const rate = s.messages / Number(r.seconds)
  recordCpu('scheduled-burst-peer', report)
  recordCost({ what: `scheduled burst: the relay's rate, ${fmt(count)} plain (nodemailer peer)`, per: 'email', count: s.messages, procs: costOf(report, s.messages) })
  log(`    the relay's rate: nodemailer pooled (${SMTP_CONNECTIONS} conn.), ${fmt(count)} plain messages: ${fmt(rate)} emails/s (${fmt(s.messages)} at the relay, ${Number(r.failed)} failed)`)
  return rate
}

export async function scheduledBurst (): Promise<ScheduledBurstFigures> {
  const count = SIZE.emails
  log(`- scheduled burst: ${fmt(count)} emails through POST /api/send/batch, all scheduledAt the same second (≈ ${SIZE.leadMs / 1000} s ahead) → the discarding relay; ` +
    `one svc, then two on the same SQLite file; beside nodemailer's pooled transport (${SMTP_CONNECTIONS} connections) sending ${fmt(count)} plain messages`)
  const relay = await startProc('relay')
  const peer = await startProc('smtp-peer')
  const port = Number((await ask<Msg>(relay, { type: 'info' })).port)
  const fig: ScheduledBurstFigures = { emails: count, relayRate: NaN, immediateRate: NaN }
  try {
    await ask<Msg>(peer, { type: 'send', port, count: SMTP_WARMUP, connections: SMTP_CONNECTIONS, from: 'svc <no-reply@localhost>' }, 300_000)
    fig.relayRate = await peerRun(peer, relay, port, count)
    await stopChild(peer, 2000)
    fig.immediateRate = await immediateRun(relay, port, count)
    fig.one = await svcRun(relay, port, count, 1)
    fig.two = await svcRun(relay, port, count, 2)
  } finally {
    await stopChild(relay, 2000)
    await stopChild(peer, 2000)
  }
  for (const r of [fig.one, fig.two]) {
    if (r === undefined) continue
    log(`    ${r.nodes} node${r.nodes > 1 ? 's' : ''}: T → last ${fmt(r.lastAfterMs / 1000, 2)} s, ${fmt(r.rate)} emails/s = ${fmt(r.rate / fig.relayRate, 2)} × the relay's rate ` +
      `(${fmt(fig.relayRate)}/s), ${fmt(r.rate / fig.immediateRate, 2)} × svc's own without a schedule (${fmt(fig.immediateRate)}/s); ${fmt(r.emptyClaims)} of ${fmt(r.claims)} claims found nothing`)
  }
  results.scheduledBurst = fig
  return fig
}
