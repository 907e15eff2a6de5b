//! SQL that both backends run as it is written (parameters as `$N`, which SQLite binds by
//! number too). What differs between them (types, functions, locking) stays in each backend.

/// The columns of a portal session row, as both backends read it.
macro_rules! session_columns {
    () => {
        "id, tenant_id, scope, created_at, expires_at, exchanged_at, revoked_at"
    };
}

/// The columns of an erasure row, as both backends read it.
macro_rules! erasure_columns {
    () => {
        "id, tenant_id, match_kind, sealed_match, reason, requested_by, requested_at, state,
    scanned_to, scanned, events, jobs_cancelled, responses, dlq_records, quarantined, finished_at"
    };
}
pub(crate) const ERASURE_COLUMNS: &str = erasure_columns!();

/// The columns of a delivery job row, as both backends read it.
macro_rules! job_columns {
    () => {
        "id, tenant_id, subscription_id, event_seq, state, attempts, recoveries, due_at,
    event_received_at, window_start, last_error, created_at, updated_at, finished_at"
    };
}
pub(crate) const JOB_COLUMNS: &str = job_columns!();

/// The columns of a ledger checkpoint row, as both backends read it.
macro_rules! checkpoint_columns {
    () => {
        "size, root, time, kid, signature, note"
    };
}

/// The columns of a replay row, as both backends read it.
macro_rules! replay_columns {
    () => {
        "id, tenant_id, subscription_id, since, until, from_seq, to_seq, include_delivered,
    only_undelivered, filters, state, walked_to, matched, created, skipped, created_at, updated_at, finished_at, rate"
    };
}
pub(crate) const REPLAY_COLUMNS: &str = replay_columns!();

/// Binds a DLQ-plane record to [`WRITE_DLQ_RECORDS`], in the order of its parameters; the
/// backends differ only in how they write its headers and its times (`$time` turns a time into
/// what the backend stores).
macro_rules! bind_dlq_record {
    ($query:expr, $r:expr, headers: $headers:expr, time: $time:expr) => {
        $query
            .bind(&$r.topic)
            .bind($r.partition)
            .bind($r.offset)
            .bind(&$r.source)
            .bind(&$r.tenant_id)
            .bind(&$r.ce_id)
            .bind(&$r.ce_type)
            .bind(&$r.error_class)
            .bind(&$r.error_message)
            .bind($headers)
            .bind(&$r.body)
            .bind($r.body_bytes)
            .bind($r.payload_omitted)
            .bind($r.record_timestamp.map($time))
            .bind($time($r.received_at))
    };
}
pub(crate) use bind_dlq_record;

/// Binds a quarantined record to [`INSERT_QUARANTINE`], in the order of its parameters; as
/// [`bind_dlq_record`], the backends differ only in its headers and its time.
macro_rules! bind_quarantined {
    ($query:expr, $record:expr, headers: $headers:expr, time: $time:expr) => {{
        let (topic, partition, offset) = $record.origin.kafka_parts();
        $query
            .bind($record.column("ce-tenantid", hub_core::TenantId::MAX_LEN))
            .bind($record.column("ce-source", hub_core::Source::MAX_LEN))
            .bind($record.column("ce-id", 64))
            .bind($record.reason.code.as_str())
            .bind(&$record.reason.field)
            .bind($record.reason.to_string())
            .bind($headers)
            .bind(&$record.body)
            .bind($record.body_bytes as i64)
            .bind($record.origin.kind())
            .bind(topic)
            .bind(partition)
            .bind(offset)
            .bind($time($record.received_at))
    }};
}
pub(crate) use bind_quarantined;

// The statements, in the order of the backend files that run them.

pub(crate) const CLAIM_MANIFEST_REFRESH: &str = "UPDATE manifest_refresh SET due_at = $2, sources = $3
    WHERE id = 1 AND (due_at <= $1 OR sources <> $3)";

pub(crate) const MANIFESTS: &str = "SELECT location, document, schemas, fetched_at, checked_at, error, problems
    FROM manifests ORDER BY location";

pub(crate) const SAVE_MANIFEST: &str =
    "INSERT INTO manifests (location, document, schemas, fetched_at, checked_at, error, problems)
    VALUES ($1, $2, $3, $4, $4, NULL, $5)
    ON CONFLICT (location) DO UPDATE SET document = excluded.document,
    schemas = excluded.schemas, fetched_at = excluded.fetched_at,
    checked_at = excluded.checked_at, error = NULL, problems = excluded.problems";

