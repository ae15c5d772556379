// Compiles with tsc only when dist/ is older than the sources: `npm run cli` and `npm start` then cost
// no build (tsc needs seconds even when incremental finds nothing to do). Stale means: no build by this
// script yet, the last build had errors, or a file under tsconfig's "include" (or tsconfig.json,
// package.json) changed since the last build by this script began (dist/.built-at carries that start
// time, so a file saved while tsc ran counts as newer; a bare `npm run build` leaves no stamp, and the
// next run compiles once more).
import { spawnSync } from 'node:child_process'
import { readFileSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const tsconfig = JSON.parse(readFileSync(path.join(root, 'tsconfig.json'), 'utf8'))
const buildInfo = path.join(root, tsconfig.compilerOptions?.tsBuildInfoFile ?? 'dist/.tsbuildinfo')
const stamp = path.join(root, tsconfig.compilerOptions?.outDir ?? 'dist', '.built-at')
const mtime = (p) => { try { return statSync(p).mtimeMs } catch { return 0 } }

function newestUnder (dir, newest = 0) {
  let entries
  try {
    entries = readdirSync(dir, { withFileTypes: true })
  } catch {
    return newest
  }
  for (const e of entries) {
    const p = path.join(dir, e.name)
    if (e.isDirectory()) newest = newestUnder(p, newest)
    else if (/\.(ts|mts|cts|json)$/.test(e.name)) newest = Math.max(newest, statSync(p).mtimeMs)
  }
  return newest
}

function stale () {
  try {
    if (readFileSync(buildInfo, 'utf8').includes('"errors":true')) return true
  } catch {
    return true
  }
  const built = mtime(stamp)
  if (built === 0) return true
  let newest = Math.max(statSync(path.join(root, 'tsconfig.json')).mtimeMs, statSync(path.join(root, 'package.json')).mtimeMs)
  for (const dir of tsconfig.include ?? []) newest = newestUnder(path.join(root, dir), newest)
  return newest > built
}

if (stale()) {
  const began = new Date()
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc')
  const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: root, stdio: 'inherit' })
  if (r.status === 0) {
    writeFileSync(stamp, `${began.toISOString()}\n`)
    utimesSync(stamp, began, began)
  }
  process.exit(r.status ?? 1)
}
