-- Ledger retention (STREAMING_HUB_LEDGER_RETENTION, docs/LEDGER.md "Retention"): a log's oldest
-- entries are dropped a month at a time, with the tree nodes and checkpoints over them, by
-- dropping partitions instead of deleting rows.
--
-- Entries, nodes and checkpoints are partitioned by the month of `recorded_at`. An entry's
-- `recorded_at` is the latest time its log was given so far (kept in `ledger_heads.last_at`,
-- under the head's lock), so within a log it never goes backwards as indexes grow: a month's
-- partition holds, of each log, one run of indexes, all below those of later months. A node's
-- `recorded_at` is its last leaf's, a checkpoint's is its last entry's: the partitions of a month
-- hold exactly the nodes and checkpoints over entries of that month or before.
--
-- When a month is dropped, each log it held begins at the index after its last entry there;
-- `ledger_trees.start_size` and `start_peaks` keep that tree's peaks (every proof about a later
-- entry that reaches below the start uses only those), and exports begin with them.

ALTER TABLE ledger_heads ADD COLUMN last_at TIMESTAMPTZ;
ALTER TABLE ledger_trees
    ADD COLUMN last_at     TIMESTAMPTZ,
    ADD COLUMN start_size  BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN start_peaks BYTEA  NOT NULL DEFAULT '';

ALTER TABLE ledger_entries RENAME TO ledger_entries_v1;
ALTER TABLE ledger_nodes RENAME TO ledger_nodes_v1;
ALTER TABLE ledger_checkpoints RENAME TO ledger_checkpoints_v1;

CREATE TABLE ledger_entries (
    log         TEXT        NOT NULL,
    idx         BIGINT      NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL,
    kind        TEXT        NOT NULL,
    data        TEXT        NOT NULL,
    leaf_hash   BYTEA       NOT NULL,
    event_id    UUID,
    digest_key  BYTEA
) PARTITION BY RANGE (recorded_at);
CREATE TABLE ledger_nodes (
    log         TEXT        NOT NULL,
    level       SMALLINT    NOT NULL,
    idx         BIGINT      NOT NULL,
    hash        BYTEA       NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL
) PARTITION BY RANGE (recorded_at);
CREATE TABLE ledger_checkpoints (
    log         TEXT        NOT NULL,
    size        BIGINT      NOT NULL,
    root        TEXT        NOT NULL,
    time        TEXT        NOT NULL,
    kid         TEXT        NOT NULL,
    signature   TEXT        NOT NULL,
    note        TEXT        NOT NULL,
    signed_at   TIMESTAMPTZ NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL
) PARTITION BY RANGE (recorded_at);
-- Rows of a month without its partition (a clock far ahead, a month the retention pass has not
-- made yet) wait here; retention deletes them row by row.
CREATE TABLE ledger_entries_default PARTITION OF ledger_entries DEFAULT;
CREATE TABLE ledger_nodes_default PARTITION OF ledger_nodes DEFAULT;
CREATE TABLE ledger_checkpoints_default PARTITION OF ledger_checkpoints DEFAULT;

-- Makes the month's partition of each ledger table that is missing, moving in the rows its
-- default partition holds for that month. Answers whether it made any.
CREATE FUNCTION hub_ledger_partition(month date) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    lo timestamptz := date_trunc('month', month::timestamp) AT TIME ZONE 'UTC';
    hi timestamptz := (date_trunc('month', month::timestamp) + interval '1 month') AT TIME ZONE 'UTC';
    t text;
    part text;
    made boolean := false;
