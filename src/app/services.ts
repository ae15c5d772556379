// The use cases of one process, built once around one store (src/service.ts calls createUseCases) and
// handed to whoever needs them: the HTTP app's routes, the mailer, the domain checker, the returned-mail
// listener. Nothing here is filled in later: what the background workers report to the routes
// (WorkerStatus) is given by src/service.ts, which runs them, once they exist.
import type { Config } from '../../config/index.js'
import { systemClock, type Clock } from '../domain/clock.js'
import { createDns } from '../domain/dns.js'
import { parseCidrList, type Resolver } from '../domain/webhook-url.js'
import type { Store } from '../store/types.js'
import { createAccountService, type AccountService } from './accounts.js'
import { createUsageService, type UsageService } from './account-usage.js'
import { createApiKeyService, type ApiKeyService } from './api-keys.js'
import { createDeliveryService, type DeliveryService } from './deliveries.js'
import { createDomainService, spfMechanism, type DomainService } from './domains.js'
import { createEmailListService, type EmailListService } from './email-list.js'
import { createEmailService, type EmailService } from './emails.js'
import { createReceivedService, type ReceivedService } from './received.js'
import { createReturnedMailService, type ReturnedMailService } from './returned-mail.js'
import { createStatsService, type StatsService } from './stats.js'
import { createSuppressionService, type SuppressionService } from './suppressions.js'
import { createTemplateService, type TemplateService } from './templates.js'
import { createWebhookService, type WebhookService } from './webhooks.js'

export interface UseCases {
  clock: Clock
  /** The store's kind and health, for the health routes (the rest of the store is reached through the use cases). */
  storeStatus: Pick<Store, 'kind' | 'health' | 'ping'>
  /** What an account uses of its plan's limits. */
  usage: UsageService
  stats: StatsService
  emailList: EmailListService
  accounts: AccountService
  apiKeys: ApiKeyService
  webhooks: WebhookService
  emails: EmailService
  suppressions: SuppressionService
  deliveries: DeliveryService
  /** Sender domains: records, verification, and which senders a send may use. */
  domains: DomainService
  /** Mail received at domains with receiving on (kept by the inbound listener, read by /api/received). */
  received: ReceivedService
  /** Bounces and complaints coming back to the VERP addresses (the inbound listener). */
  returnedMail: ReturnedMailService
  /** Templates and their versions; renders the sends that name one. */
  templates: TemplateService
}

/** The adaptive delivery state of a webhook on this process: its window, round trip and breaker. */
export interface DeliveryState { window: number; roundTripMs: number; breaker: 'closed' | 'open' | 'half_open' }

/** What the background workers of this process report to the routes; built by src/service.ts, which runs them. */
export interface WorkerStatus {
  /**
   * The adaptive delivery state of a webhook on this process, or null when this process holds no
   * delivery work for it (or runs no delivery engine).
   */
  deliveryState: (webhookId: string) => DeliveryState | null
  /** Named readiness checks of the background workers: null when fine, else what is wrong. */
  readiness: Map<string, () => string | null>
}

/** What the HTTP app is given: the use cases and the workers' status. */
export interface Services extends UseCases, WorkerStatus {}

export interface UseCaseDeps {
  store: Store
  clock?: Clock
  /** DNS for the webhook URL guard; tests inject one and never touch public DNS. */
  resolver?: Resolver
  /** Where failures of background work started by a request are told; default: nowhere. */
  logger?: { error: (details: object, message: string) => void }
}

export function createUseCases (config: Config, deps: UseCaseDeps): UseCases {
  if (config.secret === undefined) throw new Error('config.secret must be resolved before building the use cases')
  const clock = deps.clock ?? systemClock
  const { store } = deps
  // DNS_SERVERS: one resolver for sender-domain checks and webhook hosts.
  const dns = createDns(config.dnsServers)
  const webhooks = createWebhookService({
    store,
    clock,
    secret: config.secret,
    urlPolicy: { production: config.production, allowedCidrs: parseCidrList(config.webhookAllowedCidrs) },
    resolver: deps.resolver ?? dns.hosts,
    onBackgroundError: (err) => deps.logger?.error({ err }, 'replaying deliveries failed'),
  })
  const domains = createDomainService({
    store,
    clock,
    secret: config.secret,
    dns,
    settings: {
      bounceDomain: config.mail.bounceDomain,
      mxHost: config.mail.mxHost,
      spfMechanism: spfMechanism({ spfInclude: config.mail.spfInclude, smtpUrl: config.smtpUrl, mxHost: config.mail.mxHost }),
    },
    requireVerified: config.mail.requireVerifiedDomain,
  })
  const templates = createTemplateService({ store, clock })
  return {
    clock,
    storeStatus: store,
    usage: createUsageService({ store }),
    stats: createStatsService({ store, clock }),
    emailList: createEmailListService({ store }),
    accounts: createAccountService({
      store, secret: config.secret, clock, sessionTtlMs: config.sessionTtlMs, sessionMaxMs: config.sessionMaxMs, signupOpen: config.signupOpen,
    }),
    apiKeys: createApiKeyService({ store, secret: config.secret, clock }),
    webhooks,
    emails: createEmailService({
      store, clock, mailFrom: config.mailFrom, senders: domains, secret: config.secret, quotas: config.quotas, attachmentLimits: config.attachments,
      scheduleHorizonDays: config.mail.scheduleHorizonDays, trackingDefaults: (accountId, from) => domains.trackingDefaults(accountId, from),
      templates,
    }),
    domains,
    templates,
    received: createReceivedService({ store, clock, retentionMs: config.retentionDays * 86_400_000 }),
    returnedMail: createReturnedMailService({ store, clock }),
    suppressions: createSuppressionService({ store, clock }),
    deliveries: createDeliveryService({
      store, clock, webhooks, onBackgroundError: (err) => deps.logger?.error({ err }, 'recovering deliveries failed'),
    }),
  }
}
