export const PLANS = {
  free: { name: 'Free', apiKeys: 3, webhooks: 5, domains: 1 },
  pro: { name: 'Pro', apiKeys: 10, webhooks: 10, domains: 10 },
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
