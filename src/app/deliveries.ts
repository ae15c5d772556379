import { NotFound, OperationInProgress, ValidationError } from '../errors.js'
import type { Clock } from '../domain/clock.js'
import { eventPayload, TEST_EVENT_DATA, type EventRecord, type EventType } from '../domain/events.js'
import { decodeDeliveryCursor, deliveryId, newId } from '../domain/ids.js'
import type { WebhookService } from './webhooks.js'
import type { DeliveryPage, DeliveryRecord, DeliveryStatus } from '../store/deliveries.js'
import type { Store } from '../store/types.js'

export interface DeliveryServiceOptions {
  store: Store
  clock: Clock
  webhooks: WebhookService
  /** Where a background recovery reports a failure. */
  onBackgroundError?: (err: unknown) => void
}

/** The recipient test deliveries name: a simulator address, so nobody real is implied. */
export const TEST_RECIPIENT = 'delivered@simulator.test'
const RECOVER_CHUNK = 500

export function createDeliveryService ({ store, clock, webhooks, onBackgroundError }: DeliveryServiceOptions) {
  // Webhooks whose recovery is running in this process: one at a time each, so that a client repeating
  // the request does not start loop after loop over the same deliveries.
  const recovering = new Set<string>()
  return {
    async list (accountId: string, webhookId: string, opts: { status?: DeliveryStatus; limit: number; cursor?: string }): Promise<DeliveryPage> {
      await webhooks.get(accountId, webhookId)
      // A cursor this API did not give out is a bad request, as on every list (not an empty page).
      if (opts.cursor !== undefined && decodeDeliveryCursor(opts.cursor) === null) {
        throw ValidationError('The request is not valid', [{ path: 'query.cursor', message: 'is not a cursor this API gave out' }])
      }
      return store.listDeliveries(accountId, webhookId, opts)
    },

    /** Delivers it again now, whatever its state; the attempt count goes on from where it was. */
    async retry (accountId: string, webhookId: string, id: string): Promise<DeliveryRecord> {
      await webhooks.get(accountId, webhookId)
      const record = await store.retryDelivery(accountId, webhookId, id, clock.now())
      if (!record) throw NotFound('No delivery with this id')
      return record
    },

    /** A signed delivery of a made-up event of `type`, to this webhook only. */
    async test (accountId: string, webhookId: string, type: EventType): Promise<DeliveryRecord> {
      await webhooks.get(accountId, webhookId)
      const now = clock.now()
      const base = { id: newId('evt', now), emailId: newId(type === 'email.received' ? 'rcv' : 'em', now), type, recipient: TEST_RECIPIENT, occurredAt: new Date(now).toISOString() }
      // The shape of a real event of that type: a sent email's events carry its tags and metadata.
      const labels = type === 'email.received' ? undefined : { tags: [{ name: 'test', value: 'true' }], metadata: { source: 'svc-test-event' } }
      const event: EventRecord = { ...base, accountId, payload: eventPayload(base, TEST_EVENT_DATA[type], labels) }
      return store.insertTestDelivery(event, webhookId, deliveryId(event.id, webhookId), now)
    },

    /**
     * Queues again every failed (or cancelled) delivery created in [since, until), in the background and
     * in small chunks, so that a long outage's worth of deliveries never stalls the store. Answers with
     * how many there are.
     */
    async recover (accountId: string, webhookId: string, since: number, until: number): Promise<number> {
      await webhooks.get(accountId, webhookId)
      if (!(since < until)) throw ValidationError('`since` must be before `until`', [{ path: 'body.since', message: 'must be before until' }])
      if (recovering.has(webhookId)) throw OperationInProgress('A recovery of this webhook is running; ask again when it has finished')
      recovering.add(webhookId)
      let background = false
      try {
        const window = { since, until }
        const queued = await store.countFailed(accountId, webhookId, window)
        if (queued > 0) {
          background = true
          void (async () => {
            while (await store.requeueFailed(accountId, webhookId, window, clock.now(), RECOVER_CHUNK) === RECOVER_CHUNK) {
              await new Promise((resolve) => setImmediate(resolve))
            }
          })().catch((err) => onBackgroundError?.(err)).finally(() => recovering.delete(webhookId))
        }
        return queued
      } finally {
        if (!background) recovering.delete(webhookId)
      }
    },
  }
}

export type DeliveryService = ReturnType<typeof createDeliveryService>
