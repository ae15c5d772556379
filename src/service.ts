// The whole service: the HTTP app plus the background workers (the mail queue, the delivery engine),
// built around one store. server.ts and the tests both start svc through here, so what is tested is
// what runs.
import path from 'node:path'
import Fastify from 'fastify'
import { Registry } from 'prom-client'
import type { Config } from '../config/index.js'
import type { Component } from './component.js'
import { buildApp, createServices, type App, type AppDeps } from './app.js'
import { DeliveryEngine, type EngineOptions } from './delivery/engine.js'
import { systemClock } from './domain/clock.js'
import type { ResolvedAddress } from './domain/webhook-url.js'
import { registerErrorHandling } from './http/errors.js'
import { registerHttpMetrics } from './http/metrics.js'
import { fastifyTrustProxy } from './http/trust-proxy.js'
import { addSharedSchemas } from './http/schemas.js'
import healthRoutes from './http/routes/health.js'
import { Mailer, type MailerTuning } from './mail/mailer.js'
import { instrumentStore } from './metrics.js'
import { createSandboxTransport } from './mail/sandbox-transport.js'
import { createSmtpThreadTransport } from './mail/smtp-thread.js'
import { createOutbound } from './mail/outbound.js'
import { createComposer } from './mail/compose-pool.js'
import { leaseOwner } from './domain/lease-owner.js'
import { verpKey } from './domain/verp.js'
import { openWebhookSecret } from './domain/secrets.js'
import { createReturnedMailService } from './app/returned-mail.js'
import { DomainChecker, type DomainCheckerOptions } from './mail/domain-checker.js'
import type { InboundOptions } from './mail/inbound/listener.js'
import type { ReceivingOptions } from './mail/inbound/receiving.js'
import type { MailTransport } from './mail/transport.js'

export type { Component }

export interface ServiceDeps extends AppDeps {
  /** Fixed DNS answers for the delivery worker threads (tests: a hostname without public DNS). */
  deliveryHosts?: Record<string, ResolvedAddress[]>
  /** Engine tuning beyond the configuration (tests, benchmarks). */
  engine?: Partial<EngineOptions>
  /** Where accepted emails go; default: the SMTP_URL relay, else the sandbox. Only a transport the service made is closed by it. */
  transport?: MailTransport
  /** Mail queue tuning beyond the configuration (tests: a short retry schedule). */
  mailer?: MailerTuning
  /** Sender-domain re-check tuning (tests: a short interval). */
  domainChecker?: Pick<DomainCheckerOptions, 'intervalMs' | 'tickMs'>
  /** Returning-mail listener tuning (tests: the per-address connection rate and share, the addresses remembered). */
  inbound?: Pick<InboundOptions, 'maxBytes' | 'connectionsPerMinute' | 'connectionsPerAddress' | 'trackedAddresses'
    | 'maxClients' | 'idleMs' | 'maxAgeMs' | 'transactionMs' | 'evictIdleMs'>
  /** Receiving tuning (tests: how often old received mail is pruned; the judging bounds in small numbers). */
  receiving?: Pick<ReceivingOptions, 'pruneEveryMs' | 'judging'>
}

export interface Service {
  app: App
  /** The delivery engine; reading it in a process without the delivery role (SVC_ROLES) throws. */
  readonly engine: DeliveryEngine
  /** The mail queue, when this process runs the mailer role. */
  readonly mailer: Mailer | undefined
  components: Component[]
  /** Starts the background components (the app itself is started by listen() or inject()). */
  start(): Promise<void>
  /** Stops the components, then the app. The store stays open: whoever opened it closes it. */
  stop(): Promise<void>
}

/** How often a process without the API role looks for other processes' writes (see ExternalWrites). */
export const EXTERNAL_WRITES_POLL_MS = 10

/**
 * The HTTP side of a process without the API role: /healthz, /readyz and /metrics on its PORT (operators
 * scrape every node), every other path the 404 envelope. A separate, minimal app rather than the API app
 * with its routes left out: nothing of the API (body parsers, sessions, rate limits, docs) is loaded,
 * and nothing of it can be reached by mistake.
 */
async function buildOperationsApp (config: Config, deps: AppDeps): Promise<App> {
  const services = createServices(config, deps)
  const registry = deps.registry ?? new Registry()
  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: false }),
    bodyLimit: 1024,
    trustProxy: fastifyTrustProxy(config.trustProxy),
  })
  addSharedSchemas(app)
  registerErrorHandling(app)
  registerHttpMetrics(app, registry, config.metricsToken, config.metricsServed)
  await app.register(healthRoutes, { services, config })
  return Object.assign(app, { services, registry }) as unknown as App
}

