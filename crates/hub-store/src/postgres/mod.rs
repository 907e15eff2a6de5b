//! The PostgreSQL backend: production, shared by any number of replicas.
//!
//! A batch locks the sequence rows of its tenants (in tenant order, so two batches never
//! deadlock), checks which ids they already have, and inserts the new events with their pull
//! entries and jobs in one `UNNEST` statement: a fixed number of round trips per batch, however
//! many tenants it holds.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions, PgRow};
use sqlx::{Connection, PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use crate::PruneKind;
use crate::model::{
    JobToWrite, MatchRow, MatchTarget, accepted_by_tenant, assign_seqs, lease_new_jobs, match_events, ordered,
    split_poison,
};
use crate::prelude::*;
use crate::{
    AcceptedEvent, ApiKeyRecord, AttemptRecord, AttemptResult, ClaimRequest, ClaimedJob, Completed, DeliveryJob,
    DlqEntry, DlqFilter, HealthChange, IngestLease, IngestRecord, JobState, JobTransition, LeasedAtIngest, NewApiKey,
    NewDlqRecord, Origin, QuarantineEntry, QuarantineFilter, QuarantinedRecord, Recovery, StoreError, StoreResult,
    StoredEvent, SubscriptionRecord, WriteOutcome,
};
use crate::{
    EventQuery, NewReplay, PulledEvent, ReplayLimits, ReplayRecord, ReplayStart, ReplayState, ReplayStep, StreamEntry,
};

mod inbox;
mod ingest;
mod jobs;
mod kept;
mod operations;
mod replays;
mod subscriptions;

/// The two moves of waiting jobs: `(from, to, when the subscription is)`. Constants, so each
/// statement is served by its state's partial index.
const SYNC_WAITING: [(&str, &str, &str); 2] = [
    ("pending", "held", "NOT (enabled AND verification_state = 'active')"),
    ("held", "pending", "enabled AND verification_state = 'active'"),
];

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// The PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// The subscriptions ingest matches against, by tenant (see `ingest.rs`).
    subs: std::sync::Arc<ingest::SubscriptionMemory>,
    /// `NOTIFY` channel for new jobs; per schema, so hubs sharing a server do not wake each other.
    channel: String,
    /// Connections kept between the hot statements (see `kept.rs`).
    kept: std::sync::Arc<kept::Kept>,
}

/// How long a pooled connection may sit idle before it is checked again when next handed out.
const CHECK_IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

impl PgStore {
    /// Connects a pool of at most `max_connections`; with `schema`, every connection works
    /// inside that schema.
    pub async fn connect(dsn: &str, schema: Option<&str>, max_connections: u32) -> StoreResult<Self> {
        Self::connect_with(dsn, schema, &crate::PoolSettings { max_connections, ..crate::PoolSettings::default() })
            .await
    }

    /// Connects a pool shaped by `pool`; with `schema`, every connection works inside that schema.
    pub async fn connect_with(dsn: &str, schema: Option<&str>, pool: &crate::PoolSettings) -> StoreResult<Self> {
        // The sessions say whose they are in `pg_stat_activity`: `streaming-hub`, or with a
        // schema `streaming-hub/<schema>`, so the hubs sharing a server are told apart.
        let mut options = PgConnectOptions::from_str(dsn)?.application_name("streaming-hub");
        if let Some(schema) = schema {
            options = options.options([("search_path", schema)]).application_name(&format!("streaming-hub/{schema}"));
        }
        // One connection of its own first: a server that is not there is told apart from one
        // that answers and refuses, and the pool does not hide the cause behind its timeout.
        let place = format!("{}:{}", options.get_host(), options.get_port());
        match tokio::time::timeout(std::time::Duration::from_secs(5), PgConnection::connect_with(&options)).await {
            Err(_) => return Err(StoreError::Unreachable(format!("{place} did not answer within 5 s"))),
            Ok(Err(sqlx::Error::Io(e))) => return Err(StoreError::Unreachable(format!("{place}: {e}"))),
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(probe)) => {
                let _ = probe.close().await;
            }
        }
        let max_connections = pool.max_connections.max(1);
        // A connection is checked (one round trip) before it is handed out only when it sat idle
        // long enough to have been dropped by the server or the network meanwhile; checking every
        // one would add a round trip to every statement. One found broken by its statement is not
        // given out again, and writes try again on another (`on_live_connection`).
        let pool = PgPoolOptions::new()
            .min_connections(pool.min_connections.min(max_connections))
            .max_lifetime(pool.max_lifetime)
            .max_connections(max_connections)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    // A large statement or result grew the connection's buffers to its size; they
                    // are let go before it is used again (a no-op when they did not grow).
                    conn.shrink_buffers();
                    if meta.idle_for >= CHECK_IDLE_AFTER {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(options)
            .await?;
        let channel = match schema {
            Some(schema) => format!("streaming_hub_jobs_{schema}"),
            None => "streaming_hub_jobs".to_owned(),
        };
        let kept = std::sync::Arc::new(kept::Kept::new(max_connections as usize));
        Ok(Self { pool, subs: std::sync::Arc::default(), channel, kept })
    }