pub(crate) const MANIFEST_FAILED: &str = "INSERT INTO manifests (location, checked_at, error) VALUES ($1, $2, $3)
    ON CONFLICT (location) DO UPDATE SET checked_at = excluded.checked_at, error = excluded.error";

pub(crate) const CREATE_ERASURE: &str =
    "INSERT INTO erasures (id, tenant_id, match_kind, sealed_match, reason, requested_by, requested_at, state)
    VALUES ($1, $2, $3, $4, $5, $6, $7, 'running')";

pub(crate) const FINISH_ERASURE: &str =
    "UPDATE erasures SET state = 'done', sealed_match = NULL, finished_at = $2, lease_until = NULL
    WHERE id = $1 AND state = 'running'";

pub(crate) const TENANT_LAST_SEQ: &str = "SELECT last_seq FROM tenant_sequences WHERE tenant_id = $1";

pub(crate) const SET_PULL_CURSOR: &str = "UPDATE subscriptions SET pull_cursor = $3 WHERE tenant_id = $1 AND id = $2";

pub(crate) const STREAM_ENTRIES_FOR_EVENT: &str = "SELECT p.subscription_id, p.seq, p.seq <= s.pull_cursor
    FROM pull_entries p JOIN subscriptions s ON s.id = p.subscription_id
    WHERE p.tenant_id = $1 AND p.seq = $2 AND p.event_seq IS NULL AND s.tenant_id = $1
    UNION ALL
    SELECT p.subscription_id, p.seq, p.seq <= s.pull_cursor
    FROM pull_entries p JOIN subscriptions s ON s.id = p.subscription_id
    WHERE p.tenant_id = $1 AND p.event_seq = $2 AND s.tenant_id = $1
    ORDER BY 2";

pub(crate) const DROP_ISSUER_KEYS: &str = "DELETE FROM issuer_keys WHERE retired_at < $1";

pub(crate) const COUNT_BLOCKED_KEYS: &str = "SELECT count(*) FROM (SELECT 1 FROM delivery_jobs
    WHERE ordering_key IS NOT NULL AND state IN ('pending', 'leased', 'held')
    GROUP BY subscription_id, ordering_key HAVING count(*) > 1) b";

/// The jobs in each open state, each counted from that state's own index (what they count is work
/// waiting, never the history).
pub(crate) const OPEN_JOB_COUNTS: &str = "SELECT 'pending', count(*) FROM delivery_jobs WHERE state = 'pending'
    UNION ALL SELECT 'held', count(*) FROM delivery_jobs WHERE state = 'held'
    UNION ALL SELECT 'leased', count(*) FROM delivery_jobs WHERE state = 'leased'
    UNION ALL SELECT 'dead', count(*) FROM delivery_jobs WHERE state = 'dead'";

pub(crate) const OLDEST_DUE_PENDING: &str =
    "SELECT min(due_at) FROM delivery_jobs WHERE state = 'pending' AND due_at <= $1";

pub(crate) const CUT_DEFAULTS: &str =
    "SELECT idx, recorded_at FROM ledger_entries WHERE log = $1 ORDER BY idx LIMIT $2";

pub(crate) const DIGEST_KEY: &str = "SELECT digest_key FROM ledger_entries WHERE log = $1 AND idx = $2";

pub(crate) const INTEGRATE_LEDGER: &str = "SELECT size FROM ledger_heads WHERE log = $1";

pub(crate) const LEDGER_BACKLOG: &str = "SELECT h.log FROM ledger_heads h LEFT JOIN ledger_trees t ON t.log = h.log
    WHERE h.size > COALESCE(t.size, 0) ORDER BY h.log";

pub(crate) const LEDGER_ENTRIES: &str = "SELECT idx, recorded_at, kind, data, leaf_hash FROM ledger_entries
    WHERE log = $1 AND idx >= $2 ORDER BY idx LIMIT $3";

pub(crate) const LEDGER_ENTRIES_OF_KIND: &str = "SELECT idx, recorded_at, kind, data, leaf_hash FROM ledger_entries
    WHERE log = $1 AND kind = $2 AND idx < $3 ORDER BY idx DESC LIMIT $4";

