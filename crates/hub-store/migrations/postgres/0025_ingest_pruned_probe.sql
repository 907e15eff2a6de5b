-- The ingest function's probe for stored ids (0024) made to open only the partitions the batch's
-- ids fall in. Its ids come row by row from the batch, so the planner could prune partitions only
-- as each id was probed: every execution started an index scan on every partition's unique
-- index (with a month of day partitions, 35 index scans opened for one event, 11 % of the
-- function's time). Bounded by the batch's least and greatest id, function variables that the
-- executor knows when it starts, the probe is pruned before it runs: one partition, two at a
-- day's turn. Nothing else changes.

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
    -- The batch's least and greatest id: the partitions its probes may read.
    lo uuid;
    hi uuid;
BEGIN
    -- Each tenant's writers take turns on its sequence row until commit, in tenant order so two
    -- batches never deadlock. The row as locked is the one every earlier writer committed.
    WITH locked AS (
        INSERT INTO tenant_sequences AS s (tenant_id, last_seq)
        SELECT t, 0 FROM UNNEST(t_tenant) WITH ORDINALITY AS u(t, n) ORDER BY n
        ON CONFLICT (tenant_id) DO UPDATE SET last_seq = s.last_seq
        RETURNING s.tenant_id, s.subs_version, s.last_seq
    )
    SELECT array_agg(u.n::int) FILTER (WHERE l.subs_version <> u.v), array_agg(l.last_seq ORDER BY u.n),
        (SELECT x FROM UNNEST(e_ce_id) AS x ORDER BY x LIMIT 1),
        (SELECT x FROM UNNEST(e_ce_id) AS x ORDER BY x DESC LIMIT 1)
    INTO stale, t_last, lo, hi
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
        -- One probe of the unique index of the one partition the id selects, whatever the
        -- statistics say: the equalities select the partition and bound the scan to the id; the
        -- row comparison, which only that index serves, keeps the planner from another index led
        -- by tenant_id (with the equalities alone, a plan made while a partition was empty read
        -- the tenant's every event of the day for each id). The batch's bounds, known when the
        -- statement starts, leave out every partition no id of the batch falls in before any is
        -- opened.
        LEFT JOIN LATERAL (
            SELECT ev.seq FROM events ev
            WHERE ev.tenant_id = c.tenant_id AND ev.ce_id = c.ce_id
              AND (ev.tenant_id, ev.ce_id) >= (c.tenant_id, c.ce_id)
              AND ev.ce_id BETWEEN lo AND hi
            ORDER BY ev.tenant_id, ev.ce_id LIMIT 1
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
