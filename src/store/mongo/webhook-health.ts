// Webhook health in MongoDB: what src/domain/webhook-health.ts decides, stored for each webhook.
import type { Collection } from 'mongodb'
import { decideHealth, unchanged, type CancelReason, type HealthOutcome, type WebhookHealth } from '../../domain/webhook-health.js'
import { iso, type HookDoc } from './delivery-docs.js'

/**
 * Stores what src/domain/webhook-health.ts decides for each webhook: the last success with $max (it
 * only grows), the streak and an auto-disable with a compare-and-set on the health it was decided from;
 * when another node changed that meanwhile, the webhook is read and decided again.
 */
export async function storeWebhookHealth (
  hookDocs: Collection<HookDoc>, attempts: Map<string, HealthOutcome[]>, opts: { now: number; autoDisableMs: number },
  cancelPendingFor: (webhookId: string, reason: CancelReason) => Promise<void>,
): Promise<void> {
  const projection = { _id: 1, status: 1, deletedAt: 1, failingSince: 1 } as const
  const healthOf = (h: Pick<HookDoc, 'status' | 'deletedAt' | 'failingSince'>): WebhookHealth => ({
    status: h.status as WebhookHealth['status'], deleted: (h.deletedAt ?? null) !== null, failingSince: typeof h.failingSince === 'number' ? h.failingSince : null,
  })
  const docs = new Map((await hookDocs.find({ _id: { $in: [...attempts.keys()] } }, { projection }).toArray()).map((h) => [h._id, h]))
  await Promise.all([...attempts].map(async ([hook, list]) => {
    let doc = docs.get(hook) ?? null
    for (let round = 0; doc !== null && round < 5; round++) {
      const before = healthOf(doc)
      const decision = decideHealth(before, list, opts)
      const success = decision.lastSuccessAt !== null ? { $max: { lastSuccessAt: decision.lastSuccessAt } } : {}
      if (unchanged(before, decision)) {
        if (decision.lastSuccessAt !== null) await hookDocs.updateOne({ _id: hook }, success)
        return
      }
      const set: Partial<HookDoc> = { failingSince: decision.failingSince }
      if (decision.disable !== null) Object.assign(set, { status: 'auto_disabled', updatedAt: iso(opts.now)! })
      const r = await hookDocs.updateOne({
        _id: hook, status: doc.status, deletedAt: before.deleted ? { $ne: null } : null, failingSince: before.failingSince,
      }, { $set: set, ...success })
      if (r.matchedCount === 1) {
        // If this process stops here, the next claim cancels what this would have cancelled.
        if (decision.disable !== null) await cancelPendingFor(hook, decision.disable)
        return
      }
      doc = await hookDocs.findOne({ _id: hook }, { projection })
    }
  }))
}
