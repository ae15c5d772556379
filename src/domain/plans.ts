const MiB = 1024 * 1024

export const PLANS = {
  // receivedBytes: received mail an account keeps at once (each message's raw size, once, kept
  // RETENTION_DAYS or until deleted); a message that would pass it is answered 452 (try again later) and not kept.
  // templates: templates an account keeps at once (each keeps all its versions).
  free: { name: 'Free', apiKeys: 3, webhooks: 5, domains: 1, receivedBytes: 100 * MiB, templates: 20 },
  pro: { name: 'Pro', apiKeys: 10, webhooks: 10, domains: 10, receivedBytes: 5 * 1024 * MiB, templates: 200 },
} as const

export type Plan = keyof typeof PLANS
export const PLAN_NAMES = Object.keys(PLANS) as Plan[]

export function isPlan (value: string): value is Plan {
  return Object.hasOwn(PLANS, value)
}

export function limitsOf (plan: Plan): { apiKeys: number; webhooks: number; domains: number } {
  const { apiKeys, webhooks, domains } = PLANS[plan]
  return { apiKeys, webhooks, domains }
}
