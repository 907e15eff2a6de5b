-- Event inbox, quarantine and API keys.

-- Per-tenant arrival sequence. The row is locked by every batch that writes the tenant's events,
-- so seq is assigned and committed in one order per tenant.
CREATE TABLE tenant_sequences (
    tenant_id TEXT PRIMARY KEY,
    last_seq  BIGINT NOT NULL
);

CREATE TABLE events (
    tenant_id         TEXT        NOT NULL,
    seq               BIGINT      NOT NULL,
    ce_id             UUID        NOT NULL,
    source            TEXT        NOT NULL,
    ce_type           TEXT        NOT NULL,
    resource_type     TEXT        NOT NULL,
    event_type        TEXT        NOT NULL,
    event_time        TEXT        NOT NULL,
    schema_version    TEXT        NOT NULL,
    subject           TEXT,
    data_content_type TEXT,
    data_schema       TEXT,
    traceparent       TEXT,
    tracestate        TEXT,
    extensions        JSONB       NOT NULL,
    payload           BYTEA       NOT NULL,
    origin            TEXT        NOT NULL,
    kafka_topic       TEXT,
    kafka_partition   INTEGER,
    kafka_offset      BIGINT,
    received_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, seq),
    UNIQUE (tenant_id, ce_id)
);
CREATE INDEX events_received_at ON events (received_at);

CREATE TABLE quarantine (
    id              BIGSERIAL PRIMARY KEY,
    tenant_id       TEXT,
    source          TEXT,
    ce_id           TEXT,
    reason_code     TEXT        NOT NULL,
    reason_field    TEXT        NOT NULL,
    reason          TEXT        NOT NULL,
    headers         JSONB       NOT NULL,
    body            BYTEA       NOT NULL,
    body_bytes      BIGINT      NOT NULL,
    origin          TEXT        NOT NULL,
    kafka_topic     TEXT,
    kafka_partition INTEGER,
    kafka_offset    BIGINT,
    received_at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX quarantine_received_at ON quarantine (received_at);

CREATE TABLE api_keys (
    id         UUID PRIMARY KEY,
    tenant_id  TEXT        NOT NULL,
    name       TEXT        NOT NULL,
    key_hash   BYTEA       NOT NULL UNIQUE,
    key_prefix TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    revoked_at TIMESTAMPTZ
);
