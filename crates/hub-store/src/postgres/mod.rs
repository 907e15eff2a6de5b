//! The PostgreSQL backend: production, shared by any number of replicas.
//!
//! A batch locks the sequence rows of its tenants (in tenant order, so two batches never
//! deadlock), checks which ids they already have, and inserts the new events with their pull
//! entries and jobs in one `UNNEST` statement: a fixed number of round trips per batch, however
//! many tenants it holds.

use crate::sql;
use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions, PgRow};
use sqlx::{Connection, PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use crate::PruneKind;
use crate::model::{
    JobToWrite, MatchRow, MatchTarget, Targets, accepted_by_tenant, assign_seqs, lease_new_jobs, match_events, ordered,
    split_poison,
};
use crate::prelude::*;
use crate::{
    AcceptedEvent, ApiKeyRecord, AttemptRecord, AttemptResult, ClaimRequest, ClaimedJob, Completed, DeliveryJob,
    DlqEntry, DlqFilter, HealthChange, IngestLease, IngestRecord, JobState, LeasedAtIngest, NewApiKey, NewDlqRecord,
    QuarantineEntry, QuarantineFilter, QuarantinedRecord, Recovery, StoreError, StoreResult, StoredEvent,
    SubscriptionRecord, WriteOutcome,
};
use crate::{
    EventQuery, NewReplay, PulledEvent, ReplayLimits, ReplayRecord, ReplayStart, ReplayState, ReplayStep, StreamEntry,
};

mod catalog;
mod erasures;
pub(crate) mod failover;
mod inbox;
mod ingest;
mod issuer;
mod job_partitions;
mod jobs;
mod kept;
mod ledger;
mod operations;
mod partitions;
mod replays;
mod replicas;
mod rows;
mod sessions;
mod stats;
mod subscriptions;

use rows::*;

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
            // A server that answers but has no connection to give now (53300, too many clients,
            // as in a connection storm during a rolling restart) or is still starting (57P03) is
            // out of reach for the moment, like one that does not answer: waiting helps.
            Ok(Err(sqlx::Error::Database(e))) if matches!(e.code().as_deref(), Some("53300" | "57P03")) => {
                return Err(StoreError::Unreachable(format!("{place}: {}", e.message())));
            }
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(mut probe)) => {
                let writable = failover::prepare_session(&mut probe).await;
                let _ = probe.close().await;
                if let Err(sqlx::Error::Io(e)) = writable {
                    return Err(StoreError::Unreachable(format!("{place}: {e}")));
                }
                writable?;
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
            .after_connect(|conn, _| Box::pin(failover::prepare_session(conn)))
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    // Made before a write was refused as read-only: to a server that lost its
                    // primary role (see `failover.rs`).
                    if failover::made_before_mark(meta.age) {
                        return Ok(false);
                    }
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
        // One unique-index probe per id, in the one partition its id's day selects (the LIMIT
        // keeps the subquery a probe per id, never a join).
        let (probe_tenants, probe_ids): (Vec<&str>, Vec<Uuid>) = groups
            .iter()
            .flat_map(|(t, events)| events.iter().map(move |(_, e)| (*t, e.envelope.id().as_uuid())))
            .unzip();
        let mut existing: HashMap<&str, HashMap<Uuid, i64>> = HashMap::new();
        let found: Vec<(String, Uuid, i64)> = sqlx::query_as(
            "SELECT e.tenant_id, e.ce_id, e.seq FROM UNNEST($1::text[], $2::uuid[]) AS u(tenant_id, ce_id)
             CROSS JOIN LATERAL (SELECT tenant_id, ce_id, seq FROM events
                                 WHERE tenant_id = u.tenant_id AND ce_id = u.ce_id LIMIT 1) e",
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
                    pace_bucket: row.try_get("pace_bucket")?,
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
            let work = match_events(tenant, &Targets::new(targets.remove(tenant).unwrap_or_default()), &inserts);
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
                sqlx::query(sql::APPLY_HEALTH).bind(subscription).execute(&mut **tx).await?;
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
            HealthChange::Unchanged => false,
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
        let headers = serde_json::to_value(&record.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let id =
            sql::bind_quarantined!(sqlx::query_scalar(sql::INSERT_QUARANTINE), record, headers: headers, time: std::convert::identity)
                .fetch_one(&mut **tx)
                .await?;
        Ok(id)
    }
}
