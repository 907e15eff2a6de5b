-- Retention: finding an event's jobs, and finished jobs by age.
CREATE INDEX delivery_jobs_event ON delivery_jobs (tenant_id, event_seq);
CREATE INDEX delivery_jobs_finished ON delivery_jobs (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled');
CREATE INDEX pull_entries_event ON pull_entries (tenant_id, seq);
