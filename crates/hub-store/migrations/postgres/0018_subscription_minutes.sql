-- Per-minute delivery statistics of each subscription (GET /v1/subscriptions/{id}/stats):
-- attempts delivered and failed, jobs dead-lettered, a latency histogram with fixed bounds
-- (hub_core::delivery::stats), and the backlog (pending + held jobs) sampled once a minute.
-- Replicas add their roll-ups; rows older than two days are pruned.
CREATE TABLE subscription_minutes (
    subscription_id  UUID        NOT NULL,
    minute           TIMESTAMPTZ NOT NULL,
    tenant_id        TEXT        NOT NULL,
    delivered        BIGINT      NOT NULL DEFAULT 0,
    failed           BIGINT      NOT NULL DEFAULT 0,
    dead             BIGINT      NOT NULL DEFAULT 0,
    latency          BIGINT[]    NOT NULL,
    backlog          BIGINT,
    PRIMARY KEY (subscription_id, minute)
);
CREATE INDEX subscription_minutes_minute ON subscription_minutes (minute);
