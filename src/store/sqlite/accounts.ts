// Accounts and their sessions in SQLite. Reads answer at once; each change is one WriteQueue.run.
import type Database from 'better-sqlite3'
import type { Plan } from '../../domain/plans.js'
import type { AccountRecord, SessionRecord } from '../types.js'
import type { WriteQueue } from './write-queue.js'

type Row = Record<string, unknown>
const str = (v: unknown): string => v as string

function toAccount (r: Row): AccountRecord {
  return { id: str(r.id), email: str(r.email), passwordHash: str(r.password_hash), plan: r.plan as Plan, createdAt: str(r.created_at) }
}

export class SqliteAccounts {
  private readonly q

  constructor (db: Database.Database, private readonly writes: WriteQueue) {
    const p = (sql: string) => db.prepare(sql)
    this.q = {
      insertAccount: p('INSERT INTO accounts (id, email, password_hash, plan, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (email) DO NOTHING'),
      anyAccount: p('SELECT 1 FROM accounts LIMIT 1'),
      setPassword: p('UPDATE accounts SET password_hash = ? WHERE id = ?'),
      deleteAccountSessions: p('DELETE FROM sessions WHERE account_id = ? AND token_hash IS NOT ?'),
      accountById: p('SELECT * FROM accounts WHERE id = ?'),
      accountByEmail: p('SELECT * FROM accounts WHERE email = ?'),
      setPlan: p('UPDATE accounts SET plan = ? WHERE id = ?'),

      insertSession: p('INSERT INTO sessions (token_hash, account_id, created_at, expires_at) VALUES (?, ?, ?, ?)'),
      sessionByHash: p('SELECT * FROM sessions WHERE token_hash = ?'),
      extendSession: p('UPDATE sessions SET expires_at = ? WHERE token_hash = ?'),
      deleteSession: p('DELETE FROM sessions WHERE token_hash = ?'),
      deleteExpiredSessions: p('DELETE FROM sessions WHERE expires_at < ?'),
    }
  }

  // Accounts

  createAccount (a: AccountRecord, opts: { onlyIfFirst?: boolean } = {}): Promise<'created' | 'email_taken' | 'not_first'> {
    return this.writes.run(() => {
      // Inside the write, whose transaction begins IMMEDIATE (one writer at a time, processes sharing the
      // file included): of two concurrent first signups, one is first.
      if (opts.onlyIfFirst === true && this.q.anyAccount.get() !== undefined) return 'not_first'
      return this.q.insertAccount.run(a.id, a.email, a.passwordHash, a.plan, a.createdAt).changes === 1 ? 'created' : 'email_taken'
    })
  }

  setAccountPassword (accountId: string, passwordHash: string): Promise<boolean> {
    return this.writes.run(() => this.q.setPassword.run(passwordHash, accountId).changes === 1)
  }

  deleteAccountSessions (accountId: string, keep: string | null): Promise<number> {
    return this.writes.run(() => this.q.deleteAccountSessions.run(accountId, keep).changes)
  }

  async findAccountById (id: string): Promise<AccountRecord | null> {
    const row = this.q.accountById.get(id) as Row | undefined
    return row ? toAccount(row) : null
  }

  async findAccountByEmail (email: string): Promise<AccountRecord | null> {
    const row = this.q.accountByEmail.get(email) as Row | undefined
    return row ? toAccount(row) : null
  }

  setAccountPlan (accountId: string, plan: Plan): Promise<boolean> {
    return this.writes.run(() => this.q.setPlan.run(plan, accountId).changes === 1)
  }

  // Sessions

  async createSession (s: SessionRecord): Promise<void> {
    await this.writes.run(() => this.q.insertSession.run(s.tokenHash, s.accountId, s.createdAt, s.expiresAt))
  }

  async findSession (tokenHash: string): Promise<SessionRecord | null> {
    const r = this.q.sessionByHash.get(tokenHash) as Row | undefined
    return r ? { tokenHash: str(r.token_hash), accountId: str(r.account_id), createdAt: str(r.created_at), expiresAt: str(r.expires_at) } : null
  }

  async extendSession (tokenHash: string, expiresAt: string): Promise<void> {
    await this.writes.run(() => this.q.extendSession.run(expiresAt, tokenHash))
  }

  async deleteSession (tokenHash: string): Promise<void> {
    await this.writes.run(() => this.q.deleteSession.run(tokenHash))
  }

  deleteExpiredSessions (now: string): Promise<number> {
    return this.writes.run(() => this.q.deleteExpiredSessions.run(now).changes)
  }
}
