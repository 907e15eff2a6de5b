-- Ingest in one round trip (see hub-store/src/postgres/ingest.rs).
--
-- A tenant's subscription version: moved by every change of one of its subscriptions that
-- matching or an attempt reads (not by a pull cursor moving, nor by a failure that only moves
-- last_failure_at). A replica that matched a batch against the subscriptions it remembers sends
-- the version it matched with; the write compares it under the tenant's sequence lock, so a
-- batch is never matched against subscriptions that changed before it was written.
ALTER TABLE tenant_sequences ADD COLUMN subs_version BIGINT NOT NULL DEFAULT 0;

CREATE FUNCTION hub_subscriptions_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_sequences AS s (tenant_id, last_seq, subs_version)
    VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.tenant_id ELSE NEW.tenant_id END, 0, 1)
    ON CONFLICT (tenant_id) DO UPDATE SET subs_version = s.subs_version + 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER subscriptions_version_rows AFTER INSERT OR DELETE ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION hub_subscriptions_changed();

CREATE TRIGGER subscriptions_version_columns AFTER UPDATE ON subscriptions
    FOR EACH ROW
    WHEN ((OLD.name, OLD.event_types, OLD.origin, OLD.sink_type, OLD.sink_config, OLD.signing_secret,
           OLD.previous_secret, OLD.previous_secret_expires_at, OLD.credentials, OLD.enabled,
           OLD.verification_state, OLD.verification_error, OLD.disabled_reason, OLD.disabled_at,
           OLD.failing_since, OLD.verified_at, OLD.created_at)
          IS DISTINCT FROM
          (NEW.name, NEW.event_types, NEW.origin, NEW.sink_type, NEW.sink_config, NEW.signing_secret,
           NEW.previous_secret, NEW.previous_secret_expires_at, NEW.credentials, NEW.enabled,
           NEW.verification_state, NEW.verification_error, NEW.disabled_reason, NEW.disabled_at,
           NEW.failing_since, NEW.verified_at, NEW.created_at))
    EXECUTE FUNCTION hub_subscriptions_changed();

-- One ingest batch of accepted events (no quarantine records), matched by the caller:
--   t_tenant, t_version the batch's tenants in tenant order, each with the subscription version
--                       the caller matched its events against;
--   e_*                 one element per distinct (tenant, ce_id) of the batch, `e_ord` its number;
--   j_*                 the push jobs matching created, by the number of their event (`j_ord`);
--                       leased ones carry their lease (`j_token`, `j_until`);
--   p_*                 the pull entries likewise;
--   wake, wake_channel  whether to wake other replicas' dispatchers (at commit).
-- When a tenant's version moved, nothing is written and a row (NULL, its 1-based index in
-- `t_tenant`, false) is returned for each such tenant. Otherwise one row per event: its number,
-- its seq, and whether it was inserted (false: the tenant already had that id, at that seq).
-- Each statement inside takes a fresh snapshot after the sequence rows are locked, so the ids
-- checked and the seqs assigned are those every earlier writer of these tenants committed.
CREATE FUNCTION hub_ingest(
    t_tenant text[], t_version bigint[],
    e_ord int[], e_tenant text[], e_ce_id uuid[], e_source text[], e_ce_type text[], e_resource_type text[],
    e_event_type text[], e_event_time text[], e_schema_version text[], e_subject text[],
    e_data_content_type text[], e_data_schema text[], e_traceparent text[], e_tracestate text[],
    e_extensions text[], e_payload bytea[], e_origin text[], e_kafka_topic text[], e_kafka_partition int[],
    e_kafka_offset bigint[], e_received_at timestamptz[], e_hub_traceparent text[],
    j_ord int[], j_id uuid[], j_sub uuid[], j_state text[], j_received timestamptz[], j_token uuid[],
    j_until timestamptz[],
    p_ord int[], p_sub uuid[],
    wake boolean, wake_channel text)
