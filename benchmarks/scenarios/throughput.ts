// Delivery throughput, all counted as verified 2xx at the sink (first to last arrival):
//   ceiling: one undici process, WINDOW signed POSTs in flight, no persistence;
//   naive:   a sequential fetch loop with node:crypto signing;
//   engine:  svc started on N stored events for 1 webhook (routing, leasing, signing, POSTing and writing
//            every outcome back: all persistence included);
//   queue:   BullMQ on redis-server, N jobs enqueued first, one worker process at WINDOW concurrency.
// The repeats are interleaved (ceiling, naive, engine, queue, then again) so that a noisy stretch of the
// machine hits every figure of a ratio alike; each figure is the median of its repeats.
import type { ChildProcess } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import { join } from 'node:path'
import {
  BENCH_EMAIL, BENCH_FILTER, costOf, CpuWatch, describeRun, FILTERS, keep, log, notes, pick, rateOf, recordCost, recordCpu, results, runSvcOn, sinkConfig, sinkOrigin, sinkProcs, sinkStats, SIZES,
  type Sample, type SvcRun,
} from '../lib/context.js'
import { ask, commandExists, freePort, sleep, spawnTracked, startProc, stopChild, type Msg } from '../lib/procs.js'
import { fmt } from '../lib/report.js'
import { removeDir, Seeder, tempDataDir, WINDOW } from '../lib/svc.js'

const SECRET = 'whsec_bench-reference-secret-00000000000000000000'

export interface Throughput { ceiling: number; naive: number; engine: number; queue: number }

async function loadRun (name: 'ceiling' | 'naive', gen: ChildProcess, rep: number): Promise<Sample> {
  await sinkConfig([SECRET])
  const watch = new CpuWatch({ loadgen: gen.pid, ...sinkProcs() })
  const run = await ask<Msg>(gen, {
    type: 'run', url: `${sinkOrigin}/h/0`, secret: SECRET, concurrency: WINDOW,
    durationMs: name === 'ceiling' ? SIZES.ceilingMs : SIZES.naiveMs, max: 10_000_000,
  }, 120_000)
  const report = watch.stop()
  const s = await sinkStats()
  const rate = rateOf(s.fast)
  log(`    ${name} ${rep + 1}: ${fmt(rate)} verified/s (${fmt(s.fast.count)} verified, ${s.bad} bad, ${Number(run.failed)} failed)`)
  const foreign = recordCpu(name, report)
  recordCost({ what: name, per: 'POST', count: s.fast.count, procs: costOf(report, s.fast.count) })
  return { value: rate, foreign }
}

async function engineRun (rep: number): Promise<SvcRun> {
  const dir = tempDataDir()
  try {
    const seeder = new Seeder(dir, sinkOrigin)
    const account = await seeder.account()
    // --filters: the webhook takes one domain's mail with one tag, and every event's email is looked up.
    await seeder.webhook(account, { events: ['email.delivered'], ...(FILTERS ? { filter: BENCH_FILTER } : {}) })
    await seeder.events([account], SIZES.engineEvents, 'email.delivered', FILTERS ? BENCH_EMAIL : undefined)
    await seeder.close()
    const run = await runSvcOn(dir, seeder.secrets, SIZES.engineEvents, 'engine', {
      costLabel: `engine: 1 webhook${FILTERS ? ' (filtered)' : ''}, ${fmt(SIZES.engineEvents)} stored events`,
    })
    log(`    engine ${rep + 1}: ${describeRun(run)}`)
    return run
  } finally {
    removeDir(dir)
  }
}

function redisPing (port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1')
    s.setTimeout(500)
    s.once('connect', () => s.write('PING\r\n'))
    s.once('data', (d) => { resolve(d.toString().startsWith('+PONG')); s.destroy() })
    s.once('error', () => resolve(false))
    s.once('timeout', () => { resolve(false); s.destroy() })
  })
}

interface Queue { redis: ChildProcess; peer: ChildProcess; port: number; dir: string }

async function startQueue (): Promise<Queue> {
  const dir = mkdtempSync(join(os.tmpdir(), 'svc-bench-redis-'))
  const port = await freePort()
  // Durability like svc's (SQLite synchronous=FULL): what Redis acknowledged is on disk (AOF, fsync always;
  // Redis groups the fsyncs of one event-loop turn, as svc's write queue groups its commits).
  const redis = spawnTracked('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always',
    '--daemonize', 'no', '--loglevel', 'warning',
  ], { stdio: ['ignore', 'ignore', 'inherit'] })
  const deadline = Date.now() + 10_000
  while (!await redisPing(port)) {
    if (Date.now() > deadline || redis.exitCode !== null) {
      await stopChild(redis, 1000)
      removeDir(dir)
      throw new Error('redis-server did not start')
    }
    await sleep(50)
  }
  const peer = await startProc('queue-peer')
  return { redis, peer, port, dir }
}

