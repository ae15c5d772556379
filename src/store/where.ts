// The words svc and its CLI use to name a store and where the secret comes from, so an operator can
// check them against the server's configuration.
import path from 'node:path'
import type { Config } from '../../config/index.js'
import type { SecretSource } from '../domain/secret-check.js'

/**
 * Which store a configuration names: the SQLite directory as an absolute path, or the MongoDB URI without
 * its credentials and options.
 */
export function describeStore (config: Pick<Config, 'dataDir' | 'mongodbUri'>): string {
  if (config.mongodbUri !== undefined) {
    // The last @: whatever comes before it (user, password, even an unencoded @ in it) is never printed.
    const at = config.mongodbUri.lastIndexOf('@')
    const scheme = config.mongodbUri.indexOf('://') + 3
    const rest = at === -1 ? config.mongodbUri.slice(scheme) : config.mongodbUri.slice(at + 1)
    return `the MongoDB store at ${config.mongodbUri.slice(0, scheme)}${rest.split('?')[0]} (MONGODB_URI)`
  }
  return `the SQLite store in ${path.resolve(config.dataDir)} (DATA_DIR)`
}

/** Where the secret of a configuration (as loaded, before resolveSecret) comes from. */
export function secretSourceOf (config: Pick<Config, 'dataDir' | 'secret'>): SecretSource {
  return config.secret !== undefined ? { kind: 'env' } : { kind: 'file', path: path.resolve(config.dataDir, 'secret') }
}