    /// Runs `op` again while it fails for want of a live connection. Pooled connections are
    /// checked only after a second idle (see `connect_with`), so after the server ended them
    /// (a restart, a failover) each fails the first statement it is given, at once, and is then
    /// dropped by the pool: one try per pooled connection, and one more, reaches a live one.
    pub(crate) async fn on_live_connection<T, F, Fut>(&self, mut op: F) -> StoreResult<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = StoreResult<T>>,
    {
        let mut tries = self.pool.options().get_max_connections() + 1;
        loop {
            match op().await {
                Err(e) if e.is_connection_lost() && tries > 1 => tries -= 1,
                done => return done,
            }
        }
    }

    /// The pool, for the service's own PostgreSQL-only needs (notifications, advisory locks).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// One ingest batch, all of it or none: the accepted events (with their jobs, leased under
    /// `lease` when given) and the quarantined records. A batch of accepted events only is one
    /// statement (`ingest.rs`); one holding quarantine records, one transaction.
    async fn write(
        &self,
        batch: &[IngestRecord],
        lease: Option<&IngestLease>,
    ) -> StoreResult<(Vec<WriteOutcome>, LeasedAtIngest)> {
        let accepted_only = batch.iter().all(|r| matches!(r, IngestRecord::Accepted(_)));
        if accepted_only && !batch.is_empty() {
            return self.write_one_statement(batch, lease).await;
        }
        self.write_in_transaction(batch, lease).await
    }

    /// One ingest batch in one transaction of several statements: lock the tenants' sequence
    /// rows (in tenant order, so concurrent batches never deadlock), find the ids already
    /// stored, read the tenants' deliverable subscriptions, then insert the events, pull entries
    /// and jobs and move the sequences in one statement, then the quarantine records.
    async fn write_in_transaction(
        &self,
        batch: &[IngestRecord],
        lease: Option<&IngestLease>,
    ) -> StoreResult<(Vec<WriteOutcome>, LeasedAtIngest)> {
        let mut tx = self.pool.begin().await?;
        let (mut outcomes, leased) = Self::insert_accepted(&mut tx, batch, &self.channel, lease).await?;
        for (i, record) in batch.iter().enumerate() {
            if let IngestRecord::Quarantined(q) = record {
                let id = Self::insert_quarantine(&mut tx, q).await?;
                outcomes.push((i, WriteOutcome::Quarantined { id }));
            }
        }
        tx.commit().await?;
        Ok((ordered(batch.len(), outcomes)?, leased))
    }

