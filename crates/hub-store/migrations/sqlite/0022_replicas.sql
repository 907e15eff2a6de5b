-- Destinations paced by one replica at a time (see the PostgreSQL migration of the same name; an
-- embedded hub is its only replica, but the schema and the store's calls are the same).
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    delivers INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    pacing TEXT NOT NULL DEFAULT '[]'
);

ALTER TABLE subscriptions ADD COLUMN pace_bucket INTEGER;
