// `npm test`: runs the compiled test files, and only them. `node --test dist/test/` would also run every
// helper module under test/ as an empty test file (Node 20 takes every .js under a `test` directory),
// and a test deleted from test/ would keep running from its stale copy in dist/. So the list comes from
// the sources: each test/**/*.test.ts runs as its compiled dist/test/**/*.test.js. Arguments are passed
// on to `node --test` (e.g. `npm test -- --test-name-pattern=webhook`); `--list` prints the files instead;
// `--times` runs each file in a `node --test` of its own, two at a time as the suite does, and prints each
// file's wall time, slowest first (where the suite's minutes go; other arguments are passed on as well).
// `--lint` (what `npm test` passes) runs ESLint beside the test files rather than before them: the two
// test lanes leave about a third of two cores idle (waits on sockets, timers, child processes), which the
// lint's 30 s of CPU fills; run before them it added its whole 20-40 s to the suite. Its report is printed
// after the tests', and a finding fails the run as a failed test does.
import { spawn } from 'node:child_process'
import { existsSync, readdirSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

/** test/**\/*.test.ts, relative to the root, in a stable order. */
function testSources (dir) {
  const found = []
  for (const entry of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    const rel = path.join(dir, entry.name)
    if (entry.isDirectory()) found.push(...testSources(rel))
    else if (entry.isFile() && entry.name.endsWith('.test.ts')) found.push(rel)
  }
  return found.sort()
}

const files = testSources('test').map((src) => path.join('dist', src.replace(/\.ts$/, '.js')))
const missing = files.filter((f) => !existsSync(path.join(root, f)))
if (missing.length > 0) {
  process.stderr.write(`run-tests: not compiled (run npm run build): ${missing.join(', ')}\n`)
  process.exit(1)
}

if (process.argv.includes('--list')) {
  process.stdout.write(files.map((f) => `${f}\n`).join(''))
  process.exit(0)
}

if (process.argv.includes('--times')) {
  const passOn = process.argv.slice(2).filter((a) => a !== '--times')
  const queue = [...files]
  const times = []
  let failed = 0
  const runOne = async () => {
    for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
      const started = process.hrtime.bigint()
      const code = await new Promise((resolve) => {
        const child = spawn(process.execPath, ['--enable-source-maps', '--test', ...passOn, file], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] })
        child.on('exit', (c) => resolve(c ?? 1))
      })
      const seconds = Number(process.hrtime.bigint() - started) / 1e9
      if (code !== 0) failed += 1
      times.push({ file, seconds, code })
      process.stderr.write(`${seconds.toFixed(1).padStart(7)} s  ${code === 0 ? 'ok  ' : 'FAIL'}  ${file}\n`)
    }
  }
  const started = process.hrtime.bigint()
  await Promise.all([runOne(), runOne()])
  times.sort((a, b) => b.seconds - a.seconds)
  process.stdout.write(times.map((t) => `${t.seconds.toFixed(1).padStart(7)} s  ${t.code === 0 ? 'ok  ' : 'FAIL'}  ${t.file}\n`).join(''))
  process.stdout.write(`${(Number(process.hrtime.bigint() - started) / 1e9).toFixed(1)} s in all, ${files.length} files, ${failed} failed\n`)
  process.exit(failed === 0 ? 0 : 1)
}

/** ESLint over the tree, its output kept for the end; resolves to its exit code. */
function lint () {
  const eslint = path.join(root, 'node_modules', 'eslint', 'bin', 'eslint.js')
  let output = ''
  const child = spawn(process.execPath, [eslint, '.'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code: code ?? 1, output })))
}

const withLint = process.argv.includes('--lint')
const linted = withLint ? lint() : undefined
const args = ['--enable-source-maps', '--test', '--test-concurrency=2', ...process.argv.slice(2).filter((a) => a !== '--lint'), ...files]
const child = spawn(process.execPath, args, { cwd: root, stdio: 'inherit' })
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal))
const tested = await new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0))))
let code = tested
if (linted !== undefined) {
  const result = await linted
  process.stdout.write(result.code === 0 ? 'lint: clean (eslint .)\n' : `lint: eslint . found problems\n${result.output}`)
  if (result.code !== 0 && code === 0) code = 1
}
process.exitCode = code
