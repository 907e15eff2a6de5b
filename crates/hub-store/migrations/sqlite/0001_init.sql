-- Event inbox, quarantine and API keys. Times are Unix microseconds; UUIDs are lowercase text.

CREATE TABLE tenant_sequences (
    tenant_id TEXT PRIMARY KEY,
    last_seq  INTEGER NOT NULL
);

CREATE TABLE events (
    tenant_id         TEXT    NOT NULL,
    seq               INTEGER NOT NULL,
    ce_id             TEXT    NOT NULL,
    source            TEXT    NOT NULL,
    ce_type           TEXT    NOT NULL,
    resource_type     TEXT    NOT NULL,
    event_type        TEXT    NOT NULL,
    event_time        TEXT    NOT NULL,
    schema_version    TEXT    NOT NULL,
    subject           TEXT,
    data_content_type TEXT,
    data_schema       TEXT,
    traceparent       TEXT,
    tracestate        TEXT,
    extensions        TEXT    NOT NULL,
    payload           BLOB    NOT NULL,
    origin            TEXT    NOT NULL,
    kafka_topic       TEXT,
    kafka_partition   INTEGER,
    kafka_offset      INTEGER,
    received_at       INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, seq),
    UNIQUE (tenant_id, ce_id)
) WITHOUT ROWID;
CREATE INDEX events_received_at ON events (received_at);

CREATE TABLE quarantine (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT,
    source          TEXT,
    ce_id           TEXT,
    reason_code     TEXT    NOT NULL,
    reason_field    TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    headers         TEXT    NOT NULL,
    body            BLOB    NOT NULL,
    body_bytes      INTEGER NOT NULL,
    origin          TEXT    NOT NULL,
    kafka_topic     TEXT,
    kafka_partition INTEGER,
    kafka_offset    INTEGER,
    received_at     INTEGER NOT NULL
);
CREATE INDEX quarantine_received_at ON quarantine (received_at);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    key_hash   BLOB    NOT NULL UNIQUE,
    key_prefix TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
