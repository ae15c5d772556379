// Index definitions with a migration path. createIndexes alone cannot change an index: an index that
// exists under the same name with another definition makes it fail (IndexOptionsConflict / IndexKeySpecsConflict),
// so a release that changed one would not start. syncIndexes compares what the collection has with
// what the code wants, by name, and drops and recreates what differs.
import { MongoServerError, type Collection, type Document, type IndexDescription } from 'mongodb'

/** An index as the adapter wants it: always named, since the name is what is compared. */
export type WantedIndex = IndexDescription & { name: string; key: Record<string, 1 | -1> }

/** What syncIndexes did to one collection (for logs and tests). */
export interface IndexSyncReport {
  created: string[]
  /** Dropped because their definition differs, then created again as wanted. */
  rebuilt: string[]
  dropped: string[]
}

// MongoDB server error codes.
const NAMESPACE_NOT_FOUND = 26
const INDEX_NOT_FOUND = 27

/**
 * The part of a definition that syncIndexes compares: the key (fields in order, with their direction)
 * and the options this adapter uses. Options the adapter never sets (collation, hidden, weights...) are
 * not compared.
 */
function signature (d: Document): string {
  const key: Array<[string, unknown]> = d.key instanceof Map ? [...(d.key as Map<string, unknown>).entries()] : Object.entries((d.key ?? {}) as Document)
  return JSON.stringify([
    key.map(([field, dir]) => [field, typeof dir === 'number' ? Number(dir) : String(dir)]),
    d.unique === true,
    d.sparse === true,
    d.partialFilterExpression === undefined ? null : d.partialFilterExpression,
    typeof d.expireAfterSeconds === 'number' ? d.expireAfterSeconds : null,
  ])
}

/**
 * What to do to a collection whose indexes are `existing` (as listIndexes gives them) so that those
 * named in `wanted` match their definitions. Pure, so it is tested without a server.
 */
export function planIndexSync (existing: Document[], wanted: WantedIndex[], retired: string[] = []): IndexSyncReport {
  const byName = new Map(existing.map((d) => [String(d.name), d]))
  const plan: IndexSyncReport = { created: [], rebuilt: [], dropped: [] }
  for (const name of retired) if (name !== '_id_' && byName.has(name)) plan.dropped.push(name)
  for (const w of wanted) {
    const have = byName.get(w.name)
    if (have === undefined) plan.created.push(w.name)
    else if (signature(have) !== signature(w)) plan.rebuilt.push(w.name)
  }
  return plan
}

/**
 * Makes `collection`'s indexes named in `wanted` match their definitions: creates the missing ones, and
 * drops and recreates those that exist with another key or options (unique, sparse,
 * partialFilterExpression, expireAfterSeconds). Indexes named in `retired` are dropped; any other index
 * (`_id_`, or one an operator added) is left alone. Idempotent, and safe when several nodes start at
 * once (a drop that finds nothing and a create of what exists already are no-ops).
 *
 * Rebuilding happens at start, while other nodes may be writing: between the drop and the create, a
 * rebuilt index is missing for a moment (a query is slower; a unique index does not refuse duplicates,
 * and its creation then fails and stops the start, saying which keys collide). Change a unique index's
 * name rather than its definition, and retire the old name, when that window matters.
 */
export async function syncIndexes<T extends Document> (
  collection: Collection<T>, wanted: WantedIndex[], retired: string[] = [],
): Promise<IndexSyncReport> {
  let existing: Document[]
  try {
    existing = await collection.listIndexes().toArray() as Document[]
  } catch (err) {
    if (!(err instanceof MongoServerError && err.code === NAMESPACE_NOT_FOUND)) throw err
    existing = [] // the collection does not exist yet: createIndexes creates it
  }
  const plan = planIndexSync(existing, wanted, retired)
  const drop = async (name: string): Promise<void> => {
    try {
      await collection.dropIndex(name)
    } catch (err) {
      // Another node starting at the same moment dropped it first.
      if (!(err instanceof MongoServerError && (err.code === INDEX_NOT_FOUND || err.code === NAMESPACE_NOT_FOUND))) throw err
    }
  }
  for (const name of [...plan.dropped, ...plan.rebuilt]) await drop(name)
  const create = new Set([...plan.created, ...plan.rebuilt])
  const toCreate = wanted.filter((w) => create.has(w.name))
  if (toCreate.length > 0) await collection.createIndexes(toCreate)
  return plan
}
