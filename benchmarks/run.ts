// `npm run bench` (full, ~17 min at most on 2 cores) and `npm run bench -- --quick` (~3 min, smaller sizes): every
// figure of ARCHITECTURE.md's performance targets, measured in one run beside this machine's ceiling and
// the peers, each target met or missed; a table on stdout, a JSON record and an SVG chart in
// benchmarks/results/.
//
// Every load generator, peer and sink is a process of its own; svc runs as `node dist/src/server.js` and is
// measured from outside: its throughput by what the sink verified, its memory by /proc/<pid>/status.
// Options: --quick; --only=<scenario,…> (ceiling naive engine queue api latency slow scale adversarial smtp smtp-attachment scheduled-burst postfix pipeline
// cap4 ratelimit outage unreliable restart-soak; writes a
// "-partial" record); --sink-workers=N (a cluster sink; one process is enough, see benchmarks/README.md);
// --cpu-prof (svc runs under Node's --cpu-prof; each thread's busiest functions are printed); --sql-cost (svc's
// main thread times each SQL statement; the costliest are printed after each svc run, see lib/sql-cost.ts);
// --filters (every webhook of the engine and scale scenarios filtered by a domain and a tag, every event's
// email stored: the routing of filtered webhooks, to compare with a run without).
import { execFileSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  argv, costs, cpu, CPU_PROF, foreignLoad, SQL_COST, sqlCosts, log, notes, ONLY, profiles, QUICK, results, SINK_WORKERS, SIZES, sinkOrigin, startSink, stopSink, wanted,
} from './lib/context.js'
import { median } from './lib/stats.js'
import { fmt, judge, svgChart, table, targetRows, type Target } from './lib/report.js'
import { buildChanges, buildFingerprint, EXTRA_NODE_ARGS, svcEnv, WINDOW } from './lib/svc.js'
import { adversarial } from './scenarios/adversarial.js'
import { cap4, outage, ratelimit, unreliable } from './scenarios/adaptive.js'
import { api } from './scenarios/api.js'
import { latency } from './scenarios/latency.js'
import { scale } from './scenarios/scale.js'
import { slow } from './scenarios/slow.js'
import { smtp, SMTP_CONNECTIONS } from './scenarios/smtp.js'
import { smtpAttachment } from './scenarios/smtp-attachment.js'
import { scheduledBurst } from './scenarios/scheduled-burst.js'
import { pipeline } from './scenarios/pipeline.js'
import { postfix } from './scenarios/postfix.js'
import { restartSoak, SOAK, SOAK_P99_GOAL_MS } from './scenarios/restart-soak.js'
import { throughput } from './scenarios/throughput.js'

/** Which code was measured: the commit, and the files under src/, workers/ and config/ that differ from it. */
function codeUnderTest (): Record<string, unknown> {
  const git = (...args: string[]) => {
    try { return execFileSync('git', args, { encoding: 'utf8', cwd: fileURLToPath(new URL('../../', import.meta.url)) }).trim() } catch { return '' }
  }
  const changed = git('status', '--porcelain', '--', 'src', 'workers', 'config').split('\n').filter(Boolean)
  return { commit: git('rev-parse', '--short', 'HEAD'), uncommittedChanges: changed, build: buildFingerprint() }
}

function machine (): Record<string, unknown> {
  let kernel = ''
  try { kernel = execFileSync('uname', ['-sr'], { encoding: 'utf8' }).trim() } catch { /* not unix */ }
  return {
    cores: os.availableParallelism(), cpuModel: os.cpus()[0]?.model ?? 'unknown', memoryMiB: Math.round(os.totalmem() / 1048576),
    node: process.version, platform: `${os.platform()} ${os.arch()}`, kernel,
  }
}

