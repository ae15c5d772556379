// Versioned schema. PRAGMA user_version holds the number of migrations applied; each runs once, in its
// own transaction, at open. Append only: never edit a migration that has shipped.
export const migrations: string[] = [
  /* 1: accounts, sessions, API keys, webhooks */ `
  CREATE TABLE accounts (
    id            TEXT PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    plan          TEXT NOT NULL,
    created_at    TEXT NOT NULL
  ) STRICT;

  CREATE TABLE sessions (
    token_hash  TEXT PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES accounts(id),
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX sessions_expiry ON sessions (expires_at);

  CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    name         TEXT NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,
    key_prefix   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    last_used_at TEXT,
    revoked_at   TEXT
  ) STRICT;
  CREATE INDEX api_keys_account ON api_keys (account_id, id);

  CREATE TABLE webhooks (
    id                         TEXT PRIMARY KEY,
    account_id                 TEXT NOT NULL REFERENCES accounts(id),
    url                        TEXT NOT NULL,
    events                     TEXT NOT NULL,
    secret                     TEXT NOT NULL,
    previous_secret            TEXT,
    previous_secret_expires_at TEXT,
    status                     TEXT NOT NULL,
    created_at                 TEXT NOT NULL,
    updated_at                 TEXT NOT NULL,
    deleted_at                 TEXT
  ) STRICT;
  CREATE INDEX webhooks_account ON webhooks (account_id, id) WHERE deleted_at IS NULL;
  `,
  /* 2: the event outbox, shared by sending (writes) and the delivery engine (routes) */ `
  CREATE TABLE events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    account_id  TEXT NOT NULL,
    email_id    TEXT NOT NULL,
    type        TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    occurred_at TEXT NOT NULL,
    payload     TEXT NOT NULL,
    routed      INTEGER NOT NULL DEFAULT 0
  ) STRICT;
  CREATE INDEX events_unrouted ON events (seq) WHERE routed = 0;
  CREATE INDEX events_email ON events (email_id, seq);
  `,
]
