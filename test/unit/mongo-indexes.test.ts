// The MongoDB index migration plan (src/store/mongo/indexes.ts), from listIndexes-shaped input: what is
// created, rebuilt or dropped. Needs no server; syncIndexes itself runs in the MongoDB contract suite.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { planIndexSync, type WantedIndex } from '../../src/store/mongo/indexes.js'

const wanted: WantedIndex[] = [
  { key: { leaseOwner: 1 }, name: 'emails_leases', partialFilterExpression: { leaseOwner: { $type: 'string' } } },
  { key: { accountId: 1, key: 1 }, name: 'keys_unique', unique: true },
  { key: { expiresAtDate: 1 }, name: 'keys_ttl', expireAfterSeconds: 0 },
  { key: { accountId: 1, createdAt: -1, email: -1 }, name: 'page' },
]

// As listIndexes answers for exactly `wanted`: version field, no `unique: false`.
const same = [
  { v: 2, key: { _id: 1 }, name: '_id_' },
  { v: 2, key: { leaseOwner: 1 }, name: 'emails_leases', partialFilterExpression: { leaseOwner: { $type: 'string' } } },
  { v: 2, key: { accountId: 1, key: 1 }, name: 'keys_unique', unique: true },
  { v: 2, key: { expiresAtDate: 1 }, name: 'keys_ttl', expireAfterSeconds: 0 },
  { v: 2, key: { accountId: 1, createdAt: -1, email: -1 }, name: 'page' },
]

describe('planIndexSync', () => {
  test('an up-to-date collection needs nothing; an empty one gets every index', () => {
    assert.deepEqual(planIndexSync(same, wanted), { created: [], rebuilt: [], dropped: [] })
    assert.deepEqual(planIndexSync([], wanted), { created: wanted.map((w) => w.name), rebuilt: [], dropped: [] })
  })

  test('a changed key, key order, direction, filter, uniqueness or TTL is rebuilt; nothing else is touched', () => {
    const changed = (name: string, patch: Record<string, unknown>) =>
      same.map((d) => (d.name === name ? { ...d, ...patch } : d))
    assert.deepEqual(planIndexSync(changed('emails_leases', { partialFilterExpression: { leaseOwner: { $exists: true } } }), wanted).rebuilt,
      ['emails_leases'])
    assert.deepEqual(planIndexSync(changed('keys_unique', { unique: undefined }), wanted).rebuilt, ['keys_unique'])
    assert.deepEqual(planIndexSync(changed('keys_ttl', { expireAfterSeconds: 3600 }), wanted).rebuilt, ['keys_ttl'])
    assert.deepEqual(planIndexSync(changed('page', { key: { accountId: 1, email: -1, createdAt: -1 } }), wanted).rebuilt, ['page'])
    assert.deepEqual(planIndexSync(changed('page', { key: { accountId: 1, createdAt: 1, email: -1 } }), wanted).rebuilt, ['page'])
    assert.deepEqual(planIndexSync(changed('page', { sparse: true }), wanted).rebuilt, ['page'])
  })

  test('unknown indexes stay (an operator may have added them); retired names are dropped, never _id_', () => {
    const extra = [...same, { v: 2, key: { subject: 1 }, name: 'operator_subject' }, { v: 2, key: { old: 1 }, name: 'old_one' }]
    assert.deepEqual(planIndexSync(extra, wanted, ['old_one', '_id_', 'not_there']), { created: [], rebuilt: [], dropped: ['old_one'] })
  })
})
