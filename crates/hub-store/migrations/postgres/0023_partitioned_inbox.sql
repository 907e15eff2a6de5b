-- The partitioned inbox, step 3 (see 0021): the table becomes the partition of every id before
-- the cutover under a new partitioned `events`, beside a default partition and one partition per
-- day from the cutover on. Its indexes stay as they are (each partition has its own; the parent
-- has none), and the CHECK constraint proven in step 2 spares the attach its scan, so this step
-- is catalog changes only.
--
-- From here on retention drops a whole day partition once every event in it is past retention
-- and no job refers to one (postgres/operations.rs). Rows of the old table and of the default
-- partition are still pruned row by row; the old table is dropped once it is empty.

-- Creates the partition of `day` (ids of that UTC day) unless it exists, moving into it the rows of
-- that day the default partition took meanwhile. Answers whether it created one.
CREATE FUNCTION hub_event_partition(day date) RETURNS boolean
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
    EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
    RETURN true;
END
$$;

ALTER TABLE events RENAME TO events_legacy;
CREATE TABLE events (LIKE events_legacy INCLUDING DEFAULTS) PARTITION BY RANGE (ce_id);
DO $$
BEGIN
    EXECUTE format('ALTER TABLE events ATTACH PARTITION events_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
        hub_day_uuid((SELECT day FROM inbox_cutover)));
END
$$;

CREATE TABLE events_default PARTITION OF events DEFAULT;
CREATE UNIQUE INDEX events_default_id ON events_default (tenant_id, ce_id);
CREATE UNIQUE INDEX events_default_seq ON events_default (tenant_id, seq);
CREATE INDEX events_default_received_at ON events_default (received_at);
CREATE INDEX events_default_by_key ON events_default (tenant_id, resource_type, event_type, seq);

SELECT hub_event_partition((SELECT day FROM inbox_cutover) + n) FROM generate_series(0, 2) AS n;

-- The ids that stepped aside in step 2 come back, each to its day.
INSERT INTO events SELECT * FROM events_ahead;
DROP TABLE events_ahead;
DROP TABLE inbox_cutover;

-- The ingest function of 0016, probing each id with equalities, which select its partition.
CREATE OR REPLACE FUNCTION hub_ingest(
    t_tenant text[], t_version bigint[],
    e_ord int[], e_tenant text[], e_ce_id uuid[], e_source text[], e_ce_type text[], e_resource_type text[],
    e_event_type text[], e_event_time text[], e_schema_version text[], e_subject text[],
    e_data_content_type text[], e_data_schema text[], e_traceparent text[], e_tracestate text[],
    e_extensions text[], e_payload bytea[], e_origin text[], e_kafka_topic text[], e_kafka_partition int[],
    e_kafka_offset bigint[], e_received_at timestamptz[], e_hub_traceparent text[],
    j_ord int[], j_id uuid[], j_sub uuid[], j_state text[], j_received timestamptz[], j_token uuid[],
    j_until timestamptz[], j_key text[],
    p_ord int[], p_sub uuid[],
    wake boolean, wake_channel text)
