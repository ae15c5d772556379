// Webhook health, decided once for every store. A store applies a batch of delivery outcomes, hands the
// outcomes that applied (grouped by webhook, in the order they happened) and the webhook's health as
// stored to `decideHealth`, and stores what comes back. The rules:
//
// - a success clears the failing streak (and is remembered as the last success);
// - a failure (retry, failed) starts a streak if none is running; a later success in the same batch ends it;
// - a webhook failing without a success for `autoDisableMs` becomes auto_disabled;
// - a 410 Gone auto-disables it at once;
// - disabling (by these rules, by hand, or by deleting the webhook) cancels its live deliveries, with a reason.
//
// Attempts of deliveries cancelled while in flight count like any other: they were made.
/** A webhook's status, as stored. */
export type WebhookStatus = 'enabled' | 'disabled' | 'auto_disabled'

/** Why a delivery was cancelled, as its log shows it (`lastError`). */
export const CANCEL_REASONS = {
  disabled: 'webhook disabled',
  deleted: 'webhook deleted',
  gone: 'webhook disabled: receiver answered 410 Gone',
  failing: 'webhook auto-disabled after failing for too long',
  /** MongoDB only: a delivery whose event was pruned (see the contract). */
  eventMissing: 'event no longer stored',
} as const

export type CancelReason = typeof CANCEL_REASONS[keyof typeof CANCEL_REASONS]

/** The `lastError` of the delivery that was answered 410 Gone. */
export const GONE_ERROR = 'receiver answered 410 Gone: webhook disabled'

/** A webhook's health as stored. */
export interface WebhookHealth {
  status: WebhookStatus
  deleted: boolean
  /** Start (ms) of the current failing streak; null when none. */
  failingSince: number | null
}

/** An outcome that applied, as health sees it. */
export interface HealthOutcome {
  kind: 'succeeded' | 'failed' | 'gone'
  at: number
}

export interface HealthDecision {
  failingSince: number | null
  /** The latest success of the batch (ms), to store as the last success; null when none. */
  lastSuccessAt: number | null
  /** Set when the webhook becomes auto_disabled now: its live deliveries are cancelled for this reason. */
  disable: CancelReason | null
}

/** True when the decision changes nothing stored (apart from the last success). */
export function unchanged (before: WebhookHealth, decision: HealthDecision): boolean {
  return decision.disable === null && decision.failingSince === before.failingSince
}

export function decideHealth (before: WebhookHealth, outcomes: readonly HealthOutcome[], opts: { now: number; autoDisableMs: number }): HealthDecision {
  let failingSince = before.failingSince
  let lastSuccessAt: number | null = null
  let gone = false
  for (const o of outcomes) {
    if (o.kind === 'succeeded') {
      failingSince = null
      lastSuccessAt = lastSuccessAt === null ? o.at : Math.max(lastSuccessAt, o.at)
    } else if (o.kind === 'gone') {
      gone = true
    } else {
      failingSince ??= o.at
    }
  }
  let disable: CancelReason | null = null
  if (before.status === 'enabled' && !before.deleted) {
    if (gone) disable = CANCEL_REASONS.gone
    else if (failingSince !== null && opts.now - failingSince >= opts.autoDisableMs) disable = CANCEL_REASONS.failing
  }
  return { failingSince, lastSuccessAt, disable }
}

/**
 * Why a delivery of this webhook may not be handed out (it is cancelled instead), or null when it may.
 * Claims ask this of every delivery they are about to lease.
 */
export function cancelReasonFor (webhook: { status: string; deleted: boolean } | null): CancelReason | null {
  if (webhook === null || webhook.deleted) return CANCEL_REASONS.deleted
  return webhook.status === 'enabled' ? null : CANCEL_REASONS.disabled
}

/**
 * An edit that sets the status to anything but `enabled` cancels the webhook's live deliveries (whatever
 * the status was: cancelling again is harmless, and it lets a repeated edit finish a cancellation).
 */
export function cancelOnEdit (status: WebhookStatus | undefined): CancelReason | null {
  return status !== undefined && status !== 'enabled' ? CANCEL_REASONS.disabled : null
}

/** Group outcome kinds as health sees them: a retry is a failure; deferrals and parking are not attempts. */
export function healthKind (kind: string): HealthOutcome['kind'] | null {
  switch (kind) {
    case 'succeeded': return 'succeeded'
    case 'retry':
    case 'failed': return 'failed'
    case 'gone': return 'gone'
    default: return null
  }
}

/** The attempts of a batch that applied, by webhook, in the order they happened: what health is decided from. */
export function appliedAttempts (outcomes: ReadonlyArray<{ kind: string; webhookId: string; at?: number }>, applied: (index: number) => boolean): Map<string, HealthOutcome[]> {
  const byHook = new Map<string, HealthOutcome[]>()
  outcomes.forEach((o, i) => {
    const kind = healthKind(o.kind)
    if (kind === null || !applied(i)) return
    let list = byHook.get(o.webhookId)
    if (!list) byHook.set(o.webhookId, list = [])
    list.push({ kind, at: Number(o.at) })
  })
  return byHook
}