BEGIN
    FOREACH t IN ARRAY ARRAY['ledger_entries', 'ledger_nodes', 'ledger_checkpoints'] LOOP
        part := t || '_' || to_char(month, 'YYYYMM');
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        -- Writers into the default partition wait for this transaction: no row of the month can
        -- land there between the move and the attach.
        EXECUTE format('LOCK TABLE %I IN SHARE ROW EXCLUSIVE MODE', t || '_default');
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)', part, t);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (recorded_at >= %L AND recorded_at < %L)',
            part, part || '_month', lo, hi);
        EXECUTE format('WITH moved AS (DELETE FROM %I WHERE recorded_at >= %L AND recorded_at < %L RETURNING *)
                        INSERT INTO %I SELECT * FROM moved', t || '_default', lo, hi, part);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', t, part, lo, hi);
        made := true;
    END LOOP;
    RETURN made;
END
$$;

-- The months the log already covers, and this one and the next.
SELECT hub_ledger_partition(m::date)
FROM generate_series(
    date_trunc('month', LEAST(now(), (SELECT min(recorded_at) FROM ledger_entries_v1)) AT TIME ZONE 'UTC'),
    date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month',
    interval '1 month') AS m;

-- Existing entries keep their order; their times are made non-decreasing within each log.
INSERT INTO ledger_entries (log, idx, recorded_at, kind, data, leaf_hash, event_id, digest_key)
SELECT log, idx, max(recorded_at) OVER (PARTITION BY log ORDER BY idx ROWS UNBOUNDED PRECEDING),
    kind, data, leaf_hash, event_id, digest_key
FROM ledger_entries_v1;
INSERT INTO ledger_nodes (log, level, idx, hash, recorded_at)
SELECT n.log, n.level, n.idx, n.hash, COALESCE(e.recorded_at, now())
FROM ledger_nodes_v1 n
LEFT JOIN ledger_entries e ON e.log = n.log AND e.idx = ((n.idx + 1) << n.level) - 1;
INSERT INTO ledger_checkpoints (log, size, root, time, kid, signature, note, signed_at, recorded_at)
SELECT c.log, c.size, c.root, c.time, c.kid, c.signature, c.note, c.signed_at, COALESCE(e.recorded_at, c.signed_at)
FROM ledger_checkpoints_v1 c
LEFT JOIN ledger_entries e ON e.log = c.log AND e.idx = c.size - 1;
UPDATE ledger_heads h SET last_at = (SELECT max(recorded_at) FROM ledger_entries e WHERE e.log = h.log);
UPDATE ledger_trees t SET last_at = (SELECT e.recorded_at FROM ledger_entries e WHERE e.log = t.log AND e.idx = t.size - 1);
DROP TABLE ledger_entries_v1;
DROP TABLE ledger_nodes_v1;
DROP TABLE ledger_checkpoints_v1;

-- Indexes on the partitioned tables: each partition gets its own, and so does every partition
-- made later. An index cannot be unique without the partition key; indexes are unique by the
-- heads' numbering, and the tree's own hashes show a row added, removed or moved.
CREATE INDEX ledger_entries_at ON ledger_entries (log, idx);
CREATE INDEX ledger_entries_event ON ledger_entries (log, event_id) WHERE event_id IS NOT NULL;
CREATE INDEX ledger_entries_changes ON ledger_entries (log, idx) WHERE kind = 'change';
CREATE INDEX ledger_nodes_at ON ledger_nodes (log, level, idx);
CREATE INDEX ledger_checkpoints_at ON ledger_checkpoints (log, size);

-- Appends entries given as columns (rows whose `a_data` is null are left out), numbered under
-- each log's head, whose row is taken last and held to the commit. Each entry's `recorded_at`
-- is the latest time its log was given so far. Answers (position in the input, index).
CREATE FUNCTION hub_ledger_append(a_log text[], a_kind text[], a_data text[], a_event uuid[], a_dkey bytea[],
    a_at timestamptz[])
