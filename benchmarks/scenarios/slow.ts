// Isolation: 99 fast webhooks alone, then the same 99 beside one endpoint that answers in 5 s. The fast
// ones' throughput (verified at the sink, first to last fast arrival) is compared; the phases alternate
// when repeated. Ten Pro accounts of ten webhooks (account 0: nine fast, plus the slow one in the second
// phase); every account's events go to all of its webhooks.
import { describeRun, keep, log, pick, results, runSvcOn, sinkOrigin, SIZES, type SvcRun } from '../lib/context.js'
import { fmt } from '../lib/report.js'
import { removeDir, Seeder, tempDataDir } from '../lib/svc.js'

async function phase (withSlow: boolean): Promise<SvcRun> {
  const E = SIZES.slowEventsPerAccount
  const dir = tempDataDir()
  try {
    const seeder = new Seeder(dir, sinkOrigin)
    const accounts: string[] = []
    for (let a = 0; a < 10; a++) {
      const account = await seeder.account()
      accounts.push(account)
      for (let h = 0; h < (a === 0 ? 9 : 10); h++) await seeder.webhook(account, { events: ['email.delivered'] })
      if (a === 0 && withSlow) await seeder.webhook(account, { slow: true, events: ['email.delivered'] })
    }
    await seeder.events(accounts, E)
    await seeder.close()
    return await runSvcOn(dir, seeder.secrets, 99 * E, withSlow ? 'slow-beside' : 'slow-alone', {
      stopGraceMs: 30_000, costLabel: withSlow ? `slow: 99 fast webhooks beside a 5 s one, ${fmt(99 * E)} events` : `slow: 99 webhooks alone, ${fmt(99 * E)} events`,
    })
  } finally {
    removeDir(dir)
  }
}

export async function slow (): Promise<{ alone: number; beside: number }> {
  const E = SIZES.slowEventsPerAccount
  log(`- slow endpoint: 99 fast webhooks alone, then beside 1 answering in 5 s (10 accounts × ${fmt(E)} events → ${fmt(99 * E)} fast deliveries; ${SIZES.slowReps} × each, alternating)`)
  const alone: SvcRun[] = []
  const beside: SvcRun[] = []
  for (let r = 0; r < SIZES.slowReps; r++) {
    const a = await phase(false)
    alone.push(a)
    log(`    99 fast alone: ${describeRun(a)}`)
    const b = await phase(true)
    beside.push(b)
    log(`    99 fast beside the slow one: ${describeRun(b)}; the slow one answered ${fmt(b.stats.slow.count)} meanwhile`)
  }
  const out = {
    alone: pick('slow: alone', alone.map((r) => ({ value: r.rate, foreign: r.foreign }))),
    beside: pick('slow: beside', beside.map((r) => ({ value: r.rate, foreign: r.foreign }))),
  }
  results.slow = {
    ...out, fastDeliveries: 99 * E, slowDelayMs: 5000,
    runs: { alone: alone.map(keep), beside: beside.map((r) => ({ ...keep(r), slowAnswered: r.stats.slow.count })) },
  }
  return out
}
