// Sender domains and returning mail (bounces and complaints) in SQLite. Each change is one WriteQueue.run.
import type Database from 'better-sqlite3'
import type { EventRecord } from '../../domain/events.js'
import type { SuppressionRecord } from '../emails.js'
import type { DnsRecordPurpose, DnsRecordStatus, DomainCheck, DomainRecord, DomainStatus, LimitedInsert } from '../types.js'
import type { WriteQueue } from './write-queue.js'

type Row = Record<string, unknown>
const str = (v: unknown): string => v as string
const strOrNull = (v: unknown): string | null => (v ?? null) as string | null

function toDomain (r: Row): DomainRecord {
  return {
    id: str(r.id),
    accountId: str(r.account_id),
    name: str(r.name),
    selector: str(r.selector),
    publicKey: str(r.public_key),
    privateKey: str(r.private_key),
    status: r.status as DomainStatus,
    // Rows from before receiving have no `receiving` status.
    records: { receiving: 'pending', ...(JSON.parse(str(r.records)) as Partial<Record<DnsRecordPurpose, DnsRecordStatus>>) } as Record<DnsRecordPurpose, DnsRecordStatus>,
    createdAt: str(r.created_at),
    updatedAt: str(r.updated_at),
    lastCheckedAt: strOrNull(r.last_checked_at),
    verifiedAt: strOrNull(r.verified_at),
    receiving: r.receiving === 1,
    tracking: { opens: r.track_opens == null ? null : r.track_opens === 1, clicks: r.track_clicks == null ? null : r.track_clicks === 1 },
  }
}

export class SqliteDomains {
  private readonly q

