-- The ledger (SPEC §11, "Proof of delivery"): every delivery outcome and every change, appended
-- to its tenant's log (log '' is the platform's), numbered without gaps in commit order under
-- the log's head row, and folded into a Merkle tree (hub_core::ledger) whose heads the hub
-- signs. An entry's `data` is exactly what its leaf hashes (with its index); `digest_key` keys
-- the digest of what was sent and is not part of the log: erasure destroys it, the entry stays.
CREATE TABLE ledger_entries (
    log         TEXT        NOT NULL,
    idx         BIGINT      NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL,
    kind        TEXT        NOT NULL,
    data        TEXT        NOT NULL,
    leaf_hash   BYTEA       NOT NULL,
    event_id    UUID,
    digest_key  BYTEA,
    PRIMARY KEY (log, idx)
);
CREATE INDEX ledger_entries_event ON ledger_entries (log, event_id) WHERE event_id IS NOT NULL;
-- The audit view: a log's changes, newest first, without reading its deliveries.
CREATE INDEX ledger_entries_changes ON ledger_entries (log, idx) WHERE kind = 'change';

-- The next index of each log; its row is locked by whoever appends until they commit.
CREATE TABLE ledger_heads (
    log  TEXT   PRIMARY KEY,
    size BIGINT NOT NULL
);

-- What each log's tree holds (its last checkpoint's size) and its peaks (hub_store's encoding),
-- locked by the replica integrating it.
CREATE TABLE ledger_trees (
    log   TEXT   PRIMARY KEY,
    size  BIGINT NOT NULL,
    peaks BYTEA  NOT NULL
);

-- Complete inner nodes (level ≥ 1) of each tree; leaves are the entries' leaf hashes.
CREATE TABLE ledger_nodes (
    log   TEXT     NOT NULL,
    level SMALLINT NOT NULL,
    idx   BIGINT   NOT NULL,
    hash  BYTEA    NOT NULL,
    PRIMARY KEY (log, level, idx)
);

CREATE TABLE ledger_checkpoints (
    log       TEXT        NOT NULL,
    size      BIGINT      NOT NULL,
    root      TEXT        NOT NULL,
    time      TEXT        NOT NULL,
    kid       TEXT        NOT NULL,
    signature TEXT        NOT NULL,
    note      TEXT        NOT NULL,
    signed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (log, size)
);

-- The Ed25519 keys checkpoints are signed with, sealed like other secrets; never dropped.
CREATE TABLE ledger_keys (
    kid         UUID        PRIMARY KEY,
    sealed_key  BYTEA       NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    retired_at  TIMESTAMPTZ
);

-- Each attempt names its ledger entry.
ALTER TABLE delivery_attempts ADD COLUMN ledger_index BIGINT;

-- Recording outcomes (0026) now appends one ledger entry per attempt that carries one, in the
-- same statement. The log's head is taken last, so it is held only for the rest of the
-- statement and the commit.
DROP FUNCTION hub_record(uuid[], uuid[], text[], uuid[], int[], timestamptz[], bigint[], text[], int[], text[],
    text[], uuid[], text[], timestamptz[], text[], timestamptz[], timestamptz[], boolean);
CREATE FUNCTION hub_record(
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
    WITH given AS (
        SELECT x.ord, x.log, x.data, x.event, x.dkey, x.at,
            row_number() OVER (PARTITION BY x.log ORDER BY x.ord) AS nth
        FROM UNNEST(r_tenant, r_entry, r_event, r_digest_key, r_now) WITH ORDINALITY AS x(log, data, event, dkey, at, ord)
        WHERE x.data IS NOT NULL
    ), wanted AS (
        SELECT log, count(*) AS n FROM given GROUP BY log
    ), heads AS (
        INSERT INTO ledger_heads AS h (log, size)
        SELECT log, n FROM wanted ORDER BY log
        ON CONFLICT (log) DO UPDATE SET size = h.size + EXCLUDED.size
        RETURNING h.log, h.size
    ), numbered AS (
        SELECT g.*, h.size - w.n + g.nth - 1 AS idx
        FROM given g JOIN wanted w ON w.log = g.log JOIN heads h ON h.log = g.log
    ), written AS (
        INSERT INTO ledger_entries (log, idx, recorded_at, kind, data, leaf_hash, event_id, digest_key)
        SELECT log, idx, at, 'delivery', data,
            sha256('\x00'::bytea || int8send(idx) || convert_to(data, 'UTF8')), event, dkey
        FROM numbered
    )
    SELECT array_agg(n.idx ORDER BY s.ord) INTO numbers
    FROM generate_subscripts(r_tenant, 1) AS s(ord) LEFT JOIN numbered n ON n.ord = s.ord;
    INSERT INTO delivery_attempts (id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms,
        outcome, status_code, error, response_body, ledger_index)
    SELECT * FROM UNNEST(r_id, r_job, r_tenant, r_sub, r_attempt, r_started, r_latency, r_outcome, r_status,
        r_error, r_response, numbers);
END
$$;
