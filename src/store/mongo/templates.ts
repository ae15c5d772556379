// Templates in MongoDB (src/store/templates.ts). A template is one document in `templates` that holds
// its head and its current version's content; every earlier version is a document of its own in
// `template_versions` (_id `<templateId>:<version>`). A change is two single-document writes, each atomic
// on any deployment, ordered so that no crash loses a version:
//   1. the current version is copied into `template_versions` (an upsert: a retry writes the same bytes),
//   2. the head moves to the new version on the condition that it is still at the one it was read at
//      (a concurrent change makes this a 'conflict', and nothing of it is written).
// The current version is therefore always in the head, and every older one in `template_versions`.
// The plan's limit takes a slot on the account document (`templateIds`), like keys, webhooks and domains
// (see the comment on MongoStore in index.ts): one conditional $addToSet, given back when the insert is
// refused or the template is deleted. Every filter value goes through String() or Number().
import { MongoServerError, type Collection, type Db } from 'mongodb'
import type { JsonValue, TemplateVariable } from '../../domain/templates.js'
import type {
  TemplateHead, TemplateKey, TemplateStore, TemplateSummary, TemplateVersionRecord, TemplateVersionSummary,
} from '../templates.js'
import type { LimitedInsert } from '../types.js'
import { nullableString } from './documents.js'

interface ContentDoc {
  subject: string
  html: string | null
  text: string | null
  /** JSON text: a default may be any JSON value, and its keys are the tenant's (never read as operators). */
  variables: string
}

export interface TemplateDoc extends ContentDoc {
  _id: string
  accountId: string
  name: string
  version: number
  createdAt: string
  updatedAt: string
}

export interface TemplateVersionDoc extends ContentDoc {
  _id: string
  templateId: string
  accountId: string
  version: number
  createdAt: string
}

interface SlotDoc { _id: string; templateIds?: string[] }

const DUPLICATE_KEY = 11000

function contentDoc (v: Pick<TemplateVersionRecord, 'subject' | 'html' | 'text' | 'variables'>): ContentDoc {
  return {
    subject: String(v.subject),
    html: nullableString(v.html),
    text: nullableString(v.text),
    variables: JSON.stringify(v.variables.map((x) => (Object.hasOwn(x, 'default') ? { name: String(x.name), default: x.default as JsonValue } : { name: String(x.name) }))),
  }
}

function toHead (d: TemplateDoc): TemplateHead {
  return { id: d._id, accountId: d.accountId, name: d.name, version: d.version, createdAt: d.createdAt, updatedAt: d.updatedAt }
}

function toVersion (templateId: string, accountId: string, version: number, createdAt: string, c: ContentDoc): TemplateVersionRecord {
  return {
    templateId, accountId, version, subject: c.subject, html: c.html ?? null, text: c.text ?? null,
    variables: JSON.parse(c.variables) as TemplateVariable[], createdAt,
  }
}

export class MongoTemplates implements TemplateStore {
  readonly templates: Collection<TemplateDoc>
  readonly versions: Collection<TemplateVersionDoc>
  private readonly slots: Collection<SlotDoc>

  constructor (db: Db) {
    this.templates = db.collection<TemplateDoc>('templates')
    this.versions = db.collection<TemplateVersionDoc>('template_versions')
    this.slots = db.collection<SlotDoc>('accounts')
  }

  async ensureIndexes (): Promise<void> {
    await Promise.all([
      this.templates.createIndexes([
        { key: { accountId: 1, name: 1 }, name: 'templates_account_name', unique: true },
        { key: { accountId: 1, _id: -1 }, name: 'templates_account' },
      ]),
      this.versions.createIndexes([{ key: { templateId: 1, version: -1 }, name: 'template_versions_template' }]),
    ])
  }

  private async releaseSlot (accountId: string, id: string): Promise<void> {
    await this.slots.updateOne({ _id: accountId }, { $pull: { templateIds: id } })
  }

  async insertTemplate (head: TemplateHead, first: TemplateVersionRecord, limit: number): Promise<LimitedInsert | 'name_taken'> {
    const accountId = String(head.accountId)
    const id = String(head.id)
    const doc: TemplateDoc = {
      _id: id, accountId, name: String(head.name), version: Number(head.version),
      createdAt: String(head.createdAt), updatedAt: String(head.updatedAt), ...contentDoc(first),
    }
    if (await this.templates.findOne({ accountId, name: doc.name }, { projection: { _id: 1 } }) !== null) return 'name_taken'
    const max = Math.ceil(Number(limit))
    const taken = max > 0
      ? await this.slots.findOneAndUpdate({ _id: accountId, [`templateIds.${max - 1}`]: { $exists: false } }, { $addToSet: { templateIds: id } })
      : null
    if (taken === null) {
      if (await this.slots.findOne({ _id: accountId }, { projection: { _id: 1 } }) === null) throw new Error(`cannot insert for account ${accountId}: no such account`)
      return 'limit_reached'
    }
    try {
      await this.templates.insertOne(doc)
    } catch (err) {
      const duplicate = err instanceof MongoServerError && err.code === DUPLICATE_KEY
      // Given back unless the template may be stored after all (a lost answer: the slot stays, the safe side).
      if (duplicate || await this.templates.findOne({ _id: id }, { projection: { _id: 1 } }).then((d) => d === null, () => false)) {
        await this.releaseSlot(accountId, id).catch(() => {})
      }
      // A concurrent request took the name between the check and the insert (the unique index).
      if (duplicate) return 'name_taken'
      throw err
    }
    return 'created'
  }