pub(crate) const MOVE_START: &str = "UPDATE ledger_trees SET start_size = $2, start_peaks = $3 WHERE log = $1";

pub(crate) const APPLY_HEALTH: &str = "UPDATE subscriptions SET failing_since = NULL, last_failure_at = NULL
    WHERE id = $1 AND failing_since IS NOT NULL";

pub(crate) const INSERT_QUARANTINE: &str =
    "INSERT INTO quarantine (tenant_id, source, ce_id, reason_code, reason_field, reason,
    headers, body, body_bytes, origin, kafka_topic, kafka_partition, kafka_offset,
    received_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
    RETURNING id";

pub(crate) const API_KEY_BY_HASH: &str =
    "SELECT id, tenant_id, name, key_prefix, created_at, revoked_at, admin, expires_at, role FROM api_keys
    WHERE key_hash = $1 AND revoked_at IS NULL";

pub(crate) const CREATE_API_KEY: &str =
    "INSERT INTO api_keys (id, tenant_id, name, key_hash, key_prefix, created_at, admin, expires_at, role)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
    RETURNING id, tenant_id, name, key_prefix, created_at, revoked_at, admin, expires_at, role";

pub(crate) const PENDING_MIGRATIONS: &str = "SELECT version FROM _sqlx_migrations WHERE success";

/// Up to `$2` jobs of `table` (the jobs table, or on PostgreSQL one of its partitions) that
/// finished before `$1`: what job retention deletes, with their attempts.
pub(crate) fn finished_jobs_to_prune(table: &str) -> String {
    format!(
        "SELECT id FROM {table}
         WHERE state IN ('succeeded', 'dead', 'cancelled') AND COALESCE(finished_at, updated_at) < $1
         LIMIT $2"
    )
}

pub(crate) const EVENTS_BY_TENANT: &str = "SELECT tenant_id, count(*) FROM events GROUP BY tenant_id";

pub(crate) const SUBSCRIPTIONS_BY_TENANT: &str = "SELECT tenant_id, count(*) FROM subscriptions GROUP BY tenant_id";

pub(crate) const API_KEYS_BY_TENANT: &str =
    "SELECT tenant_id, count(*) FROM api_keys WHERE revoked_at IS NULL AND NOT admin GROUP BY tenant_id";

pub(crate) const OPEN_JOBS_BY_TENANT: &str = "SELECT tenant_id, state, count(*) FROM delivery_jobs
    WHERE state IN ('pending', 'leased', 'held', 'dead') GROUP BY tenant_id, state";

pub(crate) const WRITE_DLQ_RECORDS: &str =
    "INSERT INTO dlq_records (topic, kafka_partition, kafka_offset, source, tenant_id, ce_id, ce_type,
    error_class, error_message, headers, body, body_bytes, payload_omitted, record_timestamp,
    received_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
    ON CONFLICT (topic, kafka_partition, kafka_offset) DO NOTHING";

pub(crate) const RUNNING_REPLAYS: &str =
    "SELECT id FROM replays WHERE state = 'running' ORDER BY created_at, id LIMIT $1";

pub(crate) const FIRST_SEQ_SINCE: &str = "SELECT min(seq) FROM events WHERE tenant_id = $1 AND received_at >= $2";

pub(crate) const LAST_SEQ_BEFORE: &str = "SELECT max(seq) FROM events WHERE tenant_id = $1 AND received_at < $2";

pub(crate) const REPLAY_EVENTS_AFTER: &str =
    "SELECT seq, resource_type, event_type, source, received_at, erased_by IS NOT NULL FROM events
    WHERE tenant_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4";

pub(crate) const ADVANCE_TENANT_SEQUENCE: &str =
    "UPDATE tenant_sequences SET last_seq = last_seq + $2 WHERE tenant_id = $1 RETURNING last_seq";

pub(crate) const CREATE_PERSON_SESSION: &str =
    "INSERT INTO person_sessions (id, session_hash, issuer, subject, roles, created_at, expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7)";

pub(crate) const CREATE_PORTAL_SESSION: &str =
    "INSERT INTO portal_sessions (id, tenant_id, scope, grant_hash, created_at, expires_at)
    VALUES ($1, $2, $3, $4, $5, $6)";

pub(crate) const END_PERSON_SESSION: &str = "DELETE FROM person_sessions WHERE session_hash = $1";