  constructor (db: Database.Database, private readonly writes: WriteQueue, private readonly markWork: () => void) {
    const p = (sql: string) => db.prepare(sql)
    this.q = {
      count: p('SELECT count(*) AS n FROM domains WHERE account_id = ?'),
      byName: p('SELECT * FROM domains WHERE account_id = ? AND name = ?'),
      byId: p('SELECT * FROM domains WHERE account_id = ? AND id = ?'),
      insert: p(`INSERT INTO domains (id, account_id, name, selector, public_key, private_key, status, records, created_at, updated_at,
                   last_checked_at, verified_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
      list: p('SELECT * FROM domains WHERE account_id = ? ORDER BY id DESC'),
      check: p(`UPDATE domains SET status = ?, records = ?, last_checked_at = ?, verified_at = ?, updated_at = ?
                WHERE account_id = ? AND id = ?`),
      remove: p('DELETE FROM domains WHERE account_id = ? AND id = ?'),
      setReceiving: p(`UPDATE domains SET receiving = ?, records = json_set(records, '$.receiving', 'pending'), updated_at = ?
                       WHERE account_id = ? AND id = ? AND receiving != ?`),
      // A null parameter keeps the column as it is.
      setTracking: p(`UPDATE domains SET track_opens = coalesce(?, track_opens), track_clicks = coalesce(?, track_clicks), updated_at = ?
                      WHERE account_id = ? AND id = ?`),
      receivingByName: p(`SELECT * FROM domains WHERE name = ? AND receiving = 1 AND status = 'verified' ORDER BY created_at, id LIMIT ?`),
      due: p(`SELECT * FROM domains WHERE coalesce(last_checked_at, '') < ? ORDER BY coalesce(last_checked_at, ''), id LIMIT ?`),
      sameEvent: p('SELECT 1 FROM events WHERE email_id = ? AND type = ? AND recipient = ? LIMIT 1'),
      insertEvent: p(`INSERT INTO events (id, account_id, email_id, type, recipient, occurred_at, payload, routed, route)
                      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
      insertSuppression: p(`INSERT INTO suppressions (account_id, email, reason, created_at) VALUES (?, ?, ?, ?)
                            ON CONFLICT (account_id, email) DO NOTHING`),
    }
  }

  insertDomain (d: DomainRecord, limit: number): Promise<LimitedInsert | 'name_taken'> {
    return this.writes.run(() => {
      if (this.q.byName.get(d.accountId, d.name) !== undefined) return 'name_taken'
      const { n } = this.q.count.get(d.accountId) as { n: number }
      if (n >= limit) return 'limit_reached'
      this.q.insert.run(d.id, d.accountId, d.name, d.selector, d.publicKey, d.privateKey, d.status, JSON.stringify(d.records),
        d.createdAt, d.updatedAt, d.lastCheckedAt, d.verifiedAt)
      return 'created'
    })
  }

  async listDomains (accountId: string): Promise<DomainRecord[]> {
    return (this.q.list.all(accountId) as Row[]).map(toDomain)
  }

  async findDomain (accountId: string, id: string): Promise<DomainRecord | null> {
    const row = this.q.byId.get(accountId, id) as Row | undefined
    return row ? toDomain(row) : null
  }

  async findDomainByName (accountId: string, name: string): Promise<DomainRecord | null> {
    const row = this.q.byName.get(accountId, name) as Row | undefined
    return row ? toDomain(row) : null
  }

  updateDomainCheck (accountId: string, id: string, c: DomainCheck): Promise<DomainRecord | null> {
    return this.writes.run(() => {
      if (this.q.check.run(c.status, JSON.stringify(c.records), c.checkedAt, c.verifiedAt, c.checkedAt, accountId, id).changes === 0) return null
      return toDomain(this.q.byId.get(accountId, id) as Row)
    })
  }

  /** A change of the switch starts the receiving record's status over (pending until the next check). */
  setDomainReceiving (accountId: string, id: string, receiving: boolean, at: string): Promise<DomainRecord | null> {
    return this.writes.run(() => {
      this.q.setReceiving.run(receiving ? 1 : 0, at, accountId, id, receiving ? 1 : 0)
      const row = this.q.byId.get(accountId, id) as Row | undefined
      return row ? toDomain(row) : null
    })
  }

  setDomainTracking (accountId: string, id: string, tracking: { opens?: boolean; clicks?: boolean }, at: string): Promise<DomainRecord | null> {
    const bit = (v: boolean | undefined) => (v === undefined ? null : v ? 1 : 0)
    return this.writes.run(() => {
      if (this.q.setTracking.run(bit(tracking.opens), bit(tracking.clicks), at, accountId, id).changes === 0) return null
      return toDomain(this.q.byId.get(accountId, id) as Row)
    })
  }

  async findReceivingDomains (name: string, limit: number): Promise<DomainRecord[]> {
    return (this.q.receivingByName.all(name, limit) as Row[]).map(toDomain)
  }

  deleteDomain (accountId: string, id: string): Promise<boolean> {
    return this.writes.run(() => this.q.remove.run(accountId, id).changes === 1)
  }

  async listDomainsCheckedBefore (before: string, limit: number): Promise<DomainRecord[]> {
    return (this.q.due.all(before, limit) as Row[]).map(toDomain)
  }

  recordReturnedMail (input: { event: EventRecord; suppression: SuppressionRecord | null; timelineOnly: boolean }): Promise<'recorded' | 'duplicate'> {
    const { event: e, suppression: s } = input
    return this.writes.run(() => {
      // routed = 1: the routing cursor passes over it, so it reaches no webhook (timeline only).
      if (this.q.sameEvent.get(e.emailId, e.type, e.recipient) !== undefined) return 'duplicate'
      this.q.insertEvent.run(e.id, e.accountId, e.emailId, e.type, e.recipient, e.occurredAt, e.payload, input.timelineOnly ? 1 : 0, e.route ?? null)
      if (!input.timelineOnly) this.markWork()
      if (s !== null) this.q.insertSuppression.run(s.accountId, s.email, s.reason, s.createdAt)
      return 'recorded'
    })
  }
}