RETURNS TABLE (ord int, seq bigint, inserted boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    stale int[];
BEGIN
    -- Each tenant's writers take turns on its sequence row until commit, in tenant order so two
    -- batches never deadlock.
    WITH locked AS (
        INSERT INTO tenant_sequences AS s (tenant_id, last_seq)
        SELECT t, 0 FROM UNNEST(t_tenant) WITH ORDINALITY AS u(t, n) ORDER BY n
        ON CONFLICT (tenant_id) DO UPDATE SET last_seq = s.last_seq
        RETURNING s.tenant_id, s.subs_version
    )
    SELECT array_agg(u.n::int) INTO stale
    FROM locked l JOIN UNNEST(t_tenant, t_version) WITH ORDINALITY AS u(t, v, n) ON u.t = l.tenant_id
    WHERE l.subs_version <> u.v;
    IF stale IS NOT NULL THEN
        RETURN QUERY SELECT NULL::int, n::bigint, false FROM UNNEST(stale) AS n;
        RETURN;
    END IF;
    IF wake THEN
        PERFORM pg_notify(wake_channel, '');
    END IF;
    RETURN QUERY
    WITH c AS (
        SELECT u.ord, u.tenant_id, u.ce_id FROM UNNEST(e_ord, e_tenant, e_ce_id) AS u(ord, tenant_id, ce_id)
    ), found AS (
        -- One unique-index probe per id, whatever the statistics say (see events_by_seqs).
        SELECT c.ord, f.seq FROM c
        CROSS JOIN LATERAL (SELECT ev.tenant_id, ev.ce_id, ev.seq FROM events ev
                            WHERE (ev.tenant_id, ev.ce_id) >= (c.tenant_id, c.ce_id)
                            ORDER BY ev.tenant_id, ev.ce_id LIMIT 1) f
        WHERE f.tenant_id = c.tenant_id AND f.ce_id = c.ce_id
    ), assigned AS MATERIALIZED (
        SELECT c.ord, c.tenant_id, f.seq IS NULL AS fresh,
            COALESCE(f.seq, s.last_seq + row_number() OVER (PARTITION BY c.tenant_id, f.seq IS NULL ORDER BY c.ord))
                AS seq
        FROM c LEFT JOIN found f ON f.ord = c.ord JOIN tenant_sequences s ON s.tenant_id = c.tenant_id
    ), new_events AS (
        INSERT INTO events (tenant_id, seq, ce_id, source, ce_type, resource_type, event_type, event_time,
            schema_version, subject, data_content_type, data_schema, traceparent, tracestate, extensions,
            payload, origin, kafka_topic, kafka_partition, kafka_offset, received_at, hub_traceparent)
        SELECT a.tenant_id, a.seq, e.ce_id, e.source, e.ce_type, e.resource_type, e.event_type, e.event_time,
            e.schema_version, e.subject, e.data_content_type, e.data_schema, e.traceparent, e.tracestate,
            e.extensions::jsonb, e.payload, e.origin, e.kafka_topic, e.kafka_partition, e.kafka_offset,
            e.received_at, e.hub_traceparent
        FROM UNNEST(e_ord, e_ce_id, e_source, e_ce_type, e_resource_type, e_event_type, e_event_time,
            e_schema_version, e_subject, e_data_content_type, e_data_schema, e_traceparent, e_tracestate,
            e_extensions, e_payload, e_origin, e_kafka_topic, e_kafka_partition, e_kafka_offset, e_received_at,
            e_hub_traceparent)
        AS e(ord, ce_id, source, ce_type, resource_type, event_type, event_time, schema_version, subject,
            data_content_type, data_schema, traceparent, tracestate, extensions, payload, origin, kafka_topic,
            kafka_partition, kafka_offset, received_at, hub_traceparent)
        JOIN assigned a ON a.ord = e.ord AND a.fresh
    ), new_jobs AS (
        INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, due_at, event_received_at,
            window_start, created_at, updated_at, lease_token, lease_expires_at)
        SELECT j.id, a.tenant_id, j.sub, a.seq, j.state, j.received, j.received, j.received, now(), now(),
            j.token, j.until
        FROM UNNEST(j_ord, j_id, j_sub, j_state, j_received, j_token, j_until)
            AS j(ord, id, sub, state, received, token, until)
        JOIN assigned a ON a.ord = j.ord AND a.fresh
    ), new_pulls AS (
        INSERT INTO pull_entries (subscription_id, seq, tenant_id)
        SELECT p.sub, a.seq, a.tenant_id FROM UNNEST(p_ord, p_sub) AS p(ord, sub)
        JOIN assigned a ON a.ord = p.ord AND a.fresh
    ), sequences AS (
        UPDATE tenant_sequences s SET last_seq = m.last_seq
        FROM (SELECT a.tenant_id, max(a.seq) AS last_seq FROM assigned a WHERE a.fresh GROUP BY a.tenant_id) m
        WHERE s.tenant_id = m.tenant_id
    )
    SELECT a.ord, a.seq, a.fresh FROM assigned a;
END
$$;