    /// Inserts a batch's accepted events with the jobs and pull entries they create; with a
    /// `lease`, the deliverable jobs (up to its limit) are inserted leased and returned.
    async fn insert_accepted(
        tx: &mut Transaction<'_, Postgres>,
        batch: &[IngestRecord],
        channel: &str,
        lease: Option<&IngestLease>,
    ) -> StoreResult<(Vec<(usize, WriteOutcome)>, LeasedAtIngest)> {
        let groups = accepted_by_tenant(batch);
        if groups.is_empty() {
            return Ok((Vec::new(), LeasedAtIngest::default()));
        }
        let tenants: Vec<&str> = groups.keys().copied().collect();
        // Each tenant's writers take turns on its sequence row until commit.
        let last: HashMap<String, i64> = sqlx::query_as(
            "INSERT INTO tenant_sequences (tenant_id, last_seq)
             SELECT t, 0 FROM UNNEST($1::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n
             ON CONFLICT (tenant_id) DO UPDATE SET last_seq = tenant_sequences.last_seq
             RETURNING tenant_id, last_seq",
        )
        .bind(&tenants)
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .collect();
        // One unique-index probe per id, whatever the table's statistics say: only the
        // `(tenant_id, ce_id)` index can serve this row comparison in its order (see
        // `events_by_seqs`).
        let (probe_tenants, probe_ids): (Vec<&str>, Vec<Uuid>) = groups
            .iter()
            .flat_map(|(t, events)| events.iter().map(move |(_, e)| (*t, e.envelope.id().as_uuid())))
            .unzip();
        let mut existing: HashMap<&str, HashMap<Uuid, i64>> = HashMap::new();
        let found: Vec<(String, Uuid, i64)> = sqlx::query_as(
            "SELECT e.tenant_id, e.ce_id, e.seq FROM UNNEST($1::text[], $2::uuid[]) AS u(tenant_id, ce_id)
             CROSS JOIN LATERAL (SELECT tenant_id, ce_id, seq FROM events
                                 WHERE (tenant_id, ce_id) >= (u.tenant_id, u.ce_id)
                                 ORDER BY tenant_id, ce_id LIMIT 1) e
             WHERE e.tenant_id = u.tenant_id AND e.ce_id = u.ce_id",
        )
        .bind(&probe_tenants)
        .bind(&probe_ids)
        .fetch_all(&mut **tx)
        .await?;
        for (tenant, id, seq) in &found {
            if let Some(t) = tenants.iter().find(|t| **t == tenant.as_str()) {
                existing.entry(*t).or_default().insert(*id, *seq);
            }
        }
        // Every subscription that may take new events (see `hub_core::admission`), whole: the
        // jobs leased at ingest are handed over with theirs.
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS}, verified_at IS NOT NULL AS verified_before FROM subscriptions
             WHERE tenant_id = ANY($1) AND enabled AND verification_state IN ('active', 'pending')"
        );
        let rows = sqlx::query(&sql).bind(&tenants).fetch_all(&mut **tx).await?;
        let mut targets: HashMap<&str, Vec<MatchTarget>> = HashMap::new();
        let mut sub_rows: HashMap<Uuid, &PgRow> = HashMap::new();
        for row in &rows {
            let tenant: String = row.try_get("tenant_id")?;
            let id: Uuid = row.try_get("id")?;
            if let Some(t) = tenants.iter().find(|t| **t == tenant.as_str()) {
                let match_row = MatchRow {
                    id,
                    sink: row.try_get("sink_type")?,
                    event_types: row.try_get("event_types")?,
                    origin: row.try_get("origin")?,
                    filters: row.try_get("filters")?,
                    ordering: row.try_get("ordering")?,
                    enabled: row.try_get("enabled")?,
                    verification: row.try_get("verification_state")?,
                    verified_before: row.try_get("verified_before")?,
                };
                targets.entry(*t).or_default().push(MatchTarget::new(match_row)?);
                sub_rows.insert(id, row);
            }
        }

