-- Partitioned jobs, step 3 (see 0038): the tables become the partitions of every id before the
-- cutover under new partitioned `delivery_jobs` and `delivery_attempts`, beside a default
-- partition each and one partition per day from the cutover on. The parents' indexes are those
-- the tables have, so the attach adopts theirs instead of building any, and the CHECK constraints
-- proven in step 2 spare it the scan: this step is catalog changes only.
--
-- From here on retention drops a day's jobs and attempts together once every job of the day has
-- finished before the cutoff (postgres/job_partitions.rs). Rows of the old tables and of the
-- default partitions are still pruned row by row; the old tables are dropped once empty.

-- The indexes of one partition of jobs and one of attempts, named after their tables.
CREATE FUNCTION hub_job_indexes(jobs text, attempts text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (id)', jobs, jobs || '_pkey');
    EXECUTE format('CREATE INDEX %I ON %I (tenant_id, due_at) WHERE state = ''pending''', jobs || '_due', jobs);
    EXECUTE format('CREATE INDEX %I ON %I (lease_expires_at) WHERE state = ''leased''', jobs || '_leased', jobs);
    EXECUTE format('CREATE INDEX %I ON %I (subscription_id, id)', jobs || '_subscription', jobs);
    EXECUTE format('CREATE INDEX %I ON %I (tenant_id, event_seq)', jobs || '_event', jobs);
    EXECUTE format('CREATE INDEX %I ON %I (finished_at) WHERE state IN (''succeeded'', ''dead'', ''cancelled'')',
        jobs || '_finished', jobs);
    EXECUTE format('CREATE INDEX %I ON %I (subscription_id) WHERE state = ''held''', jobs || '_held_by_subscription', jobs);
    EXECUTE format('CREATE INDEX %I ON %I (subscription_id, due_at) WHERE state = ''pending''',
        jobs || '_pending_due_by_subscription', jobs);
    EXECUTE format('CREATE INDEX %I ON %I (subscription_id, ordering_key, event_seq)
                    WHERE ordering_key IS NOT NULL AND state IN (''pending'', ''leased'', ''held'')',
        jobs || '_unsettled_keys', jobs);
    EXECUTE format('CREATE INDEX %I ON %I (subscription_id) WHERE state = ''dead''', jobs || '_dead_by_subscription', jobs);
    EXECUTE format('CREATE INDEX %I ON %I (job_id, attempt)', attempts || '_job', attempts);
END
$$;

-- Creates the partitions of `day` (job ids of that UTC day) unless they exist, moving into them
-- the rows of that day the default partitions took meanwhile. Answers whether it created them.
CREATE FUNCTION hub_job_partition(day date) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    jobs text := 'delivery_jobs_' || to_char(day, 'YYYYMMDD');
    attempts text := 'delivery_attempts_' || to_char(day, 'YYYYMMDD');
    lo uuid := hub_day_uuid(day);
    hi uuid := hub_day_uuid(day + 1);
BEGIN
    IF to_regclass(jobs) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE delivery_jobs INCLUDING DEFAULTS)', jobs);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (id >= %L::uuid AND id < %L::uuid)',
        jobs, jobs || '_day', lo, hi);
    EXECUTE format('CREATE TABLE %I (LIKE delivery_attempts INCLUDING DEFAULTS)', attempts);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (job_id >= %L::uuid AND job_id < %L::uuid)',
        attempts, attempts || '_day', lo, hi);
    -- Writers into the default partitions wait for this transaction: no row of the day can land
    -- there between the move and the attach.
    LOCK TABLE delivery_jobs_default, delivery_attempts_default IN SHARE ROW EXCLUSIVE MODE;
    EXECUTE format('WITH moved AS (DELETE FROM delivery_jobs_default WHERE id >= %L::uuid AND id < %L::uuid RETURNING *)
                    INSERT INTO %I SELECT * FROM moved', lo, hi, jobs);
    EXECUTE format('WITH moved AS (DELETE FROM delivery_attempts_default WHERE job_id >= %L::uuid AND job_id < %L::uuid
                                   RETURNING *)
                    INSERT INTO %I SELECT * FROM moved', lo, hi, attempts);
    PERFORM hub_job_indexes(jobs, attempts);
    EXECUTE format('ALTER TABLE delivery_jobs ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', jobs, lo, hi);
    EXECUTE format('ALTER TABLE delivery_attempts ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', attempts, lo, hi);
    RETURN true;
END
$$;

ALTER TABLE delivery_jobs RENAME TO delivery_jobs_legacy;
ALTER TABLE delivery_attempts RENAME TO delivery_attempts_legacy;
CREATE TABLE delivery_jobs (LIKE delivery_jobs_legacy INCLUDING DEFAULTS) PARTITION BY RANGE (id);
CREATE TABLE delivery_attempts (LIKE delivery_attempts_legacy INCLUDING DEFAULTS) PARTITION BY RANGE (job_id);

-- The parents' indexes, as the old tables have them (0002, 0004, 0005, 0011, 0016, 0037).
ALTER TABLE delivery_jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);
CREATE INDEX jobs_due ON delivery_jobs (tenant_id, due_at) WHERE state = 'pending';
CREATE INDEX jobs_leased ON delivery_jobs (lease_expires_at) WHERE state = 'leased';
CREATE INDEX jobs_subscription ON delivery_jobs (subscription_id, id);
CREATE INDEX jobs_event ON delivery_jobs (tenant_id, event_seq);
CREATE INDEX jobs_finished ON delivery_jobs (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled');
CREATE INDEX jobs_held_by_subscription ON delivery_jobs (subscription_id) WHERE state = 'held';
CREATE INDEX jobs_pending_due_by_subscription ON delivery_jobs (subscription_id, due_at) WHERE state = 'pending';
CREATE INDEX jobs_unsettled_keys ON delivery_jobs (subscription_id, ordering_key, event_seq)
    WHERE ordering_key IS NOT NULL AND state IN ('pending', 'leased', 'held');
CREATE INDEX jobs_dead_by_subscription ON delivery_jobs (subscription_id) WHERE state = 'dead';
CREATE INDEX attempts_job ON delivery_attempts (job_id, attempt);

DO $$
DECLARE
    cut uuid := hub_day_uuid((SELECT day FROM jobs_cutover));
BEGIN
    EXECUTE format('ALTER TABLE delivery_jobs ATTACH PARTITION delivery_jobs_legacy FOR VALUES FROM (MINVALUE) TO (%L)', cut);
    EXECUTE format('ALTER TABLE delivery_attempts ATTACH PARTITION delivery_attempts_legacy
                    FOR VALUES FROM (MINVALUE) TO (%L)', cut);
END
$$;

CREATE TABLE delivery_jobs_default (LIKE delivery_jobs INCLUDING DEFAULTS);
CREATE TABLE delivery_attempts_default (LIKE delivery_attempts INCLUDING DEFAULTS);
SELECT hub_job_indexes('delivery_jobs_default', 'delivery_attempts_default');
ALTER TABLE delivery_jobs ATTACH PARTITION delivery_jobs_default DEFAULT;
ALTER TABLE delivery_attempts ATTACH PARTITION delivery_attempts_default DEFAULT;

SELECT hub_job_partition((SELECT day FROM jobs_cutover) + n) FROM generate_series(0, 2) AS n;

-- The rows that stepped aside in step 2 come back, each to its day.
INSERT INTO delivery_jobs SELECT * FROM delivery_jobs_ahead;
INSERT INTO delivery_attempts SELECT * FROM delivery_attempts_ahead;
DROP TABLE delivery_jobs_ahead, delivery_attempts_ahead;
DROP TABLE jobs_cutover;

-- Recording outcomes (0033) on partitioned jobs: a job is locked and updated by its id, each
-- probe in the one partition its id's day selects (a row address is not unique across
-- partitions).
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
    held uuid[];
    numbers bigint[];
BEGIN
    SELECT array_agg(l.id) INTO held
    FROM UNNEST(r_job, r_token) AS u(id, token)
    CROSS JOIN LATERAL (SELECT j.id, j.lease_token, j.state FROM delivery_jobs j
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
        WHERE u.id = ANY(held) AND j.id = u.id
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
