-- The inbox becomes partitioned by day, in three steps (0021–0023) that never hold a lock that
-- stops writers for longer than a catalog change (docs/OPERATIONS.md, "The partitioned inbox").
--
-- Events are partitioned by the day of their id: a `ce-id` is a UUIDv7, whose first 48 bits are
-- its Unix time in milliseconds, so a day is a range of ids, and the per-partition unique index on
-- (tenant_id, ce_id) is unique across the whole inbox. The table of today's layout becomes the
-- partition of every id before the cutover day (two days after the migration, UTC); later days
-- get partitions of their own, and an id of a day without one lands in the default partition.
--
-- Step 1: from now on the table takes only ids before the cutover (NOT VALID: a catalog change,
-- no scan). An id from after the cutover, written while the steps run, is refused and retried by
-- its writer (a Kafka batch is written again, an HTTP producer gets 503).

-- The first id of a UTC day.
CREATE FUNCTION hub_day_uuid(day date) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT
AS $$
    SELECT (lpad(to_hex((extract(epoch FROM day::timestamp) * 1000)::bigint), 12, '0')
        || '00000000000000000000')::uuid
$$;

CREATE TABLE inbox_cutover (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    day DATE    NOT NULL
);
INSERT INTO inbox_cutover VALUES (1, (now() AT TIME ZONE 'UTC')::date + 2);

DO $$
BEGIN
    EXECUTE format('ALTER TABLE events ADD CONSTRAINT events_before_cutover CHECK (ce_id < %L::uuid) NOT VALID',
        hub_day_uuid((SELECT day FROM inbox_cutover)));
END
$$;

-- Where ids already stored from after the cutover wait during step 2.
CREATE TABLE events_ahead (LIKE events INCLUDING DEFAULTS);
