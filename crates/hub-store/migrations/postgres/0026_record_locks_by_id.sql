-- Recording outcomes locks each job by its primary key. The lock's scan no longer names the job's
-- state, which let a cached generic plan (made while the table was nearly empty) read the
-- partial index of leased jobs whole, once per job: a batch of 256 outcomes read a million
-- index entries on a backlog of 4 000 leased jobs. The lease is checked on the locked row
-- instead; a job whose lease was lost is locked until this transaction ends and not updated.
CREATE OR REPLACE FUNCTION hub_record(
    r_id uuid[], r_job uuid[], r_tenant text[], r_sub uuid[], r_attempt int[], r_started timestamptz[],
    r_latency bigint[], r_outcome text[], r_status int[], r_error text[], r_response text[],
    r_token uuid[], r_state text[], r_due timestamptz[], r_job_error text[], r_finished timestamptz[],
    r_now timestamptz[], r_clear boolean)
RETURNS TABLE (moved uuid)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    held tid[];
BEGIN
    SELECT array_agg(l.row) INTO held
    FROM UNNEST(r_job, r_token) AS u(id, token)
    CROSS JOIN LATERAL (SELECT j.ctid AS row, j.lease_token, j.state FROM delivery_jobs j
                        WHERE j.id = u.id
                        LIMIT 1 FOR UPDATE) l
    WHERE l.lease_token = u.token AND l.state = 'leased';
    INSERT INTO delivery_attempts (id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms,
        outcome, status_code, error, response_body)
    SELECT * FROM UNNEST(r_id, r_job, r_tenant, r_sub, r_attempt, r_started, r_latency, r_outcome, r_status,
        r_error, r_response);
    IF r_clear THEN
        UPDATE subscriptions SET failing_since = NULL, last_failure_at = NULL
        WHERE id = ANY(r_sub) AND failing_since IS NOT NULL;
    END IF;
    IF held IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    UPDATE delivery_jobs j SET state = u.state, attempts = j.attempts + 1, due_at = COALESCE(u.due_at, j.due_at),
        last_error = u.error, finished_at = u.finished_at, lease_expires_at = NULL, lease_token = NULL,
        updated_at = u.now
    FROM UNNEST(r_job, r_state, r_due, r_job_error, r_finished, r_now) AS u(id, state, due_at, error, finished_at, now)
    WHERE j.ctid = ANY(held) AND j.id = u.id
    RETURNING j.id;
END
$$;