        let mut outcomes = Vec::new();
        let mut cols = EventColumns::default();
        let (mut pull_subs, mut pull_seqs, mut pull_tenants) = (Vec::new(), Vec::new(), Vec::new());
        let mut jobs = JobColumns::default();
        let mut leased = LeasedAtIngest::default();
        let mut room = lease.map_or(0, |l| l.limit);
        let (mut seq_tenants, mut seq_last) = (Vec::new(), Vec::new());
        let none = HashMap::new();
        for (tenant, events) in &groups {
            let start = last
                .get(*tenant)
                .copied()
                .ok_or_else(|| StoreError::Corrupt(format!("no sequence row came back for tenant {tenant}")))?;
            let (tenant_outcomes, inserts, new_last) =
                assign_seqs(events, existing.get(tenant).unwrap_or(&none), start);
            outcomes.extend(tenant_outcomes);
            if inserts.is_empty() {
                continue;
            }
            for (seq, event) in &inserts {
                cols.push(tenant, *seq, event);
            }
            let work = match_events(tenant, targets.get(tenant).map_or(&[][..], Vec::as_slice), &inserts);
            for (sub, seq) in work.pulls {
                pull_subs.push(sub);
                pull_seqs.push(seq);
                pull_tenants.push(*tenant);
            }
            for job in lease_new_jobs(tenant, work.jobs, lease, &mut room, &mut leased) {
                jobs.push(tenant, job);
            }
            seq_tenants.push(*tenant);
            seq_last.push(new_last);
        }
        let mut leased_subs: Vec<Uuid> = leased.jobs.iter().map(|j| j.subscription_id).collect();
        leased_subs.sort_unstable();
        leased_subs.dedup();
        leased.subscriptions = leased_subs
            .iter()
            .filter_map(|id| sub_rows.get(id))
            .map(|row| subscription_from_row(row))
            .collect::<StoreResult<_>>()?;
        if cols.seq.is_empty() {
            return Ok((outcomes, leased));
        }
        let notify = jobs.state.iter().any(|s| *s == JobState::Pending.as_str());
        sqlx::query(
            "WITH new_events AS (
                INSERT INTO events (tenant_id, seq, ce_id, source, ce_type, resource_type, event_type,
                    event_time, schema_version, subject, data_content_type, data_schema, traceparent,
                    tracestate, extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset,
                    received_at, hub_traceparent)
                SELECT t.tenant_id, t.seq, t.ce_id, t.source, t.ce_type, t.resource_type, t.event_type,
                    t.event_time, t.schema_version, t.subject, t.data_content_type, t.data_schema,
                    t.traceparent, t.tracestate, t.extensions::jsonb, t.payload, t.origin, t.kafka_topic,
                    t.kafka_partition, t.kafka_offset, t.received_at, t.hub_traceparent
                FROM UNNEST($1::text[], $2::bigint[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                    $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                    $13::text[], $14::text[], $15::text[], $16::bytea[], $17::text[], $18::text[],
                    $19::int[], $20::bigint[], $21::timestamptz[], $35::text[])
                AS t(tenant_id, seq, ce_id, source, ce_type, resource_type, event_type, event_time,
                    schema_version, subject, data_content_type, data_schema, traceparent, tracestate,
                    extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset, received_at,
                    hub_traceparent)
             ), new_pulls AS (
                INSERT INTO pull_entries (subscription_id, seq, tenant_id)
                SELECT * FROM UNNEST($22::uuid[], $23::bigint[], $24::text[])
             ), new_jobs AS (
                INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, due_at,
                    event_received_at, window_start, created_at, updated_at, lease_token, lease_expires_at,
                    ordering_key)
                SELECT t.id, t.tenant_id, t.sub, t.seq, t.state, t.received, t.received, t.received, now(), now(),
                    t.token, t.until, t.key
                FROM UNNEST($25::uuid[], $26::text[], $27::uuid[], $28::bigint[], $29::timestamptz[], $34::text[],
                    $36::uuid[], $37::timestamptz[], $38::text[])
                AS t(id, tenant_id, sub, seq, received, state, token, until, key)
             ), sequences AS (
                UPDATE tenant_sequences s SET last_seq = u.last_seq
                FROM UNNEST($30::text[], $31::bigint[]) AS u(tenant_id, last_seq)
                WHERE s.tenant_id = u.tenant_id
             )
             -- Delivered at commit: other replicas' dispatchers wake at once.
             SELECT pg_notify($32, '') WHERE $33",
        )
        .bind(cols.tenant_id)
        .bind(cols.seq)
        .bind(cols.ce_id)
        .bind(cols.source)
        .bind(cols.ce_type)
        .bind(cols.resource_type)
        .bind(cols.event_type)
        .bind(cols.event_time)
        .bind(cols.schema_version)
        .bind(cols.subject)
        .bind(cols.data_content_type)
        .bind(cols.data_schema)
        .bind(cols.traceparent)
        .bind(cols.tracestate)
        .bind(cols.extensions)
        .bind(cols.payload)
        .bind(cols.origin)
        .bind(cols.kafka_topic)
        .bind(cols.kafka_partition)
        .bind(cols.kafka_offset)
        .bind(cols.received_at)
        .bind(pull_subs)
        .bind(pull_seqs)
        .bind(pull_tenants)
        .bind(jobs.id)
        .bind(jobs.tenant_id)
        .bind(jobs.sub)
        .bind(jobs.seq)
        .bind(jobs.received)
        .bind(seq_tenants)
        .bind(seq_last)
        .bind(channel)
        .bind(notify)
        .bind(jobs.state)
        .bind(cols.hub_traceparent)
        .bind(jobs.token)
        .bind(jobs.until)
        .bind(jobs.key)
        .execute(&mut **tx)
        .await?;
        Ok((outcomes, leased))
    }

    /// A subscription's health after one attempt; true when this attempt disabled it.
    async fn apply_health(
        tx: &mut Transaction<'_, Postgres>,
        subscription: Uuid,
        health: &HealthChange,
    ) -> StoreResult<bool> {
        Ok(match health {
            HealthChange::Success => {
                sqlx::query(
                    "UPDATE subscriptions SET failing_since = NULL, last_failure_at = NULL
                     WHERE id = $1 AND failing_since IS NOT NULL",
                )
                .bind(subscription)
                .execute(&mut **tx)
                .await?;
                false
            }
            HealthChange::Failure { at, disable } => {
                let done = sqlx::query(
                    "UPDATE subscriptions SET failing_since = COALESCE(failing_since, $2), last_failure_at = $2,
                        enabled = CASE WHEN $3::text IS NULL THEN enabled ELSE false END,
                        disabled_reason = COALESCE($3, disabled_reason),
                        disabled_at = CASE WHEN $3::text IS NULL OR NOT enabled THEN disabled_at ELSE $2 END,
                        updated_at = CASE WHEN $3::text IS NULL THEN updated_at ELSE $2 END
                     WHERE id = $1
                     RETURNING ($3::text IS NOT NULL)",
                )
                .bind(subscription)
                .bind(at)
                .bind(disable)
                .fetch_optional(&mut **tx)
                .await?;
                matches!(done.map(|row| row.try_get::<bool, _>(0)).transpose()?, Some(true))
            }
        })
    }

    /// Ends a subscription change: the row as updated (none when the update matched nothing),
    /// its waiting jobs moved to the state it now asks for, and the transaction committed.
    async fn changed(
        mut tx: Transaction<'static, Postgres>,
        row: Option<PgRow>,
        id: Uuid,
    ) -> StoreResult<Option<SubscriptionRecord>> {
        let sub = row.as_ref().map(subscription_from_row).transpose()?;
        if sub.is_some() {
            Self::sync_waiting_jobs(&mut tx, id).await?;
        }
        tx.commit().await?;
        Ok(sub)
    }

    /// Moves a subscription's waiting jobs to the state its deliverability asks for (`pending`
    /// when it is enabled and active, `held` otherwise), inside the caller's transaction.
    async fn sync_waiting_jobs(tx: &mut Transaction<'_, Postgres>, subscription: Uuid) -> StoreResult<()> {
        for (from, to, when) in SYNC_WAITING {
            let sql = format!(
                "UPDATE delivery_jobs SET state = '{to}', updated_at = now()
                 WHERE subscription_id = $1 AND state = '{from}'
                   AND EXISTS (SELECT 1 FROM subscriptions WHERE id = $1 AND {when})"
            );
            sqlx::query(&sql).bind(subscription).execute(&mut **tx).await?;
        }
        Ok(())
    }

    async fn insert_quarantine(tx: &mut Transaction<'_, Postgres>, record: &QuarantinedRecord) -> StoreResult<i64> {
        let (topic, partition, offset) = record.origin.kafka_parts();
        let headers = serde_json::to_value(&record.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let id = sqlx::query_scalar(
            "INSERT INTO quarantine (tenant_id, source, ce_id, reason_code, reason_field, reason,
                headers, body, body_bytes, origin, kafka_topic, kafka_partition, kafka_offset,
                received_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
             RETURNING id",
        )
        .bind(record.column("ce-tenantid", hub_core::TenantId::MAX_LEN))
        .bind(record.column("ce-source", hub_core::Source::MAX_LEN))
        .bind(record.column("ce-id", 64))
        .bind(record.reason.code.as_str())
        .bind(&record.reason.field)
        .bind(record.reason.to_string())
        .bind(headers)
        .bind(&record.body)
        .bind(record.body_bytes as i64)
        .bind(record.origin.kind())
        .bind(topic)
        .bind(partition)
        .bind(offset)
        .bind(record.received_at)
        .fetch_one(&mut **tx)
        .await?;
        Ok(id)
    }
}

