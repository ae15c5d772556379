// Versioned schema. PRAGMA user_version holds the number of migrations applied; each runs once, in its
// own transaction, at open. Append only: never edit a migration that has shipped.
import type Database from 'better-sqlite3'

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
  /* 3: webhook deliveries and webhook health (times in ms: the engine's hot path compares them) */ `
  CREATE TABLE deliveries (
    id               TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL,
    webhook_id       TEXT NOT NULL,
    event_seq        INTEGER NOT NULL,
    event_id         TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    email_id         TEXT NOT NULL,
    event_at         INTEGER NOT NULL,
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    lease_owner      TEXT,
    parked           INTEGER NOT NULL DEFAULT 0,
    last_attempt_at  INTEGER,
    last_status_code INTEGER,
    last_error       TEXT,
    last_duration_ms INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status IN ('pending', 'retrying');
  CREATE INDEX deliveries_webhook_due ON deliveries (webhook_id, next_attempt_at) WHERE status IN ('pending', 'retrying');
  CREATE INDEX deliveries_webhook ON deliveries (webhook_id, id);
  CREATE INDEX deliveries_leases ON deliveries (lease_owner) WHERE lease_owner IS NOT NULL;
  CREATE INDEX deliveries_parked ON deliveries (webhook_id, lease_owner, next_attempt_at) WHERE parked = 1;
  CREATE INDEX deliveries_event ON deliveries (event_seq);
  CREATE INDEX deliveries_final ON deliveries (updated_at) WHERE status IN ('succeeded', 'failed', 'cancelled');
  ALTER TABLE webhooks ADD COLUMN failing_since INTEGER;
  ALTER TABLE webhooks ADD COLUMN last_success_at INTEGER;
  `,
  /* 4: sending: emails (also the mail queue), idempotency keys, suppressions */ `
  CREATE TABLE emails (
    id               TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts(id),
    from_address     TEXT NOT NULL,
    to_addresses     TEXT NOT NULL,
    cc_addresses     TEXT NOT NULL,
    bcc_addresses    TEXT NOT NULL,
    reply_to         TEXT NOT NULL,
    subject          TEXT NOT NULL,
    html             TEXT,
    text             TEXT,
    headers          TEXT NOT NULL,
    tags             TEXT NOT NULL,
    suppressed       TEXT NOT NULL,
    recipients       TEXT NOT NULL,
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT,
    lease_owner      TEXT,
    lease_expires_at TEXT,
    last_error       TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
  ) STRICT;
  CREATE INDEX emails_due ON emails (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
  CREATE INDEX emails_leases ON emails (lease_owner) WHERE lease_owner IS NOT NULL;

  CREATE TABLE idempotency_keys (
    account_id      TEXT NOT NULL REFERENCES accounts(id),
    key             TEXT NOT NULL,
    request_hash    TEXT NOT NULL,
    response_status INTEGER NOT NULL,
    response_body   TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    expires_at      TEXT NOT NULL,
    PRIMARY KEY (account_id, key)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

  CREATE TABLE suppressions (
    account_id TEXT NOT NULL REFERENCES accounts(id),
    email      TEXT NOT NULL,
    reason     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (account_id, email)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX suppressions_page ON suppressions (account_id, created_at, email);
  `,
  /* 5: routing by a cursor. The engine remembers how far it has routed (one row) instead of rewriting
     every event it routes (the largest rows there are) to set events.routed. From here on, routed = 1
     only marks events the cursor must pass over: test events (their one delivery is made with them),
     and events routed before this migration. The partial index on routed = 0 would now hold every
     event, so it goes; the cursor reads by seq, which AUTOINCREMENT never reuses. */ `
  CREATE TABLE routing (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    routed_through INTEGER NOT NULL
  ) STRICT;
  INSERT INTO routing (id, routed_through)
    VALUES (1, coalesce((SELECT min(seq) - 1 FROM events WHERE routed = 0), (SELECT max(seq) FROM events), 0));
  DROP INDEX events_unrouted;
  `,
  /* 6: rate limits shared by every process on this file: one row per key, holding its newest window only
     (a hit for a later window overwrites it); rows whose window has ended are pruned by window_end. */ `
  CREATE TABLE rate_limits (
    key          TEXT PRIMARY KEY,
    window_start INTEGER NOT NULL,
    window_end   INTEGER NOT NULL,
    count        INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX rate_limits_end ON rate_limits (window_end);
  `,
  /* 7: delivery lease tokens (fencing): every claim increments `lease` and hands it out with the work; an
     outcome applies only while the row still holds the token it was claimed under. No index: outcomes
     find their row by id and compare the token there. */ `
  ALTER TABLE deliveries ADD COLUMN lease INTEGER NOT NULL DEFAULT 0;
  `,
  /* 8: the dashboard's reads. The account's emails newest first, with or without a status (the list
     pages on (created_at, id)); and the account's events by time, for the stats: (account_id,
     occurred_at, type) covers the count, so it reads the index alone. Test events (routed = 1 from their
     insert) stay out of that index; events routed before migration 5 do too, and age out with
     RETENTION_DAYS. */ `
  CREATE INDEX emails_account_page ON emails (account_id, created_at, id);
  CREATE INDEX emails_account_status ON emails (account_id, status, created_at, id);
  CREATE INDEX events_account_time ON events (account_id, occurred_at, type) WHERE routed = 0;
  `,
  /* 9: mail lease fencing: each claim of an email sets a fresh lease token, and an attempt's outcome,
     a renewal or a release applies only under the token it was claimed with. Existing emails start at
     0; a lease held across the upgrade is simply claimed again when it expires. */ `
  ALTER TABLE emails ADD COLUMN lease_token INTEGER NOT NULL DEFAULT 0;
  `,
  /* 10: api key permissions: what each key may do (src/domain/api-key-permissions.ts). Every key made
     before this was accepted on the sending routes only, in an account whose owner could do everything;
     it becomes full_access, the default for a new key. */ `
  ALTER TABLE api_keys ADD COLUMN permission TEXT NOT NULL DEFAULT 'full_access';
  `,
  /* 11: sender domains: one row per account and domain name, the DKIM private key sealed by the
     application (src/app/domains.ts); records holds each DNS record's last status as JSON. */ `
  CREATE TABLE domains (
    id              TEXT PRIMARY KEY,
    account_id      TEXT NOT NULL REFERENCES accounts(id),
    name            TEXT NOT NULL,
    selector        TEXT NOT NULL,
    public_key      TEXT NOT NULL,
    private_key     TEXT NOT NULL,
    status          TEXT NOT NULL,
    records         TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    last_checked_at TEXT,
    verified_at     TEXT,
    UNIQUE (account_id, name)
  ) STRICT;
  CREATE INDEX domains_check ON domains (coalesce(last_checked_at, ''), id);
  `,
  /* 12: the routing lease (written once, see ../deliveries.ts): one node at a time reads events after the
     cursor and holds their first attempts in memory; a take increments router_token, which fences that
     node's first-attempt outcomes and its moves of the cursor. */ `
  ALTER TABLE routing ADD COLUMN router_owner TEXT;
  ALTER TABLE routing ADD COLUMN router_until INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE routing ADD COLUMN router_token INTEGER NOT NULL DEFAULT 0;
  `,
  /* 13: a count of API-key revocations, bumped in the revocation's own write: every process reads it (one
     row) before trusting a key it remembers, so a revocation made by any process holds from the next
     request on (src/app/api-keys.ts). */ `
  CREATE TABLE api_key_revocations (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
  ) STRICT;
  INSERT INTO api_key_revocations (id, n) VALUES (1, 0);
  `,
  /* 14: deliveries that adapt (src/delivery/attempt-outcome.ts, window.ts). `pushbacks`: of a delivery's attempts,
     those the receiver pushed back (429/503 while it still answered), which the retry schedule does not
     count; `rate_limit`: a webhook's deliveries per second (null: none), held by every node through the
     shared rate-limit counters (migration 6). */ `
  ALTER TABLE deliveries ADD COLUMN pushbacks INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE webhooks ADD COLUMN rate_limit INTEGER;
  `,
  /* 15: sending quotas: recipients accepted per account and period ('d:2026-11-26', 'm:2026-11'), counted in
     the write that accepts the send (src/domain/quotas.ts); and the sessions of one account, found at once
     when a password change or "log out everywhere" ends them. */ `
  CREATE TABLE send_usage (
    account_id TEXT NOT NULL REFERENCES accounts(id),
    period     TEXT NOT NULL,
    recipients INTEGER NOT NULL,
    PRIMARY KEY (account_id, period)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX sessions_account ON sessions (account_id);
  `,
  /* 16: receiving mail. A domain's receiving switch
     (domains_receiving finds the domains mail is taken for by name, across accounts); the received
     messages, newest first per account and per recipient, pruned by time; and their bytes (the raw
     message, part 'raw', and each attachment, part 'att_<n>') beside them, so that listing messages never
     reads a blob. */ `
  ALTER TABLE domains ADD COLUMN receiving INTEGER NOT NULL DEFAULT 0;
  CREATE INDEX domains_receiving ON domains (name) WHERE receiving = 1;
  CREATE TABLE received (
    id          TEXT PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES accounts(id),
    domain_id   TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    size        INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    message     TEXT NOT NULL
  ) STRICT;
  CREATE INDEX received_account ON received (account_id, id, size);
  CREATE INDEX received_recipient ON received (account_id, recipient, id);
  CREATE INDEX received_time ON received (created_at);
  CREATE TABLE received_contents (
    received_id TEXT NOT NULL,
    part        TEXT NOT NULL,
    content     BLOB NOT NULL,
    PRIMARY KEY (received_id, part)
  ) STRICT;
  `,
  /* 17: the mail queue's claim reads the due index past every email already leased (those in flight are the
     oldest due); with the lease's expiry and the id in the index, each of those is skipped on the index
     alone instead of a read of its row. */ `
  DROP INDEX emails_due;
  CREATE INDEX emails_due ON emails (next_attempt_at, lease_expires_at, id) WHERE next_attempt_at IS NOT NULL;
  `,
  /* 18: facts about the store itself, one row per name: 'secret_check', the check value of the secret the
     store was written under (src/domain/secret-check.ts), written at the first start under this version. */ `
  CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
  ) STRICT, WITHOUT ROWID;
  `,
  /* 19: received mail, one message per SMTP transaction and account (src/store/received.ts). Its
     recipients each have a row in received_recipients (the `to` filter reads them; received.recipient
     keeps the first); each account's stored bytes are a running total in received_usage, changed in the
     write of every insert, delete and prune, computed here from the messages already kept. */ `
  CREATE TABLE received_recipients (
    received_id TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    PRIMARY KEY (received_id, recipient)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX received_recipients_to ON received_recipients (account_id, recipient, received_id);
  INSERT INTO received_recipients (received_id, recipient, account_id) SELECT id, recipient, account_id FROM received;
  DROP INDEX received_recipient;
  CREATE TABLE received_usage (
    account_id TEXT PRIMARY KEY REFERENCES accounts(id),
    bytes      INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  INSERT INTO received_usage (account_id, bytes) SELECT account_id, sum(size) FROM received GROUP BY account_id;
  `,
  /* 20: scheduled sends, tracking by choice and the sender's metadata (src/domain/schedule.ts, metadata.ts).
     A scheduled email waits in emails_due like a retry: its next_attempt_at is its time, so a claim's range
     scan stops at now and never reads what is not due. The tracking and unsubscribe choices are stored as
     decided at acceptance (1: on, as for every email before this); a domain's tracking defaults are null
     until set (null: the account's default, on). */ `
  ALTER TABLE emails ADD COLUMN scheduled_at TEXT;
  ALTER TABLE emails ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
  ALTER TABLE emails ADD COLUMN track_opens INTEGER NOT NULL DEFAULT 1;
  ALTER TABLE emails ADD COLUMN track_clicks INTEGER NOT NULL DEFAULT 1;
  ALTER TABLE emails ADD COLUMN unsubscribe INTEGER NOT NULL DEFAULT 1;
  ALTER TABLE domains ADD COLUMN track_opens INTEGER;
  ALTER TABLE domains ADD COLUMN track_clicks INTEGER;
  `,
  /* 21: webhook filters and replays (src/domain/webhook-filter.ts, src/domain/replay.ts). route_filter: the
     webhook's filter as JSON ({ domains, tags }), NULL for none; routing reads it with the webhook. replay:
     the last replay asked of the webhook as JSON ({ since, until, types, startedAt }), NULL when none was;
     a second replay is refused while a delivery of that range is still live. */ `
  ALTER TABLE webhooks ADD COLUMN route_filter TEXT;
  ALTER TABLE webhooks ADD COLUMN replay TEXT;
  `,
  /* 22: attachments of sent emails (src/domain/attachments.ts). The email keeps each attachment's facts
     (filename, content type, size, SHA-256, content id) as JSON in emails.attachments, for as long as the
     email is kept; the bytes are in email_attachments, once per email whatever its recipients, until the
     mailer's housekeeping drops them a while after the email's last attempt (ATTACHMENT_RETENTION_HOURS). */ `
  ALTER TABLE emails ADD COLUMN attachments TEXT NOT NULL DEFAULT '[]';
  CREATE TABLE email_attachments (
    email_id   TEXT NOT NULL,
    part       INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    content    BLOB NOT NULL,
    PRIMARY KEY (email_id, part)
  ) STRICT;
  CREATE INDEX email_attachments_time ON email_attachments (created_at, email_id);
  `,
  /* 23: templates (src/store/templates.ts): each template's head (its name, unique per account, and its
     current version) and every version it had, the current one included; a version is never changed, and
     goes only with its template. An email sent from a template names it and the version it used. */ `
  CREATE TABLE templates (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (account_id, name)
  ) STRICT;
  CREATE INDEX templates_account ON templates (account_id, id);
  CREATE TABLE template_versions (
    template_id TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    version     INTEGER NOT NULL,
    subject     TEXT NOT NULL,
    html        TEXT,
    text        TEXT,
    variables   TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (template_id, version)
  ) STRICT;
  ALTER TABLE emails ADD COLUMN template_id TEXT;
  ALTER TABLE emails ADD COLUMN template_version INTEGER;
  `,
  /* 24: what routing matches webhook filters on, made with each event of a sent email (its From domain and
     tags as JSON: src/domain/webhook-filter.ts eventRoute), so that routing does not read the email's row
     (its tags sit after its bodies). NULL on events from before, and on those of no sent email: routing
     then looks the email, or the received message's recipients, up. */ `
  ALTER TABLE events ADD COLUMN route TEXT;
  `,
  /* 25: one lease rule (src/domain/lease-owner.ts): an email's lease_expires_at is ms since the epoch, an
     INTEGER like the delivery engine's lease times, no longer ISO text (text compares wrongly against a
     number). Every email lease held across the upgrade is released (its email is due again at once, the
     processes that held it being gone): no old value is converted, the column is dropped with them and
     made again with its new type, and the due index that reads it with it. */ `
  DROP INDEX emails_due;
  UPDATE emails SET lease_owner = NULL WHERE lease_owner IS NOT NULL;
  ALTER TABLE emails DROP COLUMN lease_expires_at;
  ALTER TABLE emails ADD COLUMN lease_expires_at INTEGER;
  CREATE INDEX emails_due ON emails (next_attempt_at, lease_expires_at, id) WHERE next_attempt_at IS NOT NULL;
  `,
]

/** Applies the migrations this database has not had yet, each in its own transaction; refuses a newer schema. */
export function migrate (db: Database.Database): void {
  const current = db.pragma('user_version', { simple: true }) as number
  if (current > migrations.length) {
    throw new Error(`the database schema is version ${current}, newer than this svc knows (${migrations.length}); upgrade svc`)
  }
  for (let v = current; v < migrations.length; v++) {
    db.transaction(() => {
      db.exec(migrations[v]!)
      db.pragma(`user_version = ${v + 1}`)
    }).immediate()
  }
}
