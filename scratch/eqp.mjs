import Database from 'better-sqlite3'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
const sqls = new Set()
const orig = Database.prototype.prepare
Database.prototype.prepare = function (sql) { sqls.add(sql); return orig.call(this, sql) }
const { openSqliteStore } = await import('/work/wt/perf/dist/src/store/sqlite/index.js')
const dir = mkdtempSync(join(tmpdir(), 'eqp-'))
const store = openSqliteStore({ dataDir: dir })
const db = new Database(join(dir, 'svc.db'))
const idx = db.prepare(`SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='deliveries' AND sql IS NOT NULL`).all().map(r => r.name)
const used = Object.fromEntries(idx.map(n => [n, []]))
for (const sql of [...sqls]) {
  if (!/deliveries/.test(sql)) continue
  let plan
  try {
    const st = db.prepare('EXPLAIN QUERY PLAN ' + sql)
    const n = (sql.match(/\?/g) ?? []).length
    plan = st.all(...Array(n).fill(null))
  } catch (e) { console.log('ERR', e.message, sql.slice(0, 80)); continue }
  const text = plan.map(r => r.detail).join(' | ')
  const s = sql.replace(/\s+/g, ' ').slice(0, 90)
  console.log(s, '\n    ', text)
  for (const n of idx) if (new RegExp(`\\b${n}\\b`).test(text)) used[n].push(s.slice(0, 50))
}
console.log(JSON.stringify(used, null, 1))
await store.close()
