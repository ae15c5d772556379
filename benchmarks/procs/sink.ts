// The webhook receiver every figure is counted at: a node:http server in its own process (or a cluster of
// them) that verifies every signature the way README.md tells customers to (HMAC-SHA256 with the webhook's
// secret over `<t>.<raw body>`, timestamp within 5 minutes), answers 200 (or 200 after a delay on the slow
// path), and keeps counts and arrival times that the harness reads over IPC.
//
//   POST /h/<index>   a fast endpoint: webhook <index>'s secret verifies it, 200 at once
//   POST /s/<index>   the slow endpoint: verified the same way, 200 after `slowMs`
//
// Usage (forked by the harness): node sink.js <workers>. Messages: config {secrets, slowMs, latency},
// stats, stop. With workers > 1 the primary forks cluster workers that share the port.
import cluster, { type Worker } from 'node:cluster'
import { createHmac, timingSafeEqual } from 'node:crypto'
import http from 'node:http'
import net from 'node:net'

interface Config { secrets: string[]; slowMs: number; latency: boolean }

interface ClassStats { count: number; first: number; last: number }

interface WorkerStats {
  fast: ClassStats
  slow: ClassStats
  bad: number
  duplicates: number
  /** Arrival time (ms) and event → arrival latency (ms) of each fast delivery, when asked for. */
  arrivals: number[]
  latencies: number[]
  /** The event type of each latency sample (the X-Svc-Event header). */
  types: string[]
  /** Verified deliveries per second of arrival (Math.floor(ms / 1000) → count). */
  perSecond: Record<string, number>
  pid: number
}

const TOLERANCE_S = 300

function emptyClass (): ClassStats { return { count: 0, first: 0, last: 0 } }

// ── worker: the HTTP server ────────────────────────────────────────────────────────────────────────

function runServer (port: number, onReady: () => void): { configure (c: Config): void; stats (): WorkerStats } {
  let config: Config = { secrets: [], slowMs: 5000, latency: false }
  let secretKeys: Buffer[] = []
  let stats = fresh()
  let seen = new Set<string>()

  function fresh (): WorkerStats {
    return { fast: emptyClass(), slow: emptyClass(), bad: 0, duplicates: 0, arrivals: [], latencies: [], types: [], perSecond: {}, pid: process.pid }
  }

  function verify (header: string | string[] | undefined, raw: Buffer, key: Buffer | undefined): boolean {
    if (typeof header !== 'string' || key === undefined) return false
    let t: string | undefined
    const given: string[] = []
    for (const part of header.split(',')) {
      const eq = part.indexOf('=')
      if (eq === -1) continue
      const k = part.slice(0, eq)
      if (k === 't') t = part.slice(eq + 1)
      else if (k === 'v1') given.push(part.slice(eq + 1))
    }
    if (t === undefined || !/^\d{1,15}$/.test(t) || Math.abs(Date.now() / 1000 - Number(t)) > TOLERANCE_S) return false
    const expected = Buffer.from(createHmac('sha256', key).update(`${t}.`).update(raw).digest('hex'))
    return given.some((v) => v.length === expected.length && timingSafeEqual(Buffer.from(v), expected))
  }

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const at = Date.now()
      const raw = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)
      const url = req.url ?? '/'
      const slow = url.startsWith('/s/')
      if (!slow && !url.startsWith('/h/')) {
        res.writeHead(404, { 'content-length': '0' }).end()
        return
      }
      const index = Number(url.slice(3))
      if (req.method !== 'POST' || !verify(req.headers['x-svc-signature'], raw, secretKeys[index])) {
        stats.bad += 1
        res.writeHead(401, { 'content-length': '0' }).end()
        return
      }
      const delivery = req.headers['x-svc-delivery']
      if (typeof delivery === 'string') {
        if (seen.has(delivery)) stats.duplicates += 1
        else seen.add(delivery)
      }
      const cls = slow ? stats.slow : stats.fast
      if (cls.count === 0) cls.first = at
      cls.count += 1
      cls.last = at
      const sec = String(Math.floor(at / 1000))
      stats.perSecond[sec] = (stats.perSecond[sec] ?? 0) + 1
      if (config.latency && !slow) {
        const ts = (JSON.parse(raw.toString('utf8')) as { timestamp?: string }).timestamp
        if (ts !== undefined) {
          stats.arrivals.push(at)
          stats.latencies.push(at - Date.parse(ts))
          stats.types.push(String(req.headers['x-svc-event']))
        }
      }
      if (slow) setTimeout(() => res.writeHead(200, { 'content-length': '0' }).end(), config.slowMs)
      else res.writeHead(200, { 'content-length': '0' }).end()
    })
  })
  server.keepAliveTimeout = 65_000
  server.headersTimeout = 66_000
  server.requestTimeout = 0
  // A deep accept queue: svc may open thousands of connections at once (one per delivery in flight).
  server.listen(port, '127.0.0.1', 4096, onReady)

  return {
    configure (c) {
      config = c
      secretKeys = c.secrets.map((s) => Buffer.from(s, 'utf8'))
      stats = fresh()
      seen = new Set()
    },
    stats: () => stats,
  }
}

