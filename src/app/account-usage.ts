// What an account uses of its plan's limits: active API keys, live webhooks, sender domains; and the
// recipients it sent in each quota period (src/domain/quotas.ts).
import type { Store } from '../store/types.js'

export interface AccountUsage {
  apiKeys: number
  webhooks: number
  domains: number
}

export function createUsageService ({ store }: { store: Pick<Store, 'countActiveApiKeys' | 'countWebhooks' | 'listDomains' | 'readSendUsage'> }) {
  return {
    async of (accountId: string): Promise<AccountUsage> {
      const [apiKeys, webhooks, domains] = await Promise.all([
        store.countActiveApiKeys(accountId),
        store.countWebhooks(accountId),
        store.listDomains(accountId).then((list) => list.length),
      ])
      return { apiKeys, webhooks, domains }
    },
    /** Recipients accepted in each of the periods named (quotas' 'd:YYYY-MM-DD', 'm:YYYY-MM'). */
    sending (accountId: string, periods: string[]): Promise<Record<string, number>> {
      return store.readSendUsage(accountId, periods)
    },
  }
}

export type UsageService = ReturnType<typeof createUsageService>
