-- Opt-in ordering per key (see the PostgreSQL migration of the same name): the subscription's
-- mode, each job's ordering key, and the unsettled ordered jobs a claim checks against.
ALTER TABLE subscriptions ADD COLUMN ordering TEXT NOT NULL DEFAULT 'none'
    CHECK (ordering IN ('none', 'key'));
ALTER TABLE delivery_jobs ADD COLUMN ordering_key TEXT;
CREATE INDEX delivery_jobs_unsettled_keys ON delivery_jobs (subscription_id, ordering_key, event_seq)
    WHERE ordering_key IS NOT NULL AND state IN ('pending', 'leased', 'held');
