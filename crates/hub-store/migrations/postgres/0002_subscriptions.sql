-- Subscriptions, pull streams and delivery jobs.

CREATE TABLE subscriptions (
    id                         UUID PRIMARY KEY,
    tenant_id                  TEXT        NOT NULL,
    name                       TEXT        NOT NULL,
    event_types                JSONB       NOT NULL,
    origin                     TEXT,
    sink_type                  TEXT        NOT NULL,
    sink_config                JSONB       NOT NULL,
    signing_secret             BYTEA,
    previous_secret            BYTEA,
    previous_secret_expires_at TIMESTAMPTZ,
    credentials                BYTEA,
    enabled                    BOOLEAN     NOT NULL,
    verification_state         TEXT        NOT NULL,
    verification_error         TEXT,
    disabled_reason            TEXT,
    -- The open failure period (auto-disable): first and last failure since the last success.
    failing_since              TIMESTAMPTZ,
    last_failure_at            TIMESTAMPTZ,
    pull_cursor                BIGINT      NOT NULL DEFAULT 0,
    created_at                 TIMESTAMPTZ NOT NULL,
    updated_at                 TIMESTAMPTZ NOT NULL
);
CREATE INDEX subscriptions_tenant ON subscriptions (tenant_id, id);
-- What ingest reads once per tenant and batch: the tenant's deliverable subscriptions.
CREATE INDEX subscriptions_active ON subscriptions (tenant_id)
    WHERE enabled AND verification_state = 'active';

-- A pull subscription's stream: the seqs of the tenant's events it matched.
-- No foreign keys: a subscription deleted while a batch is being written must not fail the batch.
CREATE TABLE pull_entries (
    subscription_id UUID   NOT NULL,
    seq             BIGINT NOT NULL,
    tenant_id       TEXT   NOT NULL,
    PRIMARY KEY (subscription_id, seq)
);

-- One job per (event, push subscription). States: pending, leased, succeeded, dead, cancelled.
-- No foreign keys, for the same reason as pull_entries.
CREATE TABLE delivery_jobs (
    id                UUID PRIMARY KEY,
    tenant_id         TEXT    NOT NULL,
    subscription_id   UUID    NOT NULL,
    event_seq         BIGINT  NOT NULL,
    state             TEXT    NOT NULL,
    attempts          INTEGER NOT NULL DEFAULT 0,
    recoveries        INTEGER NOT NULL DEFAULT 0,
    due_at            TIMESTAMPTZ NOT NULL,
    lease_expires_at  TIMESTAMPTZ,
    lease_token       UUID,
    event_received_at TIMESTAMPTZ NOT NULL,
    -- Where the retry deadline counts from: the event's arrival, or the last redrive.
    window_start      TIMESTAMPTZ NOT NULL,
    last_error        TEXT,
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL,
    finished_at       TIMESTAMPTZ
);
-- Claims: due pending jobs per tenant (skip-scan over tenants, then oldest due first).
CREATE INDEX delivery_jobs_due ON delivery_jobs (tenant_id, due_at) WHERE state = 'pending';
CREATE INDEX delivery_jobs_leased ON delivery_jobs (lease_expires_at) WHERE state = 'leased';
CREATE INDEX delivery_jobs_subscription ON delivery_jobs (subscription_id, id);

CREATE TABLE delivery_attempts (
    id              UUID PRIMARY KEY,
    job_id          UUID    NOT NULL,
    tenant_id       TEXT    NOT NULL,
    subscription_id UUID    NOT NULL,
    attempt         INTEGER NOT NULL,
    started_at      TIMESTAMPTZ NOT NULL,
    latency_ms      BIGINT  NOT NULL,
    outcome         TEXT    NOT NULL,
    status_code     INTEGER,
    error           TEXT,
    response_body   TEXT
);
CREATE INDEX delivery_attempts_job ON delivery_attempts (job_id, attempt);
