// The background re-check of sender domains (mailer role): every domain is looked at again once its last
// check is older than the interval, so a domain whose records disappear stops being verified (and its
// mail unsigned, its sends refused when REQUIRE_VERIFIED_DOMAIN), and a pending one becomes verified
// once its records are published, without anyone pressing verify.
import type { FastifyBaseLogger } from 'fastify'
import { RECHECK_INTERVAL_MS } from '../domain/sender-domains.js'

export interface DomainCheckerOptions {
  /** Checks up to `limit` domains not checked for `intervalMs` (src/app/domains.ts recheckDue); how many it checked. */
  domains: { recheckDue(intervalMs: number, limit: number, onError: (err: unknown, domainId: string) => void): Promise<number> }
  logger: FastifyBaseLogger
  /** How old a check may get; default RECHECK_INTERVAL_MS (1 h). */
  intervalMs?: number
  /** How often due domains are looked for; default a minute. */
  tickMs?: number
}

const BATCH = 50

export class DomainChecker {
  readonly name = 'domain-checker'
  private timer: NodeJS.Timeout | undefined
  private running: Promise<void> | undefined

  constructor (private readonly options: DomainCheckerOptions) {}

  async start (): Promise<void> {
    // A pass catches and logs its own failures, so a tick never rejects: nothing to wait for here.
    this.timer = setInterval(() => { void this.tick() }, this.options.tickMs ?? 60_000).unref()
    void this.tick()
  }

  /** Runs one pass unless one is running; resolves when that pass is done. */
  tick (): Promise<void> {
    this.running ??= this.pass().finally(() => { this.running = undefined })
    return this.running
  }

  private async pass (): Promise<void> {
    const interval = this.options.intervalMs ?? RECHECK_INTERVAL_MS
    try {
      // Batches until nothing is due (each checked domain is no longer due).
      for (let i = 0; i < 20; i++) {
        const n = await this.options.domains.recheckDue(interval, BATCH, (err, domainId) => {
          this.options.logger.warn({ err, domainId }, 'domains: a background check failed; it runs again later')
        })
        if (n < BATCH) break
      }
    } catch (err) {
      this.options.logger.warn({ err }, 'domains: could not read the domains due for a check')
    }
  }

  async stop (): Promise<void> {
    clearInterval(this.timer)
    this.timer = undefined
    await this.running
  }
}