/// Column arrays for one `UNNEST` insert.
#[derive(Default)]
struct EventColumns {
    tenant_id: Vec<String>,
    seq: Vec<i64>,
    ce_id: Vec<Uuid>,
    source: Vec<String>,
    ce_type: Vec<String>,
    resource_type: Vec<String>,
    event_type: Vec<String>,
    event_time: Vec<String>,
    schema_version: Vec<String>,
    subject: Vec<Option<String>>,
    data_content_type: Vec<Option<String>>,
    data_schema: Vec<Option<String>>,
    traceparent: Vec<Option<String>>,
    tracestate: Vec<Option<String>>,
    extensions: Vec<String>,
    payload: Vec<Vec<u8>>,
    origin: Vec<String>,
    kafka_topic: Vec<Option<String>>,
    kafka_partition: Vec<Option<i32>>,
    kafka_offset: Vec<Option<i64>>,
    received_at: Vec<DateTime<Utc>>,
    hub_traceparent: Vec<Option<String>>,
}

impl EventColumns {
    fn push(&mut self, tenant: &str, seq: i64, event: &AcceptedEvent) {
        let env = &event.envelope;
        let (topic, partition, offset) = event.origin.kafka_parts();
        self.tenant_id.push(tenant.to_owned());
        self.seq.push(seq);
        self.ce_id.push(env.id().as_uuid());
        self.source.push(env.source().to_string());
        self.ce_type.push(env.ce_type().to_owned());
        self.resource_type.push(env.key().resource().to_owned());
        self.event_type.push(env.key().event().to_owned());
        self.event_time.push(env.time().to_owned());
        self.schema_version.push(env.schema_version().to_owned());
        self.subject.push(env.subject().map(str::to_owned));
        self.data_content_type.push(env.data_content_type().map(str::to_owned));
        self.data_schema.push(env.data_schema().map(str::to_owned));
        self.traceparent.push(env.traceparent().map(str::to_owned));
        self.tracestate.push(env.tracestate().map(str::to_owned));
        self.extensions.push(serde_json::to_string(env.extensions()).unwrap_or_else(|_| "{}".to_owned()));
        self.payload.push(event.payload.clone());
        self.origin.push(event.origin.kind().to_owned());
        self.kafka_topic.push(topic.map(str::to_owned));
        self.kafka_partition.push(partition);
        self.kafka_offset.push(offset);
        self.received_at.push(event.received_at);
        self.hub_traceparent.push(event.trace.clone());
    }
}

