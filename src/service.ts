// The whole service: the HTTP app plus the background workers (the mail queue, the delivery engine),
// built around one store. server.ts and the tests both start svc through here, so what is tested is
// what runs.
import type { Config } from '../config/index.js'
import { buildApp, type App, type AppDeps } from './app.js'
import { DeliveryEngine, type EngineOptions } from './delivery/engine.js'
import { systemClock } from './domain/clock.js'
import type { ResolvedAddress } from './domain/webhook-url.js'
import { Mailer, type MailerTuning } from './mail/mailer.js'
import { createSandboxTransport } from './mail/sandbox-transport.js'
import { createSmtpTransport } from './mail/smtp-transport.js'
import type { MailTransport } from './mail/transport.js'

/** A background part of the service: started after the app is ready, stopped before the store closes. */
export interface Component {
  readonly name: string
  start(): Promise<void>
  /** Stop taking work; finish or release what is in flight before resolving. */
  stop(): Promise<void>
}

export interface ServiceDeps extends AppDeps {
  /** Fixed DNS answers for the delivery worker threads (tests: a hostname without public DNS). */
  deliveryHosts?: Record<string, ResolvedAddress[]>
  /** Engine tuning beyond the configuration (tests, benchmarks). */
  engine?: Partial<EngineOptions>
  /** Where accepted emails go; default: the SMTP_URL relay, else the sandbox. Only a transport the service made is closed by it. */
  transport?: MailTransport
  /** Mail queue tuning beyond the configuration (tests: a short retry schedule). */
  mailer?: MailerTuning
}

export interface Service {
  app: App
  engine: DeliveryEngine
  components: Component[]
  /** Starts the background components (the app itself is started by listen() or inject()). */
  start(): Promise<void>
  /** Stops the components, then the app. The store stays open: whoever opened it closes it. */
  stop(): Promise<void>
}

export async function createService (config: Config, deps: ServiceDeps): Promise<Service> {
  const app = await buildApp(config, deps)
  const engine = new DeliveryEngine({
    store: deps.store,
    clock: deps.clock ?? systemClock,
    registry: app.registry,
    logger: app.log,
    threads: config.deliveryThreads,
    timeoutMs: config.delivery.timeoutMs,
    retrySchedule: config.delivery.retrySchedule,
    window: config.delivery.window,
    leaseMs: config.delivery.leaseMs,
    autoDisableMs: config.delivery.autoDisableMs,
    retentionMs: config.retentionDays * 86_400_000,
    production: config.production,
    allowedCidrs: config.webhookAllowedCidrs,
    nodeId: config.nodeId,
    ...(deps.deliveryHosts ? { hosts: deps.deliveryHosts } : {}),
    ...deps.engine,
  })
  const mailer = new Mailer({
    store: deps.store,
    transport: deps.transport ?? (config.smtpUrl !== undefined ? createSmtpTransport(config.smtpUrl) : createSandboxTransport({ keep: 0 })),
    closeTransport: deps.transport === undefined,
    emails: app.services.emails,
    clock: deps.clock ?? systemClock,
    logger: app.log.child({ component: 'mailer' }),
    registry: app.registry,
    publicUrl: config.publicUrl,
    secret: config.secret!,
    owner: config.nodeId,
    ...deps.mailer,
  })
  // The mailer starts after the engine (its events find the engine running) and stops before it.
  const components: Component[] = [engine, mailer]
  app.services.readiness.set('delivery', () => (engine.started ? null : 'The delivery engine is not running'))
  app.services.readiness.set('mail', () => (mailer.started ? null : 'The mail queue is not running'))
  let started: Component[] = []
  return {
    app,
    engine,
    components,
    async start () {
      await app.ready()
      for (const c of components) {
        await c.start()
        started.push(c)
      }
    },
    async stop () {
      // Reverse order: what started last depends on what started first.
      for (const c of started.reverse()) await c.stop()
      started = []
      await app.close()
    },
  }
}
