import type { Config } from '../../config/index.js'
import { openSqliteStore } from './sqlite/index.js'
import type { Store } from './types.js'

/** The store the configuration names: MongoDB when MONGODB_URI is set, else SQLite in DATA_DIR. */
export async function openStore (config: Config): Promise<Store> {
  if (config.mongodbUri !== undefined) {
    const { openMongoStore } = await import('./mongo/open.js')
    return openMongoStore({ uri: config.mongodbUri, writeConcern: config.mongodbWriteConcern })
  }
  return openSqliteStore({ dataDir: config.dataDir })
}
