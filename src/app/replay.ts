// Replay (POST /api/webhooks/:id/replay): every delivery of a webhook whose event happened in a window is
// sent again, delivered ones included, as a new attempt of the same delivery (src/domain/replay.ts has the
// rules). The work is the store's: a replayed delivery is made pending and due now, and the delivery
// engine sends it like any due delivery, at the webhook's pace (its adaptive window and rateLimit); each
// attempt is appended to the delivery log.
//
// One replay per webhook at a time, as one `recover` (src/app/deliveries.ts): while this process pages
// through a replay, a second one of that webhook is refused here; after that, until every delivery of
// the last replay's range (stored on the webhook, so every node and a restart see it) has an outcome.
import { OperationInProgress, ValidationError, WebhookNotEnabled } from '../errors.js'
import type { Clock } from '../domain/clock.js'
import type { EventType } from '../domain/events.js'
import { rangeOfState, replayRange, replayState, type ReplayRange } from '../domain/replay.js'
import type { Store, WebhookRecord } from '../store/types.js'

export interface ReplayOptions {
  store: Pick<Store, 'countInRange' | 'replayPage' | 'anyLiveInRange' | 'setWebhookReplay'>
  clock: Clock
  /** Where a replay that fails in the background reports it. */
  onBackgroundError?: ((err: unknown) => void) | undefined
  /** Deliveries made due per write (each page is one write; the engine starts on the first at once). */
  pageSize?: number
}

export interface ReplayRequest {
  since: number
  until?: number | undefined
  events?: EventType[] | undefined
}

export function createReplayer ({ store, clock, onBackgroundError, pageSize = 500 }: ReplayOptions) {
  // Webhooks whose replay this process is paging through.
  const paging = new Set<string>()

  async function pageThrough (webhook: WebhookRecord, range: ReplayRange): Promise<void> {
    let after: string | null = null
    for (;;) {
      const page = await store.replayPage(webhook.accountId, webhook.id, range, after, clock.now(), pageSize)
      if (page.read < pageSize || page.last === null) return
      after = page.last
      // Other writes (sends, outcomes) get their turn between pages.
      await new Promise((resolve) => setImmediate(resolve))
    }
  }

  /**
   * Starts a replay of `webhook` (already found for its account); answers how many deliveries it covers
   * and the window. The pages are written in the background.
   */
  return async function replay (webhook: WebhookRecord, request: ReplayRequest): Promise<{ queued: number; range: ReplayRange }> {
    const now = clock.now()
    const checked = replayRange(request, now)
    if ('problems' in checked) throw ValidationError('The request is not valid', checked.problems)
    const { range } = checked
    if (webhook.status !== 'enabled') {
      throw WebhookNotEnabled(`The webhook is ${webhook.status.replace('_', ' ')}: enable it (PATCH status "enabled") before replaying to it`)
    }
    if (paging.has(webhook.id)) throw OperationInProgress('A replay of this webhook is running; ask again when it has finished')
    paging.add(webhook.id)
    let background = false
    try {
      const previous = rangeOfState(webhook.replay)
      if (previous !== null && await store.anyLiveInRange(webhook.id, previous)) {
        throw OperationInProgress('A replay of this webhook is still going out; ask again when its deliveries have an outcome (see the delivery log)')
      }
      const queued = await store.countInRange(webhook.accountId, webhook.id, range)
      if (queued > 0) {
        await store.setWebhookReplay(webhook.accountId, webhook.id, replayState(range, now))
        background = true
        void pageThrough(webhook, range).catch((err) => onBackgroundError?.(err)).finally(() => paging.delete(webhook.id))
      }
      return { queued, range }
    } finally {
      if (!background) paging.delete(webhook.id)
    }
  }
}

export type Replayer = ReturnType<typeof createReplayer>