/**
 * Wakes this process's mailer and engine when another process commits to the store. The store's
 * subscribe() hint is heard only inside the process that wrote; without this, a send accepted by an API
 * process would wait for the mailer's poll (1 s) and its event for the engine's (250 ms). SQLite tells
 * other connections' commits apart with PRAGMA data_version, which costs microseconds to read; MongoDB has
 * no such number (null), and there the polls stay the only way (see the README).
 */
class ExternalWrites implements Component {
  readonly name = 'external-writes'
  private timer: NodeJS.Timeout | undefined
  private last: number | null = null
  private reading = false

  constructor (private readonly store: AppDeps['store'], private readonly wake: Array<() => void>, private readonly everyMs: number) {}

  async start (): Promise<void> {
    this.last = await this.store.externalWriteVersion()
    if (this.last === null) return
    this.timer = setInterval(() => { void this.check() }, this.everyMs).unref()
  }

  private async check (): Promise<void> {
    if (this.reading) return
    this.reading = true
    try {
      const version = await this.store.externalWriteVersion()
      if (version !== this.last) {
        this.last = version
        for (const wake of this.wake) wake()
      }
    } catch {
      // The store is closing or unreachable: the components' own polls and errors say so.
    } finally {
      this.reading = false
    }
  }

  async stop (): Promise<void> {
    clearInterval(this.timer)
    this.timer = undefined
  }
}

/** The transport without SMTP_URL: nothing leaves the machine; in development each email is written to DATA_DIR/sandbox. */
/** Emails in flight at once on the sandbox (what 8 per connection gave with the pool's old default of 10). */
const SANDBOX_CONCURRENCY = 80

function sandbox (config: Config, app: App): MailTransport {
  // The mailer hands the sandbox drafts: a copy per recipient is made only for the emails it writes.
  const copies = { publicUrl: config.publicUrl, secret: config.secret! }
  if (config.sandboxKeep === 0) return createSandboxTransport({ keep: 0, copies })
  const logger = app.log.child({ component: 'mailer' })
  return createSandboxTransport({
    keep: 0,
    dir: path.join(config.dataDir, 'sandbox'),
    keepFiles: config.sandboxKeep,
    copies,
    logger: { info: (msg) => logger.info(msg), warn: (msg) => logger.warn(msg) },
  })
}

