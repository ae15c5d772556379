// The entry point: read the environment once, open the store, serve HTTP, and stop cleanly on SIGTERM.
import os from 'node:os'
import pino from 'pino'
import { Registry } from 'prom-client'
import { ConfigError, loadConfig, type Config } from '../config/index.js'
import { resolveSecret } from '../config/secret.js'
import { requireStoreSecret } from './app/secret-check.js'
import type { SecretSource } from './domain/secret-check.js'
import { registerProcessMetrics } from './metrics.js'
import { createService } from './service.js'
import { openStore } from './store/open.js'
import { describeStore, secretSourceOf } from './store/where.js'

function readConfig (): { config: Config; secretFrom: SecretSource } {
  try {
    const config = loadConfig(process.env, { cores: os.availableParallelism(), hostname: os.hostname() })
    return { config: { ...config, secret: resolveSecret(config) }, secretFrom: secretSourceOf(config) }
  } catch (err) {
    if (err instanceof ConfigError) {
      for (const problem of err.problems) process.stderr.write(`svc: configuration: ${problem}\n`)
      process.exit(1)
    }
    throw err
  }
}

async function main (): Promise<void> {
  const { config, secretFrom } = readConfig()
  // The log format follows where the logs go, not NODE_ENV: JSON lines always, one per request; an
  // operator who wants them pretty pipes them through pino-pretty.
  const logger = pino({
    level: config.logLevel,
    redact: {
      paths: ['req.headers.cookie', 'req.headers["x-api-key"]', 'req.headers.authorization', '*.password', '*.secret', '*.key', '*.token'],
      censor: '[redacted]',
    },
  })
  for (const warning of config.warnings) logger.warn(warning)
  const registry = new Registry()
  registerProcessMetrics(registry)

  const store = await openStore(config)
  // A store written under another secret (restored without it) is refused before anything reads or seals
  // with this one: otherwise every API key would answer 401.
  try {
    const check = await requireStoreSecret(store, config.secret!, describeStore(config), secretFrom)
    if (check === 'written') logger.info('the store now keeps a check value of this secret: svc refuses to start on it under another one')
  } catch (err) {
    await store.close().catch(() => {})
    throw err
  }
  const service = await createService(config, { store, logger, registry })
  const { app } = service
  if (config.smtpUrl === undefined && config.roles.mailer) {
    logger.warn('SMTP_URL is not set: the sandbox transport is in use and no email leaves this machine')
  }
  if (!config.production) logger.info('development mode: webhooks may use http:// and localhost')

  let stopping = false
  const stop = async (signal: string) => {
    if (stopping) return
    stopping = true
    logger.info({ signal }, 'stopping')
    const deadline = setTimeout(() => {
      logger.error('did not stop within 30 s; exiting')
      process.exit(1)
    }, 30_000).unref()
    try {
      await service.stop()
      await store.close()
      clearTimeout(deadline)
      logger.info('stopped')
      logger.flush()
      process.exitCode = 0
    } catch (err) {
      logger.error({ err }, 'error while stopping')
      process.exit(1)
    }
  }
  process.once('SIGTERM', () => { void stop('SIGTERM') })
  process.once('SIGINT', () => { void stop('SIGINT') })

  await service.start()
  await app.listen({ port: config.port, host: config.host })
  const roles = Object.entries(config.roles).filter(([, on]) => on).map(([role]) => role)
  logger.info({ store: store.kind, publicUrl: config.publicUrl, nodeId: config.nodeId, roles, rateLimits: config.rateLimitStore }, 'svc is ready')
}

main().catch((err) => {
  process.stderr.write(`svc: failed to start: ${err instanceof Error ? err.message : String(err)}\n`)
  process.exit(1)
})
