// Opening the MongoDB store: the client with its write concern, the topology check, the indexes.
import { MongoClient, type W } from 'mongodb'
import { MongoStore } from './index.js'

export interface MongoOptions {
  uri: string
  /** Database name; default: the one in the URI's path, else 'svc'. */
  dbName?: string
  /** The write concern's `w` (writes are always journaled); default 'majority'. */
  writeConcern?: W
}

/** The database named in a MongoDB connection string (`mongodb[+srv]://auth@hosts/<db>?options`), if any. */
export function dbNameFromUri (uri: string): string | undefined {
  const rest = uri.replace(/^mongodb(\+srv)?:\/\//i, '')
  // Reserved characters in credentials and socket paths are percent-encoded, so the first '/' ends the hosts.
  const slash = rest.indexOf('/')
  if (slash < 0) return undefined
  const path = rest.slice(slash + 1).split('?')[0] ?? ''
  const name = decodeURIComponent(path)
  return name === '' ? undefined : name
}

export async function openMongoStore (options: MongoOptions): Promise<MongoStore> {
  // Set here, it wins over a `w` or `journal` in the URI.
  const client = new MongoClient(options.uri, { appName: 'svc', writeConcern: { w: options.writeConcern ?? 'majority', journal: true } })
  try {
    await client.connect()
    await requireTransactions(client)
    const store = new MongoStore(client, client.db(options.dbName ?? dbNameFromUri(options.uri) ?? 'svc'))
    await store.ensureIndexes()
    await store.ensureRateLimitIndexes()
    return store
  } catch (err) {
    await client.close().catch(() => {})
    throw err
  }
}

/** Fails the start with a clear message on a standalone server, where every transaction would fail. */
async function requireTransactions (client: MongoClient): Promise<void> {
  const hello = await client.db('admin').command({ hello: 1 })
  if (typeof hello.setName === 'string' || hello.msg === 'isdbgrid') return
  throw new Error('MongoDB: svc needs a replica set or a sharded cluster (it writes batches in transactions), and this server ' +
    'is a standalone mongod. A single-node replica set will do: start mongod with --replSet rs0, run rs.initiate() once, ' +
    'and add ?replicaSet=rs0 to MONGODB_URI.')
}
