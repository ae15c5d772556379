// Templates in SQLite (src/store/templates.ts): `templates` holds each head, `template_versions` every
// version, the current one included. Each change is one WriteQueue.run, so a version and the head that
// names it commit together.
import type Database from 'better-sqlite3'
import type { TemplateVariable } from '../../domain/templates.js'
import type {
  TemplateHead, TemplateKey, TemplateStore, TemplateSummary, TemplateVersionRecord, TemplateVersionSummary,
} from '../templates.js'
import type { LimitedInsert } from '../types.js'
import type { WriteQueue } from './write-queue.js'

type Row = Record<string, unknown>
const str = (v: unknown): string => v as string
const strOrNull = (v: unknown): string | null => (v ?? null) as string | null

function toHead (r: Row): TemplateHead {
  return {
    id: str(r.id),
    accountId: str(r.account_id),
    name: str(r.name),
    version: r.version as number,
    createdAt: str(r.created_at),
    updatedAt: str(r.updated_at),
  }
}

function toVersion (r: Row): TemplateVersionRecord {
  return {
    templateId: str(r.template_id),
    accountId: str(r.account_id),
    version: r.version as number,
    subject: str(r.subject),
    html: strOrNull(r.html),
    text: strOrNull(r.text),
    variables: JSON.parse(str(r.variables)) as TemplateVariable[],
    createdAt: str(r.created_at),
  }
}

export class SqliteTemplates implements TemplateStore {
  private readonly q

  constructor (db: Database.Database, private readonly writes: WriteQueue) {
    const p = (sql: string) => db.prepare(sql)
    this.q = {
      count: p('SELECT count(*) AS n FROM templates WHERE account_id = ?').pluck(),
      byName: p('SELECT * FROM templates WHERE account_id = ? AND name = ?'),
      byId: p('SELECT * FROM templates WHERE account_id = ? AND id = ?'),
      insert: p('INSERT INTO templates (id, account_id, name, version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)'),
      insertVersion: p(`INSERT INTO template_versions (template_id, account_id, version, subject, html, text, variables, created_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
      list: p(`SELECT t.*, v.subject FROM templates t JOIN template_versions v ON v.template_id = t.id AND v.version = t.version
               WHERE t.account_id = ? ORDER BY t.id DESC`),
      version: p('SELECT * FROM template_versions WHERE account_id = ? AND template_id = ? AND version = ?'),
      versions: p(`SELECT version, subject, created_at FROM template_versions WHERE account_id = ? AND template_id = ? AND version < ?
                   ORDER BY version DESC LIMIT ?`),
      advance: p('UPDATE templates SET version = ?, name = ?, updated_at = ? WHERE account_id = ? AND id = ? AND version = ?'),
      remove: p('DELETE FROM templates WHERE account_id = ? AND id = ?'),
      removeVersions: p('DELETE FROM template_versions WHERE template_id = ?'),
    }
  }

  private insertVersionRow (v: TemplateVersionRecord): void {
    this.q.insertVersion.run(v.templateId, v.accountId, v.version, v.subject, v.html, v.text, JSON.stringify(v.variables), v.createdAt)
  }

  insertTemplate (head: TemplateHead, first: TemplateVersionRecord, limit: number): Promise<LimitedInsert | 'name_taken'> {
    return this.writes.run(() => {
      if (this.q.byName.get(head.accountId, head.name) !== undefined) return 'name_taken'
      if ((this.q.count.get(head.accountId) as number) >= limit) return 'limit_reached'
      this.q.insert.run(head.id, head.accountId, head.name, head.version, head.createdAt, head.updatedAt)
      this.insertVersionRow(first)
      return 'created'
    })
  }

  async listTemplates (accountId: string): Promise<TemplateSummary[]> {
    return (this.q.list.all(accountId) as Row[]).map((r) => ({ ...toHead(r), subject: str(r.subject) }))
  }

  async findTemplate (accountId: string, key: TemplateKey): Promise<TemplateHead | null> {
    const row = ('id' in key ? this.q.byId.get(accountId, String(key.id)) : this.q.byName.get(accountId, String(key.name))) as Row | undefined
    return row ? toHead(row) : null
  }

  async findTemplateVersion (accountId: string, id: string, version: number): Promise<TemplateVersionRecord | null> {
    const row = this.q.version.get(accountId, id, Math.trunc(version)) as Row | undefined
    return row ? toVersion(row) : null
  }

  async listTemplateVersions (accountId: string, id: string, page: { limit: number; before?: number }): Promise<TemplateVersionSummary[]> {
    const before = page.before === undefined ? Number.MAX_SAFE_INTEGER : Math.trunc(page.before)
    return (this.q.versions.all(accountId, id, before, Math.trunc(page.limit)) as Row[])
      .map((r) => ({ version: r.version as number, subject: str(r.subject), createdAt: str(r.created_at) }))
  }

  updateTemplate (accountId: string, id: string, expectedVersion: number, next: TemplateVersionRecord, name?: string): Promise<'updated' | 'conflict' | 'not_found' | 'name_taken'> {
    return this.writes.run(() => {
      const head = this.q.byId.get(accountId, id) as Row | undefined
      if (head === undefined) return 'not_found'
      if (head.version !== expectedVersion) return 'conflict'
      const newName = name ?? str(head.name)
      if (newName !== head.name) {
        const other = this.q.byName.get(accountId, newName) as Row | undefined
        if (other !== undefined) return 'name_taken'
      }
      this.insertVersionRow(next)
      this.q.advance.run(next.version, newName, next.createdAt, accountId, id, expectedVersion)
      return 'updated'
    })
  }

  deleteTemplate (accountId: string, id: string): Promise<boolean> {
    return this.writes.run(() => {
      if (this.q.remove.run(accountId, id).changes !== 1) return false
      this.q.removeVersions.run(id)
      return true
    })
  }
}
