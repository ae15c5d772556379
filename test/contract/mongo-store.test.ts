// The Store contract against MongoDB, when a server is reachable through MONGODB_URI (a fresh database
// per store, dropped afterwards). Without MONGODB_URI the run reports one skipped test and says so: a
// MongoDB test never passes without a MongoDB.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { MongoClient } from 'mongodb'
import type { MongoStore } from '../../src/store/mongo/index.js'
import { dbNameFromUri, openMongoStore } from '../../src/store/mongo/open.js'
import { storeContract, type MadeStore } from './store-contract.js'
import { deliveryContract } from './delivery-contract.js'

const uri = process.env.MONGODB_URI

async function makeMongo (mongoUri: string): Promise<MadeStore> {
  const dbName = `svc_test_${randomBytes(6).toString('hex')}`
  const opened: MongoStore[] = []
  const open = async (): Promise<MongoStore> => {
    const s = await openMongoStore({ uri: mongoUri, dbName })
    opened.push(s)
    return s
  }
  return {
    store: await open(),
    reopen: open,
    cleanup: async () => {
      for (const s of opened) await s.close()
      const client = new MongoClient(mongoUri)
      try {
        await client.connect()
        await client.db(dbName).dropDatabase()
      } finally {
        await client.close()
      }
    },
  }
}

if (uri === undefined || uri === '') {
  const message = 'MONGODB_URI is not set: the MongoDB contract tests were skipped'
  process.stderr.write(message + '\n')
  test('mongo store contract', { skip: message }, () => {})
} else {
  const mongoUri = uri
  storeContract('mongo', () => makeMongo(mongoUri))
  deliveryContract('mongo', () => makeMongo(mongoUri))

  describe('mongo store: adapter-specific', () => {
    test('opening twice on the same database is idempotent (indexes included)', async () => {
      const made = await makeMongo(mongoUri)
      try {
        const again = await made.reopen()
        await again.ping()
        const names = (await (again as MongoStore).apiKeys.indexes()).map((i) => i.name).sort()
        assert.deepEqual(names, ['_id_', 'api_keys_account', 'api_keys_hash'])
        const ttl = (await (again as MongoStore).sessions.indexes()).find((i) => i.name === 'sessions_ttl')
        assert.equal(ttl?.expireAfterSeconds, 0)
      } finally {
        await made.cleanup()
      }
    })

    test('an index whose definition changed is rebuilt at start instead of failing it', async () => {
      const made = await makeMongo(mongoUri)
      try {
        const emails = (made.store as MongoStore).mail.emails
        await emails.dropIndex('emails_leases')
        await emails.createIndex({ leaseOwner: 1 }, { name: 'emails_leases', sparse: true })
        const again = (await made.reopen()) as MongoStore
        const idx = (await again.mail.emails.indexes()).find((i) => i.name === 'emails_leases')
        assert.deepEqual(idx?.partialFilterExpression, { leaseOwner: { $type: 'string' } })
        assert.equal(idx?.sparse, undefined)
      } finally {
        await made.cleanup()
      }
    })
  })
}

// Needs no server: how the database name is read from the URI.
describe('mongo store: database name from the URI', () => {
  test('path of the URI, else undefined (the store then uses "svc")', () => {
    assert.equal(dbNameFromUri('mongodb://localhost:27017/app'), 'app')
    assert.equal(dbNameFromUri('mongodb://u:p%2Fq@h1:1,h2:2/app?replicaSet=rs0&w=majority'), 'app')
    assert.equal(dbNameFromUri('mongodb+srv://cluster.example.net/prod?retryWrites=true'), 'prod')
    assert.equal(dbNameFromUri('mongodb://localhost:27017'), undefined)
    assert.equal(dbNameFromUri('mongodb://localhost:27017/'), undefined)
    assert.equal(dbNameFromUri('mongodb://localhost:27017/?w=majority'), undefined)
  })
})