// ── primary: IPC with the harness, aggregation over workers ──────────────────────────────────────────

function merge (all: WorkerStats[]): Omit<WorkerStats, 'pid'> & { pids: number[] } {
  const cls = (pick: (s: WorkerStats) => ClassStats): ClassStats => {
    const live = all.map(pick).filter((c) => c.count > 0)
    return {
      count: live.reduce((n, c) => n + c.count, 0),
      first: live.length ? Math.min(...live.map((c) => c.first)) : 0,
      last: live.length ? Math.max(...live.map((c) => c.last)) : 0,
    }
  }
  const perSecond: Record<string, number> = {}
  for (const s of all) for (const [k, v] of Object.entries(s.perSecond)) perSecond[k] = (perSecond[k] ?? 0) + v
  return {
    fast: cls((s) => s.fast),
    slow: cls((s) => s.slow),
    bad: all.reduce((n, s) => n + s.bad, 0),
    duplicates: all.reduce((n, s) => n + s.duplicates, 0),
    arrivals: all.flatMap((s) => s.arrivals),
    latencies: all.flatMap((s) => s.latencies),
    types: all.flatMap((s) => s.types),
    perSecond,
    pids: all.map((s) => s.pid),
  }
}

function pickPort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo
      s.close(() => resolve(port))
    })
  })
}

interface Msg { type: string; id?: number; [k: string]: unknown }

async function primary (): Promise<void> {
  const workers = Math.max(1, Number(process.argv[2] ?? 1))
  const port = await pickPort()
  let local: ReturnType<typeof runServer> | undefined
  const pool: Worker[] = []
  let replyId = 0
  const waiting = new Map<number, (s: WorkerStats) => void>()

  if (workers === 1) {
    await new Promise<void>((resolve) => { local = runServer(port, resolve) })
  } else {
    for (let i = 0; i < workers; i++) {
      const w = cluster.fork({ SINK_PORT: String(port) })
      w.on('message', (m: { rid: number; stats?: WorkerStats }) => {
        const done = waiting.get(m.rid)
        waiting.delete(m.rid)
        done?.(m.stats!)
      })
      pool.push(w)
    }
    await Promise.all(pool.map((w) => new Promise<void>((resolve) => w.once('listening', () => resolve()))))
  }

  const toWorkers = (cmd: string, payload: unknown): Promise<WorkerStats[]> => Promise.all(pool.map((w) => new Promise<WorkerStats>((resolve) => {
    const rid = ++replyId
    waiting.set(rid, resolve)
    w.send({ cmd, rid, payload })
  })))

  process.on('message', (msg: Msg) => {
    void (async () => {
      try {
        if (msg.type === 'config') {
          const c: Config = { secrets: msg.secrets as string[], slowMs: Number(msg.slowMs ?? 5000), latency: msg.latency === true }
          if (local) local.configure(c)
          else await toWorkers('config', c)
          process.send!({ type: 'ok', id: msg.id })
        } else if (msg.type === 'stats') {
          const all = local ? [local.stats()] : await toWorkers('stats', null)
          const merged = merge(all)
          // Latency samples only travel when asked for.
          if (msg.samples !== true) { merged.arrivals = []; merged.latencies = []; merged.types = [] }
          process.send!({ type: 'ok', id: msg.id, ...merged })
        } else if (msg.type === 'info') {
          process.send!({ type: 'ok', id: msg.id, port, pids: [process.pid, ...pool.map((w) => w.process.pid!)] })
        } else if (msg.type === 'stop') {
          for (const w of pool) w.process.kill('SIGKILL')
          process.send!({ type: 'ok', id: msg.id })
          setImmediate(() => process.exit(0))
        }
      } catch (err) {
        process.send!({ type: 'error', id: msg.id, message: String(err) })
      }
    })()
  })
  process.on('disconnect', () => {
    for (const w of pool) w.process.kill('SIGKILL')
    process.exit(0)
  })
  process.send!({ type: 'ready', port })
}

function worker (): void {
  const port = Number(process.env.SINK_PORT)
  const server = runServer(port, () => {})
  process.on('message', (m: { cmd: string; rid: number; payload: unknown }) => {
    if (m.cmd === 'config') {
      server.configure(m.payload as Config)
      process.send!({ rid: m.rid, stats: server.stats() })
    } else if (m.cmd === 'stats') {
      process.send!({ rid: m.rid, stats: server.stats() })
    }
  })
  process.on('disconnect', () => process.exit(0))
}

if (cluster.isPrimary) void primary()
else worker()