RETURNS TABLE (ord bigint, idx bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH given AS (
        SELECT x.ord, x.log, x.kind, x.data, x.event, x.dkey, x.at,
            row_number() OVER (PARTITION BY x.log ORDER BY x.ord) AS nth
        FROM UNNEST(a_log, a_kind, a_data, a_event, a_dkey, a_at) WITH ORDINALITY AS x(log, kind, data, event, dkey, at, ord)
        WHERE x.data IS NOT NULL
    ), wanted AS (
        SELECT log, count(*) AS n, max(at) AS at FROM given GROUP BY log
    ), heads AS (
        INSERT INTO ledger_heads AS h (log, size, last_at)
        SELECT log, n, at FROM wanted ORDER BY log
        ON CONFLICT (log) DO UPDATE SET size = h.size + EXCLUDED.size, last_at = GREATEST(h.last_at, EXCLUDED.last_at)
        RETURNING h.log, h.size, h.last_at
    ), numbered AS (
        SELECT g.ord, g.log, g.kind, g.data, g.event, g.dkey, h.last_at AS at, h.size - w.n + g.nth - 1 AS idx
        FROM given g JOIN wanted w ON w.log = g.log JOIN heads h ON h.log = g.log
    ), written AS (
        INSERT INTO ledger_entries (log, idx, recorded_at, kind, data, leaf_hash, event_id, digest_key)
        SELECT log, idx, at, kind, data, sha256('\x00'::bytea || int8send(idx) || convert_to(data, 'UTF8')), event, dkey
        FROM numbered
    )
    SELECT n.ord, n.idx FROM numbered n;
END
$$;

-- Recording outcomes (0032), appending through hub_ledger_append.
CREATE OR REPLACE FUNCTION hub_record(
    r_id uuid[], r_job uuid[], r_tenant text[], r_sub uuid[], r_attempt int[], r_started timestamptz[],
    r_latency bigint[], r_outcome text[], r_status int[], r_error text[], r_response text[],
    r_token uuid[], r_state text[], r_due timestamptz[], r_job_error text[], r_finished timestamptz[],
    r_now timestamptz[], r_clear boolean, r_entry text[], r_event uuid[], r_digest_key bytea[])
RETURNS TABLE (moved uuid)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    held tid[];
    numbers bigint[];
BEGIN
    SELECT array_agg(l.row) INTO held
    FROM UNNEST(r_job, r_token) AS u(id, token)
    CROSS JOIN LATERAL (SELECT j.ctid AS row, j.lease_token, j.state FROM delivery_jobs j
                        WHERE j.id = u.id
                        LIMIT 1 FOR UPDATE) l
    WHERE l.lease_token = u.token AND l.state = 'leased';
    IF r_clear THEN
        UPDATE subscriptions SET failing_since = NULL, last_failure_at = NULL
        WHERE id = ANY(r_sub) AND failing_since IS NOT NULL;
    END IF;
    IF held IS NOT NULL THEN
        RETURN QUERY
        UPDATE delivery_jobs j SET state = u.state, attempts = j.attempts + 1, due_at = COALESCE(u.due_at, j.due_at),
            last_error = u.error, finished_at = u.finished_at, lease_expires_at = NULL, lease_token = NULL,
            updated_at = u.now
        FROM UNNEST(r_job, r_state, r_due, r_job_error, r_finished, r_now) AS u(id, state, due_at, error, finished_at, now)
        WHERE j.ctid = ANY(held) AND j.id = u.id
        RETURNING j.id;
    END IF;
    WITH appended AS MATERIALIZED (
        SELECT a.ord, a.idx FROM hub_ledger_append(r_tenant, array_fill('delivery'::text, ARRAY[cardinality(r_tenant)]),
            r_entry, r_event, r_digest_key, r_now) a
    )
    SELECT array_agg(a.idx ORDER BY s.ord) INTO numbers
    FROM generate_subscripts(r_tenant, 1) AS s(ord) LEFT JOIN appended a ON a.ord = s.ord;
    INSERT INTO delivery_attempts (id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms,
        outcome, status_code, error, response_body, ledger_index)
    SELECT * FROM UNNEST(r_id, r_job, r_tenant, r_sub, r_attempt, r_started, r_latency, r_outcome, r_status,
        r_error, r_response, numbers);
END
$$;