async function main (): Promise<void> {
  const started = new Date()
  const m = machine()
  const code = codeUnderTest()
  const stamp = started.toISOString().replace(/[:.]/g, '-')
  const resultsDir = fileURLToPath(new URL('../../benchmarks/results/', import.meta.url))
  if (CPU_PROF) {
    svcEnv.profileRoot = join(resultsDir, `profiles-${stamp}`)
    notes.push(`svc ran with --cpu-prof (profiles in benchmarks/results/profiles-${stamp}/): its figures are lower than without`)
  }
  if (SQL_COST) {
    svcEnv.sqlCostRoot = join(resultsDir, `sql-cost-${stamp}`)
    notes.push(`svc ran with --sql-cost (each SQL statement timed; totals in benchmarks/results/sql-cost-${stamp}/): its figures are lower than without`)
  }
  if (EXTRA_NODE_ARGS.length > 0) notes.push(`svc ran with the Node options ${EXTRA_NODE_ARGS.join(' ')} (BENCH_SVC_NODE_ARGS): its figures may differ from a plain run's`)
  log(`svc benchmarks: ${QUICK ? 'quick' : 'full'} run, ${started.toISOString()}`)
  log(`machine: ${String(m.cores)} cores (${String(m.cpuModel)}), ${fmt(Number(m.memoryMiB))} MiB, Node ${process.version}`)
  const changed = code.uncommittedChanges as string[]
  log(`code: commit ${String(code.commit)}${changed.length > 0 ? ` with ${changed.length} uncommitted change${changed.length > 1 ? 's' : ''} in src/, workers/, config/` : ''}, build ${String(code.build)}`)
  const idle = await foreignLoad(2)
  log(`other processes before the start: ${fmt(idle * 100)} % of a core${idle > 0.25 ? ' (the machine is busy: expect noisy figures)' : ''}`)
  if (idle > 0.25) notes.push(`the machine was busy before the start: other processes used ${fmt(idle * 100)} % of a core`)
  await startSink()
  log(`sink: ${SINK_WORKERS === 1 ? 'one node:http process' : `a cluster of ${SINK_WORKERS} node:http processes`} on ${sinkOrigin}`)

  // A scenario that fails is reported and leaves its figures unmeasured; the others still run.
  const attempt = async <T>(name: string, fn: () => Promise<T>): Promise<T | undefined> => {
    try {
      return await fn()
    } catch (err) {
      const message = err instanceof Error ? err.message.split('\n')[0]! : String(err)
      log(`    ! ${name} failed: ${message}`)
      notes.push(`${name} failed, not measured: ${message}`)
      return undefined
    }
  }
  const tp = await attempt('throughput', () => throughput({
    ceiling: wanted('ceiling') || wanted('pipeline'), naive: wanted('naive') || wanted('pipeline'), queue: wanted('queue'),
    // The latency and scale targets are relative to the engine figure: measured whenever they are.
    engine: wanted('engine') || wanted('latency') || wanted('scale'),
  })) ?? { ceiling: NaN, naive: NaN, engine: NaN, queue: NaN }
  const apiFig = wanted('api') ? await attempt('api', api) : undefined
  const p99 = wanted('latency') ? await attempt('latency', () => latency(tp.engine)) ?? NaN : NaN
  const slowFig = wanted('slow') ? await attempt('slow', slow) : undefined
  const scaleFig = wanted('scale') ? await attempt('scale', scale) : undefined
  const advFig = wanted('adversarial') ? await attempt('adversarial', adversarial) : undefined
  const cap4Fig = wanted('cap4') ? await attempt('cap4', cap4) : undefined
  const rateFig = wanted('ratelimit') ? await attempt('ratelimit', ratelimit) : undefined
  const outageFig = wanted('outage') ? await attempt('outage', outage) : undefined
  const unreliableFig = wanted('unreliable') ? await attempt('unreliable', unreliable) : undefined
  const smtpFig = wanted('smtp') ? await attempt('smtp', smtp) : undefined
  const attachFig = wanted('smtp-attachment') ? await attempt('smtp-attachment', smtpAttachment) : undefined
  const burstFig = wanted('scheduled-burst') ? await attempt('scheduled-burst', scheduledBurst) : undefined
  const postfixFig = wanted('postfix') ? await attempt('postfix', postfix) : undefined
  const pipeFig = wanted('pipeline') ? await attempt('pipeline', pipeline) : undefined
  const soakFig = wanted('restart-soak') ? await attempt('restart-soak', restartSoak) : undefined

  const scaleName = `${fmt(SIZES.scaleAccounts * 10)} webhooks, ${fmt(SIZES.scaleAccounts * 10 * SIZES.scaleEventsPerAccount)} pending`
  const t = (key: string, name: string, value: number, op: Target['op'], target: number, unit: string, detail: string): Target =>
    ({ key, name, value, op, target, unit, met: judge(value, op, target), detail })
  const targets: Target[] = [
    t('engine_vs_ceiling', 'engine ÷ ceiling', tp.engine / tp.ceiling, '>=', 0.6, '×', `${fmt(tp.engine)}/s vs ${fmt(tp.ceiling)}/s`),
    t('engine_vs_naive', 'engine ÷ naive peer', tp.engine / tp.naive, '>=', 5, '×', `${fmt(tp.engine)}/s vs ${fmt(tp.naive)}/s`),
    t('engine_vs_queue', 'engine ÷ queue peer (BullMQ)', tp.engine / tp.queue, '>', 1, '×', `${fmt(tp.engine)}/s vs ${fmt(tp.queue)}/s`),
    t('api_vs_bare', 'POST /api/send ÷ bare route', (apiFig?.svc.rps ?? NaN) / (apiFig?.bare.rps ?? NaN), '>=', 0.5, '×',
      `${fmt(apiFig?.svc.rps ?? NaN)} vs ${fmt(apiFig?.bare.rps ?? NaN)} req/s; svc p99 ${fmt(apiFig?.svc.p99 ?? NaN, 1)} ms`),
    t('api_only_vs_bare', 'POST /api/send, API role alone ÷ bare route', (apiFig?.apiOnly.rps ?? NaN) / (apiFig?.bare.rps ?? NaN), '>=', 0.5, '×',
      `${fmt(apiFig?.apiOnly.rps ?? NaN)} vs ${fmt(apiFig?.bare.rps ?? NaN)} req/s (mailer + engine in another process); all in one ${fmt((apiFig?.svc.rps ?? NaN) / (apiFig?.bare.rps ?? NaN), 2)} ×`),
    t('latency_p99', 'p99 event → delivery at ½ max rate', p99, '<', 50, 'ms', `at ${fmt(tp.engine / 2)} deliveries/s`),
    t('scale_rss', `peak RSS, ${scaleName}`, scaleFig?.peakRssMiB ?? NaN, '<', 512, 'MiB', 'VmHWM of the svc process'),
    t('scale_rate', `throughput, ${scaleName} ÷ 1 webhook`, (scaleFig?.rate ?? NaN) / tp.engine, '>=', 0.5, '×', `${fmt(scaleFig?.rate ?? NaN)}/s vs ${fmt(tp.engine)}/s`),
    t('smtp_plain_vs_peer', `mail over SMTP ÷ nodemailer pooled (${SMTP_CONNECTIONS} conn.)`, (smtpFig?.plain.svc ?? NaN) / (smtpFig?.plain.peer ?? NaN), '>=', 1, '×',
      `${fmt(smtpFig?.plain.svc ?? NaN)}/s vs ${fmt(smtpFig?.plain.peer ?? NaN)}/s`),
    t('smtp_signed_vs_peer', 'mail over SMTP, DKIM + VERP ÷ nodemailer signing', (smtpFig?.signed.svc ?? NaN) / (smtpFig?.signed.peer ?? NaN), '>=', 0.7, '×',
      `${fmt(smtpFig?.signed.svc ?? NaN)}/s vs ${fmt(smtpFig?.signed.peer ?? NaN)}/s`),
    t('attachment_memory', 'peak RSS, 20 sends of a 20 MiB file posted at once', attachFig?.memory?.peakMiB ?? NaN, '<', 768, 'MiB',
      `VmHWM of the svc process; ${fmt(attachFig?.memory?.beforeMiB ?? NaN)} MiB before, ${attachFig?.memory?.retried ?? 'n/a'} sends answered 503 and sent again`),
    t('smtp_attachment_vs_peer', 'mail over SMTP with a 1 MiB file ÷ nodemailer pooled, same file', (attachFig?.svc ?? NaN) / (attachFig?.peer ?? NaN), '>=', 1, '×',
      `${fmt(attachFig?.svc ?? NaN)}/s vs ${fmt(attachFig?.peer ?? NaN)}/s; svc CPU per email ${fmt(attachFig?.cpuPerEmail1 ?? NaN)} µs, ${fmt(attachFig?.cpuPerEmail50 ?? NaN)} µs to 50 recipients`),
    t('smtp_attachment_leg_vs_peer', '… the SMTP leg alone (accepted before, due at once) ÷ nodemailer pooled', (attachFig?.leg ?? NaN) / (attachFig?.peer ?? NaN), '>=', 1, '×',
      `${fmt(attachFig?.leg ?? NaN)}/s vs ${fmt(attachFig?.peer ?? NaN)}/s; the file read from the store, encoded and sent, no intake`),
    t('scheduled_burst_vs_relay', `${fmt(burstFig?.emails ?? NaN)} emails due in one second, from T ÷ the relay's rate (nodemailer pooled)`, (burstFig?.one?.rate ?? NaN) / (burstFig?.relayRate ?? NaN), '>=', 1, '×',
      `${fmt(burstFig?.one?.rate ?? NaN)}/s vs ${fmt(burstFig?.relayRate ?? NaN)}/s; two nodes on one file ${fmt(burstFig?.two?.rate ?? NaN)}/s; svc without a schedule ${fmt(burstFig?.immediateRate ?? NaN)}/s`),
    t('scheduled_burst_early', 'emails due in one second: messages at the relay before T', burstFig ? (burstFig.one?.beforeT ?? 0) + (burstFig.two?.beforeT ?? 0) : NaN, '<=', 0, '',
      'one node and two; each relay reset before T'),
    t('pipeline_vs_ceiling', 'pipeline: send → sandbox → email.sent ÷ ceiling', (pipeFig?.rate ?? NaN) / tp.ceiling, '>=', 0.5, '×',
      `${fmt(pipeFig?.rate ?? NaN)}/s vs ${fmt(tp.ceiling)}/s (without the sandbox's files ${fmt(pipeFig?.rateNoSandboxFiles ?? NaN)}/s; to email.delivered ${fmt(pipeFig?.rateDelivered ?? NaN)}/s)`),
    t('pipeline_vs_naive', 'pipeline ÷ naive peer', (pipeFig?.rate ?? NaN) / tp.naive, '>=', 5, '×', `${fmt(pipeFig?.rate ?? NaN)}/s vs ${fmt(tp.naive)}/s`),
    t('pipeline_p99', 'pipeline p99 send → email.sent at ½ rate', pipeFig?.p99 ?? NaN, '<', 50, 'ms', `at ${fmt((pipeFig?.rate ?? NaN) / 2)} sends/s`),
    t('slow_isolation', '99 fast beside a 5 s one ÷ alone', (slowFig?.beside ?? NaN) / (slowFig?.alone ?? NaN), '>=', 0.9, '×', `${fmt(slowFig?.beside ?? NaN)}/s vs ${fmt(slowFig?.alone ?? NaN)}/s`),
    t('cap4_time', '4-at-once receiver: 1,000 delivered, ÷ its own limit (5 s)', (cap4Fig?.seconds ?? NaN) / 5, '<=', 2, '×', `${fmt(cap4Fig?.seconds ?? NaN, 1)} s`),
    t('cap4_refused', '4-at-once receiver: attempts refused', (cap4Fig?.refusedShare ?? NaN) * 100, '<=', 10, '%', `${fmt(cap4Fig?.delivered ?? NaN)} delivered`),
    t('ratelimit_peak', 'rateLimit 50: most arrivals in one second', rateFig?.mostInOneSecond ?? NaN, '<=', 55, '/s', `${fmt(rateFig?.delivered ?? NaN)} delivered`),
    t('outage_drain', 'after a 40 s outage: the 300-event backlog delivered', outageFig?.drainSeconds ?? NaN, '<=', 20, 's', 'after the receiver\'s return'),
    t('flaky_after_load', '30 % flaky receiver: every event, after the load\'s end', unreliableFig?.['/flaky'] ?? NaN, '<=', 240, 's', '150 events/s for 2 min'),
    t('throttled_after_load', '20 % throttling receiver: every event, after the load\'s end', unreliableFig?.['/throttled'] ?? NaN, '<=', 240, 's', '150 events/s for 2 min'),
    t('restart_soak_p99', `restart soak: send p99 outside ${SOAK.excludeMs / 1000} s after a SIGKILL`, soakFig?.p99 ?? NaN, '<', SOAK_P99_GOAL_MS, 'ms',
      `${SOAK.rate} sends/s for ${SOAK.durationMs / 1000} s, killed at ${SOAK.killAtMs / 1000} s; ready again in ${fmt(soakFig?.readyMs ?? NaN)} ms`),
    t('restart_soak_events', 'restart soak: accepted sends\' events missing at the healthy receiver', soakFig ? soakFig.missingSent + soakFig.missingDelivered : NaN, '<=', 0, '',
      `${fmt(soakFig?.accepted ?? NaN)} accepted, email.sent and email.delivered each`),
  ]

  const per = (n: number, unit = '/s') => (Number.isFinite(n) ? `${fmt(n)} ${unit}` : 'n/a')
  const figures = [
    ['figure', 'value'],
    [`ceiling: 1 undici process, ${WINDOW} in flight, signed → bare sink`, per(tp.ceiling)],
    ['naive peer: sequential fetch loop, signed', per(tp.naive)],
    [`queue peer: BullMQ + Redis (AOF fsync always), ${WINDOW} in flight`, per(tp.queue)],
    ['svc engine: stored event → verified 2xx, 1 webhook', per(tp.engine)],
    ['bare Fastify route, same schema', apiFig ? `${fmt(apiFig.bare.rps)} req/s (p99 ${fmt(apiFig.bare.p99, 1)} ms)` : 'n/a'],
    ['svc POST /api/send, auth + durable write', apiFig ? `${fmt(apiFig.svc.rps)} req/s (p50 ${fmt(apiFig.svc.p50, 1)} ms, p99 ${fmt(apiFig.svc.p99, 1)} ms)` : 'n/a'],
    ['… API role alone (mailer + engine in another process)', apiFig ? `${fmt(apiFig.apiOnly.rps)} req/s (p50 ${fmt(apiFig.apiOnly.p50, 1)} ms, p99 ${fmt(apiFig.apiOnly.p99, 1)} ms)` : 'n/a'],
    ['… all in one, rate limits in the store', apiFig ? `${fmt(apiFig.sharedLimits.rps)} req/s (p50 ${fmt(apiFig.sharedLimits.p50, 1)} ms, p99 ${fmt(apiFig.sharedLimits.p99, 1)} ms)` : 'n/a'],
    ['svc mail over SMTP, plain / DKIM + VERP (emails/s at the relay)', smtpFig ? `${per(smtpFig.plain.svc)} / ${per(smtpFig.signed.svc)}` : 'n/a'],
    [`nodemailer pooled (${SMTP_CONNECTIONS} conn.), plain / DKIM + VERP`, smtpFig ? `${per(smtpFig.plain.peer)} / ${per(smtpFig.signed.peer)}` : 'n/a'],
    ['svc / nodemailer pooled, mail over SMTP with a 1 MiB file (emails/s)', attachFig ? `${per(attachFig.svc)} / ${per(attachFig.peer)}` : 'n/a'],
    ['svc CPU per email with a 1 MiB file: 1 recipient / 50 (a copy each) / each further copy', attachFig
      ? `${fmt(attachFig.cpuPerEmail1)} / ${fmt(attachFig.cpuPerEmail50)} / ${fmt(attachFig.cpuPerExtraCopy)} µs` : 'n/a'],
    [`svc: ${fmt(burstFig?.emails ?? NaN)} scheduled for one second → relay, 1 node / 2 nodes: T → last; ÷ the relay's rate`, burstFig
      ? [burstFig.one, burstFig.two].map((r) => r ? `${fmt(r.lastAfterMs / 1000, 1)} s, ${fmt(r.rate / burstFig.relayRate, 2)} ×` : 'n/a').join(' / ') +
        ` (relay ${per(burstFig.relayRate)}; sent before T: ${fmt((burstFig.one?.beforeT ?? 0) + (burstFig.two?.beforeT ?? 0))})` : 'n/a'],
    ['svc mail over SMTP, single sends at a low rate: POST → relay p50 / p99', smtpFig?.latency ? `${fmt(smtpFig.latency.p50)} / ${fmt(smtpFig.latency.p99)} ms at ${smtpFig.latency.rate}/s` : 'n/a'],
    [`svc / nodemailer pooled (${SMTP_CONNECTIONS} conn.) through a real Postfix (emails/s at the far side)`, postfixFig
      ? `${per(postfixFig.svc)} / ${per(postfixFig.peer)} (${fmt(postfixFig.svc / postfixFig.peer, 2)} ×)` : 'n/a'],
    ['svc pipeline send → sandbox → email.sent, files / no files', pipeFig ? `${per(pipeFig.rate)} / ${per(pipeFig.rateNoSandboxFiles)} (p99 at ½ rate ${fmt(pipeFig.p99, 1)} ms)` : 'n/a'],
    ['svc event → delivery at ½ max rate (via /api/send)', Number.isFinite(p99) ? `p99 ${fmt(p99, 1)} ms` : 'n/a'],
    ['svc 99 fast webhooks: alone / beside a 5 s one', slowFig ? `${per(slowFig.alone)} / ${per(slowFig.beside)}` : 'n/a'],
    ['svc account B beside A\'s 1 MiB adversarial sends (worst shape)', advFig
      ? `B p99 ${advFig.worst.bLowerBound ? '≥ ' : ''}${fmt(advFig.worst.bP99Ms, 1)} ms, max ${advFig.worst.bLowerBound ? '≥ ' : ''}${fmt(advFig.worst.bMaxMs, 1)} ms; ` +
        `svc event-loop max ${fmt(advFig.worst.eventLoopDelayMaxMs, 1)} ms` +
        `${advFig.worst.stalledShapes.length > 0 ? `; STALLED by ${advFig.worst.stalledShapes.join(', ')}` : ''}; A ${fmt(advFig.accepted)} accepted, ${fmt(advFig.refused)} refused`
      : 'n/a'],
    ['svc 4-at-once receiver: 1,000 events', cap4Fig ? `${fmt(cap4Fig.seconds, 1)} s, ${fmt(cap4Fig.refusedShare * 100, 1)} % of attempts refused` : 'n/a'],
    ['svc rateLimit 50: most arrivals in one second', rateFig ? `${fmt(rateFig.mostInOneSecond)} (${fmt(rateFig.delivered)} delivered)` : 'n/a'],
    ['svc 40 s outage: 300-event backlog delivered after the return', outageFig ? `${fmt(outageFig.drainSeconds, 1)} s` : 'n/a'],
    ['svc 150 events/s, 2 min: last event after the load\'s end (healthy / flaky 30 % / throttling 20 %)', unreliableFig
      ? `${fmt(unreliableFig['/healthy-1'] ?? NaN, 1)} s / ${fmt(unreliableFig['/flaky'] ?? NaN, 1)} s / ${fmt(unreliableFig['/throttled'] ?? NaN, 1)} s` : 'n/a'],
    ['svc restart soak: sends outside the window after the kill, p50 / p99 / max; time to ready', soakFig
      ? `${fmt(soakFig.p50, 1)} / ${fmt(soakFig.p99, 1)} / ${fmt(soakFig.max)} ms (${fmt(soakFig.failedOutside)} without a 202); ready in ${fmt(soakFig.readyMs)} ms` : 'n/a'],
    [`svc ${scaleName}`, scaleFig ? `${per(scaleFig.rate)}, peak RSS ${fmt(scaleFig.peakRssMiB)} MiB${scaleFig.complete ? '' : ` (INCOMPLETE: ${fmt(scaleFig.delivered)} delivered)`}` : 'n/a'],
  ]

  // Cost: CPU µs per item, the median of each row's repeats, by process (svc split by thread).
  const costRows: string[][] = [['CPU µs per item (median of repeats)', 'per', 'svc main', 'svc delivery thr.', 'svc other thr.', 'svc total', 'load gen. / peer', 'sink']]
  const byWhat = new Map<string, typeof costs>()
  for (const c of costs) byWhat.set(c.what, [...(byWhat.get(c.what) ?? []), c])
  const costSummary: Record<string, Record<string, Record<string, number>>> = {}
  for (const [what, rows] of byWhat) {
    const m = (proc: string, key: 'total' | 'main' | 'delivery' | 'other') => median(rows.map((r) => r.procs[proc]?.[key] ?? NaN).filter(Number.isFinite))
    const procNames = [...new Set(rows.flatMap((r) => Object.keys(r.procs)))]
    costSummary[what] = Object.fromEntries(procNames.map((p) => [p, {
      total: m(p, 'total'), main: m(p, 'main'), ...(rows[0]!.procs[p]?.delivery !== undefined ? { delivery: m(p, 'delivery'), other: m(p, 'other') } : {}),
    }]))
    const gen = ['bare', 'loadgen', 'worker', 'peer'].find((p) => procNames.includes(p))
    const sinkNames = procNames.filter((p) => p.startsWith('sink'))
    const sinkUs = sinkNames.length > 0 ? sinkNames.reduce((n, p) => n + m(p, 'total'), 0) : NaN
    const hasSvc = procNames.includes('svc')
    const u = (n: number) => fmt(n, 1)
    costRows.push([what, rows[0]!.per,
      hasSvc ? u(m('svc', 'main')) : '', hasSvc && m('svc', 'delivery') > 0 ? u(m('svc', 'delivery')) : '', hasSvc ? u(m('svc', 'other')) : '', hasSvc ? u(m('svc', 'total')) : '',
      gen !== undefined ? `${u(m(gen, 'total'))}${gen === 'bare' ? ' (route)' : ''}${procNames.includes('redis') ? ` + redis ${u(m('redis', 'total'))}` : ''}` : '',
      Number.isFinite(sinkUs) ? u(sinkUs) : ''])
  }

  if (buildChanges.length > 0) notes.push(`svc's compiled code changed during the run (dist/ was rebuilt meanwhile: builds ${String(code.build)} → ${buildChanges.join(', ')}): figures may mix versions`)
  // The restart soak alone, at full size and unprofiled, is a whole record of its figure: named for it, not "-partial".
  const soakAlone = ONLY.size === 1 && ONLY.has('restart-soak') && !QUICK && !CPU_PROF && !SQL_COST && EXTRA_NODE_ARGS.length === 0
  const name = `${stamp}${QUICK ? '-quick' : ''}${soakAlone ? '-restart-soak' : ONLY.size > 0 || CPU_PROF ? '-partial' : ''}`
  const dir = resultsDir
  mkdirSync(dir, { recursive: true })
  const record = {
    startedAt: started.toISOString(), finishedAt: new Date().toISOString(), seconds: Math.round((Date.now() - started.getTime()) / 1000),
    mode: QUICK ? 'quick' : 'full', scenarios: ONLY.size > 0 ? [...ONLY] : 'all',
    command: `npm run bench${argv.length ? ' -- ' + argv.join(' ') : ''}`,
    code, machine: { ...m, otherProcessesBeforeStartCores: idle }, sizes: SIZES, sinkProcesses: SINK_WORKERS, concurrency: WINDOW,
    targets, figures: results,
    cost: { note: 'CPU µs per item (delivery, POST, send) by process, median of repeats; svc split by thread: main, delivery threads, other threads', ...costSummary, runs: costs },
    cpu: { note: 'share of one core per process over each measured window; "foreign" = every other process on the machine', ...cpu },
    ...(CPU_PROF ? { profiles } : {}),
    ...(SQL_COST ? { sqlCost: sqlCosts } : {}),
    notes,
  }
  writeFileSync(join(dir, `${name}.json`), JSON.stringify(record, null, 2) + '\n')
  writeFileSync(join(dir, `${name}.svg`), svgChart(targets,
    `svc benchmarks: ${QUICK ? 'quick' : 'full'} run, ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC`,
    `${String(m.cores)} cores, ${String(m.cpuModel)}, Node ${process.version}; every ratio measured in this one run`))

  log('')
  log(table(figures))
  log('')
  log(table(targetRows(targets)))
  if (costRows.length > 1) {
    log('')
    log(table(costRows))
  }
  if (notes.length > 0) log('\nnotes:\n' + notes.map((n) => `- ${n}`).join('\n'))
  log(`\nwrote benchmarks/results/${name}.json and .svg (${fmt((Date.now() - started.getTime()) / 1000)} s)`)
}

let failed = false
try {
  await main()
} catch (err) {
  failed = true
  process.stderr.write(`bench: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`)
} finally {
  await stopSink()
}
// Any child still running is killed by the exit handler in lib/procs.ts.
process.exit(failed ? 1 : 0)
