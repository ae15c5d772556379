// The send quota's counts in MongoDB: recipients accepted per account and period (src/domain/quotas.ts
// names the periods and their limits; the store only counts). One document per account and period.
//
// A charge reserves the recipients first, one conditional increment per period (a count that would pass
// its limit matches nothing, and the upsert then collides with the existing document: refused); a send
// that is then not written gives them back. A crash between the two leaves the account charged for a
// send it did not make, never the other way round.
import type { Collection, Db } from 'mongodb'
import type { AcceptResult, QuotaCharge } from '../emails.js'
import { isDuplicate } from './email-docs.js'

/** One account's sending count in one period; _id `<accountId>|<period>`. */
interface SendUsageDoc {
  _id: string
  accountId: string
  period: string
  recipients: number
}

function usageId (accountId: string, period: string): string {
  return `${String(accountId)}|${String(period)}`
}

export class MongoSendUsage {
  private readonly usage: Collection<SendUsageDoc>

  constructor (db: Db) {
    this.usage = db.collection<SendUsageDoc>('send_usage')
  }

  /** Reserves `charge` (when there is one), then runs `accept`; gives the reservation back unless it accepted. */
  async charged (charge: QuotaCharge | undefined, accept: () => Promise<AcceptResult>): Promise<AcceptResult> {
    if (charge === undefined) return await accept()
    const over = charge.periods.find((p) => charge.recipients > p.limit)
    if (over !== undefined) return { outcome: 'quota_exceeded', period: over.period }
    const taken: string[] = []
    const giveBack = async () => {
      for (const period of taken) {
        await this.usage.updateOne({ _id: usageId(charge.accountId, period) }, { $inc: { recipients: -charge.recipients } })
      }
    }
    for (const p of charge.periods) {
      let refused: boolean
      try {
        const r = await this.usage.updateOne(
          { _id: usageId(charge.accountId, p.period), recipients: { $lte: p.limit - charge.recipients } },
          { $inc: { recipients: charge.recipients }, $setOnInsert: { accountId: String(charge.accountId), period: String(p.period) } },
          { upsert: true })
        refused = r.matchedCount + r.upsertedCount !== 1
      } catch (err) {
        if (!isDuplicate(err)) {
          await giveBack()
          throw err
        }
        refused = true
      }
      if (refused) {
        await giveBack()
        return { outcome: 'quota_exceeded', period: p.period }
      }
      taken.push(p.period)
    }
    try {
      const result = await accept()
      if (result.outcome !== 'accepted') await giveBack()
      return result
    } catch (err) {
      await giveBack()
      throw err
    }
  }

  /** The recipients counted in each of `periods` (0 for a period with none). */
  async read (accountId: string, periods: string[]): Promise<Record<string, number>> {
    const docs = await this.usage.find({ _id: { $in: periods.map((p) => usageId(accountId, p)) } }).toArray()
    const usage: Record<string, number> = {}
    for (const period of periods) usage[period] = docs.find((d) => d._id === usageId(accountId, period))?.recipients ?? 0
    return usage
  }

  /** Gives `refund.recipients` back to each of its periods, one decrement each, never below 0. */
  async refund (accountId: string, refund: { recipients: number; periods: string[] }): Promise<void> {
    const n = Math.floor(Number(refund.recipients))
    if (!(n > 0)) return
    for (const period of refund.periods) {
      await this.usage.updateOne({ _id: usageId(accountId, period) }, [
        { $set: { recipients: { $max: [0, { $subtract: ['$recipients', n] }] } } },
      ])
    }
  }
}
