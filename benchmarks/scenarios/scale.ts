// Scale: 10 webhooks per Pro account, every account's events routed (by the store's own routing) into
// pending deliveries before svc starts, their leases given back: N pending deliveries due now. svc drains
// them; its throughput is what the sink verified, its memory the VmHWM of its process (and VmRSS each second).
import { BENCH_EMAIL, BENCH_FILTER, describeRun, FILTERS, keep, log, results, runSvcOn, sinkOrigin, SIZES } from '../lib/context.js'
import { fmt } from '../lib/report.js'
import { removeDir, Seeder, tempDataDir } from '../lib/svc.js'

export async function scale (): Promise<{ rate: number; peakRssMiB: number; complete: boolean; delivered: number }> {
  const A = SIZES.scaleAccounts
  const P = SIZES.scaleEventsPerAccount
  const total = A * 10 * P
  log(`- scale: ${fmt(A * 10)} webhooks (${fmt(A)} Pro accounts × 10), ${fmt(total)} pending deliveries in the store before svc starts (cap ${SIZES.scaleCapMs / 1000} s)`)
  const dir = tempDataDir()
  try {
    const t0 = performance.now()
    const seeder = new Seeder(dir, sinkOrigin)
    const accounts: string[] = []
    for (let a = 0; a < A; a++) {
      const account = await seeder.account()
      accounts.push(account)
      // --filters: every webhook takes one domain's mail with one tag; every event has an email it takes.
      await Promise.all(Array.from({ length: 10 }, () => seeder.webhook(account, { events: ['email.delivered'], ...(FILTERS ? { filter: BENCH_FILTER } : {}) })))
    }
    await seeder.events(accounts, P, 'email.delivered', FILTERS ? BENCH_EMAIL : undefined)
    const r0 = performance.now()
    const routed = await seeder.routeAll()
    const routingMs = performance.now() - r0
    await seeder.close()
    log(`    seeded ${fmt(routed)} pending deliveries in ${fmt((performance.now() - t0) / 1000, 1)} s (routing ${fmt(A * P)} events: ` +
      `${fmt(routingMs / 1000, 1)} s, ${fmt(routingMs * 1000 / (A * P), 1)} µs per event${FILTERS ? ', every webhook filtered' : ''})`)
    const rss: number[] = []
    // A longer stall tolerance here: breakers that opened wait 30 s before they probe again.
    const run = await runSvcOn(dir, seeder.secrets, total, 'scale', { capMs: SIZES.scaleCapMs, stallMs: SIZES.scaleStallMs, watchRss: (m) => rss.push(Math.round(m)), costLabel: `scale: ${fmt(A * 10)} webhooks, ${fmt(total)} pending` })
    log(`    ${describeRun(run)}`)
    log(`    svc RSS each second (MiB): ${rss.map((m) => fmt(m)).join(' ')}`)
    results.scale = { webhooks: A * 10, pending: routed, filtered: FILTERS, routingMsPerEvent: routingMs / (A * P), ...keep(run), rssEverySecondMiB: rss }
    return { rate: run.rate, peakRssMiB: run.peakRssMiB, complete: run.complete, delivered: run.delivered }
  } finally {
    removeDir(dir)
  }
}