async function queueRun (q: Queue, rep: number): Promise<Sample> {
  await sinkConfig([SECRET])
  const enq = await ask<Msg>(q.peer, { type: 'enqueue', redisPort: q.port, count: SIZES.queueJobs, url: `${sinkOrigin}/h/0` }, 300_000)
  const watch = new CpuWatch({ worker: q.peer.pid, redis: q.redis.pid, ...sinkProcs() })
  const done = await ask<Msg>(q.peer, { type: 'work', redisPort: q.port, secret: SECRET, expected: SIZES.queueJobs, concurrency: WINDOW, timeoutMs: 300_000 }, 320_000)
  const report = watch.stop()
  const s = await sinkStats()
  const rate = rateOf(s.fast)
  recordCost({ what: 'queue peer', per: 'delivery', count: s.fast.count, procs: costOf(report, s.fast.count) })
  log(`    queue ${rep + 1}: ${fmt(rate)} verified/s (${fmt(s.fast.count)} verified, ${fmt(Number(done.completed))} completed, ` +
    `${fmt(Number(done.failed))} failed; ${fmt(SIZES.queueJobs)} jobs enqueued beforehand in ${fmt(Number(enq.elapsedMs) / 1000, 1)} s)`)
  return { value: rate, foreign: recordCpu('queue', report) }
}

export async function throughput (want: { ceiling: boolean; naive: boolean; engine: boolean; queue: boolean }): Promise<Throughput> {
  const reps = SIZES.reps
  log(`- throughput, ${reps} interleaved repeat${reps > 1 ? 's' : ''}, ${WINDOW} in flight where concurrent:`)
  if (want.ceiling) log(`    ceiling: one undici process, signed POSTs to the bare sink, ${SIZES.ceilingMs / 1000} s each`)
  if (want.naive) log(`    naive peer: a sequential fetch loop with node:crypto signing, ${SIZES.naiveMs / 1000} s each`)
  if (want.engine) log(`    engine: svc on ${fmt(SIZES.engineEvents)} stored events for 1 webhook → verified 2xx`)
  let haveRedis = want.queue && commandExists('redis-server')
  if (want.queue && !haveRedis) {
    log('    queue peer: SKIPPED: redis-server is not installed (Debian/Ubuntu: apt-get install -y redis-server)')
    notes.push('queue peer skipped: redis-server is not installed')
    results.queue = { skipped: 'redis-server is not installed' }
  } else if (want.queue) {
    log(`    queue peer: BullMQ + redis-server (AOF, appendfsync always), ${fmt(SIZES.queueJobs)} jobs enqueued first, ${SIZES.queueReps} of the repeats`)
  }

  const ceilingGen = want.ceiling ? await startProc('ceiling') : undefined
  const naiveGen = want.naive ? await startProc('naive') : undefined
  let queue: Queue | undefined
  const rates = { ceiling: [] as Sample[], naive: [] as Sample[], engine: [] as Sample[], queue: [] as Sample[] }
  const engineRuns: SvcRun[] = []
  try {
    if (haveRedis) {
      try {
        queue = await startQueue()
      } catch (err) {
        haveRedis = false
        log(`    queue peer: SKIPPED: ${String(err)}`)
        notes.push(`queue peer skipped: ${String(err)}`)
      }
    }
    for (let r = 0; r < reps; r++) {
      if (ceilingGen) rates.ceiling.push(await loadRun('ceiling', ceilingGen, r))
      if (naiveGen) rates.naive.push(await loadRun('naive', naiveGen, r))
      if (want.engine) {
        const run = await engineRun(r)
        engineRuns.push(run)
        rates.engine.push({ value: run.rate, foreign: run.foreign })
      }
      if (queue && r < SIZES.queueReps) rates.queue.push(await queueRun(queue, r))
    }
  } finally {
    if (ceilingGen) await stopChild(ceilingGen, 2000)
    if (naiveGen) await stopChild(naiveGen, 2000)
    if (queue) {
      await stopChild(queue.peer, 5000)
      await stopChild(queue.redis, 5000)
      removeDir(queue.dir)
    }
  }
  const out = {
    ceiling: pick('ceiling', rates.ceiling), naive: pick('naive', rates.naive), engine: pick('engine', rates.engine), queue: pick('queue', rates.queue),
  }
  if (want.ceiling) results.ceiling = { perSecond: out.ceiling, runs: rates.ceiling, concurrency: WINDOW, durationMs: SIZES.ceilingMs }
  if (want.naive) results.naive = { perSecond: out.naive, runs: rates.naive, durationMs: SIZES.naiveMs }
  if (want.engine) results.engine = { perSecond: out.engine, events: SIZES.engineEvents, runs: engineRuns.map(keep) }
  if (queue) {
    results.queue = {
      perSecond: out.queue, runs: rates.queue, jobs: SIZES.queueJobs, concurrency: WINDOW,
      redis: 'redis-server --appendonly yes --appendfsync always --save "" (acknowledged writes are on disk, like svc)',
    }
  }
  return out
}
