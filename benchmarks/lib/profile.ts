// `--cpu-prof`: svc runs with Node's --cpu-prof (one .cpuprofile per thread, written when it exits), and
// the harness prints where each thread spent its time: the functions with the most self time.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

interface ProfileNode { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }
interface Profile { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] }

export interface ProfileSummary { file: string; totalMs: number; idlePct: number; top: Array<{ fn: string; ms: number; pct: number }> }

function where (url: string, line: number): string {
  if (!url) return ''
  const short = url.replace(/^file:\/\//, '').replace(/^.*\/node_modules\//, '~/').replace(/^.*\/dist\//, '')
  return ` ${short}:${line + 1}`
}

export function summarizeProfile (file: string, n = 12): ProfileSummary {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile
  const byId = new Map(p.nodes.map((node) => [node.id, node]))
  const self = new Map<string, number>()
  let total = 0
  let idle = 0
  p.samples.forEach((id, i) => {
    const dt = (p.timeDeltas[i] ?? 0) / 1000
    total += dt
    const frame = byId.get(id)?.callFrame
    const name = frame?.functionName || '(anonymous)'
    // Piscina's idle workers wait in Atomics.wait, which the profiler sees as a running function.
    if (name === '(idle)' || name === 'atomicsWaitLoop') idle += dt
    const key = `${name}${where(frame?.url ?? '', frame?.lineNumber ?? 0)}`
    self.set(key, (self.get(key) ?? 0) + dt)
  })
  const busy = Math.max(1e-9, total - idle)
  const top = [...self.entries()].filter(([k]) => !k.startsWith('(idle)') && !k.startsWith('atomicsWaitLoop')).sort(([, a], [, b]) => b - a).slice(0, n)
    .map(([fn, ms]) => ({ fn, ms: Math.round(ms), pct: Math.round((ms / busy) * 1000) / 10 }))
  return { file, totalMs: Math.round(total), idlePct: Math.round((idle / Math.max(1e-9, total)) * 1000) / 10, top }
}

export function summarizeDir (dir: string, n = 12): ProfileSummary[] {
  let files: string[]
  try { files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile')).sort() } catch { return [] }
  return files.map((f) => summarizeProfile(join(dir, f), n))
}
