// API keys in SQLite: each account's keys, their use and their revocation. Reads answer at once; each
// change is one WriteQueue.run.
import type Database from 'better-sqlite3'
import type { ApiKeyRecord, LimitedInsert } from '../types.js'
import type { WriteQueue } from './write-queue.js'

type Row = Record<string, unknown>
const str = (v: unknown): string => v as string
const strOrNull = (v: unknown): string | null => (v ?? null) as string | null

function toApiKey (r: Row): ApiKeyRecord {
  return {
    id: str(r.id),
    accountId: str(r.account_id),
    name: str(r.name),
    keyHash: str(r.key_hash),
    keyPrefix: str(r.key_prefix),
    createdAt: str(r.created_at),
    lastUsedAt: strOrNull(r.last_used_at),
    revokedAt: strOrNull(r.revoked_at),
    permission: str(r.permission) as ApiKeyRecord['permission'],
  }
}

export class SqliteApiKeys {
  private readonly q

  constructor (db: Database.Database, private readonly writes: WriteQueue) {
    const p = (sql: string) => db.prepare(sql)
    this.q = {
      countActiveKeys: p('SELECT count(*) AS n FROM api_keys WHERE account_id = ? AND revoked_at IS NULL'),
      insertKey: p(`INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, created_at, last_used_at, revoked_at, permission)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
      listKeys: p('SELECT * FROM api_keys WHERE account_id = ? ORDER BY id DESC'),
      keyByHash: p('SELECT * FROM api_keys WHERE key_hash = ?'),
      keyById: p('SELECT * FROM api_keys WHERE account_id = ? AND id = ?'),
      revokeKey: p('UPDATE api_keys SET revoked_at = ? WHERE account_id = ? AND id = ? AND revoked_at IS NULL'),
      revocations: p('SELECT n FROM api_key_revocations WHERE id = 1').pluck(),
      countRevocation: p('UPDATE api_key_revocations SET n = n + 1 WHERE id = 1'),
      touchKey: p('UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)'),
    }
  }

  insertApiKey (k: ApiKeyRecord, limit: number): Promise<LimitedInsert> {
    return this.writes.run(() => {
      const { n } = this.q.countActiveKeys.get(k.accountId) as { n: number }
      if (n >= limit) return 'limit_reached'
      this.q.insertKey.run(k.id, k.accountId, k.name, k.keyHash, k.keyPrefix, k.createdAt, k.lastUsedAt, k.revokedAt, k.permission)
      return 'created'
    })
  }

  async listApiKeys (accountId: string): Promise<ApiKeyRecord[]> {
    return (this.q.listKeys.all(accountId) as Row[]).map(toApiKey)
  }

  async findApiKeyByHash (keyHash: string): Promise<ApiKeyRecord | null> {
    const row = this.q.keyByHash.get(keyHash) as Row | undefined
    return row ? toApiKey(row) : null
  }

  revokeApiKey (accountId: string, id: string, at: string): Promise<ApiKeyRecord | null> {
    return this.writes.run(() => {
      if (this.q.revokeKey.run(at, accountId, id).changes === 1) this.q.countRevocation.run()
      const row = this.q.keyById.get(accountId, id) as Row | undefined
      return row ? toApiKey(row) : null
    })
  }

  apiKeyRevocations (): number {
    return this.q.revocations.get() as number
  }

  async touchApiKeys (uses: Array<{ id: string; lastUsedAt: string }>): Promise<void> {
    if (uses.length === 0) return
    await this.writes.run(() => {
      for (const u of uses) this.q.touchKey.run(u.lastUsedAt, u.id, u.lastUsedAt)
    })
  }

  async countActiveApiKeys (accountId: string): Promise<number> {
    return (this.q.countActiveKeys.get(accountId) as { n: number }).n
  }
}
