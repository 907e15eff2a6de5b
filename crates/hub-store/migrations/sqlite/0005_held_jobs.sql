-- A subscription verified at least once keeps receiving (held) jobs while it is verified again
-- after a change of destination; jobs of a subscription that is not deliverable are `held`, so
-- claims only see work that can be done.
ALTER TABLE subscriptions ADD COLUMN verified_at INTEGER;
UPDATE subscriptions SET verified_at = updated_at WHERE verification_state = 'active';

-- What ingest reads once per tenant and batch: the subscriptions that may take new events.
DROP INDEX subscriptions_active;
CREATE INDEX subscriptions_matching ON subscriptions (tenant_id)
    WHERE enabled = 1 AND verification_state IN ('active', 'pending');

-- Waiting jobs by subscription: what holding and releasing a subscription's jobs touches.
CREATE INDEX delivery_jobs_pending_by_subscription ON delivery_jobs (subscription_id) WHERE state = 'pending';
CREATE INDEX delivery_jobs_held_by_subscription ON delivery_jobs (subscription_id) WHERE state = 'held';

UPDATE delivery_jobs SET state = 'held'
WHERE state = 'pending' AND subscription_id IN (
    SELECT id FROM subscriptions WHERE NOT (enabled = 1 AND verification_state = 'active'));
