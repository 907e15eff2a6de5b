-- What the console's searches read (GET /v1/events?event_type=…, GET /v1/events/{ce_id}) on a
-- tenant with millions of events and thousands of subscriptions:
-- * events by key, in seq order within a key: a search for `resource.event` or `resource.*`
--   probes the tenant's events of that type instead of walking all of them;
-- * subscriptions by the patterns they hold (`event_types ?| …`), and replayed pull entries by
--   the event they carry: one event's fan-out reads its candidates and its stream entries
--   instead of every subscription and stream of the tenant.
-- On a large existing inbox, building the first index blocks ingest for as long as it takes; an
-- operator may build it beforehand without blocking, under the same name, and this migration
-- then finds it (docs/OPERATIONS.md, "Upgrading"):
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS events_by_key ON events (tenant_id, resource_type, event_type, seq);
CREATE INDEX IF NOT EXISTS events_by_key ON events (tenant_id, resource_type, event_type, seq);
CREATE INDEX IF NOT EXISTS subscriptions_by_pattern ON subscriptions USING gin (event_types);
CREATE INDEX IF NOT EXISTS pull_entries_replayed_event ON pull_entries (tenant_id, event_seq) WHERE event_seq IS NOT NULL;
