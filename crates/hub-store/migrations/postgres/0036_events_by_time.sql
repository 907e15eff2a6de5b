-- The event log's search by time (GET /v1/events?since=…&until=…) reads the tenant's events of the
-- window through `(tenant_id, received_at)` and sorts them: its cost is the window's events of that
-- tenant, never the rest of the inbox (the walk of the primary key it could take before read every
-- event up to the window; the index on `received_at` alone reads every tenant's).
--
-- On a large existing inbox, building the index blocks ingest into each partition for as long as
-- it takes there; an operator may build them beforehand without blocking, under the same names,
-- and this migration then finds them (docs/OPERATIONS.md, "Upgrading"), for each partition P of
-- `events` (`SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'events'::regclass`):
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS P_by_time ON P (tenant_id, received_at);
DO $$
DECLARE
    part text;
BEGIN
    FOR part IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = to_regclass('events') LOOP
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I (tenant_id, received_at)', part || '_by_time', part);
    END LOOP;
END
$$;

-- Each new day's partition gets it too: the function of 0023, one index more. Creates the partition
-- of `day` (ids of that UTC day) unless it exists, moving into it the rows of that day the default
-- partition took meanwhile. Answers whether it created one.
CREATE OR REPLACE FUNCTION hub_event_partition(day date) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    name text := 'events_' || to_char(day, 'YYYYMMDD');
    lo uuid := hub_day_uuid(day);
    hi uuid := hub_day_uuid(day + 1);
BEGIN
    IF to_regclass(name) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE events INCLUDING DEFAULTS)', name);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (ce_id >= %L::uuid AND ce_id < %L::uuid)',
        name, name || '_day', lo, hi);
    -- Writers into the default partition wait for this transaction: no row of the day can land
    -- there between the move and the attach.
    LOCK TABLE events_default IN SHARE ROW EXCLUSIVE MODE;
    EXECUTE format('WITH moved AS (DELETE FROM events_default WHERE ce_id >= %L::uuid AND ce_id < %L::uuid RETURNING *)
                    INSERT INTO %I SELECT * FROM moved', lo, hi, name);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (tenant_id, ce_id)', name || '_id', name);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (tenant_id, seq)', name || '_seq', name);
    EXECUTE format('CREATE INDEX %I ON %I (received_at)', name || '_received_at', name);
    EXECUTE format('CREATE INDEX %I ON %I (tenant_id, resource_type, event_type, seq)', name || '_by_key', name);
    EXECUTE format('CREATE INDEX %I ON %I (tenant_id, received_at)', name || '_by_time', name);
    EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
    RETURN true;
END
$$;

