// The bench's --sql-cost hook (benchmarks/procs/sql-cost-hook.ts) in a real Node process with the real
// better-sqlite3: loaded with --import as the bench loads it into svc, it times every statement the process
// runs, BEGIN and COMMIT of a transaction included, and writes them when the process exits.
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { test } from 'node:test'
import { readSqlCost } from '../../benchmarks/lib/sql-cost.js'

const HOOK = new URL('../../benchmarks/procs/sql-cost-hook.js', import.meta.url)
const ROOT = fileURLToPath(new URL('../../../', import.meta.url))

const SCRIPT = `
const Database = require('better-sqlite3')
const db = new Database(process.argv[1])
db.prepare('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)').run()
const insert = db.prepare('INSERT INTO t (v) VALUES (?)')
db.transaction(() => { for (let i = 0; i < 3; i++) insert.run('row ' + i) })()
db.prepare('SELECT * FROM t').all()
db.prepare('SELECT * FROM t WHERE id = ?').get(99)
db.close()
`

test('loaded with --import, the hook writes every statement the process ran, with its calls and rows, when it exits', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-sql-cost-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  const file = join(dir, 'cost.json')
  const r = spawnSync(process.execPath, ['--import', HOOK.href, '-e', SCRIPT, join(dir, 'db.sqlite')], {
    cwd: ROOT, env: { PATH: process.env.PATH ?? '', SVC_SQL_COST_FILE: file }, encoding: 'utf8',
  })
  assert.equal(r.status, 0, r.stderr)
  const costs = readSqlCost(file)
  const find = (method: string, sql: string) => costs.find((c) => c.method === method && c.sql === sql)
  assert.deepEqual(pick(find('run', 'INSERT INTO t (v) VALUES (?)')), { calls: 3, rows: 3 })
  assert.deepEqual(pick(find('all', 'SELECT * FROM t')), { calls: 1, rows: 3 })
  assert.deepEqual(pick(find('get', 'SELECT * FROM t WHERE id = ?')), { calls: 1, rows: 0 })
  // better-sqlite3's transaction runs its BEGIN and COMMIT as statements: the commit's cost shows.
  assert.equal(find('run', 'COMMIT')?.calls, 1)
  assert.equal(find('run', 'BEGIN')?.calls, 1)
  assert.ok(costs.every((c) => c.ms >= 0))
})

test('without SVC_SQL_COST_FILE the hook changes nothing and writes nothing', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-sql-cost-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  const r = spawnSync(process.execPath, ['--import', HOOK.href, '-e', SCRIPT, join(dir, 'db.sqlite')], {
    cwd: ROOT, env: { PATH: process.env.PATH ?? '' }, encoding: 'utf8',
  })
  assert.equal(r.status, 0, r.stderr)
  assert.deepEqual(readSqlCost(join(dir, 'cost.json')), [])
})

function pick (c: { calls: number; rows: number } | undefined): { calls: number; rows: number } | undefined {
  return c === undefined ? undefined : { calls: c.calls, rows: c.rows }
}
