// The restart soak (issue 39): does a restart under load stall the API? svc as a child process on a
// SQLite file; three Pro accounts, each with five webhooks (email.sent and email.delivered) on receivers
// scripted in this process: one healthy, and four that misbehave (slow, 500 at random, 429 with
// Retry-After at random, one that never answers). A load generator in its own process sends
// POST /api/send at a fixed rate (open loop, round robin over the accounts) for the whole run, after a
// warm-up that is not counted; svc is SIGKILLed partway and started again at once on the same file and
// port. Reported besides: each send's email.sent at the healthy receiver, how long after the send.
//
// Reported: each send's latency, p50 / p99 / max of the sends outside [kill, kill + 15 s] (the target:
// p99 < 250 ms); the restart's time to ready (spawn → /readyz 200); whether every accepted send's
// email.sent and email.delivered arrived at the healthy receiver (counted by emailId) by the end of a
// bounded wait; each second's latency and svc's event-loop delay (its /metrics, scraped every SCRAPE_MS) in
// the record, to say when a stall happened.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { iso } from '../../src/domain/clock.js'
import { newId } from '../../src/domain/ids.js'
import { limitsOf } from '../../src/domain/plans.js'
import { newWebhookSecret, sealWebhookSecret } from '../../src/domain/secrets.js'
import { log, notes, QUICK, reportLogged, results, sendBodies } from '../lib/context.js'
import { ask, freePort, machineBusy, sampleCpu, sleep, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { runtimeScrape } from '../lib/runtime.js'
import { summarize } from '../lib/stats.js'
import { deliveryCounts, removeDir, Seeder, startSvc, stopSvc, SVC_SECRET, tempDataDir, type SvcProcess } from '../lib/svc.js'
import type { SendRecord } from '../procs/restart-load.js'

export const SOAK = QUICK
  ? { rate: 150, warmupMs: 3000, durationMs: 40_000, killAtMs: 20_000, excludeMs: 15_000, drainCapMs: 120_000 }
  : { rate: 150, warmupMs: 5000, durationMs: 120_000, killAtMs: 60_000, excludeMs: 15_000, drainCapMs: 240_000 }
const ACCOUNTS = 3
/**
 * How often svc's /metrics is read: as often as a Prometheus that scrapes fast. Each scrape costs svc's
 * main thread something (its delivery statistics are recomputed at most every 5 s), so not every second.
 */
const SCRAPE_MS = 5000
/** The p99 goal (issue 39) for the sends outside the window after the kill. */
export const SOAK_P99_GOAL_MS = 250

export interface SoakFigures {
  p50: number; p99: number; max: number; n: number
  /** Sends outside the window that got no 202 (an error, another status, or no answer). */
  failedOutside: number
  readyMs: number
  accepted: number
  /** Accepted emails whose email.sent / email.delivered never reached the healthy receiver. */
  missingSent: number; missingDelivered: number
  /** The last event at the healthy receiver, after the load's end (s). */
  drainedAfterS: number
  /** Other work on the machine during the load, in cores. */
  foreign: number
}

type Behaviour = (req: http.IncomingMessage, res: http.ServerResponse, body: string) => void

/** One receiver on its own port (svc's delivery threads share connections per origin: receivers apart, as on the Internet). */
async function receiver (behave: Behaviour): Promise<{ origin: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => behave(req, res, Buffer.concat(chunks).toString('utf8')))
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}

async function hook (seeder: Seeder, accountId: string, url: string): Promise<void> {
  const now = iso(Date.now())
  const id = newId('wh')
  const r = await seeder.store.insertWebhook({
    id, accountId, url, events: ['email.sent', 'email.delivered'], secret: sealWebhookSecret(SVC_SECRET, id, newWebhookSecret()), previousSecret: null,
    previousSecretExpiresAt: null, status: 'enabled', filter: null, createdAt: now, updatedAt: now,
  }, limitsOf('pro').webhooks)
  if (r !== 'created') throw new Error('seeding: webhook refused')
}

