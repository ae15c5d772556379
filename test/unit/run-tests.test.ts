import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { readdirSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

// dist/test/unit → the repository root
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')

describe('npm test (scripts/run-tests.mjs)', () => {
  test('runs every compiled *.test.ts and nothing else: no helper module is counted as a test', () => {
    const listed = execFileSync(process.execPath, ['scripts/run-tests.mjs', '--list'], { cwd: root, encoding: 'utf8' })
      .trim().split('\n')
    const sources: string[] = []
    const walk = (dir: string): void => {
      for (const e of readdirSync(path.join(root, dir), { withFileTypes: true })) {
        if (e.isDirectory()) walk(path.join(dir, e.name))
        else if (e.name.endsWith('.ts')) sources.push(path.join(dir, e.name))
      }
    }
    walk('test')
    const tests = sources.filter((s) => s.endsWith('.test.ts'))
    const helpers = sources.filter((s) => !s.endsWith('.test.ts'))
    assert.ok(helpers.length > 0, 'the suite has helper modules (test/helpers, the shared contract cases)')
    assert.deepEqual([...listed].sort(), tests.map((s) => path.join('dist', s.replace(/\.ts$/, '.js'))).sort())
    assert.ok(listed.includes(path.join('dist', 'test', 'unit', 'run-tests.test.js')))
    for (const helper of helpers) assert.ok(!listed.includes(path.join('dist', helper.replace(/\.ts$/, '.js'))), helper)
  })
})
