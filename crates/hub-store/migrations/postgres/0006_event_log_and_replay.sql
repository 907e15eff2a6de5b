-- The event log reads a tenant's inbox and one event's deliveries; replays give a subscription
-- events of its inbox again.

-- One event's jobs (the event log, replay's skip check) use `delivery_jobs_event` (0004).

-- A pull stream is read by position (`seq`, the cursor). A live entry's position is its event's
-- seq (`event_seq` NULL); a replayed entry is appended at a new position drawn from the tenant's
-- sequence, so it lands after every entry a reader may have seen, and names its event here.
ALTER TABLE pull_entries ADD COLUMN event_seq BIGINT;
CREATE INDEX pull_entries_replayed ON pull_entries (subscription_id, event_seq) WHERE event_seq IS NOT NULL;

-- When the subscription was last disabled (by a PATCH or automatically): where a replay that
-- recovers it starts.
ALTER TABLE subscriptions ADD COLUMN disabled_at TIMESTAMPTZ;
UPDATE subscriptions SET disabled_at = updated_at WHERE NOT enabled;

CREATE TABLE replays (
    id                UUID PRIMARY KEY,
    tenant_id         TEXT        NOT NULL,
    subscription_id   UUID        NOT NULL,
    -- The window as asked (any bound may be open) and the seqs it was resolved to at creation.
    since             TIMESTAMPTZ,
    until             TIMESTAMPTZ,
    from_seq          BIGINT      NOT NULL,
    to_seq            BIGINT      NOT NULL,
    include_delivered BOOLEAN     NOT NULL,
    -- running, done, cancelled.
    state             TEXT        NOT NULL,
    -- The last seq walked.
    walked_to         BIGINT      NOT NULL,
    matched           BIGINT      NOT NULL DEFAULT 0,
    created           BIGINT      NOT NULL DEFAULT 0,
    skipped           BIGINT      NOT NULL DEFAULT 0,
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL,
    finished_at       TIMESTAMPTZ
);
-- One replay at a time per subscription.
CREATE UNIQUE INDEX replays_running ON replays (subscription_id) WHERE state = 'running';
CREATE INDEX replays_subscription ON replays (subscription_id, id);
