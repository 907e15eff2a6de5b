-- Claims walk each deliverable subscription's own due jobs, oldest first, so the backlog of a
-- subscription left out of a claim (its destination has all the workers it may take) is never
-- scanned by the claims of its tenant's other subscriptions. The same index serves holding and
-- releasing a subscription's waiting jobs, which the one it replaces served.
CREATE INDEX delivery_jobs_pending_due_by_subscription ON delivery_jobs (subscription_id, due_at)
    WHERE state = 'pending';
DROP INDEX delivery_jobs_pending_by_subscription;
