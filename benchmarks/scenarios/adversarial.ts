// Adversarial sends: can one account stall svc for the others? For each shape of lib/adversarial.ts, a
// fresh svc (a fresh data directory: an email that stalls svc would stall the next start too) with two
// Pro accounts; account B makes ordinary sends at a steady rate, alone for a warm-up, then beside account
// A sending that 1 MiB body at a steady rate. Reported per shape: B's request latency (p50, p99, max),
// svc's own event-loop delay over the window (p99, max, from its /metrics), and how many of A's sends
// were accepted (202) or refused. Every phase is bounded in time: a stalled svc is left behind, its
// unanswered requests counted (their wait so far is a lower bound of their latency), and it is killed.
import { CpuWatch, log, notes, recordCpu, reportLogged, results, sendBodies, sinkOrigin, SIZES, startSvc, stopSvc } from '../lib/context.js'
import { SHAPES } from '../lib/adversarial.js'
import { ask, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { runtimeScrape, runtimeWindow, type RuntimeScrape } from '../lib/runtime.js'
import { removeDir, Seeder, tempDataDir } from '../lib/svc.js'

interface SideReport {
  sent: number; skipped: number; statuses: Record<string, number>; errors: number; unanswered: number; longestUnansweredMs: number
  latency: { p50: number; p90: number; p99: number; max: number; n: number }
}

export interface ShapeFigures {
  shape: string
  what: string
  bodyBytes: number
  /** B's p99 during the warm-up, alone with a cold svc (not a figure: a reference). */
  bAloneP99Ms: number
  /** A's sends: accepted (202), refused (any other answer), and those never answered. */
  accepted: number
  refused: number
  aStatuses: Record<string, number>
  aUnanswered: number
  /** B's ordinary sends during the window. */
  b: SideReport
  /** svc's main thread over the window (undefined: svc did not answer /metrics in time, it was stalled). */
  eventLoopDelayP99Ms?: number
  eventLoopDelayMaxMs?: number
  /** svc did not stop within its grace after SIGTERM and was killed. */
  killed: boolean
}

export interface AdversarialFigures {
  shapes: ShapeFigures[]
  /** The worst shape's figures (B's p99 and max, the event-loop max), and A's totals. */
  worst: {
    bP99Ms: number; bMaxMs: number; eventLoopDelayMaxMs: number; stalledShapes: string[]
    /** Some of B's sends were never answered: its p99 and max are only lower bounds. */
    bLowerBound: boolean
  }
  accepted: number
  refused: number
}

const SCRAPE_TIMEOUT_MS = 1500
const STOP_GRACE_MS = 2000

export async function adversarial (): Promise<AdversarialFigures> {
  const shapes = Object.keys(SHAPES)
  log(`- adversarial sends: ${shapes.length} shapes of 1 MiB bodies, each against a fresh svc: account A sends it ${SIZES.advARate}/s ` +
    `while account B makes ordinary sends ${SIZES.advBRate}/s (after ${SIZES.advWarmupMs / 1000} s of B alone); ` +
    `${SIZES.advMs / 1000} s each, then at most ${SIZES.advGraceMs / 1000} s for the answers still due`)
  const proc = await startProc('adversary')
  const out: ShapeFigures[] = []
  try {
    for (const shape of shapes) {
      const dir = tempDataDir()
      try {
        const seeder = new Seeder(dir, sinkOrigin)
        const accountA = await seeder.account()
        const accountB = await seeder.account()
        const keyA = await seeder.apiKey(accountA)
        const keyB = await seeder.apiKey(accountB)
        await seeder.close()
        const svc = await startSvc(dir, {}, `adversarial-${shape}`)
        let killed = false
        try {
          const common = { origin: svc.origin, keyA, keyB, bBodies: sendBodies(1), bRate: SIZES.advBRate }
          const warm = await ask<Msg>(proc, { type: 'warmup', ...common, durationMs: SIZES.advWarmupMs }, SIZES.advWarmupMs + 30_000)
          const alone = (warm.b as SideReport).latency
          // The event-loop histogram restarts at each scrape: this one opens the window.
          const first = await runtimeScrape(svc.origin, SCRAPE_TIMEOUT_MS).catch(() => undefined)
          const watch = new CpuWatch({ svc: svc.pid, adversary: proc.pid })
          const r = await ask<Msg>(proc, {
            type: 'attack', ...common, shape, aRate: SIZES.advARate, durationMs: SIZES.advMs, graceMs: SIZES.advGraceMs,
          }, SIZES.advMs + SIZES.advGraceMs + 30_000)
          const last: RuntimeScrape | undefined = await runtimeScrape(svc.origin, SCRAPE_TIMEOUT_MS).catch(() => undefined)
          recordCpu(`adversarial ${shape}`, watch.stop())
          const runtime = first && last ? runtimeWindow(first, last) : undefined
          const a = r.a as SideReport
          const b = r.b as SideReport
          const accepted = a.statuses['202'] ?? 0
          const answered = Object.values(a.statuses).reduce((n, v) => n + v, 0)
          const fig: ShapeFigures = {
            shape, what: String(r.what), bodyBytes: Number(r.bodyBytes), bAloneP99Ms: alone.p99,
            accepted, refused: answered - accepted, aStatuses: a.statuses, aUnanswered: a.unanswered + a.errors, b,
            ...(runtime ? { eventLoopDelayP99Ms: runtime.eventLoopDelayP99Ms, eventLoopDelayMaxMs: runtime.eventLoopDelayMaxMs } : {}),
            killed: false,
          }
          out.push(fig)
          const bLine = `B: ${fmt(b.latency.n)} sends, p50 ${fmt(b.latency.p50, 1)} ms, p99 ${fmt(b.latency.p99, 1)} ms, max ${fmt(b.latency.max, 1)} ms` +
            (b.unanswered > 0 ? ` (${fmt(b.unanswered)} unanswered, one for ${fmt(b.longestUnansweredMs / 1000, 1)} s when abandoned)` : '') +
            (b.errors > 0 ? `, ${b.errors} errors` : '') + `; statuses ${JSON.stringify(b.statuses)}`
          log(`    ${shape}: ${fig.what} (${fmt(fig.bodyBytes)} bytes); B alone first (svc cold, not counted): p99 ${fmt(alone.p99, 1)} ms`)
          log(`      A: ${fmt(a.sent)} sent, ${fmt(accepted)} accepted, ${fmt(fig.refused)} refused ${JSON.stringify(a.statuses)}` +
            `${fig.aUnanswered > 0 ? `, ${fmt(fig.aUnanswered)} unanswered` : ''}${a.skipped > 0 ? `, ${fmt(a.skipped)} not sent (8 already in flight)` : ''}`)
          log(`      ${bLine}`)
          log(runtime
            ? `      svc's event-loop delay in the window: p99 ${fmt(runtime.eventLoopDelayP99Ms, 1)} ms, max ${fmt(runtime.eventLoopDelayMaxMs, 1)} ms`
            : `      svc's event-loop delay: not measured (svc did not answer /metrics within ${SCRAPE_TIMEOUT_MS / 1000} s: it was stalled)`)
        } finally {
          const stopped = await stopSvc(svc, STOP_GRACE_MS)
          killed = stopped.exitCode === null
          const fig = out.find((f) => f.shape === shape)
          if (fig) fig.killed = killed
          if (killed) log(`      svc did not stop within ${STOP_GRACE_MS / 1000} s of SIGTERM (stalled): killed`)
          reportLogged(`adversarial ${shape}`, svc)
        }
      } finally {
        removeDir(dir)
      }
    }
  } finally {
    await stopChild(proc, 2000)
  }

  const max = (xs: number[]) => {
    const finite = xs.filter((x) => Number.isFinite(x))
    return finite.length > 0 ? Math.max(...finite) : NaN
  }
  const stalled = out.filter((f) => f.b.unanswered > 0 || f.eventLoopDelayMaxMs === undefined).map((f) => f.shape)
  const figures: AdversarialFigures = {
    shapes: out,
    worst: {
      bP99Ms: max(out.map((f) => f.b.latency.p99)),
      bMaxMs: max(out.map((f) => f.b.latency.max)),
      eventLoopDelayMaxMs: max(out.map((f) => f.eventLoopDelayMaxMs ?? NaN)),
      stalledShapes: stalled,
      bLowerBound: out.some((f) => f.b.unanswered > 0),
    },
    accepted: out.reduce((n, f) => n + f.accepted, 0),
    refused: out.reduce((n, f) => n + f.refused, 0),
  }
  if (stalled.length > 0) notes.push(`adversarial sends: svc stalled (B's sends unanswered, or no /metrics) under ${stalled.join(', ')}`)
  results.adversarial = {
    ...figures,
    rates: { aPerSecond: SIZES.advARate, bPerSecond: SIZES.advBRate },
    windowMs: SIZES.advMs, warmupMs: SIZES.advWarmupMs, graceMs: SIZES.advGraceMs,
    note: 'per shape, a fresh svc; B latencies include unanswered requests at their wait when abandoned (a lower bound)',
  }
  return figures
}
