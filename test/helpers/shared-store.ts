// The store that several svc processes of a test share: a fresh SQLite directory, or, when MONGODB_URI
// is set (the hosted CI's MongoDB job), a fresh database on that MongoDB, dropped after the test. The
// multi-node tests run on whichever is given, so the same scenarios check both adapters.
import { randomBytes } from 'node:crypto'
import type { TestContext } from 'node:test'
import { MongoClient } from 'mongodb'
import { tempDir } from './server.js'

const mongoUri = process.env.MONGODB_URI === '' ? undefined : process.env.MONGODB_URI

/** Which store the shared-store tests run on, for their names. */
export const SHARED_STORE_KIND: 'sqlite' | 'mongo' = mongoUri === undefined ? 'sqlite' : 'mongo'

/** MONGODB_URI with its database replaced by `db` (hosts, credentials and options kept). */
export function withDatabase (uri: string, db: string): string {
  const scheme = /^mongodb(\+srv)?:\/\//i.exec(uri)![0]
  const rest = uri.slice(scheme.length)
  const query = rest.indexOf('?')
  const hostsEnd = [rest.indexOf('/'), query].filter((i) => i >= 0).reduce((a, b) => Math.min(a, b), rest.length)
  return `${scheme}${rest.slice(0, hostsEnd)}/${db}${query >= 0 ? rest.slice(query) : ''}`
}

/** The environment that points a svc process at the shared store: DATA_DIR, or MONGODB_URI. */
export function sharedStore (t: Pick<TestContext, 'after'>): Record<string, string> {
  if (mongoUri === undefined) return { DATA_DIR: tempDir(t) }
  const db = `svc_nodes_${randomBytes(6).toString('hex')}`
  t.after(async () => {
    const client = new MongoClient(mongoUri)
    try {
      await client.connect()
      await client.db(db).dropDatabase()
    } finally {
      await client.close()
    }
  })
  // A DATA_DIR too, for what svc keeps in files (the sandbox); the store is MongoDB.
  return { MONGODB_URI: withDatabase(mongoUri, db), DATA_DIR: tempDir(t) }
}
