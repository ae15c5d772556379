// Child processes of the harness: every one is registered here and killed when the harness exits, however
// it exits (normal end, exception, Ctrl-C). Also the /proc readers the harness measures children with.
import { fork, spawn, spawnSync, type ChildProcess, type ForkOptions, type SpawnOptions } from 'node:child_process'
import { readFileSync, readdirSync } from 'node:fs'
import net from 'node:net'
import { fileURLToPath } from 'node:url'

const children = new Set<ChildProcess>()

function killAll (): void {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null && c.pid !== undefined) {
      try { process.kill(c.pid, 'SIGKILL') } catch { /* already gone */ }
    }
  }
  children.clear()
}

process.on('exit', killAll)
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    if (children.size > 0) process.stderr.write(`\nbench: ${signal}: stopping every child process\n`)
    killAll()
    process.exit(130)
  })
}

function track<T extends ChildProcess> (child: T): T {
  children.add(child)
  child.once('exit', () => children.delete(child))
  return child
}

/** The compiled file of a harness process (benchmarks/procs/<name>.ts → dist/benchmarks/procs/<name>.js). */
export function procFile (name: string): string {
  return fileURLToPath(new URL(`../procs/${name}.js`, import.meta.url))
}

export const SERVER_FILE = fileURLToPath(new URL('../../src/server.js', import.meta.url))

export function forkTracked (file: string, args: string[] = [], opts: ForkOptions = {}): ChildProcess {
  return track(fork(file, args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], ...opts }))
}

export function spawnTracked (cmd: string, args: string[], opts: SpawnOptions = {}): ChildProcess {
  return track(spawn(cmd, args, opts))
}

/** Sends SIGTERM, waits up to `ms`, then SIGKILL. Resolves with the exit code (null when killed). */
export async function stopChild (child: ChildProcess, ms = 10_000, signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  child.kill(signal)
  const timer = setTimeout(() => { child.kill('SIGKILL') }, ms)
  try {
    return await exited
  } finally {
    clearTimeout(timer)
  }
}

// ── a tiny request/answer protocol over IPC ──────────────────────────────────────────────────────────

export interface Msg { type: string; id?: number; [k: string]: unknown }

let nextId = 1

/** Sends `msg` and resolves with the child's answer carrying the same id (or rejects on exit/timeout). */
export function ask<T = Msg> (child: ChildProcess, msg: Msg, timeoutMs = 60_000): Promise<T> {
  const id = nextId++
  return new Promise<T>((resolve, reject) => {
    const onMessage = (m: Msg) => {
      if (m?.id !== id) return
      cleanup()
      if (m.type === 'error') reject(new Error(`${String(msg.type)}: ${String(m.message)}`))
      else resolve(m as T)
    }
    const onExit = (code: number | null) => { cleanup(); reject(new Error(`child exited (${code}) before answering ${msg.type}`)) }
    const timer = setTimeout(() => { cleanup(); reject(new Error(`no answer to ${msg.type} within ${timeoutMs} ms`)) }, timeoutMs)
    const cleanup = () => {
      clearTimeout(timer)
      child.off('message', onMessage)
      child.off('exit', onExit)
    }
    child.on('message', onMessage)
    child.once('exit', onExit)
    child.send({ ...msg, id })
  })
}

/** In a child: answers requests from the harness with `handler`. */
export function serve (handler: (msg: Msg) => Promise<Record<string, unknown>> | Record<string, unknown>): void {
  process.on('message', (msg: Msg) => {
    Promise.resolve()
      .then(() => handler(msg))
      .then((answer) => process.send!({ type: 'ok', ...answer, id: msg.id }),
        (err: unknown) => process.send!({ type: 'error', id: msg.id, message: err instanceof Error ? err.stack ?? err.message : String(err) }))
  })
  // The harness is gone: so are we.
  process.on('disconnect', () => process.exit(0))
  process.send!({ type: 'ready' })
}

/** Resolves with a child's first `ready` message (sent once it listens for requests). */
export function waitReady (child: ChildProcess, timeoutMs = 30_000): Promise<Msg> {
  return new Promise<Msg>((resolve, reject) => {
    const onMessage = (m: Msg) => {
      if (m?.type !== 'ready') return
      cleanup()
      resolve(m)
    }
    const onExit = (code: number | null) => { cleanup(); reject(new Error(`child exited (${code}) before it was ready`)) }
    const timer = setTimeout(() => { cleanup(); reject(new Error(`child not ready within ${timeoutMs} ms`)) }, timeoutMs)
    const cleanup = () => {
      clearTimeout(timer)
      child.off('message', onMessage)
      child.off('exit', onExit)
    }
    child.on('message', onMessage)
    child.once('exit', onExit)
  })
}