export async function restartSoak (): Promise<SoakFigures> {
  const { rate, warmupMs, durationMs, killAtMs, excludeMs, drainCapMs } = SOAK
  log(`- restart soak: ${rate} POST /api/send per second for ${durationMs / 1000} s after ${warmupMs / 1000} s of warm-up (open loop, ${ACCOUNTS} accounts), ` +
    `each account's webhooks on a healthy receiver and four misbehaving ones (slow 3 s, 500 half the time, 429 + Retry-After: 1 ` +
    `half the time, never answering); svc SIGKILLed at ${killAtMs / 1000} s and started again at once on the same file; ` +
    `p99 of the sends outside ${excludeMs / 1000} s after the kill (goal < ${SOAK_P99_GOAL_MS} ms)`)
  // The healthy receiver's events, by type, by emailId; the others only count what they were asked.
  const got: Record<string, Map<string, number>> = { 'email.sent': new Map(), 'email.delivered': new Map() }
  /** When each email's email.sent first reached the healthy receiver (wall clock, ms). */
  const sentArrived = new Map<string, number>()
  let lastHealthy = 0
  const asked: Record<string, number> = {}
  const count = (name: string) => { asked[name] = (asked[name] ?? 0) + 1 }
  const held = new Set<http.ServerResponse>()
  const behaviours: Record<string, Behaviour> = {
    healthy: (_req, res, body) => {
      try {
        const e = JSON.parse(body) as { emailId?: string; type?: string }
        const seen = got[e.type ?? '']
        if (seen && e.emailId) {
          seen.set(e.emailId, (seen.get(e.emailId) ?? 0) + 1)
          if (e.type === 'email.sent' && !sentArrived.has(e.emailId)) sentArrived.set(e.emailId, Date.now())
        }
        lastHealthy = Date.now()
      } catch { /* not an event */ }
      setTimeout(() => { res.writeHead(200); res.end() }, 2)
    },
    slow: (_req, res) => { setTimeout(() => { res.writeHead(200); res.end() }, 3000) },
    error: (_req, res) => { res.writeHead(Math.random() < 0.5 ? 500 : 200); res.end() },
    throttle: (_req, res) => {
      if (Math.random() < 0.5) res.writeHead(429, { 'retry-after': '1' })
      else res.writeHead(200)
      res.end()
    },
    // Never answers: svc gives up at its delivery timeout (DELIVERY_TIMEOUT_MS, 10 s) and closes the socket.
    hang: (_req, res) => { held.add(res); res.on('close', () => held.delete(res)) },
  }
  const rx: Record<string, { origin: string; close: () => Promise<void> }> = {}
  for (const [kind, behave] of Object.entries(behaviours)) rx[kind] = await receiver((req, res, body) => { count(kind); behave(req, res, body) })
  const dir = tempDataDir()
  const load = await startProc('restart-load')
  const seeder = new Seeder(dir, rx.healthy!.origin)
  const keys: string[] = []
  let svc: SvcProcess | undefined
  let scraping = true
  const lag: Array<{ at: number; maxMs: number; p99Ms: number; flushes: number; flushSeconds: number }> = []
  try {
    for (let a = 0; a < ACCOUNTS; a++) {
      const account = await seeder.account()
      keys.push(await seeder.apiKey(account))
      for (const kind of Object.keys(behaviours)) await hook(seeder, account, `${rx[kind]!.origin}/${kind}`)
    }
    await seeder.close()
    const port = await freePort()
    svc = await startSvc(dir, { PORT: String(port) }, 'restart-soak')
    const origin = svc.origin
    // svc's event-loop delay over each SCRAPE_MS (prom-client's histogram restarts at each scrape).
    const scraper = (async () => {
      while (scraping) {
        const at = Date.now()
        try {
          const s = await runtimeScrape(origin, 2000)
          lag.push({ at, maxMs: s.lagMaxMs, p99Ms: s.lagP99Ms, flushes: s.flush.count, flushSeconds: s.flush.seconds })
        } catch { /* down, or stalled past 1 s */ }
        await sleep(Math.max(0, SCRAPE_MS - (Date.now() - at)))
      }
    })()
    // Other work on the machine over the load (in cores): its busy time less svc's (both), the load
    // generator's and this process's.
    const busy0 = machineBusy()
    const own0 = process.cpuUsage()
    const loadCpu0 = sampleCpu(load.pid!)
    // CPU seconds (utime + stime) of each svc: the first's over the load until the kill, the second's all its life.
    const svcCpu0 = sampleCpu(svc.pid).total
    let svcCpu = 0
    const running = ask<Msg>(load, { type: 'run', origin, keys, bodies: sendBodies(1), rate, durationMs: warmupMs + durationMs, graceMs: 30_000 }, warmupMs + durationMs + 120_000)
    const loadStart = Date.now()
    await sleep(warmupMs + killAtMs)
    const first = svc
    first.stopping()
    svcCpu += sampleCpu(first.pid).total - svcCpu0
    const killedAt = Date.now()
    await stopChild(first.child, 0, 'SIGKILL')
    reportLogged('restart soak, before the kill', first)
    const spawnAt = Date.now()
    svc = await startSvc(dir, { PORT: String(port) }, 'restart-soak-after')
    const readyMs = Date.now() - spawnAt
    log(`    SIGKILL ${fmt((killedAt - loadStart - warmupMs) / 1000, 1)} s after the warm-up; started again, ready in ${fmt(readyMs)} ms`)
    const out = await running
    const loadEnd = Date.now()
    const secondsOfLoad = (loadEnd - loadStart) / 1000
    svcCpu += sampleCpu(svc.pid).total
    const own = process.cpuUsage(own0)
    const ours = svcCpu + sampleCpu(load.pid!).total - loadCpu0.total + (own.user + own.system) / 1e6
    const foreign = Math.max(0, (machineBusy() - busy0 - ours) / secondsOfLoad)
    const sends = out.sends as SendRecord[]
    const accepted = sends.filter((s) => s.status === 202 && s.id !== undefined).map((s) => s.id!)
    // Every accepted send's two events at the healthy receiver, within a bound.
    const deadline = Date.now() + drainCapMs
    const missing = (type: string) => accepted.filter((id) => !got[type]!.has(id)).length
    while ((missing('email.sent') > 0 || missing('email.delivered') > 0) && Date.now() < deadline) await sleep(250)
    scraping = false
    await scraper
    const missingSent = missing('email.sent')
    const missingDelivered = missing('email.delivered')
    if (missingSent + missingDelivered > 0) log(`    ! gave up waiting for the healthy receiver after ${fmt(drainCapMs / 1000)} s`)

    // The warm-up's sends are not counted: the figure is about the restart, not about a cold start.
    const measuredFrom = (out.startedAt as number) + warmupMs
    const warm = sends.filter((s) => s.at < measuredFrom)
    const measured = sends.filter((s) => s.at >= measuredFrom)
    const inWindow = (s: SendRecord) => s.at >= killedAt && s.at < killedAt + excludeMs
    const outside = measured.filter((s) => !inWindow(s))
    const ok = outside.filter((s) => s.status === 202)
    const lat = summarize(outside.map((s) => s.ms))
    const failed = outside.length - ok.length
    const byStatus: Record<string, number> = {}
    for (const s of sends) {
      const k = s.status === 0 ? (s.error ?? 'error') : String(s.status)
      byStatus[k] = (byStatus[k] ?? 0) + 1
    }
    // Second by second from the load's start: the sends that started in it, and svc's event-loop delay.
    const seconds: Array<{
      s: number; n: number; p99: number; max: number; failed: number; lagMaxMs?: number; flushMs?: number
      /** The sends' email.sent at the healthy receiver: the median wait from the send's start (s), and how many never came. */
      toHealthyS?: number; neverAtHealthy?: number
    }> = []
    for (let s = 0; s * 1000 < durationMs; s++) {
      const from = measuredFrom + s * 1000
      const these = sends.filter((x) => x.at >= from && x.at < from + 1000)
      const l = summarize(these.map((x) => x.ms))
      // The scrape that ends the interval holding this second: its event-loop histogram and flushes since the last one.
      const i = lag.findIndex((x) => x.at >= from + 1000)
      const end = lag[i]
      const before = lag[i - 1]
      const flushes = end && before && end.flushes >= before.flushes ? end.flushes - before.flushes : 0
      const waits = these.filter((x) => x.id !== undefined).map((x) => (sentArrived.get(x.id!) ?? NaN) - x.at)
      const arrived = waits.filter(Number.isFinite)
      seconds.push({ s, n: these.length, p99: Math.round(l.p99), max: Math.round(l.max), failed: these.filter((x) => x.status !== 202).length,
        ...(arrived.length > 0 ? { toHealthyS: Math.round(summarize(arrived).p50 / 100) / 10 } : {}), neverAtHealthy: waits.length - arrived.length,
        ...(end && end.at < from + 1000 + SCRAPE_MS + 500 ? { lagMaxMs: Math.round(end.maxMs) } : {}),
        ...(flushes > 0 ? { flushMs: Math.round(((end!.flushSeconds - before!.flushSeconds) / flushes) * 10_000) / 10 } : {}) })
    }
    const killS = (killedAt - measuredFrom) / 1000
    const slowest = seconds.filter((x) => x.s < killS || x.s >= killS + excludeMs / 1000).sort((a, b) => b.p99 - a.p99).slice(0, 5)
    log(`    sends outside [kill, kill + ${excludeMs / 1000} s]: ${fmt(lat.n)}, p50 ${fmt(lat.p50, 1)} ms, p99 ${fmt(lat.p99, 1)} ms, ` +
      `max ${fmt(lat.max)} ms, ${fmt(failed)} without a 202; all sends by answer: ${JSON.stringify(byStatus)}; ${fmt(out.skipped as number)} skipped, ` +
      `${fmt(out.unanswered as number)} never answered`)
    log(`    warm-up (${warmupMs / 1000} s, not counted): p99 ${fmt(summarize(warm.map((s) => s.ms)).p99, 1)} ms`)
    log(`    slowest seconds outside the window (second: p99 / max ms (svc's event-loop max), its WAL flushes' mean): ` +
      slowest.map((x) => `${x.s}: ${x.p99} / ${x.max}${x.lagMaxMs !== undefined ? ` (${x.lagMaxMs})` : ''}${x.flushMs !== undefined ? `, mean flush ${x.flushMs} ms` : ''}`).join(', '))
    const dupes = [...got['email.sent']!.values()].filter((n) => n > 1).length
    const drainedAfterS = (lastHealthy - loadEnd) / 1000
    log(`    healthy receiver: ${fmt(accepted.length)} accepted sends; email.sent missing ${fmt(missingSent)}, email.delivered missing ${fmt(missingDelivered)}; ` +
      `${fmt(dupes)} email.sent received twice or more; last event ${fmt(drainedAfterS, 1)} s after the load's end; requests to the others: ${JSON.stringify(asked)}`)
    if (failed > 0) notes.push(`restart soak: ${fmt(failed)} sends outside the window after the kill got no 202 (${JSON.stringify(byStatus)})`)
    if (missingSent + missingDelivered > 0) notes.push(`restart soak: events of accepted sends never reached the healthy receiver (email.sent ${missingSent}, email.delivered ${missingDelivered})`)
    log(`    other work on the machine during the load: ${fmt(foreign * 100)} % of a core`)
    if (foreign > 0.25) notes.push(`restart soak: other processes (or the kernel, for ours) used ${fmt(foreign * 100)} % of a core during the load`)
    const figures: SoakFigures = {
      p50: lat.p50, p99: lat.p99, max: lat.max, n: lat.n, failedOutside: failed, readyMs, accepted: accepted.length,
      missingSent, missingDelivered, drainedAfterS, foreign,
    }
    results.restartSoak = {
      ...figures, ratePerSecond: rate, seconds: durationMs / 1000, killAtSeconds: killS, excludedSeconds: excludeMs / 1000, accounts: ACCOUNTS,
      byAnswer: byStatus, skipped: out.skipped, unanswered: out.unanswered, duplicatesSent: dupes, receiverRequests: asked,
      inWindow: summarize(sends.filter(inWindow).map((s) => s.ms)), warmup: { seconds: warmupMs / 1000, ...summarize(warm.map((s) => s.ms)) }, perSecond: seconds,
    }
    return figures
  } finally {
    scraping = false
    await stopChild(load, 2000)
    if (svc) {
      await stopSvc(svc)
      reportLogged('restart soak, after the restart', svc)
    }
    try {
      const counts = deliveryCounts(dir)
      log(`    deliveries by status: ${JSON.stringify(counts.byStatus)}`)
    } catch { /* the store could not be read */ }
    for (const res of held) res.destroy()
    for (const r of Object.values(rx)) await r.close()
    removeDir(dir)
  }
}
