-- Per-minute delivery statistics of each subscription: see the PostgreSQL migration of the same
-- name. `minute` is microseconds since the epoch; `latency` a JSON array of bucket counts.
CREATE TABLE subscription_minutes (
    subscription_id  TEXT    NOT NULL,
    minute           INTEGER NOT NULL,
    tenant_id        TEXT    NOT NULL,
    delivered        INTEGER NOT NULL DEFAULT 0,
    failed           INTEGER NOT NULL DEFAULT 0,
    dead             INTEGER NOT NULL DEFAULT 0,
    latency          TEXT    NOT NULL,
    backlog          INTEGER,
    PRIMARY KEY (subscription_id, minute)
) WITHOUT ROWID;
CREATE INDEX subscription_minutes_minute ON subscription_minutes (minute);
