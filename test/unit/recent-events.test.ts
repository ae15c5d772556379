// The engine's cache of event rows just committed (src/store/sqlite/recent-events.ts): it answers a read
// only with the run of consecutive seqs right after the reader's position, holds only what committed
// (rolled-back writes leave nothing), and stays within its bounds, keeping the oldest when full.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { RecentEvents, type EventRow } from '../../src/store/sqlite/recent-events.js'

function row (seq: number, payloadChars = 10): EventRow {
  return { seq, id: `evt_${seq}`, account_id: 'acct_1', email_id: 'em_1', type: 'email.sent', occurred_at: '2026-01-01T00:00:00.000Z', payload: 'p'.repeat(payloadChars) }
}

function committed (cache: RecentEvents, seqs: number[], payloadChars = 10): void {
  for (const s of seqs) cache.stage(row(s, payloadChars))
  cache.commit()
}

const seqs = (rows: EventRow[] | undefined) => rows?.map((r) => r.seq)

describe('recent events', () => {
  test('a read after the last seq read gets the consecutive rows that follow, up to the limit', () => {
    const cache = new RecentEvents()
    committed(cache, [5, 6, 7, 8])
    assert.deepEqual(seqs(cache.after(4, 2)), [5, 6])
    assert.deepEqual(seqs(cache.after(6, 10)), [7, 8])
    assert.deepEqual(seqs(cache.after(8, 10)), undefined, 'nothing held after 8: only the table knows')
    assert.equal(cache.size, 0, 'what was read past is let go')
  })

  test('a gap ends the answer: the seq another writer took is read from the table', () => {
    const cache = new RecentEvents()
    committed(cache, [1, 2])
    committed(cache, [4, 5]) // 3 was another process's event
    assert.deepEqual(seqs(cache.after(0, 10)), [1, 2])
    assert.equal(cache.after(2, 10), undefined, '3 is not held')
    assert.deepEqual(seqs(cache.after(3, 10)), [4, 5], 'once the table gave 3, the cache goes on')
  })

  test('a reader whose position is behind what is held (a lease taken over) reads the table', () => {
    const cache = new RecentEvents()
    committed(cache, [10, 11])
    assert.equal(cache.after(7, 10), undefined)
    assert.deepEqual(seqs(cache.after(9, 10)), [10, 11])
  })

  test('nothing is held before its transaction commits, and a rolled-back write leaves nothing', () => {
    const cache = new RecentEvents()
    cache.stage(row(1))
    assert.equal(cache.after(0, 10), undefined, 'staged, not committed')
    const mark = cache.mark()
    cache.stage(row(2))
    cache.rollBack(mark)
    cache.stage(row(2)) // the seq is given again once the failed write is undone
    cache.commit()
    assert.deepEqual(cache.after(0, 10)?.map((r) => r.id), ['evt_1', 'evt_2'])
    cache.stage(row(3))
    cache.rollBack(0)
    cache.commit()
    assert.equal(cache.after(2, 10), undefined, 'the whole batch was undone')
  })

  test('seqs that go backwards are not trusted: what was held is dropped', () => {
    const cache = new RecentEvents()
    committed(cache, [5, 6])
    committed(cache, [3])
    assert.deepEqual(seqs(cache.after(2, 10)), [3])
    assert.equal(cache.after(4, 10), undefined, '5 and 6 were let go')
  })

  test('when full, the oldest stay and newer ones are left out; reading makes room again', () => {
    const cache = new RecentEvents({ maxRows: 3, maxPayloadChars: 1000 })
    committed(cache, [1, 2, 3, 4, 5])
    assert.equal(cache.size, 3)
    assert.deepEqual(seqs(cache.after(0, 10)), [1, 2, 3])
    assert.equal(cache.after(3, 10), undefined, '4 and 5 were left out')
    committed(cache, [6])
    assert.deepEqual(seqs(cache.after(5, 10)), [6])
  })

  test('payloads are bounded in characters', () => {
    const cache = new RecentEvents({ maxRows: 100, maxPayloadChars: 100 })
    committed(cache, [1, 2], 40)
    committed(cache, [3], 40)
    assert.deepEqual(seqs(cache.after(0, 10)), [1, 2], 'the third would pass 100 characters')
    assert.equal(cache.after(2, 10), undefined, '3 was left out: after 2, only the table knows')
    committed(cache, [4], 40)
    assert.deepEqual(seqs(cache.after(3, 10)), [4], 'the characters read past were given back')
  })

  test('clear lets go of every committed row', () => {
    const cache = new RecentEvents()
    committed(cache, [1, 2])
    cache.clear()
    assert.equal(cache.size, 0)
    assert.equal(cache.after(0, 10), undefined)
  })

  test('a long run read a little at a time stays linear and keeps only what is unread', () => {
    const cache = new RecentEvents({ maxRows: 50_000, maxPayloadChars: 10_000_000 })
    committed(cache, Array.from({ length: 40_000 }, (_, i) => i + 1), 1)
    let through = 0
    while (through < 40_000) {
      const got = cache.after(through, 7)!
      assert.equal(got[0]!.seq, through + 1)
      through = got.at(-1)!.seq
    }
    assert.equal(cache.after(through, 7), undefined)
    assert.equal(cache.size, 0)
  })
})
