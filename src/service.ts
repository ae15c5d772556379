// The whole service: the HTTP app plus the background workers (the mail queue, the delivery engine),
// built around one store. server.ts and the tests both start svc through here, so what is tested is
// what runs.
import path from 'node:path'
import type { FastifyBaseLogger } from 'fastify'
import pino from 'pino'
import { Registry } from 'prom-client'
import type { Config } from '../config/index.js'
import type { Component } from './component.js'
import { createUseCases, type Services, type UseCaseDeps } from './app/services.js'
import { DeliveryEngine, type EngineOptions } from './delivery/engine.js'
import { systemClock } from './domain/clock.js'
import type { ResolvedAddress } from './domain/webhook-url.js'
import { buildApp, buildOperationsApp, type App } from './http/build-app.js'
import { Mailer, type MailerTuning } from './mail/mailer.js'
import { instrumentStore } from './metrics.js'
import { createSandboxTransport } from './mail/sandbox-transport.js'
import { createSmtpThreadTransport } from './mail/smtp-thread.js'
import { createOutbound } from './mail/outbound.js'
import { createComposer } from './mail/compose-pool.js'
import { leaseOwner } from './domain/lease-owner.js'
import { verpKey } from './domain/verp.js'
import { openWebhookSecret } from './domain/secrets.js'
import { DomainChecker, type DomainCheckerOptions } from './mail/domain-checker.js'
import type { InboundOptions } from './mail/inbound/listener.js'
import type { ReceivingOptions } from './mail/inbound/receiving.js'
import type { MailTransport } from './mail/transport.js'
import type { Store } from './store/types.js'

export type { Component }

export interface ServiceDeps extends UseCaseDeps {
  /** A pino logger; default: none (silent). The server passes its own. */
  logger?: FastifyBaseLogger
  /** Where metrics register; default: a fresh Registry. */
  registry?: Registry
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

  constructor (private readonly store: Store, private readonly wake: Array<() => void>, private readonly everyMs: number) {}

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

function sandbox (config: Config, log: FastifyBaseLogger): MailTransport {
  // The mailer hands the sandbox drafts: a copy per recipient is made only for the emails it writes.
  const copies = { publicUrl: config.publicUrl, secret: config.secret! }
  if (config.sandboxKeep === 0) return createSandboxTransport({ keep: 0, copies })
  const logger = log.child({ component: 'mailer' })
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
  // Silent unless given one, like the HTTP app's own (Fastify's logger: false).
  const logger = given.logger ?? pino({ enabled: false })
  const deps: ServiceDeps = { ...given, registry, logger, store: instrumentStore(given.store, registry) }
  const clock = deps.clock ?? systemClock
  // Built once, here, and handed to each part: the background workers first, the HTTP app last (it is
  // given what the workers report).
  const useCases = createUseCases(config, deps)
  const engine = roles.delivery
    ? new DeliveryEngine({
      store: deps.store,
      clock,
      registry,
      logger,
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
      transport: deps.transport ?? (config.smtpUrl !== undefined ? createSmtpThreadTransport(config.smtpUrl, { registry, maxConnections: config.smtpPoolSize, connectionLimits: config.smtpConnectionLimits, copies: { publicUrl: config.publicUrl, secret: config.secret! } }) : sandbox(config, logger)),
      closeTransport: deps.transport === undefined,
      emails: {
        onAccepted: (listener) => {
          const local = useCases.emails.onAccepted(listener)
          // 0: another process accepted something; the accepted-emails metric counts this node's sends only.
          const remote = () => listener(0)
          remoteSends.add(remote)
          return () => { local(); remoteSends.delete(remote) }
        },
        // Sends accepted here go to this mailer in the write that stores them, when it has room.
        handOffTo: (intake) => useCases.emails.handOffTo(intake),
        // Scheduled sends accepted or moved here: the mailer wakes at their time, not at its next poll.
        onScheduled: (listener) => useCases.emails.onScheduled(listener),
      },
      clock,
      logger: logger.child({ component: 'mailer' }),
      registry,
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
      composer: createComposer({ publicUrl: config.publicUrl, secret: config.secret!, registry }),
      outbound: createOutbound({ domains: useCases.domains, verpKey: verpKey(config.secret!), bounceDomain: config.mail.bounceDomain }),
      ...deps.mailer,
    })
    : undefined
  // The mailer starts after the engine (its events find the engine running) and stops before it; the
  // watcher of other processes' writes starts last and stops first.
  const components: Component[] = []
  if (engine) components.push(engine)
  if (mailer) {
    components.push(mailer)
    // Sender domains are re-checked, and returning mail heard, by the mailer role.
    components.push(new DomainChecker({ domains: useCases.domains, logger: logger.child({ component: 'domains' }), ...deps.domainChecker }))
    if (config.mail.inbound.port !== undefined) {
      // Loaded only where it listens: the SMTP server and the MIME parser hold about 9 MiB of the main
      // thread's heap for as long as the process runs, and V8 lets the heap grow to a multiple of what
      // stays alive before it collects, so every process without the listener would pay a multiple of it.
      const { InboundMail } = await import('./mail/inbound/listener.js')
      const { Receiving } = await import('./mail/inbound/receiving.js')
      const receiving = new Receiving({
        received: useCases.received,
        maxBytes: config.mail.receivingMaxBytes,
        dnsServers: config.dnsServers,
        mta: config.mail.mxHost,
        logger: logger.child({ component: 'inbound' }),
        registry,
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
        returnedMail: useCases.returnedMail,
        logger: logger.child({ component: 'inbound' }),
        registry,
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
  // What the workers report to /readyz and the webhook routes, read from them when asked.
  const readiness = new Map<string, () => string | null>()
  if (engine) readiness.set('delivery', () => (engine.started ? null : 'The delivery engine is not running'))
  if (mailer) readiness.set('mail', () => (mailer.started ? null : 'The mail queue is not running'))
  const services: Services = {
    ...useCases,
    readiness,
    deliveryState: engine ? (webhookId) => engine.deliveryState(webhookId) : () => null,
  }
  const app = roles.api
    ? await buildApp(config, services, { store: deps.store, registry, logger: given.logger })
    : await buildOperationsApp(config, services, { registry, logger: given.logger })
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
