// Sender domains and returning mail in MongoDB. The domain limit uses the account's slots like keys and
// webhooks (index.ts); documents are rebuilt field by field and every filter value goes through String().
import type { Collection, Db } from 'mongodb'
import type { EventRecord } from '../../domain/events.js'
import type { SuppressionRecord } from '../emails.js'
import type { DnsRecordPurpose, DnsRecordStatus, DomainCheck, DomainRecord, DomainStatus } from '../types.js'
import { eventDoc, nullableString, type EventDoc } from './documents.js'

export interface DomainDoc {
  _id: string
  accountId: string
  name: string
  selector: string
  publicKey: string
  privateKey: string
  status: string
  records: Record<string, string>
  createdAt: string
  updatedAt: string
  lastCheckedAt: string | null
  /** lastCheckedAt, or '' when never checked: what the background check sorts by. */
  checkOrder: string
  verifiedAt: string | null
  /** Absent on documents from before receiving: off. */
  receiving?: boolean
  /** Tracking defaults; absent or null: never set (the account's default). */
  trackOpens?: boolean | null
  trackClicks?: boolean | null
}

const PURPOSES: DnsRecordPurpose[] = ['dkim', 'spf', 'return_path', 'dmarc', 'receiving']

function recordsDoc (records: Record<DnsRecordPurpose, DnsRecordStatus>): Record<string, string> {
  return Object.fromEntries(PURPOSES.map((p) => [p, String(records[p])]))
}

export function domainDoc (d: DomainRecord): DomainDoc {
  return {
    _id: String(d.id),
    accountId: String(d.accountId),
    name: String(d.name),
    selector: String(d.selector),
    publicKey: String(d.publicKey),
    privateKey: String(d.privateKey),
    status: String(d.status),
    records: recordsDoc(d.records),
    createdAt: String(d.createdAt),
    updatedAt: String(d.updatedAt),
    lastCheckedAt: nullableString(d.lastCheckedAt),
    checkOrder: d.lastCheckedAt === null ? '' : String(d.lastCheckedAt),
    verifiedAt: nullableString(d.verifiedAt),
    receiving: d.receiving === true,
    trackOpens: typeof d.tracking?.opens === 'boolean' ? d.tracking.opens : null,
    trackClicks: typeof d.tracking?.clicks === 'boolean' ? d.tracking.clicks : null,
  }
}

function toDomain (d: DomainDoc): DomainRecord {
  return {
    id: d._id,
    accountId: d.accountId,
    name: d.name,
    selector: d.selector,
    publicKey: d.publicKey,
    privateKey: d.privateKey,
    status: d.status as DomainStatus,
    records: Object.fromEntries(PURPOSES.map((p) => [p, (d.records?.[p] ?? 'pending') as DnsRecordStatus])) as Record<DnsRecordPurpose, DnsRecordStatus>,
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
    lastCheckedAt: d.lastCheckedAt ?? null,
    verifiedAt: d.verifiedAt ?? null,
    receiving: d.receiving === true,
    tracking: { opens: typeof d.trackOpens === 'boolean' ? d.trackOpens : null, clicks: typeof d.trackClicks === 'boolean' ? d.trackClicks : null },
  }
}

export class MongoDomains {
  readonly domains: Collection<DomainDoc>
  private readonly events: Collection<EventDoc>
  private readonly suppressions: Collection<{ accountId: string; email: string; reason: string; createdAt: string; pendingEvent: null; pendingEventAt: null }>

  constructor (db: Db, private readonly hint: () => void) {
    this.domains = db.collection<DomainDoc>('domains')
    this.events = db.collection<EventDoc>('events')
    this.suppressions = db.collection('suppressions')
  }

  async ensureIndexes (): Promise<void> {
    await this.domains.createIndexes([
      { key: { accountId: 1, name: 1 }, name: 'domains_account_name', unique: true },
      { key: { accountId: 1, _id: -1 }, name: 'domains_account' },
      { key: { checkOrder: 1, _id: 1 }, name: 'domains_check' },
      { key: { name: 1, createdAt: 1 }, name: 'domains_receiving', partialFilterExpression: { receiving: true } },
    ])
  }

  async listDomains (accountId: string): Promise<DomainRecord[]> {
    return (await this.domains.find({ accountId: String(accountId) }).sort({ _id: -1 }).toArray()).map(toDomain)
  }

