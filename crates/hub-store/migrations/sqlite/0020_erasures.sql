-- Erasure: see the PostgreSQL migration of the same name. Times are microseconds since the
-- epoch.
ALTER TABLE events ADD COLUMN erased_by TEXT;
ALTER TABLE dlq_records ADD COLUMN erased_by TEXT;
ALTER TABLE quarantine ADD COLUMN erased_by TEXT;

CREATE TABLE erasures (
    id             TEXT    PRIMARY KEY,
    tenant_id      TEXT    NOT NULL,
    match_kind     TEXT    NOT NULL CHECK (match_kind IN ('subject', 'partitionkey', 'data')),
    sealed_match   BLOB,
    reason         TEXT    NOT NULL,
    requested_by   TEXT    NOT NULL,
    requested_at   INTEGER NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('running', 'done')),
    scanned_to     INTEGER NOT NULL DEFAULT 0,
    scanned        INTEGER NOT NULL DEFAULT 0,
    events         INTEGER NOT NULL DEFAULT 0,
    jobs_cancelled INTEGER NOT NULL DEFAULT 0,
    responses      INTEGER NOT NULL DEFAULT 0,
    dlq_records    INTEGER NOT NULL DEFAULT 0,
    quarantined    INTEGER NOT NULL DEFAULT 0,
    lease_until    INTEGER,
    finished_at    INTEGER
);
CREATE INDEX erasures_running ON erasures (requested_at) WHERE state = 'running';
CREATE INDEX erasures_tenant ON erasures (tenant_id, requested_at);