  async listTemplates (accountId: string): Promise<TemplateSummary[]> {
    const docs = await this.templates.find({ accountId: String(accountId) }, { projection: { html: 0, text: 0, variables: 0 } }).sort({ _id: -1 }).toArray()
    return docs.map((d) => ({ ...toHead(d), subject: d.subject }))
  }

  async findTemplate (accountId: string, key: TemplateKey): Promise<TemplateHead | null> {
    const filter = 'id' in key ? { _id: String(key.id), accountId: String(accountId) } : { accountId: String(accountId), name: String(key.name) }
    const doc = await this.templates.findOne(filter, { projection: { html: 0, text: 0, variables: 0 } })
    return doc ? toHead(doc) : null
  }

  async findTemplateVersion (accountId: string, id: string, version: number): Promise<TemplateVersionRecord | null> {
    const v = Math.trunc(Number(version))
    const head = await this.templates.findOne({ _id: String(id), accountId: String(accountId) })
    if (head === null || !(v >= 1 && v <= head.version)) return null
    if (v === head.version) return toVersion(head._id, head.accountId, v, head.updatedAt, head)
    const doc = await this.versions.findOne({ _id: `${head._id}:${v}`, accountId: head.accountId })
    return doc ? toVersion(doc.templateId, doc.accountId, doc.version, doc.createdAt, doc) : null
  }

  async listTemplateVersions (accountId: string, id: string, page: { limit: number; before?: number }): Promise<TemplateVersionSummary[]> {
    const head = await this.templates.findOne({ _id: String(id), accountId: String(accountId) }, { projection: { html: 0, text: 0, variables: 0 } })
    if (head === null) return []
    const limit = Math.trunc(Number(page.limit))
    const before = page.before === undefined ? Number.MAX_SAFE_INTEGER : Math.trunc(Number(page.before))
    const out: TemplateVersionSummary[] = []
    if (head.version < before && limit > 0) out.push({ version: head.version, subject: head.subject, createdAt: head.updatedAt })
    if (out.length < limit) {
      const older = await this.versions.find(
        { templateId: head._id, accountId: head.accountId, version: { $lt: Math.min(before, head.version) } },
        { projection: { version: 1, subject: 1, createdAt: 1 } },
      ).sort({ version: -1 }).limit(limit - out.length).toArray()
      for (const d of older) out.push({ version: d.version, subject: d.subject, createdAt: d.createdAt })
    }
    return out
  }

  async updateTemplate (accountId: string, id: string, expectedVersion: number, next: TemplateVersionRecord, name?: string): Promise<'updated' | 'conflict' | 'not_found' | 'name_taken'> {
    const head = await this.templates.findOne({ _id: String(id), accountId: String(accountId) })
    if (head === null) return 'not_found'
    if (head.version !== Number(expectedVersion)) return 'conflict'
    // 1. The version being replaced joins the history (the same bytes, whoever writes them).
    const { _id: _ignored, name: _name, updatedAt, ...current } = head
    await this.versions.updateOne({ _id: `${head._id}:${head.version}` }, {
      $setOnInsert: { ...current, templateId: head._id, createdAt: updatedAt },
    }, { upsert: true })
    // 2. The head moves on, if nobody else moved it first.
    try {
      const moved = await this.templates.updateOne({ _id: head._id, accountId: head.accountId, version: head.version }, {
        $set: {
          ...contentDoc(next), version: Number(next.version), updatedAt: String(next.createdAt),
          ...(name !== undefined ? { name: String(name) } : {}),
        },
      })
      if (moved.matchedCount === 1) return 'updated'
    } catch (err) {
      if (err instanceof MongoServerError && err.code === DUPLICATE_KEY) return 'name_taken'
      throw err
    }
    return await this.templates.findOne({ _id: head._id, accountId: head.accountId }, { projection: { _id: 1 } }) === null ? 'not_found' : 'conflict'
  }

  async deleteTemplate (accountId: string, id: string): Promise<boolean> {
    const account = String(accountId)
    const templateId = String(id)
    const deleted = (await this.templates.deleteOne({ _id: templateId, accountId: account })).deletedCount === 1
    // Repeating a delete repairs one that stopped half way (versions left, or the slot still taken).
    if (deleted || await this.slots.findOne({ _id: account, templateIds: templateId }, { projection: { _id: 1 } }) !== null) {
      await this.versions.deleteMany({ templateId, accountId: account })
      await this.releaseSlot(account, templateId)
    }
    return deleted
  }
}
