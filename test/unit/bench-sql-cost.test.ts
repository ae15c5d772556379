// The bench's --sql-cost tally (benchmarks/lib/sql-cost.ts): what a performance engineer reads to see which
// statements svc's main thread spends its SQL time in. The hook that feeds it runs in a real process in
// test/integration/bench-sql-cost.test.ts.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { rowsOf, SqlTally, sqlCostLines, statementKey } from '../../benchmarks/lib/sql-cost.js'

test('a statement is tallied by method and text: calls, rows and time add up, the costliest comes first', () => {
  const tally = new SqlTally()
  tally.add('run', 'INSERT INTO events VALUES (?)', 5_000, 1)
  tally.add('run', 'INSERT INTO events VALUES (?)', 7_000, 1)
  tally.add('run', 'COMMIT', 1_000_000, 0)
  tally.add('all', 'SELECT * FROM emails', 40_000, 80)
  // The same text through another method is another statement.
  tally.add('get', 'SELECT * FROM emails', 2_000, 1)
  const list = tally.list()
  assert.deepEqual(list.map((c) => `${c.method} ${c.sql}`), [
    'run COMMIT', 'all SELECT * FROM emails', 'run INSERT INTO events VALUES (?)', 'get SELECT * FROM emails',
  ])
  const insert = list.find((c) => c.sql.startsWith('INSERT'))!
  assert.equal(insert.calls, 2)
  assert.equal(insert.rows, 2)
  assert.equal(insert.ms, 0.012)
})

test('the printed lines give each statement its share of all SQL time, its µs per call and rows per call', () => {
  const tally = new SqlTally()
  tally.add('run', 'COMMIT', 3_000_000, 0)
  tally.add('all', 'SELECT 1', 500_000, 10)
  tally.add('all', 'SELECT 1', 500_000, 30)
  const lines = sqlCostLines(tally.list(), 8)
  assert.equal(lines.length, 2)
  assert.match(lines[0]!, /^ +3 ms +75\.0 % {2}1 × 3000\.0 µs, 0\.0 rows each: run COMMIT$/)
  assert.match(lines[1]!, /^ +1 ms +25\.0 % {2}2 × 500\.0 µs, 20\.0 rows each: all SELECT 1$/)
  assert.equal(sqlCostLines(tally.list(), 1).length, 1)
  assert.deepEqual(sqlCostLines([], 8), [])
})

test('a statement\'s text is shown with its whitespace collapsed and cut to 160 characters, in one pass over a hostile megabyte', () => {
  assert.equal(statementKey('  UPDATE emails\n     SET a = ?,\t b = ?\n  WHERE id = ?  '), 'UPDATE emails SET a = ?, b = ? WHERE id = ?')
  const hostile = ' \n\t'.repeat(350_000) + 'x'.repeat(1_000_000)
  const key = statementKey(hostile)
  assert.equal(key, 'x'.repeat(160))
})

test('rows are what better-sqlite3 answered: an array\'s length, a row or none, the changes of a run', () => {
  assert.equal(rowsOf('all', [{}, {}, {}]), 3)
  assert.equal(rowsOf('get', { a: 1 }), 1)
  assert.equal(rowsOf('get', undefined), 0)
  assert.equal(rowsOf('run', { changes: 4, lastInsertRowid: 9 }), 4)
  // A statement that threw answers nothing.
  assert.equal(rowsOf('run', undefined), 0)
})