RETURNS TABLE (ord int, seq bigint, inserted boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    stale int[];
    -- Each tenant's last seq once its row is locked, in `t_tenant` order.
    t_last bigint[];
    -- Each candidate's seq and whether it is new, in `e_*` order.
    a_seq bigint[];
    a_fresh boolean[];
BEGIN
    -- Each tenant's writers take turns on its sequence row until commit, in tenant order so two
    -- batches never deadlock. The row as locked is the one every earlier writer committed.
    WITH locked AS (
        INSERT INTO tenant_sequences AS s (tenant_id, last_seq)
        SELECT t, 0 FROM UNNEST(t_tenant) WITH ORDINALITY AS u(t, n) ORDER BY n
        ON CONFLICT (tenant_id) DO UPDATE SET last_seq = s.last_seq
        RETURNING s.tenant_id, s.subs_version, s.last_seq
    )
    SELECT array_agg(u.n::int) FILTER (WHERE l.subs_version <> u.v), array_agg(l.last_seq ORDER BY u.n)
    INTO stale, t_last
    FROM locked l JOIN UNNEST(t_tenant, t_version) WITH ORDINALITY AS u(t, v, n) ON u.t = l.tenant_id;
    IF stale IS NOT NULL THEN
        RETURN QUERY SELECT NULL::int, n::bigint, false FROM UNNEST(stale) AS n;
        RETURN;
    END IF;
    IF wake THEN
        PERFORM pg_notify(wake_channel, '');
    END IF;
    -- A candidate already stored keeps its seq; the new ones of a tenant follow its last seq in
    -- batch order. This statement's snapshot is taken after the locks, so it sees every id an
    -- earlier writer of these tenants committed.
    SELECT array_agg(a.seq ORDER BY a.i), array_agg(a.fresh ORDER BY a.i) INTO a_seq, a_fresh
    FROM (
        SELECT c.i, f.seq IS NULL AS fresh,
            COALESCE(f.seq, t_last[array_position(t_tenant, c.tenant_id)]
                + row_number() OVER (PARTITION BY c.tenant_id, f.seq IS NULL ORDER BY c.i)) AS seq
        FROM UNNEST(e_tenant, e_ce_id) WITH ORDINALITY AS c(tenant_id, ce_id, i)
        -- One unique-index probe per id, in the one partition its id's day selects (pruned as
        -- each id is probed; the LIMIT keeps the subquery a probe per id, never a join).
        LEFT JOIN LATERAL (
            SELECT ev.seq FROM events ev WHERE ev.tenant_id = c.tenant_id AND ev.ce_id = c.ce_id LIMIT 1
        ) f ON true
    ) a;
    WITH new_events AS (
        INSERT INTO events (tenant_id, seq, ce_id, source, ce_type, resource_type, event_type, event_time,
            schema_version, subject, data_content_type, data_schema, traceparent, tracestate, extensions,
            payload, origin, kafka_topic, kafka_partition, kafka_offset, received_at, hub_traceparent)
        SELECT e.tenant_id, a_seq[e.i], e.ce_id, e.source, e.ce_type, e.resource_type, e.event_type, e.event_time,
            e.schema_version, e.subject, e.data_content_type, e.data_schema, e.traceparent, e.tracestate,
            e.extensions::jsonb, e.payload, e.origin, e.kafka_topic, e.kafka_partition, e.kafka_offset,
            e.received_at, e.hub_traceparent
        FROM UNNEST(e_tenant, e_ce_id, e_source, e_ce_type, e_resource_type, e_event_type, e_event_time,
            e_schema_version, e_subject, e_data_content_type, e_data_schema, e_traceparent, e_tracestate,
            e_extensions, e_payload, e_origin, e_kafka_topic, e_kafka_partition, e_kafka_offset, e_received_at,
            e_hub_traceparent) WITH ORDINALITY
        AS e(tenant_id, ce_id, source, ce_type, resource_type, event_type, event_time, schema_version, subject,
            data_content_type, data_schema, traceparent, tracestate, extensions, payload, origin, kafka_topic,
            kafka_partition, kafka_offset, received_at, hub_traceparent, i)
        WHERE a_fresh[e.i]
    ), new_jobs AS (
        INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, due_at, event_received_at,
            window_start, created_at, updated_at, lease_token, lease_expires_at, ordering_key)
        SELECT j.id, e_tenant[j.ord + 1], j.sub, a_seq[j.ord + 1], j.state, j.received, j.received, j.received,
            now(), now(), j.token, j.until, j.key
        FROM UNNEST(j_ord, j_id, j_sub, j_state, j_received, j_token, j_until, j_key)
            AS j(ord, id, sub, state, received, token, until, key)
        WHERE a_fresh[j.ord + 1]
    ), new_pulls AS (
        INSERT INTO pull_entries (subscription_id, seq, tenant_id)
        SELECT p.sub, a_seq[p.ord + 1], e_tenant[p.ord + 1] FROM UNNEST(p_ord, p_sub) AS p(ord, sub)
        WHERE a_fresh[p.ord + 1]
    ), last AS (
        SELECT e_tenant[i] AS tenant_id, max(a_seq[i]) AS last_seq
        FROM generate_subscripts(e_tenant, 1) AS i WHERE a_fresh[i] GROUP BY 1
    )
    UPDATE tenant_sequences s SET last_seq = m.last_seq
    FROM last m
    WHERE s.tenant_id = ANY(t_tenant) AND s.tenant_id = m.tenant_id;
    RETURN QUERY SELECT e_ord[i], a_seq[i], a_fresh[i] FROM generate_subscripts(a_seq, 1) AS i;
END
$$;
