-- The event log's search by time reads the tenant's events of the window through
-- `(tenant_id, received_at)` and sorts them (see the PostgreSQL migration of the same name).
CREATE INDEX IF NOT EXISTS events_by_time ON events (tenant_id, received_at);
