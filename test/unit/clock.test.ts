// Time formatting (src/domain/clock.ts): iso() remembers the last millisecond it formatted, since a batch
// stamps everything with one `now`; whatever the order of calls, each answer is that instant's own.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { iso, isoOrNull } from '../../src/domain/clock.js'

test('iso gives each instant its own string, in any order of calls, and refuses a time that is none', () => {
  const times = [0, 1_700_000_000_000, 1_700_000_000_000, 1_700_000_000_001, 0, -1, 8.64e15, 1_700_000_000_000]
  for (const ms of times) assert.equal(iso(ms), new Date(ms).toISOString())
  assert.throws(() => iso(Number.NaN), RangeError)
  assert.throws(() => iso(8.64e15 + 1), RangeError)
  assert.equal(iso(1_700_000_000_000), '2023-11-14T22:13:20.000Z', 'a refused time leaves the last good one alone')
  assert.equal(isoOrNull(null), null)
  assert.equal(isoOrNull(0), '1970-01-01T00:00:00.000Z')
})
