-- Subscriptions, pull streams and delivery jobs. Times are Unix microseconds, UUIDs text.

CREATE TABLE subscriptions (
    id                         TEXT PRIMARY KEY,
    tenant_id                  TEXT        NOT NULL,
    name                       TEXT        NOT NULL,
    event_types                TEXT        NOT NULL,
    origin                     TEXT,
    sink_type                  TEXT        NOT NULL,
    sink_config                TEXT        NOT NULL,
    signing_secret             BLOB,
    previous_secret            BLOB,
    previous_secret_expires_at INTEGER,
    credentials                BLOB,
    enabled                    INTEGER     NOT NULL,
    verification_state         TEXT        NOT NULL,
    verification_error         TEXT,
    disabled_reason            TEXT,
    pull_cursor                INTEGER      NOT NULL DEFAULT 0,
    created_at                 INTEGER     NOT NULL,
    updated_at                 INTEGER     NOT NULL
);
CREATE INDEX subscriptions_tenant ON subscriptions (tenant_id, id);
-- What ingest reads once per tenant and batch: the tenant's deliverable subscriptions.
CREATE INDEX subscriptions_active ON subscriptions (tenant_id)
    WHERE enabled = 1 AND verification_state = 'active';

-- A pull subscription's stream: the seqs of the tenant's events it matched.
-- No foreign keys: a subscription deleted while a batch is being written must not fail the batch.
CREATE TABLE pull_entries (
    subscription_id TEXT   NOT NULL,
    seq             INTEGER NOT NULL,
    tenant_id       TEXT   NOT NULL,
    PRIMARY KEY (subscription_id, seq)
);

CREATE TABLE delivery_jobs (
    id                TEXT PRIMARY KEY,
    tenant_id         TEXT        NOT NULL,
    subscription_id   TEXT        NOT NULL,
    event_seq         INTEGER      NOT NULL,
    state             TEXT        NOT NULL,
    attempts          INTEGER     NOT NULL DEFAULT 0,
    recoveries        INTEGER     NOT NULL DEFAULT 0,
    due_at            INTEGER     NOT NULL,
    lease_expires_at  INTEGER,
    event_received_at INTEGER     NOT NULL,
    last_error        TEXT,
    created_at        INTEGER     NOT NULL,
    updated_at        INTEGER     NOT NULL
);
CREATE INDEX delivery_jobs_due ON delivery_jobs (due_at) WHERE state = 'pending';
CREATE INDEX delivery_jobs_subscription ON delivery_jobs (subscription_id, id);