/// Column arrays for inserting delivery jobs with `UNNEST`.
#[derive(Default)]
struct JobColumns {
    id: Vec<Uuid>,
    tenant_id: Vec<String>,
    sub: Vec<Uuid>,
    seq: Vec<i64>,
    received: Vec<DateTime<Utc>>,
    state: Vec<&'static str>,
    token: Vec<Option<Uuid>>,
    until: Vec<Option<DateTime<Utc>>>,
    key: Vec<Option<String>>,
}

impl JobColumns {
    fn push(&mut self, tenant: &str, job: JobToWrite) {
        self.state.push(job.state().as_str());
        self.id.push(job.id);
        self.tenant_id.push(tenant.to_owned());
        self.sub.push(job.job.subscription);
        self.seq.push(job.job.seq);
        self.received.push(job.job.received_at);
        self.token.push(job.leased.map(|(token, _)| token));
        self.until.push(job.leased.map(|(_, until)| until));
        self.key.push(job.job.ordering_key);
    }
}

/// Whether every attempt delivered (so each clears its subscription's failure mark, and none
/// changes its health otherwise).
fn delivered_only(results: &[AttemptResult]) -> bool {
    results.iter().all(|r| matches!(r.health, HealthChange::Success))
}

/// The `hub_record` call for a set of attempts (migration 0012): the jobs it moved.
fn record_query(
    cols: &AttemptColumns,
    clear_health: bool,
) -> sqlx::query::QueryScalar<'_, Postgres, Uuid, sqlx::postgres::PgArguments> {
    sqlx::query_scalar(
        "SELECT moved FROM hub_record($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
            $18)",
    )
    .bind(&cols.id)
    .bind(&cols.job_id)
    .bind(&cols.tenant_id)
    .bind(&cols.subscription_id)
    .bind(&cols.attempt)
    .bind(&cols.started_at)
    .bind(&cols.latency_ms)
    .bind(&cols.outcome)
    .bind(&cols.status_code)
    .bind(&cols.error)
    .bind(&cols.response_body)
    .bind(&cols.token)
    .bind(&cols.state)
    .bind(&cols.due_at)
    .bind(&cols.job_error)
    .bind(&cols.finished_at)
    .bind(&cols.now)
    .bind(clear_health)
}

/// What recording each attempt changed: its job when the store moved it (`moved`), and whether
/// it disabled its subscription.
fn completions(results: &[AttemptResult], moved: &[Uuid], disabled: Option<&[bool]>) -> Vec<Completed> {
    let moved: std::collections::HashSet<&Uuid> = moved.iter().collect();
    results
        .iter()
        .enumerate()
        .map(|(i, r)| Completed {
            job_updated: moved.contains(&r.record.job_id),
            disabled: disabled.is_some_and(|d| d[i]),
        })
        .collect()
}

/// Column arrays for recording a batch of attempts with `UNNEST`.
#[derive(Default)]
struct AttemptColumns {
    id: Vec<Uuid>,
    job_id: Vec<Uuid>,
    tenant_id: Vec<String>,
    subscription_id: Vec<Uuid>,
    attempt: Vec<i32>,
    started_at: Vec<DateTime<Utc>>,
    latency_ms: Vec<i64>,
    outcome: Vec<String>,
    status_code: Vec<Option<i32>>,
    error: Vec<Option<String>>,
    response_body: Vec<Option<String>>,
    token: Vec<Uuid>,
    state: Vec<&'static str>,
    due_at: Vec<Option<DateTime<Utc>>>,
    job_error: Vec<Option<String>>,
    finished_at: Vec<Option<DateTime<Utc>>>,
    now: Vec<DateTime<Utc>>,
}

impl AttemptColumns {
    fn of(results: &[AttemptResult]) -> Self {
        let mut cols = Self::default();
        for r in results {
            cols.push(r);
        }
        cols
    }

