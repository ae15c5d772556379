// The templates part of the Store contract (src/store/types.ts): an account's templates and every version
// of each. A template is its head (name, current version) and its versions; a version never changes once
// written, so anything compiled from one (src/mail/render-template.ts) stays good while the template
// lives. Deleting a template deletes its versions with it. src/app/templates.ts decides what a template
// may hold and when a version is made; an adapter stores what it is given.
import type { TemplateVariable } from '../domain/templates.js'

/** What a template is, without the content of its versions. */
export interface TemplateHead {
  /** `tpl_…` */
  id: string
  accountId: string
  /** Unique within the account. */
  name: string
  /** The current version: 1 at creation, one more at every change. */
  version: number
  createdAt: string
  /** When the current version was made. */
  updatedAt: string
}

/** One version of a template, as it was made. */
export interface TemplateVersionRecord {
  templateId: string
  accountId: string
  version: number
  subject: string
  html: string | null
  text: string | null
  variables: TemplateVariable[]
  createdAt: string
}

/** A template as a list shows it: its head and its current subject. */
export interface TemplateSummary extends TemplateHead {
  subject: string
}

/** A version as the list of versions shows it. */
export interface TemplateVersionSummary {
  version: number
  subject: string
  createdAt: string
}

export type TemplateKey = { id: string } | { name: string }

export interface TemplateStore {
  /**
   * Inserts the template with its first version (`first.version` is `head.version`, 1), unless the
   * account has a template of this name ('name_taken') or already `limit` templates ('limit_reached'):
   * the checks and the insert are one atomic step, like insertDomain.
   */
  insertTemplate(head: TemplateHead, first: TemplateVersionRecord, limit: number): Promise<'created' | 'limit_reached' | 'name_taken'>
  /** The account's templates, newest first. */
  listTemplates(accountId: string): Promise<TemplateSummary[]>
  /** The account's template with this id or name; null when there is none. */
  findTemplate(accountId: string, key: TemplateKey): Promise<TemplateHead | null>
  /** One version of the account's template; null when the template or the version does not exist. */
  findTemplateVersion(accountId: string, id: string, version: number): Promise<TemplateVersionRecord | null>
  /** The template's versions, newest first, `limit` at most, older than `before` when given. */
  listTemplateVersions(accountId: string, id: string, page: { limit: number; before?: number }): Promise<TemplateVersionSummary[]>
  /**
   * Makes `next` (version `expectedVersion + 1`) the template's current version, and renames it when
   * `name` is given, while its current version is still `expectedVersion`: 'conflict' (nothing written)
   * when another change came first, 'not_found' when the account has no such template, 'name_taken' when
   * another of its templates has that name.
   */
  updateTemplate(accountId: string, id: string, expectedVersion: number, next: TemplateVersionRecord, name?: string): Promise<'updated' | 'conflict' | 'not_found' | 'name_taken'>
  /** Deletes the template and all its versions; false when the account has no such template. */
  deleteTemplate(accountId: string, id: string): Promise<boolean>
}