export async function createService (config: Config, given: ServiceDeps): Promise<Service> {
  const { roles } = config
  // Everything the service does with the store is measured (src/metrics.ts); the watcher of other
  // processes' writes, which reads a version number every 10 ms, uses the store as given.
  const registry = given.registry ?? new Registry()
  const deps: ServiceDeps = { ...given, registry, store: instrumentStore(given.store, registry) }
  const app = roles.api ? await buildApp(config, deps) : await buildOperationsApp(config, deps)
  const engine = roles.delivery
    ? new DeliveryEngine({
      store: deps.store,
      clock: deps.clock ?? systemClock,
      registry: app.registry,
      logger: app.log,
      threads: config.deliveryThreads,
      timeoutMs: config.delivery.timeoutMs,
      retrySchedule: config.delivery.retrySchedule,
      window: config.delivery.window,
      windowMin: config.delivery.windowMin,
      windowInitial: config.delivery.windowInitial,
      breaker: { downAfterMs: config.delivery.downAfterMs },
      leaseMs: config.delivery.leaseMs,
      autoDisableMs: config.delivery.autoDisableMs,
      retentionMs: config.retentionDays * 86_400_000,
      production: config.production,
      allowedCidrs: config.webhookAllowedCidrs,
      nodeId: config.nodeId,
      ...(deps.deliveryHosts ? { hosts: deps.deliveryHosts } : {}),
      dnsServers: config.dnsServers,
      openSecret: (webhookId, stored) => openWebhookSecret(config.secret!, webhookId, stored),
      ...deps.engine,
    })
    : undefined
  // The mailer is woken by sends accepted here (the API role) and by other processes' writes.
  const remoteSends = new Set<() => void>()
  const mailer = roles.mailer
    ? new Mailer({
      store: deps.store,
      transport: deps.transport ?? (config.smtpUrl !== undefined ? createSmtpThreadTransport(config.smtpUrl, { registry: app.registry, maxConnections: config.smtpPoolSize, connectionLimits: config.smtpConnectionLimits, copies: { publicUrl: config.publicUrl, secret: config.secret! } }) : sandbox(config, app)),
      closeTransport: deps.transport === undefined,
      emails: {
        onAccepted: (listener) => {
          const local = app.services.emails.onAccepted(listener)
          // 0: another process accepted something; the accepted-emails metric counts this node's sends only.
          const remote = () => listener(0)
          remoteSends.add(remote)
          return () => { local(); remoteSends.delete(remote) }
        },
        // Sends accepted here go to this mailer in the write that stores them, when it has room.
        handOffTo: (intake) => app.services.emails.handOffTo(intake),
        // Scheduled sends accepted or moved here: the mailer wakes at their time, not at its next poll.
        onScheduled: (listener) => app.services.emails.onScheduled(listener),
      },
      clock: deps.clock ?? systemClock,
      logger: app.log.child({ component: 'mailer' }),
      registry: app.registry,
      publicUrl: config.publicUrl,
      secret: config.secret!,
      owner: leaseOwner(config.nodeId),
      leaseMs: config.mail.leaseMs,
      attachmentRetentionMs: config.attachments.retentionMs,
      // Enough emails in flight that every relay connection has the next message waiting while others are
      // claimed, built and recorded (each email spends most of its attempt outside the SMTP transaction).
      // The sandbox answers at once: more in flight would only take the main thread from the API and the
      // webhooks.
      concurrency: config.smtpUrl !== undefined ? Math.max(32, 8 * config.smtpPoolSize) : SANDBOX_CONCURRENCY,
      composer: createComposer({ publicUrl: config.publicUrl, secret: config.secret!, registry: app.registry }),
      outbound: createOutbound({ domains: app.services.domains, verpKey: verpKey(config.secret!), bounceDomain: config.mail.bounceDomain }),
      ...deps.mailer,
    })
    : undefined
  // The mailer starts after the engine (its events find the engine running) and stops before it; the
  // watcher of other processes' writes starts last and stops first.
  const components: Component[] = []
  if (engine) {
    components.push(engine)
    app.services.readiness.set('delivery', () => (engine.started ? null : 'The delivery engine is not running'))
    app.services.deliveryState = (webhookId) => engine.deliveryState(webhookId)
  }
  if (mailer) {
    components.push(mailer)
    app.services.readiness.set('mail', () => (mailer.started ? null : 'The mail queue is not running'))
    // Sender domains are re-checked, and returning mail heard, by the mailer role.
    components.push(new DomainChecker({ domains: app.services.domains, logger: app.log.child({ component: 'domains' }), ...deps.domainChecker }))
    if (config.mail.inbound.port !== undefined) {
      // Loaded only where it listens: the SMTP server and the MIME parser hold about 9 MiB of the main
      // thread's heap for as long as the process runs, and V8 lets the heap grow to a multiple of what
      // stays alive before it collects, so every process without the listener would pay a multiple of it.
      const { InboundMail } = await import('./mail/inbound/listener.js')
      const { Receiving } = await import('./mail/inbound/receiving.js')
      const receiving = new Receiving({
        received: app.services.received,
        maxBytes: config.mail.receivingMaxBytes,
        dnsServers: config.dnsServers,
        mta: config.mail.mxHost,
        logger: app.log.child({ component: 'inbound' }),
        registry: app.registry,
        ...deps.receiving,
        judging: { deadlineMs: config.mail.receivingDeadlineMs, ...deps.receiving?.judging },
      })
      components.push(receiving)
      components.push(new InboundMail({
        port: config.mail.inbound.port,
        host: config.mail.inbound.host,
        ipv4Prefix: config.mail.inbound.ipv4Prefix,
        tls: config.mail.inbound.tls,
        verpKey: verpKey(config.secret!),
        complaintsAddress: config.mail.complaintsAddress,
        returnedMail: createReturnedMailService({ store: deps.store, clock: deps.clock ?? systemClock }),
        logger: app.log.child({ component: 'inbound' }),
        registry: app.registry,
        receiving,
        ...deps.inbound,
      }))
    }
  }
  if (engine || mailer) {
    const wake: Array<() => void> = []
    if (engine) wake.push(() => engine.wake())
    if (mailer) wake.push(() => { for (const remote of remoteSends) remote() })
    components.push(new ExternalWrites(given.store, wake, EXTERNAL_WRITES_POLL_MS))
  }
  let started: Component[] = []
  return {
    app,
    get engine (): DeliveryEngine {
      if (!engine) throw new Error('this process does not run the delivery role (SVC_ROLES)')
      return engine
    },
    mailer,
    components,
    async start () {
      await app.ready()
      // Webhook secrets stored before svc sealed them are sealed now, before anything reads them.
      const sealed = await app.services.webhooks.sealStoredSecrets()
      if (sealed > 0) {
        await deps.store.forgetOverwritten?.()
        app.log.info({ webhooks: sealed }, 'sealed webhook signing secrets stored in the clear by an earlier version')
      }
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
