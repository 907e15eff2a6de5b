-- Events by key, in seq order within a key, and replayed pull entries by their event: see the
-- PostgreSQL migration of the same name.
-- (Subscriptions are matched by pattern with a scan of the tenant's rows here: the embedded
-- store serves small installs.)
CREATE INDEX IF NOT EXISTS events_by_key ON events (tenant_id, resource_type, event_type, seq);
CREATE INDEX IF NOT EXISTS pull_entries_replayed_event ON pull_entries (tenant_id, event_seq) WHERE event_seq IS NOT NULL;