    fn push(&mut self, r: &AttemptResult) {
        let a = &r.record;
        self.id.push(a.id);
        self.job_id.push(a.job_id);
        self.tenant_id.push(a.tenant_id.clone());
        self.subscription_id.push(a.subscription_id);
        self.attempt.push(a.attempt);
        self.started_at.push(a.started_at);
        self.latency_ms.push(a.latency_ms);
        self.outcome.push(a.outcome.clone());
        self.status_code.push(a.status_code);
        self.error.push(a.error.clone());
        self.response_body.push(a.response_body.clone());
        let (state, due_at, error, finished) = match &r.transition {
            JobTransition::Succeeded => ("succeeded", None, None, Some(r.now)),
            JobTransition::Retry { due_at } => ("pending", Some(*due_at), a.error.clone(), None),
            JobTransition::Dead { reason, .. } => ("dead", None, Some(reason.clone()), Some(r.now)),
        };
        self.token.push(r.token);
        self.state.push(state);
        self.due_at.push(due_at);
        self.job_error.push(error);
        self.finished_at.push(finished);
        self.now.push(r.now);
    }
}

const EVENT_COLUMNS: &str = "tenant_id, seq, ce_id, source, ce_type, resource_type, event_type,
    event_time, schema_version, subject, data_content_type, data_schema, traceparent, tracestate,
    extensions::text AS extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset,
    received_at, hub_traceparent";

fn event_from_row(row: &PgRow) -> StoreResult<StoredEvent> {
    let extensions: String = row.try_get("extensions")?;
    Ok(StoredEvent {
        tenant_id: row.try_get("tenant_id")?,
        seq: row.try_get("seq")?,
        ce_id: row.try_get("ce_id")?,
        source: row.try_get("source")?,
        ce_type: row.try_get("ce_type")?,
        resource_type: row.try_get("resource_type")?,
        event_type: row.try_get("event_type")?,
        event_time: row.try_get("event_time")?,
        schema_version: row.try_get("schema_version")?,
        subject: row.try_get("subject")?,
        data_content_type: row.try_get("data_content_type")?,
        data_schema: row.try_get("data_schema")?,
        traceparent: row.try_get("traceparent")?,
        tracestate: row.try_get("tracestate")?,
        extensions: serde_json::from_str(&extensions).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        payload: row.try_get("payload")?,
        origin: Origin::from_parts(
            row.try_get("origin")?,
            row.try_get("kafka_topic")?,
            row.try_get("kafka_partition")?,
            row.try_get("kafka_offset")?,
        ),
        received_at: row.try_get("received_at")?,
        trace: row.try_get("hub_traceparent")?,
    })
}

fn quarantine_from_row(row: &PgRow) -> StoreResult<QuarantineEntry> {
    let headers: String = row.try_get("headers")?;
    Ok(QuarantineEntry {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        source: row.try_get("source")?,
        ce_id: row.try_get("ce_id")?,
        reason_code: row.try_get("reason_code")?,
        reason_field: row.try_get("reason_field")?,
        reason: row.try_get("reason")?,
        headers: serde_json::from_str::<BTreeMap<String, String>>(&headers)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        body: row.try_get("body")?,
        body_bytes: row.try_get("body_bytes")?,
        origin: Origin::from_parts(
            row.try_get("origin")?,
            row.try_get("kafka_topic")?,
            row.try_get("kafka_partition")?,
            row.try_get("kafka_offset")?,
        ),
        received_at: row.try_get("received_at")?,
    })
}

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, <Postgres as sqlx::Database>::Arguments<'q>>;

/// Binds `$1`..`$18` of a subscription write (see `create_subscription`).
fn bind_subscription<'q>(q: PgQuery<'q>, sub: &SubscriptionRecord) -> StoreResult<PgQuery<'q>> {
    let event_types = serde_json::to_string(&sub.event_types).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(q.bind(sub.tenant_id.clone())
        .bind(sub.id)
        .bind(sub.name.clone())
        .bind(event_types)
        .bind(sub.origin.clone())
        .bind(sub.sink.as_str())
        .bind(sub.sink_config.to_string())
        .bind(sub.signing_secret.clone())
        .bind(sub.previous_secret.clone())
        .bind(sub.previous_secret_expires_at)
        .bind(sub.credentials.clone())
        .bind(sub.enabled)
        .bind(sub.verification.as_str())
        .bind(sub.verification_error.clone())
        .bind(sub.disabled_reason.clone())
        .bind(sub.updated_at)
        .bind(sub.failing_since)
        .bind(sub.last_failure_at))
}

const SUBSCRIPTION_COLUMNS: &str = "id, tenant_id, name, event_types::text AS event_types, origin,
    filters::text AS filters, ordering, sink_type, sink_config::text AS sink_config, signing_secret, previous_secret,
    previous_secret_expires_at, credentials, enabled, verification_state, verification_error,
    disabled_reason, disabled_at, failing_since, last_failure_at, pull_cursor, created_at, updated_at";

