import type { Config } from '../../../config/index.js'
import type { AccountService } from '../../app/accounts.js'
import type { ApiKeyService } from '../../app/api-keys.js'
import type { EmailService } from '../../app/emails.js'
import type { SuppressionService } from '../../app/suppressions.js'
import type { DeliveryService } from '../../app/deliveries.js'
import type { DomainService } from '../../app/domains.js'
import type { ReceivedService } from '../../app/received.js'
import type { TemplateService } from '../../app/templates.js'
import type { WebhookService } from '../../app/webhooks.js'
import type { UsageService } from '../../app/account-usage.js'
import type { EmailListService } from '../../app/email-list.js'
import type { StatsService } from '../../app/stats.js'
import type { Store } from '../../store/types.js'
import type { Clock } from '../../domain/clock.js'

export interface Services {
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
  /** Templates and their versions; renders the sends that name one. */
  templates: TemplateService
  /**
   * The adaptive delivery state of a webhook on this process (its window, round trip and breaker), or null
   * when this process holds no delivery work for it (or runs no delivery engine). Set by the service.
   */
  deliveryState: (webhookId: string) => { window: number; roundTripMs: number; breaker: 'closed' | 'open' | 'half_open' } | null
  /** Named readiness checks of the background workers: null when fine, else what is wrong. */
  readiness: Map<string, () => string | null>
}

/** What every route plugin is registered with: the services and the validated config, nothing global. */
export interface RouteContext {
  services: Services
  config: Config
}
