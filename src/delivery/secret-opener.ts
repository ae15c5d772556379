// Webhook signing secrets are sealed at rest (src/domain/secrets.ts). The engine opens a webhook's stored
// secrets once and shares the opened array with every delivery of that webhook until the stored ones
// change (a rotation), so a backlog of a million deliveries opens its secrets once, not a million times.
import type { DeliveryWork } from '../store/deliveries.js'
import type { EngineLogger } from './engine-logger.js'

/** How many webhooks' opened secrets are remembered before the memory is emptied. */
const REMEMBERED = 10_000

export class SecretOpener {
  private readonly opened = new Map<string, { stored: string[]; secrets: string[] }>()

  constructor (
    private readonly open: ((webhookId: string, stored: string) => string) | undefined,
    private readonly log: EngineLogger,
  ) {}

  /** The work with its secrets opened; a secret that does not open leaves none, so its delivery fails and is retried. */
  apply (work: DeliveryWork[]): DeliveryWork[] {
    if (this.open === undefined) return work
    for (const w of work) w.secrets = this.secretsOf(w)
    return work
  }

  private secretsOf (w: DeliveryWork): string[] {
    const known = this.opened.get(w.webhookId)
    if (known !== undefined && known.stored.length === w.secrets.length && known.stored.every((s, i) => s === w.secrets[i])) return known.secrets
    let secrets: string[]
    try {
      secrets = w.secrets.map((s) => this.open!(w.webhookId, s))
    } catch (err) {
      this.log.error({ err, webhookId: w.webhookId }, 'a webhook signing secret does not open (was SVC_SECRET changed?); its deliveries fail until it is rotated')
      secrets = []
    }
    if (this.opened.size >= REMEMBERED) this.opened.clear()
    this.opened.set(w.webhookId, { stored: w.secrets, secrets })
    return secrets
  }
}
