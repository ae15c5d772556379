import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync, readFileSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { tempDir } from '../helpers/server.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')

test('npm run cli / npm start compile only when a source is newer than the last build, and again after a failed one', (t) => {
  // A one-file project laid out like svc, compiled by the real tsc through the real script.
  const dir = tempDir(t, 'svc-build-')
  mkdirSync(path.join(dir, 'scripts'))
  mkdirSync(path.join(dir, 'src'))
  copyFileSync(path.join(root, 'scripts', 'build-if-stale.mjs'), path.join(dir, 'scripts', 'build-if-stale.mjs'))
  symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'))
  writeFileSync(path.join(dir, 'package.json'), '{ "type": "module" }\n')
  writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { target: 'ES2022', module: 'NodeNext', strict: true, types: [], rootDir: '.', outDir: 'dist', incremental: true, tsBuildInfoFile: 'dist/.tsbuildinfo' },
    include: ['src'],
  }))
  const source = path.join(dir, 'src', 'a.ts')
  const output = path.join(dir, 'dist', 'src', 'a.js')
  const stamp = path.join(dir, 'dist', '.built-at')
  const run = () => spawnSync(process.execPath, ['scripts/build-if-stale.mjs'], { cwd: dir, encoding: 'utf8' })
  const later = (file: string, seconds: number) => { const at = new Date(Date.now() + seconds * 1000); utimesSync(file, at, at) }

  writeFileSync(source, 'export const a: number = 1\n')
  assert.equal(run().status, 0)
  assert.match(readFileSync(output, 'utf8'), /a = 1/)
  const built = statSync(stamp).mtimeMs

  assert.equal(run().status, 0)
  assert.equal(statSync(stamp).mtimeMs, built, 'up to date: tsc did not run')

  writeFileSync(source, 'export const a: number = 2\n')
  later(source, 5)
  assert.equal(run().status, 0)
  assert.match(readFileSync(output, 'utf8'), /a = 2/, 'a newer source is compiled')

  writeFileSync(source, 'export const a: number = "three"\n')
  later(source, 10)
  const failed = run()
  assert.notEqual(failed.status, 0, 'a type error stops npm run cli before it runs')
  assert.match(failed.stdout + failed.stderr, /TS2322/)
  const again = run()
  assert.notEqual(again.status, 0, 'and keeps stopping it: a failed build is never taken as up to date')
  assert.ok(existsSync(output))
})
