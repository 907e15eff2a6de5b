-- A claim reads a tenant's oldest due jobs as one window (0041, 0042) and keeps those of the
-- subscriptions it may deliver; when fewer than its share are, it reads each deliverable
-- subscription's oldest instead. When some of the tenant's active subscriptions are not
-- deliverable here (saturated, or paced by another replica) the window mostly holds their
-- backlogs: in a run of 100 webhooks at 200 ms, 57 of 243 claims over 4 ms read a window of
-- eight times their share and kept none of it, a fifth of the claims' time. With at most 64
-- deliverable subscriptions, fewer than half the tenant's active ones (counted in the same read
-- of its subscriptions that finds the deliverable ones), the claim now goes to
-- the subscriptions directly; with more (a probe per subscription would cost more than the
-- window) or most of them deliverable, it reads the window as before.

CREATE OR REPLACE FUNCTION hub_claim(
    after text, at timestamptz, until timestamptz, token uuid, excluded uuid[], most bigint,
    buckets int[], shared uuid[], again text[], again_wants bigint[])
RETURNS TABLE (id uuid, tenant_id text, subscription_id uuid, event_seq bigint, attempts int, recoveries int,
    window_start timestamptz, event_received_at timestamptz, lease_token uuid, want bigint, visited text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_material = off
AS $$
#variable_conflict use_column
DECLARE
    bound uuid := hub_time_uuid(at + interval '1 hour');
BEGIN
    RETURN QUERY
    WITH RECURSIVE a(tenant_id) AS (
        SELECT (SELECT d.tenant_id FROM delivery_jobs d
                WHERE d.state = 'pending' AND d.due_at <= at AND d.id < bound AND d.tenant_id > after
                ORDER BY d.tenant_id LIMIT 1)
        WHERE again IS NULL
        UNION ALL
        SELECT (SELECT d.tenant_id FROM delivery_jobs d
                WHERE d.state = 'pending' AND d.due_at <= at AND d.id < bound AND d.tenant_id > a.tenant_id
                ORDER BY d.tenant_id LIMIT 1)
        FROM a WHERE a.tenant_id IS NOT NULL
    ), b(tenant_id) AS (
        SELECT (SELECT d.tenant_id FROM delivery_jobs d
                WHERE d.state = 'pending' AND d.due_at <= at AND d.id < bound AND after <> ''
                ORDER BY d.tenant_id LIMIT 1)
        WHERE again IS NULL
        UNION ALL
        SELECT (SELECT d.tenant_id FROM delivery_jobs d
                WHERE d.state = 'pending' AND d.due_at <= at AND d.id < bound AND d.tenant_id > b.tenant_id
                  AND d.tenant_id <= after
                ORDER BY d.tenant_id LIMIT 1)
        FROM b WHERE b.tenant_id IS NOT NULL
    ), picked AS (
        SELECT p.tenant_id, row_number() OVER (ORDER BY p.part, p.tenant_id) AS rn FROM (
            (SELECT a.tenant_id, 0 AS part FROM a WHERE a.tenant_id IS NOT NULL LIMIT most)
            UNION ALL
            (SELECT b.tenant_id, 1 FROM b WHERE b.tenant_id IS NOT NULL AND b.tenant_id <= after LIMIT most)
        ) p
    ), chosen AS (
        SELECT picked.tenant_id, picked.rn FROM picked ORDER BY picked.rn LIMIT most
    ), wants AS (
        -- hub_core::delivery::fair_shares, in SQL so the first claim is one statement
        SELECT c.tenant_id, most / n.c + CASE WHEN c.rn <= most % n.c THEN 1 ELSE 0 END AS want
        FROM chosen c, (SELECT count(*) AS c FROM chosen) n
        UNION ALL
        SELECT u.tenant_id, u.want FROM UNNEST(again, again_wants) AS u(tenant_id, want)
    ), leased AS (
        UPDATE delivery_jobs j SET state = 'leased', lease_expires_at = until, lease_token = token, updated_at = at
        FROM (SELECT c.id, t.want FROM wants t
              CROSS JOIN LATERAL (
                  -- The tenant's deliverable subscriptions, read once as an array (`ok.ids`):
                  -- every job is checked against it in memory; and, in the same read, how many
                  -- of its subscriptions are active (`ok.active`, for the choice of `w`).
                  SELECT COALESCE(array_agg(s.id) FILTER (
                             WHERE NOT (s.id = ANY(excluded))
                               -- hub_core::delivery::owners: only the destinations it paces
                               AND (buckets IS NULL OR COALESCE(s.pace_bucket, 0) = ANY(buckets)
                                    OR s.id = ANY(shared))), '{}') AS ids,
                         count(*) AS active
                  FROM subscriptions s
                  WHERE s.tenant_id = t.tenant_id AND s.enabled AND s.verification_state = 'active') ok
              CROSS JOIN LATERAL (
                  -- Candidates: a window of the tenant's oldest due jobs, those of them
                  -- deliverable (read once, `w`); or, when it holds fewer than the share (its
                  -- oldest jobs are an excluded subscription's backlog), per deliverable
                  -- subscription its oldest due jobs, so that backlog is never walked. Candidates
                  -- are read without a lock; of them the tenant's oldest are locked one by one and
                  -- leased, a job another claim holds passed over for the next, so a claim locks
                  -- only what it leases.
                  WITH w AS MATERIALIZED (
                      SELECT w.id, w.due_at FROM (
                          SELECT j.id, j.due_at, j.subscription_id, j.ordering_key, j.event_seq
                          FROM delivery_jobs j
                          WHERE j.tenant_id = t.tenant_id AND j.state = 'pending' AND j.due_at <= at AND j.id < bound
                          ORDER BY j.due_at
                          -- Not read when at most 64 subscriptions are deliverable here and they
                          -- are fewer than half the tenant's active ones (the others saturated,
                          -- or paced by another replica): the oldest jobs are then mostly the
                          -- others' backlogs, and each deliverable subscription's own oldest are
                          -- read instead.
                          LIMIT CASE WHEN cardinality(ok.ids) <= 64 AND 2 * cardinality(ok.ids) < ok.active THEN 0
                                     ELSE 8 * t.want END) w
                      WHERE w.subscription_id = ANY(ok.ids)
                        AND (w.ordering_key IS NULL OR NOT EXISTS (
                             SELECT 1 FROM delivery_jobs e
                             WHERE e.subscription_id = w.subscription_id AND e.ordering_key = w.ordering_key
                               AND e.event_seq < w.event_seq AND e.state IN ('pending', 'leased', 'held') AND e.id < bound))
                      ORDER BY w.due_at LIMIT 2 * t.want
                  )
                  SELECT k.id FROM (
                      SELECT cand.id, cand.due_at FROM (
                          (SELECT w.id, w.due_at FROM w)
                          UNION
                          (SELECT d.id, d.due_at FROM unnest(ok.ids) AS s(id)
                           CROSS JOIN LATERAL (
                               SELECT j.id, j.due_at FROM delivery_jobs j
                               WHERE j.subscription_id = s.id AND j.state = 'pending' AND j.due_at <= at AND j.id < bound
                                 AND (j.ordering_key IS NULL OR NOT EXISTS (
                                      SELECT 1 FROM delivery_jobs e
                                      WHERE e.subscription_id = j.subscription_id AND e.ordering_key = j.ordering_key
                                        AND e.event_seq < j.event_seq AND e.state IN ('pending', 'leased', 'held') AND e.id < bound))
                               ORDER BY j.due_at LIMIT t.want) d
                           WHERE (SELECT count(*) FROM w) < t.want
                           ORDER BY d.due_at LIMIT 2 * t.want)) cand
                      ORDER BY cand.due_at) cand
                  CROSS JOIN LATERAL (
                      SELECT k.id, k.state FROM delivery_jobs k WHERE k.id = cand.id
                      LIMIT 1 FOR UPDATE SKIP LOCKED) k
                  WHERE k.state = 'pending'
                  LIMIT t.want) c
              WHERE t.want > 0) x
        WHERE j.id = x.id
        RETURNING j.id, j.tenant_id, j.subscription_id, j.event_seq, j.attempts, j.recoveries, j.window_start,
            j.event_received_at, j.lease_token, x.want
    )
    SELECT l.*, v.visited
    FROM (SELECT (SELECT chosen.tenant_id FROM chosen ORDER BY chosen.rn DESC LIMIT 1) AS visited) v
    LEFT JOIN leased l ON true;
END
$$;