pub(crate) const PERSON_SESSION: &str = "SELECT id, issuer, subject, roles, created_at, expires_at FROM person_sessions
    WHERE session_hash = $1 AND expires_at > $2";

pub(crate) const REVOKE_PORTAL_SESSION: &str =
    "UPDATE portal_sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL AND expires_at > $2";

/// Each subscription's backlog (its pending and held jobs), each state counted from its own index:
/// a condition on both states let PostgreSQL read every job instead (half a second every sample
/// beside five million finished ones, hub-bench scale).
pub(crate) const BACKLOGS: &str = "SELECT s.tenant_id, b.subscription_id, b.jobs FROM (
        SELECT subscription_id, CAST(sum(n) AS BIGINT) AS jobs FROM (
            SELECT subscription_id, count(*) AS n FROM delivery_jobs WHERE state = 'pending' GROUP BY subscription_id
            UNION ALL
            SELECT subscription_id, count(*) AS n FROM delivery_jobs WHERE state = 'held' GROUP BY subscription_id
        ) o GROUP BY subscription_id
    ) b JOIN subscriptions s ON s.id = b.subscription_id";

pub(crate) const MINUTES: &str =
    "SELECT subscription_id, minute, tenant_id, delivered, failed, dead, skipped, latency, backlog
    FROM subscription_minutes
    WHERE subscription_id = $1 AND tenant_id = $2 AND minute >= $3 ORDER BY minute";

pub(crate) const CREATE_SUBSCRIPTION_WITHIN: &str = "SELECT count(*) FROM subscriptions WHERE tenant_id = $1";

pub(crate) const DELETE_SUBSCRIPTION: &str = "DELETE FROM subscriptions WHERE tenant_id = $1 AND id = $2";

pub(crate) const DELETE_PULL_ENTRIES: &str = "DELETE FROM pull_entries WHERE subscription_id = $1";

pub(crate) const ERASURE: &str = concat!("SELECT ", erasure_columns!(), " FROM erasures WHERE id = $1");

pub(crate) const RUNNING_ERASURES: &str = concat!(
    "SELECT ",
    erasure_columns!(),
    " FROM erasures WHERE tenant_id = $1 AND state = 'running' ORDER BY requested_at, id"
);

pub(crate) const BLOCKED_KEYS: &str = concat!(
    "SELECT ",
    job_columns!(),
    ", k.ordering_key AS blocked_key, k.waiting FROM (
    SELECT ordering_key, count(*) - 1 AS waiting FROM delivery_jobs
    WHERE tenant_id = $1 AND subscription_id = $2 AND ordering_key IS NOT NULL
    AND state IN ('pending', 'leased', 'held')
    GROUP BY ordering_key HAVING count(*) > 1
    ) k
    JOIN delivery_jobs j ON j.id = (
    SELECT h.id FROM delivery_jobs h
    WHERE h.subscription_id = $2 AND h.ordering_key = k.ordering_key
    AND h.state IN ('pending', 'leased', 'held')
    ORDER BY h.event_seq, h.id LIMIT 1)
    ORDER BY j.event_seq LIMIT $3"
);

pub(crate) const JOBS_FOR_EVENT: &str =
    concat!("SELECT ", job_columns!(), " FROM delivery_jobs WHERE tenant_id = $1 AND event_seq = $2 ORDER BY id");

pub(crate) const LATEST_LEDGER_CHECKPOINT: &str =
    concat!("SELECT ", checkpoint_columns!(), " FROM ledger_checkpoints WHERE log = $1 ORDER BY size DESC LIMIT 1");

pub(crate) const LEDGER_CHECKPOINTS: &str = concat!(
    "SELECT ",
    checkpoint_columns!(),
    " FROM ledger_checkpoints WHERE log = $1 AND size >= $2 AND size <= $3
    ORDER BY size LIMIT $4"
);

pub(crate) const REPLAY: &str =
    concat!("SELECT ", replay_columns!(), " FROM replays WHERE tenant_id = $1 AND subscription_id = $2 AND id = $3");

pub(crate) const RUNNING_REPLAY: &str =
    concat!("SELECT ", replay_columns!(), " FROM replays WHERE subscription_id = $1 AND state = 'running'");

