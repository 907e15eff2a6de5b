-- Erasure (SPEC §10): a data subject's payloads replaced by tombstones. An erased row keeps its
-- ids, type and time and names its erasure (erased_by); the erasure is kept as its own audit
-- record: who, when, why and counts, and the match only while it runs (sealed, then dropped).
-- Adding a nullable column is a catalogue change: no table is rewritten.
ALTER TABLE events ADD COLUMN erased_by UUID;
ALTER TABLE dlq_records ADD COLUMN erased_by UUID;
ALTER TABLE quarantine ADD COLUMN erased_by UUID;

CREATE TABLE erasures (
    id             UUID        PRIMARY KEY,
    tenant_id      TEXT        NOT NULL,
    match_kind     TEXT        NOT NULL CHECK (match_kind IN ('subject', 'partitionkey', 'data')),
    sealed_match   BYTEA,
    reason         TEXT        NOT NULL,
    requested_by   TEXT        NOT NULL,
    requested_at   TIMESTAMPTZ NOT NULL,
    state          TEXT        NOT NULL CHECK (state IN ('running', 'done')),
    -- The inbox is walked by seq: everything up to scanned_to is done.
    scanned_to     BIGINT      NOT NULL DEFAULT 0,
    scanned        BIGINT      NOT NULL DEFAULT 0,
    events         BIGINT      NOT NULL DEFAULT 0,
    jobs_cancelled BIGINT      NOT NULL DEFAULT 0,
    responses      BIGINT      NOT NULL DEFAULT 0,
    dlq_records    BIGINT      NOT NULL DEFAULT 0,
    quarantined    BIGINT      NOT NULL DEFAULT 0,
    lease_until    TIMESTAMPTZ,
    finished_at    TIMESTAMPTZ
);
CREATE INDEX erasures_running ON erasures (requested_at) WHERE state = 'running';
CREATE INDEX erasures_tenant ON erasures (tenant_id, requested_at);