fn subscription_from_row(row: &PgRow) -> StoreResult<SubscriptionRecord> {
    let id: Uuid = row.try_get("id")?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("subscription {id}: {what}"));
    let event_types: String = row.try_get("event_types")?;
    let filters: String = row.try_get("filters")?;
    let sink_config: String = row.try_get("sink_config")?;
    let sink: String = row.try_get("sink_type")?;
    let verification: String = row.try_get("verification_state")?;
    Ok(SubscriptionRecord {
        id,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        event_types: serde_json::from_str(&event_types).map_err(|_| corrupt("event_types"))?,
        origin: row.try_get("origin")?,
        filters: serde_json::from_str(&filters).map_err(|_| corrupt("filters"))?,
        ordering: hub_core::Ordering::parse(&row.try_get::<String, _>("ordering")?)
            .ok_or_else(|| corrupt("ordering"))?,
        sink: hub_core::SinkKind::parse(&sink).ok_or_else(|| corrupt("sink_type"))?,
        sink_config: serde_json::from_str(&sink_config).map_err(|_| corrupt("sink_config"))?,
        signing_secret: row.try_get("signing_secret")?,
        previous_secret: row.try_get("previous_secret")?,
        previous_secret_expires_at: row.try_get("previous_secret_expires_at")?,
        credentials: row.try_get("credentials")?,
        enabled: row.try_get("enabled")?,
        verification: hub_core::VerificationState::parse(&verification).ok_or_else(|| corrupt("verification_state"))?,
        verification_error: row.try_get("verification_error")?,
        disabled_reason: row.try_get("disabled_reason")?,
        disabled_at: row.try_get("disabled_at")?,
        failing_since: row.try_get("failing_since")?,
        last_failure_at: row.try_get("last_failure_at")?,
        pull_cursor: row.try_get("pull_cursor")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

const JOB_COLUMNS: &str = "id, tenant_id, subscription_id, event_seq, state, attempts, recoveries, due_at,
    event_received_at, window_start, last_error, created_at, updated_at, finished_at";

fn job_state(s: String) -> StoreResult<JobState> {
    JobState::parse(&s).ok_or_else(|| StoreError::Corrupt(format!("unknown job state {s:?}")))
}

fn job_from_row(row: &PgRow) -> StoreResult<DeliveryJob> {
    Ok(DeliveryJob {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: row.try_get("subscription_id")?,
        event_seq: row.try_get("event_seq")?,
        state: job_state(row.try_get("state")?)?,
        attempts: row.try_get("attempts")?,
        recoveries: row.try_get("recoveries")?,
        due_at: row.try_get("due_at")?,
        event_received_at: row.try_get("event_received_at")?,
        window_start: row.try_get("window_start")?,
        last_error: row.try_get("last_error")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        finished_at: row.try_get("finished_at")?,
    })
}

const CLAIMED_COLUMNS: &str =
    "id, tenant_id, subscription_id, event_seq, attempts, recoveries, window_start, event_received_at, lease_token";

fn claimed_from_row(row: &PgRow) -> StoreResult<ClaimedJob> {
    let token: Option<Uuid> = row.try_get("lease_token")?;
    Ok(ClaimedJob {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: row.try_get("subscription_id")?,
        event_seq: row.try_get("event_seq")?,
        attempts: row.try_get("attempts")?,
        recoveries: row.try_get("recoveries")?,
        window_start: row.try_get("window_start")?,
        event_received_at: row.try_get("event_received_at")?,
        token: token.ok_or_else(|| StoreError::Corrupt("a claimed job has no lease token".into()))?,
    })
}

fn attempt_from_row(row: &PgRow) -> StoreResult<AttemptRecord> {
    Ok(AttemptRecord {
        id: row.try_get("id")?,
        job_id: row.try_get("job_id")?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: row.try_get("subscription_id")?,
        attempt: row.try_get("attempt")?,
        started_at: row.try_get("started_at")?,
        latency_ms: row.try_get("latency_ms")?,
        outcome: row.try_get("outcome")?,
        status_code: row.try_get("status_code")?,
        error: row.try_get("error")?,
        response_body: row.try_get("response_body")?,
    })
}

fn api_key_from_row(row: &PgRow) -> StoreResult<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: row.try_get("id")?,
        tenant_id: if row.try_get::<bool, _>("admin")? { None } else { Some(row.try_get("tenant_id")?) },
        name: row.try_get("name")?,
        key_prefix: row.try_get("key_prefix")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
        expires_at: row.try_get("expires_at")?,
    })
}
