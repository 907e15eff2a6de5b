-- A subscription's open jobs counted from indexes of the open states alone: see the PostgreSQL
-- migration of the same name.
CREATE INDEX IF NOT EXISTS delivery_jobs_dead_by_subscription ON delivery_jobs (subscription_id) WHERE state = 'dead';