/** Forks a harness process and waits until it answers requests. */
export async function startProc (name: string, args: string[] = []): Promise<ChildProcess> {
  const child = forkTracked(procFile(name), args)
  await waitReady(child)
  return child
}

// ── ports, /proc ─────────────────────────────────────────────────────────────────────────────────────

/** A TCP port free on 127.0.0.1 right now (bound, read, released). */
export function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo
      s.close(() => resolve(port))
    })
  })
}

let clkTck: number | undefined
function ticksPerSecond (): number {
  if (clkTck === undefined) {
    const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' })
    clkTck = Number(r.stdout?.trim()) || 100
  }
  return clkTck
}

/** utime + stime of a process or a thread, in seconds, from its stat file (undefined when gone). */
function cpuOf (statPath: string): number | undefined {
  try {
    const text = readFileSync(statPath, 'utf8')
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ')
    // After "pid (comm) ": state is field 3, utime 14, stime 15 → indexes 11 and 12 here.
    return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond()
  } catch {
    return undefined
  }
}

/** Busy CPU seconds of the whole machine (all cores, every process), from /proc/stat. */
export function machineBusy (): number {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!
    const [, user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).map(Number)
    return (user! + nice! + system! + irq! + softirq! + steal!) / ticksPerSecond()
  } catch {
    return NaN
  }
}

export interface CpuSample { at: number; total: number; threads: Map<number, number>; names: Map<number, string> }

export function sampleCpu (pid: number): CpuSample {
  const threads = new Map<number, number>()
  const names = new Map<number, string>()
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const s = cpuOf(`/proc/${pid}/task/${tid}/stat`)
      if (s !== undefined) threads.set(Number(tid), s)
      try { names.set(Number(tid), readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim()) } catch { /* gone */ }
    }
  } catch { /* gone */ }
  return { at: performance.now(), total: cpuOf(`/proc/${pid}/stat`) ?? 0, threads, names }
}

export interface CpuUse {
  /** Share of one core over the interval: 1.0 = one core busy the whole time. */
  total: number
  /** The process's main thread (tid = pid), share of one core. */
  main: number
  /** The busiest other threads (worker threads, GC helpers, libuv pool), share of one core each. */
  others: number[]
  /** Their names (/proc's comm: "libuv-worker", "V8 DefaultWorke", a worker thread's "node"…), in the same order. */
  otherNames: string[]
  /** Length of the window, in seconds. */
  seconds: number
  /** CPU seconds each thread used in the window, by thread id (threads that used none are left out). */
  threadSeconds: Record<string, number>
}

export function cpuBetween (pid: number, a: CpuSample, b: CpuSample): CpuUse {
  const seconds = Math.max(1e-6, (b.at - a.at) / 1000)
  const others: Array<{ use: number; name: string }> = []
  const threadSeconds: Record<string, number> = {}
  let main = 0
  for (const [tid, end] of b.threads) {
    // A thread born during the window counts from 0 (its stat starts at its birth).
    const spent = end - (a.threads.get(tid) ?? 0)
    if (spent > 0) threadSeconds[tid] = spent
    const use = spent / seconds
    if (tid === pid) main = use
    else if (use > 0.005) others.push({ use, name: b.names.get(tid) ?? '?' })
  }
  others.sort((x, y) => y.use - x.use)
  const top = others.slice(0, 4)
  return { total: (b.total - a.total) / seconds, main, others: top.map((o) => o.use), otherNames: top.map((o) => o.name), seconds, threadSeconds }
}

/** Peak resident set (VmHWM) and current resident set (VmRSS) in MiB, from /proc/<pid>/status. */
export function memoryOf (pid: number): { peakMiB: number; rssMiB: number } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8')
    const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN)
    return { peakMiB: kb('VmHWM') / 1024, rssMiB: kb('VmRSS') / 1024 }
  } catch {
    return undefined
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export function commandExists (cmd: string): boolean {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' })
  return r.status === 0 && r.stdout.trim() !== ''
}
