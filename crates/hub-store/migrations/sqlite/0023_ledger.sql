-- The ledger: see the PostgreSQL migration of the same name. SQLite has one writer, so an
-- index taken from ledger_heads in a write transaction is in commit order. Times are
-- microseconds since the epoch.
CREATE TABLE ledger_entries (
    log         TEXT    NOT NULL,
    idx         INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    kind        TEXT    NOT NULL,
    data        TEXT    NOT NULL,
    leaf_hash   BLOB    NOT NULL,
    event_id    TEXT,
    digest_key  BLOB,
    PRIMARY KEY (log, idx)
);
CREATE INDEX ledger_entries_event ON ledger_entries (log, event_id) WHERE event_id IS NOT NULL;
-- The audit view: a log's changes, newest first, without reading its deliveries.
CREATE INDEX ledger_entries_changes ON ledger_entries (log, idx) WHERE kind = 'change';

CREATE TABLE ledger_heads (
    log  TEXT    PRIMARY KEY,
    size INTEGER NOT NULL
);

CREATE TABLE ledger_trees (
    log   TEXT    PRIMARY KEY,
    size  INTEGER NOT NULL,
    peaks BLOB    NOT NULL
);

CREATE TABLE ledger_nodes (
    log   TEXT    NOT NULL,
    level INTEGER NOT NULL,
    idx   INTEGER NOT NULL,
    hash  BLOB    NOT NULL,
    PRIMARY KEY (log, level, idx)
);

CREATE TABLE ledger_checkpoints (
    log       TEXT    NOT NULL,
    size      INTEGER NOT NULL,
    root      TEXT    NOT NULL,
    time      TEXT    NOT NULL,
    kid       TEXT    NOT NULL,
    signature TEXT    NOT NULL,
    note      TEXT    NOT NULL,
    signed_at INTEGER NOT NULL,
    PRIMARY KEY (log, size)
);

CREATE TABLE ledger_keys (
    kid         TEXT    PRIMARY KEY,
    sealed_key  BLOB    NOT NULL,
    created_at  INTEGER NOT NULL,
    retired_at  INTEGER
);

ALTER TABLE delivery_attempts ADD COLUMN ledger_index INTEGER;
