// Loaded into svc with `--import` when the bench runs with --sql-cost (see ../lib/sql-cost.ts): times every
// better-sqlite3 run/get/all on svc's main thread and writes the totals by statement to SVC_SQL_COST_FILE
// when svc exits. For looking into svc only: it adds two clock reads to every statement.
import { writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { isMainThread } from 'node:worker_threads'
import { rowsOf, SqlTally } from '../lib/sql-cost.js'

const file = process.env.SVC_SQL_COST_FILE
if (isMainThread && file !== undefined && file !== '') {
  // svc's own copy of better-sqlite3 (the one its store loads), found from this file.
  const require = createRequire(import.meta.url)
  const Database = require('better-sqlite3') as new (path: string) => { prepare: (sql: string) => object; close: () => void }
  const probe = new Database(':memory:')
  const proto = Object.getPrototypeOf(probe.prepare('SELECT 1')) as Record<string, (...args: unknown[]) => unknown>
  probe.close()
  const tally = new SqlTally()
  for (const method of ['run', 'get', 'all'] as const) {
    const original = proto[method]!
    proto[method] = function (this: { source: string }, ...args: unknown[]): unknown {
      const started = process.hrtime.bigint()
      let result: unknown
      try {
        result = original.apply(this, args)
        return result
      } finally {
        tally.add(method, this.source, Number(process.hrtime.bigint() - started), rowsOf(method, result))
      }
    }
  }
  process.on('exit', () => {
    writeFileSync(file, JSON.stringify({ statements: tally.list() }) + '\n')
  })
}
