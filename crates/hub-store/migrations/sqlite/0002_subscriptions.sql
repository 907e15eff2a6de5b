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
    -- The open failure period (auto-disable): first and last failure since the last success.
    failing_since              INTEGER,
    last_failure_at            INTEGER,
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

-- One job per (event, push subscription). States: pending, leased, succeeded, dead, cancelled.
-- No foreign keys, for the same reason as pull_entries.
CREATE TABLE delivery_jobs (
    id                TEXT PRIMARY KEY,
    tenant_id         TEXT    NOT NULL,
    subscription_id   TEXT    NOT NULL,
    event_seq         INTEGER  NOT NULL,
    state             TEXT    NOT NULL,
    attempts          INTEGER NOT NULL DEFAULT 0,
    recoveries        INTEGER NOT NULL DEFAULT 0,
    due_at            INTEGER NOT NULL,
    lease_expires_at  INTEGER,
    lease_token       TEXT,
    event_received_at INTEGER NOT NULL,
    -- Where the retry deadline counts from: the event's arrival, or the last redrive.
    window_start      INTEGER NOT NULL,
    last_error        TEXT,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    finished_at       INTEGER
);
-- Claims: due pending jobs per tenant (skip-scan over tenants, then oldest due first).
CREATE INDEX delivery_jobs_due ON delivery_jobs (tenant_id, due_at) WHERE state = 'pending';
CREATE INDEX delivery_jobs_leased ON delivery_jobs (lease_expires_at) WHERE state = 'leased';
CREATE INDEX delivery_jobs_subscription ON delivery_jobs (subscription_id, id);

CREATE TABLE delivery_attempts (
    id              TEXT PRIMARY KEY,
    job_id          TEXT    NOT NULL,
    tenant_id       TEXT    NOT NULL,
    subscription_id TEXT    NOT NULL,
    attempt         INTEGER NOT NULL,
    started_at      INTEGER NOT NULL,
    latency_ms      INTEGER  NOT NULL,
    outcome         TEXT    NOT NULL,
    status_code     INTEGER,
    error           TEXT,
    response_body   TEXT
);
CREATE INDEX delivery_attempts_job ON delivery_attempts (job_id, attempt);
