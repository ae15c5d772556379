import { randomBytes } from 'node:crypto'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Config } from './index.js'

/**
 * Development convenience: without SVC_SECRET, a secret is generated once into DATA_DIR and reused, so
 * sessions and API keys survive restarts. Production refuses to start without SVC_SECRET (loadConfig).
 */
export function resolveSecret (config: Config): string {
  if (config.secret !== undefined) return config.secret
  mkdirSync(config.dataDir, { recursive: true })
  const file = join(config.dataDir, 'secret')
  try {
    const existing = readFileSync(file, 'utf8').trim()
    if (existing.length >= 32) return existing
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  const secret = randomBytes(32).toString('base64url')
  // 'wx' so two processes starting at once cannot both write a different secret.
  try {
    writeFileSync(file, secret + '\n', { mode: 0o600, flag: 'wx' })
    return secret
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return readFileSync(file, 'utf8').trim()
    throw err
  }
}
