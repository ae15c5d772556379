import type { Config } from '../../config/index.js'
import { openSqliteStore } from './sqlite/index.js'
import type { Store } from './types.js'

/**
 * The store the configuration names: MongoDB when MONGODB_URI is set, else SQLite in DATA_DIR.
 * `shortLived` (the CLI): SQLite checkpoints inline, with no thread started for a few writes.
 */
export async function openStore (config: Config, opts: { shortLived?: boolean } = {}): Promise<Store> {
  if (config.mongodbUri !== undefined) {
    const { openMongoStore } = await import('./mongo/open.js')
    return openMongoStore({ uri: config.mongodbUri, writeConcern: config.mongodbWriteConcern })
  }
  return openSqliteStore({ dataDir: config.dataDir, ...(opts.shortLived === true ? { checkpoints: 'inline' as const } : {}) })
}