pub(crate) const INSERT_REPLAY: &str = concat!(
    "INSERT INTO replays (id, tenant_id, subscription_id, since, until, from_seq, to_seq, include_delivered,
    state, walked_to, created_at, updated_at, finished_at, rate, only_undelivered, filters)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12, $13, $14, $15)
    RETURNING ",
    replay_columns!()
);

pub(crate) const CANCEL_REPLAY: &str = concat!(
    "UPDATE replays SET state = 'cancelled', finished_at = $2, updated_at = $2 WHERE id = $1
    RETURNING ",
    replay_columns!()
);

pub(crate) const ADVANCE_REPLAY: &str = concat!(
    "UPDATE replays SET walked_to = $2, matched = matched + $3, created = created + $4,
    skipped = skipped + $5, state = $6, finished_at = $7, updated_at = $8
    WHERE id = $1 RETURNING ",
    replay_columns!()
);

pub(crate) const EXCHANGE_PORTAL_GRANT: &str = concat!(
    "UPDATE portal_sessions SET exchanged_at = $3, session_hash = $2
    WHERE grant_hash = $1 AND exchanged_at IS NULL AND revoked_at IS NULL AND expires_at > $3
    RETURNING ",
    session_columns!()
);

pub(crate) const PORTAL_SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM portal_sessions
    WHERE session_hash = $1 AND revoked_at IS NULL AND expires_at > $2"
);

/// The statements that prune one batch of `kind` (older than `$1`, at most `$2` rows each), for
/// the kinds pruned by a plain delete on both backends.
pub(crate) fn prune(kind: crate::PruneKind) -> &'static [&'static str] {
    use crate::PruneKind;
    match kind {
        PruneKind::Quarantine => &["DELETE FROM quarantine WHERE id IN
    (SELECT id FROM quarantine WHERE received_at < $1 ORDER BY id LIMIT $2)"],
        PruneKind::Dlq => &["DELETE FROM dlq_records WHERE id IN
    (SELECT id FROM dlq_records WHERE received_at < $1 ORDER BY id LIMIT $2)"],
        PruneKind::Minutes => &["DELETE FROM subscription_minutes WHERE (subscription_id, minute) IN
    (SELECT subscription_id, minute FROM subscription_minutes WHERE minute < $1 LIMIT $2)"],
        PruneKind::SeenTypes => {
            &["DELETE FROM seen_event_types WHERE (tenant_id, source, event_key, schema_version) IN
    (SELECT tenant_id, source, event_key, schema_version FROM seen_event_types
    WHERE last_seen < $1 LIMIT $2)"]
        }
        PruneKind::Sessions => &[
            "DELETE FROM portal_sessions WHERE id IN (SELECT id FROM portal_sessions WHERE expires_at < $1 LIMIT $2)",
            "DELETE FROM person_sessions WHERE id IN (SELECT id FROM person_sessions WHERE expires_at < $1 LIMIT $2)",
        ],
        PruneKind::FinishedJobs | PruneKind::Events | PruneKind::Ledger => &[],
    }
}

/// The conditions of a page of the event log after `… WHERE tenant_id = `: the tenant, `after`,
/// and only the filters given, so the planner sees which index serves the page (a type names
/// `events_by_key`; both backends plan `(? IS NULL OR …)` without the values). `time` is a time as
/// the backend stores it.
pub(crate) fn push_event_conditions<'q, DB, T>(
    sql: &mut sqlx::QueryBuilder<'q, DB>,
    tenant: &'q str,
    q: &'q crate::EventQuery,
    time: fn(chrono::DateTime<chrono::Utc>) -> T,
) where
    DB: sqlx::Database,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'q String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    T: 'q + sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    sql.push_bind(tenant).push(" AND seq > ").push_bind(q.after);
    if let Some(before) = q.before {
        sql.push(" AND seq < ").push_bind(before);
    }
    if let Some(resource_type) = &q.resource_type {
        sql.push(" AND resource_type = ").push_bind(resource_type);
    }
    if let Some(event_type) = &q.event_type {
        sql.push(" AND event_type = ").push_bind(event_type);
    }
    if let Some(source) = &q.source {
        sql.push(" AND source = ").push_bind(source);
    }
    if let Some(since) = q.since {
        sql.push(" AND received_at >= ").push_bind(time(since));
    }
    if let Some(until) = q.until {
        sql.push(" AND received_at < ").push_bind(time(until));
    }
}