  async findDomain (accountId: string, id: string): Promise<DomainRecord | null> {
    const doc = await this.domains.findOne({ _id: String(id), accountId: String(accountId) })
    return doc ? toDomain(doc) : null
  }

  async findDomainByName (accountId: string, name: string): Promise<DomainRecord | null> {
    const doc = await this.domains.findOne({ accountId: String(accountId), name: String(name) })
    return doc ? toDomain(doc) : null
  }

  async updateDomainCheck (accountId: string, id: string, c: DomainCheck): Promise<DomainRecord | null> {
    const at = String(c.checkedAt)
    const doc = await this.domains.findOneAndUpdate({ _id: String(id), accountId: String(accountId) }, {
      $set: {
        status: String(c.status), records: recordsDoc(c.records), lastCheckedAt: at, checkOrder: at,
        verifiedAt: nullableString(c.verifiedAt), updatedAt: at,
      },
    }, { returnDocument: 'after' })
    return doc ? toDomain(doc) : null
  }

  /** A change of the switch starts the receiving record's status over (pending until the next check). */
  async setDomainReceiving (accountId: string, id: string, receiving: boolean, at: string): Promise<DomainRecord | null> {
    const on = receiving === true
    await this.domains.updateOne({ _id: String(id), accountId: String(accountId), receiving: on ? { $ne: true } : true },
      { $set: { receiving: on, 'records.receiving': 'pending', updatedAt: String(at) } })
    return await this.findDomain(accountId, id)
  }

  async setDomainTracking (accountId: string, id: string, tracking: { opens?: boolean; clicks?: boolean }, at: string): Promise<DomainRecord | null> {
    const set: Record<string, boolean | string> = { updatedAt: String(at) }
    if (tracking.opens !== undefined) set.trackOpens = tracking.opens === true
    if (tracking.clicks !== undefined) set.trackClicks = tracking.clicks === true
    const doc = await this.domains.findOneAndUpdate({ _id: String(id), accountId: String(accountId) }, { $set: set }, { returnDocument: 'after' })
    return doc ? toDomain(doc) : null
  }

  async findReceivingDomains (name: string, limit: number): Promise<DomainRecord[]> {
    const docs = await this.domains.find({ name: String(name), receiving: true, status: 'verified' }).sort({ createdAt: 1, _id: 1 }).limit(Number(limit)).toArray()
    return docs.map(toDomain)
  }

  /** Removes the document; the caller frees the account's slot. */
  async deleteDomainDoc (accountId: string, id: string): Promise<boolean> {
    return (await this.domains.deleteOne({ _id: String(id), accountId: String(accountId) })).deletedCount === 1
  }

  async listDomainsCheckedBefore (before: string, limit: number): Promise<DomainRecord[]> {
    const docs = await this.domains.find({ checkOrder: { $lt: String(before) } }).sort({ checkOrder: 1, _id: 1 }).limit(Number(limit)).toArray()
    return docs.map(toDomain)
  }

  async recordReturnedMail (input: { event: EventRecord; suppression: SuppressionRecord | null; timelineOnly: boolean }): Promise<'recorded' | 'duplicate'> {
    const e = input.event
    const same = await this.events.findOne({
      accountId: String(e.accountId), emailId: String(e.emailId), type: String(e.type), recipient: String(e.recipient),
    }, { projection: { _id: 1 } })
    if (same !== null) return 'duplicate'
    // The suppression first: a crash between the two leaves the address suppressed, and the sender of the
    // report (which got no answer) sends it again, which adds the event.
    const s = input.suppression
    if (s !== null) {
      try {
        await this.suppressions.updateOne({ accountId: String(s.accountId), email: String(s.email) },
          { $setOnInsert: { reason: String(s.reason), createdAt: String(s.createdAt), pendingEvent: null, pendingEventAt: null } },
          { upsert: true })
      } catch (err) {
        if (!(typeof err === 'object' && err !== null && (err as { code?: unknown }).code === 11000)) throw err
      }
    }
    try {
      await this.events.insertOne({ ...eventDoc(e), routed: input.timelineOnly })
    } catch (err) {
      if (typeof err === 'object' && err !== null && (err as { code?: unknown }).code === 11000) return 'duplicate'
      throw err
    }
    if (!input.timelineOnly) this.hint()
    return 'recorded'
  }
}
