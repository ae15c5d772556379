// The rules of scheduled sends and of the sender's metadata, with a fake clock and hostile input.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import fc from 'fast-check'
import { checkSchedule, parseScheduledAt, DEFAULT_SCHEDULE_HORIZON_DAYS } from '../../src/domain/schedule.js'
import { METADATA_LIMITS, metadataOf, metadataProblems, normaliseMetadata, parseTagFilter } from '../../src/domain/metadata.js'

const NOW = Date.parse('2026-11-27T12:00:00.000Z')
const DAY = 86_400_000

describe('scheduledAt', () => {
  test('a date-time with an offset names its instant, to the millisecond', () => {
    assert.equal(parseScheduledAt('2026-12-01T09:00:00+01:00'), Date.parse('2026-12-01T08:00:00Z'))
    assert.equal(parseScheduledAt('2026-12-01T09:00:00-05:30'), Date.parse('2026-12-01T14:30:00Z'))
    assert.equal(parseScheduledAt('2026-12-01T08:00:00Z'), Date.parse('2026-12-01T08:00:00Z'))
    assert.equal(parseScheduledAt('2026-12-01t08:00:00.123456789z'), Date.parse('2026-12-01T08:00:00.123Z'))
    assert.equal(parseScheduledAt('2028-02-29T00:00:00Z'), Date.parse('2028-02-29T00:00:00Z'))
  })

  test('anything else is no time: no offset, no seconds, dates that do not exist, words, numbers', () => {
    for (const bad of [
      '2026-12-01T09:00:00', '2026-12-01', '2026-12-01T09:00Z', 'tomorrow', '', '1764576000000', '2026-02-30T00:00:00Z',
      '2027-02-29T00:00:00Z', '2026-13-01T00:00:00Z', '2026-12-01T24:00:00Z', '2026-12-01T09:60:00Z', '2026-12-01T09:00:60Z',
      '2026-12-01T09:00:00+24:00', '2026-12-01T09:00:00+0100', ' 2026-12-01T09:00:00Z', '2026-12-01T09:00:00Z ',
      '2026-12-01T09:00:00.Z', '2026-12-01T09:00:00.1234567890Z', '+002026-12-01T09:00:00Z',
    ]) {
      assert.equal(parseScheduledAt(bad), null, bad)
    }
  })

  test('now is accepted, a millisecond before is the past, the horizon is the limit', () => {
    assert.deepEqual(checkSchedule(new Date(NOW).toISOString(), NOW), { at: NOW })
    assert.match((checkSchedule(new Date(NOW - 1).toISOString(), NOW) as { error: string }).error, /in the past/)
    const edge = NOW + DEFAULT_SCHEDULE_HORIZON_DAYS * DAY
    assert.deepEqual(checkSchedule(new Date(edge).toISOString(), NOW), { at: edge })
    assert.match((checkSchedule(new Date(edge + 1).toISOString(), NOW) as { error: string }).error, /more than 30 days ahead/)
    assert.match((checkSchedule(new Date(NOW + 8 * DAY).toISOString(), NOW, 7) as { error: string }).error, /more than 7 days ahead/)
    assert.match((checkSchedule('next week', NOW) as { error: string }).error, /not a date-time with an offset/)
  })

  test('agrees with Date.parse on every well-formed time, whatever the offset', () => {
    fc.assert(fc.property(
      fc.integer({ min: Date.UTC(1971, 0, 1), max: Date.UTC(2199, 11, 31) }),
      fc.integer({ min: -23 * 60 - 59, max: 23 * 60 + 59 }),
      (ms, offset) => {
        const local = new Date(ms + offset * 60_000).toISOString().slice(0, 23)
        const sign = offset < 0 ? '-' : '+'
        const abs = Math.abs(offset)
        const text = `${local}${sign}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`
        assert.equal(parseScheduledAt(text), ms)
      }))
  })

  test('a hostile megabyte is refused at once', () => {
    assert.equal(parseScheduledAt('2026-12-01T09:00:00' + '0'.repeat(1 << 20) + 'Z'), null)
    assert.equal(parseScheduledAt('9'.repeat(1 << 20)), null)
  })
})

describe('metadata', () => {
  test('within the bounds it is fine and kept as given', () => {
    const md = { orderId: 'ord_123', 'customer-tier': 'gold', empty: '' }
    assert.deepEqual(metadataProblems(md), [])
    assert.deepEqual(normaliseMetadata(md), md)
    assert.deepEqual(metadataProblems(undefined), [])
  })

  test('each bound is named: keys, key shape, value length, total bytes', () => {
    const many = Object.fromEntries(Array.from({ length: METADATA_LIMITS.maxKeys + 1 }, (_, i) => [`k${i}`, 'v']))
    assert.deepEqual(metadataProblems(many), [{ path: 'metadata', message: 'takes at most 20 keys' }])
    assert.equal(metadataProblems({ 'a.b': 'x' })[0]!.path, 'metadata.a.b')
    assert.match(metadataProblems({ ['k'.repeat(41)]: 'x' })[0]!.message, /not a metadata key/)
    assert.match(metadataProblems({ __proto__x: 'x', constructor: 'y' })[0]!.message, /reserved/)
    assert.match(metadataProblems({ a: 'v'.repeat(501) })[0]!.message, /longer than 500 characters/)
    assert.match(metadataProblems({ a: 5 })[0]!.message, /must be a string/)
    assert.match(metadataProblems([])[0]!.message, /must be an object/)
    // Five values of 450 characters: each fine, together over 2 KB.
    const big = Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`k${i}`, 'x'.repeat(450)]))
    assert.deepEqual(metadataProblems(big).map((p) => p.path), ['metadata'])
    assert.match(metadataProblems(big)[0]!.message, /at most 2048/)
    // Bytes, not characters: 250 three-byte characters in each of 3 values pass 2 KB.
    const wide = Object.fromEntries(Array.from({ length: 3 }, (_, i) => [`k${i}`, '€'.repeat(250)]))
    assert.match(metadataProblems(wide)[0]!.message, /at most 2048/)
  })

  test('a hostile megabyte: a million keys, or one huge key or value, is refused without reading it all', () => {
    const keys: Record<string, string> = {}
    for (let i = 0; i < 100_000; i++) keys[`k${i}`] = 'v'.repeat(10)
    assert.deepEqual(metadataProblems(keys), [{ path: 'metadata', message: 'takes at most 20 keys' }])
    const longKey = { ['k'.repeat(1 << 20)]: 'v' }
    const p = metadataProblems(longKey)
    assert.equal(p.length, 1)
    assert.ok(p[0]!.path.length < 60, 'the path does not echo the megabyte')
    assert.match(metadataProblems({ a: 'v'.repeat(1 << 20) })[0]!.message, /longer than 500/)
  })

  test('stored values read back as string pairs only', () => {
    assert.deepEqual(metadataOf({ a: 'x', b: 2, c: null }), { a: 'x' })
    assert.deepEqual(metadataOf('nonsense'), {})
    assert.deepEqual(metadataOf(null), {})
  })
})

describe('the tag filter', () => {
  test('name or name:value', () => {
    assert.deepEqual(parseTagFilter('campaign'), { name: 'campaign' })
    assert.deepEqual(parseTagFilter('campaign:black-friday'), { name: 'campaign', value: 'black-friday' })
    for (const bad of ['', ':x', 'a:', 'a:b:c', 'a b', 'é', 'x'.repeat(257), 'a:' + 'x'.repeat(1 << 20)]) {
      assert.equal(parseTagFilter(bad), null, bad.slice(0, 20))
    }
  })
})
