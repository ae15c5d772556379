// Event → delivery latency at half the engine's measured maximum. The events are made the way production
// makes them: POST /api/send (to the sandbox transport) stores each email with one email.sent event per
// recipient, and svc's mailer then raises one email.delivered per recipient, all inside svc, which wakes its
// engine on each commit. An open-loop load generator sends at a fixed rate; each webhook body carries the
// event's `timestamp`, and the sink takes arrival − timestamp (same machine, same clock).
import { CpuWatch, log, notes, recordCpu, reportLogged, results, sendBodies, sinkConfig, sinkOrigin, sinkProcs, sinkStats, SIZES, startSvc, stopSvc, waitForSink } from '../lib/context.js'
import { ask, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { runtimeScrape, runtimeWindow, type RuntimeScrape } from '../lib/runtime.js'
import { summarize } from '../lib/stats.js'
import { removeDir, Seeder, tempDataDir } from '../lib/svc.js'

export async function latency (engineRate: number): Promise<number> {
  const R = SIZES.recipients
  const deliveryRate = engineRate / 2
  const sendRate = deliveryRate / (2 * R)
  if (!Number.isFinite(engineRate)) {
    log('- latency: not measured (no engine figure)')
    notes.push('latency not measured: no engine figure')
    return NaN
  }
  log(`- latency: POST /api/send with ${R} recipients (${R} email.sent + ${R} email.delivered events each) at ${fmt(sendRate)} sends/s ` +
    `= ${fmt(deliveryRate)} deliveries/s (half the engine's ${fmt(engineRate)}/s), measured for ${SIZES.latencyMs / 1000} s after ${SIZES.latencyPrewarmMs / 1000} s at a quarter ` +
    `of the rate and ${SIZES.latencyWarmupMs / 1000} s at the rate`)
  const load = await startProc('load')
  const dir = tempDataDir()
  try {
    const seeder = new Seeder(dir, sinkOrigin)
    const account = await seeder.account()
    await seeder.webhook(account, { events: ['email.sent', 'email.delivered'] })
    const key = await seeder.apiKey(account)
    await seeder.close()
    await sinkConfig(seeder.secrets, { latency: true })
    const svc = await startSvc(dir, {}, 'latency')
    try {
      const request = { type: 'open', origin: svc.origin, path: '/api/send', headers: { 'content-type': 'application/json', 'x-api-key': key }, bodies: sendBodies(R), connections: 64 }
      // A running svc is warm: first a quarter of the rate (JIT, connections, no backlog), then the rate
      // itself for a settling period, then the measured window. The warm-up's latencies are reported apart.
      const pre = await ask<Msg>(load, { ...request, rate: sendRate / 4, durationMs: SIZES.latencyPrewarmMs, warmupMs: 0 }, 120_000)
      const watch = new CpuWatch({ svc: svc.pid, loadgen: load.pid, ...sinkProcs() })
      // svc's own view of its main thread over the measured window (event-loop delay, GC): a scrape as
      // the window opens, another as it closes.
      let opened: Promise<RuntimeScrape | undefined> = Promise.resolve(undefined)
      const atOpen = setTimeout(() => { opened = runtimeScrape(svc.origin).catch(() => undefined) }, SIZES.latencyWarmupMs)
      const sent = await ask<Msg>(load, { ...request, rate: sendRate, durationMs: SIZES.latencyMs, warmupMs: SIZES.latencyWarmupMs }, 120_000)
      clearTimeout(atOpen)
      const first = await opened
      const runtime = first ? runtimeWindow(first, await runtimeScrape(svc.origin)) : undefined
      const accepted = Number((sent.statuses as Record<string, number>)['202'] ?? 0) + Number((pre.statuses as Record<string, number>)['202'] ?? 0)
      const stats = await waitForSink(accepted * 2 * R, { capMs: 60_000, abort: () => svc.unexpectedExit() })
      recordCpu('latency', watch.stop())
      const all = await sinkStats(true)
      const from = Number(sent.startedAt) + SIZES.latencyWarmupMs
      const to = from + SIZES.latencyMs
      const inWindow = (i: number) => all.arrivals[i]! >= from && all.arrivals[i]! < to
      const window = all.latencies.filter((_, i) => inWindow(i))
      const lat = summarize(window)
      const byType: Record<string, ReturnType<typeof summarize>> = {}
      for (const type of new Set(all.types)) byType[type] = summarize(all.latencies.filter((_, i) => inWindow(i) && all.types[i] === type))
      // Arrivals per second over the whole run: does svc keep up with the rate, or does a backlog grow?
      const firstSecond = Math.floor(Number(sent.startedAt) / 1000)
      const perSecond = Object.entries(all.perSecond).filter(([sec]) => Number(sec) >= firstSecond)
        .sort(([a], [b]) => Number(a) - Number(b)).map(([, n]) => n)
      // p99 of each second of arrivals, warm-up included: does the latency settle, or grow with a backlog?
      const bySecond = new Map<number, number[]>()
      all.arrivals.forEach((at, i) => {
        const sec = Math.floor((at - Number(sent.startedAt)) / 1000)
        let list = bySecond.get(sec)
        if (!list) bySecond.set(sec, list = [])
        list.push(all.latencies[i]!)
      })
      const p99BySecond = [...bySecond.entries()].sort(([a], [b]) => a - b).filter(([sec]) => sec >= 0).map(([, l]) => summarize(l).p99)
      const warmup = summarize(all.latencies.filter((_, i) => all.arrivals[i]! < from))
      const achieved = window.length / (SIZES.latencyMs / 1000)
      const sendLat = sent.latency as { p50: number; p99: number }
      log(`    ${fmt(window.length)} deliveries in the measured window (${fmt(achieved)}/s; ${fmt(stats.fast.count)}/${fmt(accepted * 2 * R)} in all, ${stats.bad} bad): ` +
        `event → delivery p50 ${fmt(lat.p50, 1)} ms, p99 ${fmt(lat.p99, 1)} ms, max ${fmt(lat.max, 1)} ms`)
      log(`    by event type: ${Object.entries(byType).map(([k, v]) => `${k} p50 ${fmt(v.p50, 1)} / p99 ${fmt(v.p99, 1)} ms (${fmt(v.n)})`).join(', ')}`)
      log(`    sends: ${fmt(Number(sent.achievedRate))}/s achieved, p99 ${fmt(sendLat.p99, 1)} ms, ${fmt(Number(sent.skipped))} skipped`)
      log(`    during the warm-up (svc starting cold, then settling): p99 ${fmt(warmup.p99, 1)} ms, not counted`)
      if (runtime) {
        const gc = Object.entries(runtime.gc).filter(([, g]) => g.count > 0).map(([k, g]) => `${k} ${fmt(g.count)}× ${fmt(g.ms)} ms${g.over100ms > 0 ? ` (${g.over100ms} over 100 ms)` : ''}`)
        log(`    svc's main thread in the window: event-loop delay p99 ${fmt(runtime.eventLoopDelayP99Ms, 1)} ms, max ${fmt(runtime.eventLoopDelayMaxMs, 1)} ms; GC ${gc.join(', ') || 'none'}`)
        const f = runtime.diskFlush
        if (f) log(`    svc's store flushes to disk (fdatasync of the WAL; every event waits for one, often behind another): ${fmt(f.count)} in the window, mean ${fmt(f.meanMs, 1)} ms, p50 ≤ ${f.p50AtMostMs ?? '?'} ms, p99 ≤ ${f.p99AtMostMs ?? '?'} ms`)
      }
      log(`    each second from the start at the full rate (settling included): deliveries ${perSecond.map((n) => fmt(n)).join(' ')}`)
      log(`      p99 ms ${p99BySecond.map((n) => fmt(n)).join(' ')}`)
      results.latency = {
        p50: lat.p50, p90: lat.p90, p99: lat.p99, max: lat.max, samples: lat.n, byType,
        warmupP99: warmup.p99, prewarmMs: SIZES.latencyPrewarmMs, prewarmRate: sendRate / 4, warmupMs: SIZES.latencyWarmupMs,
        targetDeliveryRate: deliveryRate, achievedDeliveryRate: achieved, deliveriesPerSecond: perSecond, p99BySecondMs: p99BySecond,
        sendRate, achievedSendRate: Number(sent.achievedRate), recipientsPerSend: R, sendLatency: sent.latency, sendStatuses: sent.statuses,
        delivered: stats.fast.count, expected: accepted * 2 * R, ...(runtime ? { svcRuntime: runtime } : {}),
        eventSource: 'POST /api/send to the sandbox transport: email.sent at acceptance, email.delivered from the mailer, both inside svc',
      }
      return lat.p99
    } finally {
      await stopSvc(svc)
      reportLogged('latency', svc)
    }
  } finally {
    await stopChild(load, 2000)
    removeDir(dir)
  }
}
