// --sql-cost: what svc's main thread spends in each SQL statement, by statement. svc is started with
// `--import` of ../procs/sql-cost-hook.ts, which times every run/get/all of better-sqlite3 on the main thread
// (BEGIN and COMMIT included: better-sqlite3's transactions run them as statements) and writes the totals to
// SVC_SQL_COST_FILE when svc exits. The tally itself is here, free of better-sqlite3, so it has unit tests
// (test/unit/bench-sql-cost.test.ts).
import { existsSync, readFileSync } from 'node:fs'

export interface SqlCost {
  /** run, get or all */
  method: string
  /** The statement's text, whitespace collapsed, cut to 160 characters. */
  sql: string
  calls: number
  /** Rows returned (all, get) or changed (run). */
  rows: number
  ms: number
}

/** Statements this long are told apart by their first 160 characters only. */
const SQL_CHARS = 160

export function statementKey (sql: string): string {
  // Linear: one pass over the text, no pattern that can backtrack.
  let out = ''
  let space = false
  for (const ch of sql) {
    if (ch === ' ' || ch === '\n' || ch === '\t' || ch === '\r') {
      space = out.length > 0
      continue
    }
    if (space) out += ' '
    space = false
    out += ch
    if (out.length >= SQL_CHARS) break
  }
  return out
}

export class SqlTally {
  /** By method, then by the statement's full text (a prepared statement's text is one string, reused). */
  private readonly byMethod = new Map<string, Map<string, SqlCost>>()

  add (method: string, sql: string, ns: number, rows: number): void {
    let bySql = this.byMethod.get(method)
    if (bySql === undefined) this.byMethod.set(method, bySql = new Map<string, SqlCost>())
    let entry = bySql.get(sql)
    if (entry === undefined) {
      entry = { method, sql: statementKey(sql), calls: 0, rows: 0, ms: 0 }
      bySql.set(sql, entry)
    }
    entry.calls += 1
    entry.rows += rows
    entry.ms += ns / 1e6
  }

  /** Every statement, the costliest first. */
  list (): SqlCost[] {
    return [...this.byMethod.values()].flatMap((m) => [...m.values()]).sort((a, b) => b.ms - a.ms)
  }
}

/** Rows a better-sqlite3 call answered: an array's length (all), 1 or 0 (get), changes (run). */
export function rowsOf (method: string, result: unknown): number {
  if (method === 'all') return Array.isArray(result) ? result.length : 0
  if (method === 'get') return result === undefined ? 0 : 1
  const changes = (result as { changes?: unknown } | undefined)?.changes
  return typeof changes === 'number' ? changes : 0
}

/** The statements a svc wrote at exit, the costliest first (as SqlTally.list() wrote them); [] if it wrote none. */
export function readSqlCost (file: string): SqlCost[] {
  if (!existsSync(file)) return []
  const parsed = JSON.parse(readFileSync(file, 'utf8')) as { statements?: SqlCost[] }
  return parsed.statements ?? []
}

/** One line per statement: total ms, share of all SQL time, calls, µs per call, rows per call. */
export function sqlCostLines (costs: SqlCost[], top: number): string[] {
  const total = costs.reduce((sum, c) => sum + c.ms, 0)
  if (total === 0) return []
  return costs.slice(0, top).map((c) => {
    const share = (100 * c.ms / total).toFixed(1).padStart(5)
    const perCall = (1000 * c.ms / c.calls).toFixed(1)
    const rows = (c.rows / c.calls).toFixed(1)
    return `${c.ms.toFixed(0).padStart(6)} ms ${share} %  ${c.calls} × ${perCall} µs, ${rows} rows each: ${c.method} ${c.sql.slice(0, 100)}`
  })
}
