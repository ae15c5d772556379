// What a plan allows an account to keep at once, and the one refusal past it. The numbers are the plans'
// (./plans.ts); the stores only count, inside the write that adds one (so two requests at once cannot
// both take the last slot).
import { PlanLimitReached, type AppError } from '../errors.js'
import { PLANS, type Plan } from './plans.js'

/** The things a plan counts. */
export type Counted = 'apiKeys' | 'webhooks' | 'domains' | 'templates'

// How the refusal names each, and how to make room.
const WORDS: Record<Counted, { things: string; room: string }> = {
  apiKeys: { things: 'active API keys', room: 'revoke one' },
  webhooks: { things: 'webhooks', room: 'delete one' },
  domains: { things: 'domain(s)', room: 'delete one' },
  templates: { things: 'templates', room: 'delete one' },
}

/** How many of `what` the plan allows at once. */
export function planLimit (plan: Plan, what: Counted): number {
  return PLANS[plan][what]
}

/** 403 plan_limit_reached, naming the plan and its limit. */
export function planLimitReached (plan: Plan, what: Counted): AppError {
  const w = WORDS[what]
  return PlanLimitReached(`The ${PLANS[plan].name} plan allows ${planLimit(plan, what)} ${w.things}; ${w.room} or upgrade`)
}

/**
 * Adds one of `what` within the plan: `insert` is given the plan's limit and answers 'limit_reached' when
 * the account has that many already, which becomes the refusal; any other answer is returned.
 */
export async function withinPlan<T extends string> (plan: Plan, what: Counted, insert: (limit: number) => Promise<T | 'limit_reached'>): Promise<Exclude<T, 'limit_reached'>> {
  const outcome = await insert(planLimit(plan, what))
  if (outcome === 'limit_reached') throw planLimitReached(plan, what)
  return outcome as Exclude<T, 'limit_reached'>
}
