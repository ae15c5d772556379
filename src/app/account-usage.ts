// What an account uses of its plan's limits: active API keys, live webhooks, sender domains.
import type { Store } from '../store/types.js'

export interface AccountUsage {
  apiKeys: number
  webhooks: number
  domains: number
}

export function createUsageService ({ store }: { store: Pick<Store, 'countActiveApiKeys' | 'countWebhooks' | 'listDomains'> }) {
  return {
    async of (accountId: string): Promise<AccountUsage> {
      const [apiKeys, webhooks, domains] = await Promise.all([
        store.countActiveApiKeys(accountId),
        store.countWebhooks(accountId),
        store.listDomains(accountId).then((list) => list.length),
      ])
      return { apiKeys, webhooks, domains }
    },
  }
}

export type UsageService = ReturnType<typeof createUsageService>
