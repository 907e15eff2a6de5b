-- A subscription verified at least once keeps receiving (held) jobs while it is verified again
-- after a change of destination; jobs of a subscription that is not deliverable are `held`, so
-- claims only see work that can be done.
ALTER TABLE subscriptions ADD COLUMN verified_at TIMESTAMPTZ;
UPDATE subscriptions SET verified_at = updated_at WHERE verification_state = 'active';

-- What ingest reads once per tenant and batch: the subscriptions that may take new events.
DROP INDEX subscriptions_active;
CREATE INDEX subscriptions_matching ON subscriptions (tenant_id)
    WHERE enabled AND verification_state IN ('active', 'pending');

-- Waiting jobs by subscription: what holding and releasing a subscription's jobs touches.
CREATE INDEX delivery_jobs_pending_by_subscription ON delivery_jobs (subscription_id) WHERE state = 'pending';
CREATE INDEX delivery_jobs_held_by_subscription ON delivery_jobs (subscription_id) WHERE state = 'held';

UPDATE delivery_jobs j SET state = 'held'
FROM subscriptions s
WHERE s.id = j.subscription_id AND j.state = 'pending' AND NOT (s.enabled AND s.verification_state = 'active');
