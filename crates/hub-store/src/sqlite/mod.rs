//! The SQLite backend: the embedded default, one file, one node.
//!
//! SQLite has one writer at a time, so writes go through a pool of one connection and each write
//! transaction starts with `BEGIN IMMEDIATE` (it takes the write lock up front instead of failing
//! half-way). Reads use a separate pool and, in WAL mode, never wait for the writer. Times are
//! stored as Unix microseconds, UUIDs as lowercase text.

use crate::sql;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::{Row, Sqlite, SqlitePool, Transaction};
use uuid::Uuid;

use crate::PruneKind;
use crate::model::{
    MatchRow, MatchTarget, Targets, accepted_by_tenant, assign_seqs, lease_new_jobs, match_events, ordered,
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

mod catalog;
mod erasures;
mod inbox;
mod issuer;
mod jobs;
mod ledger;
mod operations;
mod replays;
mod replicas;
mod sessions;
mod stats;
mod subscriptions;

/// The two moves of waiting jobs: `(from, to, when the subscription is)`. Constants, so each
/// statement is served by its state's partial index.
const SYNC_WAITING: [(&str, &str, &str); 2] = [
    ("pending", "held", "NOT (enabled = 1 AND verification_state = 'active')"),
    ("held", "pending", "enabled = 1 AND verification_state = 'active'"),
];

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
}

fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn from_micros(us: i64) -> StoreResult<DateTime<Utc>> {
    DateTime::from_timestamp_micros(us).ok_or_else(|| StoreError::Corrupt(format!("timestamp {us} out of range")))
}

/// A JSON column written by this store: anything else is corrupt.
fn json<T: serde::de::DeserializeOwned>(column: &str, text: &str) -> StoreResult<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored {column}: {e}")))
}

/// A value as the JSON text of a column.
fn to_json(value: &impl serde::Serialize) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn uuid_from_text(s: &str) -> StoreResult<Uuid> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("stored uuid: {e}")))
}

impl SqliteStore {
    /// Opens (and creates when missing) the database file.
    pub async fn open(path: &Path) -> StoreResult<Self> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: an acknowledged event survives a power loss, not only a process crash.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30))
            // Deleted and overwritten content is zeroed in the file, not left in free space: an
            // erasure (and retention) leaves no old payload for anyone who reads the file.
            .pragma("secure_delete", "ON")
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new().max_connections(1).connect_with(options.clone()).await?;
        let reader = SqlitePoolOptions::new().max_connections(4).connect_with(options.read_only(false)).await?;
        Ok(Self { writer, reader })
    }

    /// The writer pool, for maintenance and tests.
    pub fn writer_pool(&self) -> &SqlitePool {
        &self.writer
    }

    async fn begin_write(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// One attempt's writes, inside the caller's transaction.
    async fn complete_in(
        tx: &mut Transaction<'_, Sqlite>,
        r: &AttemptResult,
        ledger_index: Option<u64>,
    ) -> StoreResult<Completed> {
        let a = &r.record;
        sqlx::query(
            "INSERT INTO delivery_attempts (id, job_id, tenant_id, subscription_id, attempt, started_at,
                latency_ms, outcome, status_code, error, response_body, ledger_index)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )
        .bind(text(a.id))
        .bind(text(a.job_id))
        .bind(&a.tenant_id)
        .bind(text(a.subscription_id))
        .bind(a.attempt)
        .bind(micros(a.started_at))
        .bind(a.latency_ms)
        .bind(&a.outcome)
        .bind(a.status_code)
        .bind(&a.error)
        .bind(&a.response_body)
        .bind(ledger_index.map(|n| n as i64))
        .execute(&mut **tx)
        .await?;
        let (state, due_at, error, finished) = match &r.transition {
            JobTransition::Succeeded => ("succeeded", None, None, Some(r.now)),
            JobTransition::Retry { due_at } => ("pending", Some(*due_at), a.error.clone(), None),
            JobTransition::Dead { reason, .. } => ("dead", None, Some(reason.clone()), Some(r.now)),
            JobTransition::Cancelled { reason } => ("cancelled", None, Some(reason.clone()), Some(r.now)),
        };
        let job = sqlx::query(
            "UPDATE delivery_jobs SET state = ?3, attempts = attempts + 1, due_at = COALESCE(?4, due_at),
                last_error = ?5, finished_at = ?6, lease_expires_at = NULL, lease_token = NULL, updated_at = ?7
             WHERE id = ?1 AND lease_token = ?2 AND state = 'leased'",
        )
        .bind(text(a.job_id))
        .bind(text(r.token))
        .bind(state)
        .bind(due_at.map(micros))
        .bind(error)
        .bind(finished.map(micros))
        .bind(micros(r.now))
        .execute(&mut **tx)
        .await?;
        let disabled = match &r.health {
            HealthChange::Success => {
                sqlx::query(sql::APPLY_HEALTH).bind(text(a.subscription_id)).execute(&mut **tx).await?;
                false
            }
            HealthChange::Failure { at, disable } => {
                let done = sqlx::query(
                    "UPDATE subscriptions SET failing_since = COALESCE(failing_since, ?2), last_failure_at = ?2,
                        enabled = CASE WHEN ?3 IS NULL THEN enabled ELSE 0 END,
                        disabled_reason = COALESCE(?3, disabled_reason),
                        disabled_at = CASE WHEN ?3 IS NULL OR enabled = 0 THEN disabled_at ELSE ?2 END,
                        updated_at = CASE WHEN ?3 IS NULL THEN updated_at ELSE ?2 END
                     WHERE id = ?1",
                )
                .bind(text(a.subscription_id))
                .bind(micros(*at))
                .bind(disable)
                .execute(&mut **tx)
                .await?;
                disable.is_some() && done.rows_affected() == 1
            }
            HealthChange::Unchanged => false,
        };
        if disabled {
            Self::sync_waiting_jobs(tx, a.subscription_id).await?;
        }
        Ok(Completed { job_updated: job.rows_affected() == 1, disabled })
    }

    /// One ingest batch in one transaction: the accepted events (with their jobs, leased under
    /// `lease` when given) and the quarantined records.
    async fn write(
        &self,
        batch: &[IngestRecord],
        lease: Option<&IngestLease>,
    ) -> StoreResult<(Vec<WriteOutcome>, LeasedAtIngest)> {
        let mut tx = self.begin_write().await?;
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut leased = LeasedAtIngest::default();
        let mut room = lease.map_or(0, |l| l.limit);
        for (tenant, events) in accepted_by_tenant(batch) {
            outcomes.extend(Self::insert_tenant_events(&mut tx, tenant, &events, lease, &mut room, &mut leased).await?);
        }
        for (i, record) in batch.iter().enumerate() {
            if let IngestRecord::Quarantined(q) = record {
                let id = Self::insert_quarantine(&mut tx, q).await?;
                outcomes.push((i, WriteOutcome::Quarantined { id }));
            }
        }
        tx.commit().await?;
        Ok((ordered(batch.len(), outcomes)?, leased))
    }

    async fn insert_tenant_events(
        tx: &mut Transaction<'_, Sqlite>,
        tenant: &str,
        events: &[(usize, &AcceptedEvent)],
        lease: Option<&IngestLease>,
        room: &mut usize,
        leased: &mut LeasedAtIngest,
    ) -> StoreResult<Vec<(usize, WriteOutcome)>> {
        let last_seq: i64 =
            sqlx::query_scalar(sql::TENANT_LAST_SEQ).bind(tenant).fetch_optional(&mut **tx).await?.unwrap_or(0);
        let mut existing = HashMap::new();
        for (_, event) in events {
            let id = event.envelope.id().as_uuid();
            let seq: Option<i64> = sqlx::query_scalar("SELECT seq FROM events WHERE tenant_id = ?1 AND ce_id = ?2")
                .bind(tenant)
                .bind(id.hyphenated().to_string())
                .fetch_optional(&mut **tx)
                .await?;
            if let Some(seq) = seq {
                existing.insert(id, seq);
            }
        }
        let (outcomes, inserts, new_last) = assign_seqs(events, &existing, last_seq);
        for (seq, event) in &inserts {
            let (seq, event) = (*seq, *event);
            let env = &event.envelope;
            let (topic, partition, offset) = event.origin.kafka_parts();
            let extensions = serde_json::to_string(env.extensions()).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            sqlx::query(
                "INSERT INTO events (tenant_id, seq, ce_id, source, ce_type, resource_type, event_type,
                    event_time, schema_version, subject, data_content_type, data_schema, traceparent,
                    tracestate, extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset,
                    received_at, hub_traceparent)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                    ?18, ?19, ?20, ?21, ?22)",
            )
            .bind(tenant)
            .bind(seq)
            .bind(env.id().to_string())
            .bind(env.source().as_str())
            .bind(env.ce_type())
            .bind(env.key().resource())
            .bind(env.key().event())
            .bind(env.time())
            .bind(env.schema_version())
            .bind(env.subject())
            .bind(env.data_content_type())
            .bind(env.data_schema())
            .bind(env.traceparent())
            .bind(env.tracestate())
            .bind(extensions)
            .bind(&event.payload)
            .bind(event.origin.kind())
            .bind(topic)
            .bind(partition)
            .bind(offset)
            .bind(micros(event.received_at))
            .bind(event.trace.as_deref())
            .execute(&mut **tx)
            .await?;
        }
        Self::insert_matched_work(tx, tenant, &inserts, lease, room, leased).await?;
        if new_last != last_seq {
            sqlx::query(
                "INSERT INTO tenant_sequences (tenant_id, last_seq) VALUES (?1, ?2)
                 ON CONFLICT (tenant_id) DO UPDATE SET last_seq = excluded.last_seq",
            )
            .bind(tenant)
            .bind(new_last)
            .execute(&mut **tx)
            .await?;
        }
        Ok(outcomes)
    }

    /// Matches newly inserted events against the tenant's deliverable subscriptions (one indexed
    /// read per tenant and batch) and writes the jobs and pull entries they create; returns the
    /// jobs leased under `lease` while `room` lasted.
    async fn insert_matched_work(
        tx: &mut Transaction<'_, Sqlite>,
        tenant: &str,
        inserts: &[(i64, &AcceptedEvent)],
        lease: Option<&IngestLease>,
        room: &mut usize,
        leased: &mut LeasedAtIngest,
    ) -> StoreResult<()> {
        // Every subscription that may take new events (see `hub_core::admission`), whole: the
        // jobs leased at ingest are handed over with theirs.
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS}, verified_at IS NOT NULL AS verified_before FROM subscriptions
             WHERE tenant_id = ?1 AND enabled = 1 AND verification_state IN ('active', 'pending')"
        );
        let rows = sqlx::query(&sql).bind(tenant).fetch_all(&mut **tx).await?;
        let mut sub_rows: HashMap<Uuid, &SqliteRow> = HashMap::new();
        let mut targets = Vec::with_capacity(rows.len());
        for row in &rows {
            let id = uuid_from_text(&row.try_get::<String, _>("id")?)?;
            targets.push(MatchTarget::new(MatchRow {
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
            })?);
            sub_rows.insert(id, row);
        }
        let work = match_events(tenant, &Targets::new(targets), inserts);
        for (sub, seq) in work.pulls {
            sqlx::query("INSERT INTO pull_entries (subscription_id, seq, tenant_id) VALUES (?1, ?2, ?3)")
                .bind(sub.hyphenated().to_string())
                .bind(seq)
                .bind(tenant)
                .execute(&mut **tx)
                .await?;
        }
        let now = micros(Utc::now());
        let before = leased.jobs.len();
        let jobs = lease_new_jobs(tenant, work.jobs, lease, room, leased);
        let mut taken: Vec<Uuid> = leased.jobs[before..].iter().map(|j| j.subscription_id).collect();
        taken.sort_unstable();
        taken.dedup();
        for id in taken {
            if let Some(row) = sub_rows.get(&id) {
                leased.subscriptions.push(subscription_from_row(row)?);
            }
        }
        for job in jobs {
            sqlx::query(
                "INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, due_at,
                    event_received_at, window_start, created_at, updated_at, lease_token, lease_expires_at,
                    ordering_key)
                 VALUES (?1, ?2, ?3, ?4, ?7, ?6, ?6, ?6, ?5, ?5, ?8, ?9, ?10)",
            )
            .bind(job.id.hyphenated().to_string())
            .bind(tenant)
            .bind(job.job.subscription.hyphenated().to_string())
            .bind(job.job.seq)
            .bind(now)
            .bind(micros(job.job.received_at))
            .bind(job.state().as_str())
            .bind(job.leased.map(|(token, _)| token.hyphenated().to_string()))
            .bind(job.leased.map(|(_, until)| micros(until)))
            .bind(job.job.ordering_key.clone())
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// Ends a subscription change: the row as updated (none when the update matched nothing),
    /// its waiting jobs moved to the state it now asks for, and the transaction committed.
    async fn changed(
        mut tx: Transaction<'static, Sqlite>,
        row: Option<SqliteRow>,
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
    async fn sync_waiting_jobs(tx: &mut Transaction<'_, Sqlite>, subscription: Uuid) -> StoreResult<()> {
        for (from, to, when) in SYNC_WAITING {
            let sql = format!(
                "UPDATE delivery_jobs SET state = '{to}', updated_at = ?2
                 WHERE subscription_id = ?1 AND state = '{from}'
                   AND EXISTS (SELECT 1 FROM subscriptions WHERE id = ?1 AND {when})"
            );
            sqlx::query(&sql).bind(text(subscription)).bind(micros(Utc::now())).execute(&mut **tx).await?;
        }
        Ok(())
    }

    async fn insert_quarantine(tx: &mut Transaction<'_, Sqlite>, record: &QuarantinedRecord) -> StoreResult<i64> {
        let headers = serde_json::to_string(&record.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let id =
            sql::bind_quarantined!(sqlx::query_scalar(sql::INSERT_QUARANTINE), record, headers: headers, time: micros)
                .fetch_one(&mut **tx)
                .await?;
        Ok(id)
    }
}

const EVENT_COLUMNS: &str = "tenant_id, seq, ce_id, source, ce_type, resource_type, event_type,
    event_time, schema_version, subject, data_content_type, data_schema, traceparent, tracestate,
    extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset, received_at, hub_traceparent,
    erased_by";

fn event_from_row(row: &SqliteRow) -> StoreResult<StoredEvent> {
    let extensions: String = row.try_get("extensions")?;
    let ce_id: String = row.try_get("ce_id")?;
    Ok(StoredEvent {
        tenant_id: row.try_get("tenant_id")?,
        seq: row.try_get("seq")?,
        ce_id: uuid_from_text(&ce_id)?,
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
        received_at: from_micros(row.try_get("received_at")?)?,
        trace: row.try_get("hub_traceparent")?,
        erasure_id: row.try_get::<Option<String>, _>("erased_by")?.as_deref().map(uuid_from_text).transpose()?,
    })
}

fn quarantine_from_row(row: &SqliteRow) -> StoreResult<QuarantineEntry> {
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
        received_at: from_micros(row.try_get("received_at")?)?,
    })
}

/// `?1` tenant, `?2` id, `?3`..`?18` every field a write sets: shared by create and update.
type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, <Sqlite as sqlx::Database>::Arguments<'q>>;

/// Binds `?1`..`?18` of a subscription write (see `create_subscription`).
fn bind_subscription<'q>(q: SqliteQuery<'q>, sub: &SubscriptionRecord) -> StoreResult<SqliteQuery<'q>> {
    let event_types = serde_json::to_string(&sub.event_types).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(q.bind(sub.tenant_id.clone())
        .bind(text(sub.id))
        .bind(sub.name.clone())
        .bind(event_types)
        .bind(sub.origin.clone())
        .bind(sub.sink.as_str().to_owned())
        .bind(sub.sink_config.to_string())
        .bind(sub.signing_secret.clone())
        .bind(sub.previous_secret.clone())
        .bind(sub.previous_secret_expires_at.map(micros))
        .bind(sub.credentials.clone())
        .bind(sub.enabled)
        .bind(sub.verification.as_str())
        .bind(sub.verification_error.clone())
        .bind(sub.disabled_reason.clone())
        .bind(micros(sub.updated_at))
        .bind(sub.failing_since.map(micros))
        .bind(sub.last_failure_at.map(micros)))
}

const SUBSCRIPTION_COLUMNS: &str =
    "id, tenant_id, name, event_types, origin, filters, transform, ordering, limits, allowed_rate, sink_type, sink_config,
    signing_secret, previous_secret, previous_secret_expires_at, credentials, enabled, verification_state,
    verification_error, disabled_reason, disabled_at, failing_since, last_failure_at, pull_cursor, pace_bucket,
    created_at, updated_at";

fn subscription_from_row(row: &SqliteRow) -> StoreResult<SubscriptionRecord> {
    let id = uuid_from_text(&row.try_get::<String, _>("id")?)?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("subscription {id}: {what}"));
    let event_types: String = row.try_get("event_types")?;
    let filters: String = row.try_get("filters")?;
    let sink_config: String = row.try_get("sink_config")?;
    let sink: String = row.try_get("sink_type")?;
    let verification: String = row.try_get("verification_state")?;
    let expires: Option<i64> = row.try_get("previous_secret_expires_at")?;
    let failing_since: Option<i64> = row.try_get("failing_since")?;
    let last_failure_at: Option<i64> = row.try_get("last_failure_at")?;
    Ok(SubscriptionRecord {
        id,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        event_types: serde_json::from_str(&event_types).map_err(|_| corrupt("event_types"))?,
        origin: row.try_get("origin")?,
        filters: serde_json::from_str(&filters).map_err(|_| corrupt("filters"))?,
        transform: row
            .try_get::<Option<String>, _>("transform")?
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|_| corrupt("transform"))?,
        ordering: hub_core::Ordering::parse(&row.try_get::<String, _>("ordering")?)
            .ok_or_else(|| corrupt("ordering"))?,
        sink: hub_core::SinkKind::parse(&sink).ok_or_else(|| corrupt("sink_type"))?,
        limits: serde_json::from_str(&row.try_get::<String, _>("limits")?).map_err(|_| corrupt("limits"))?,
        allowed_rate: row.try_get("allowed_rate")?,
        sink_config: serde_json::from_str(&sink_config).map_err(|_| corrupt("sink_config"))?,
        signing_secret: row.try_get("signing_secret")?,
        previous_secret: row.try_get("previous_secret")?,
        previous_secret_expires_at: expires.map(from_micros).transpose()?,
        credentials: row.try_get("credentials")?,
        enabled: row.try_get("enabled")?,
        verification: hub_core::VerificationState::parse(&verification).ok_or_else(|| corrupt("verification_state"))?,
        verification_error: row.try_get("verification_error")?,
        disabled_reason: row.try_get("disabled_reason")?,
        disabled_at: row.try_get::<Option<i64>, _>("disabled_at")?.map(from_micros).transpose()?,
        failing_since: failing_since.map(from_micros).transpose()?,
        last_failure_at: last_failure_at.map(from_micros).transpose()?,
        pull_cursor: row.try_get("pull_cursor")?,
        pace_bucket: row.try_get("pace_bucket")?,
        created_at: from_micros(row.try_get("created_at")?)?,
        updated_at: from_micros(row.try_get("updated_at")?)?,
    })
}

const JOB_COLUMNS: &str = sql::JOB_COLUMNS;

fn job_state(s: String) -> StoreResult<JobState> {
    JobState::parse(&s).ok_or_else(|| StoreError::Corrupt(format!("unknown job state {s:?}")))
}

fn job_from_row(row: &SqliteRow) -> StoreResult<DeliveryJob> {
    Ok(DeliveryJob {
        id: uuid_from_text(&row.try_get::<String, _>("id")?)?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: uuid_from_text(&row.try_get::<String, _>("subscription_id")?)?,
        event_seq: row.try_get("event_seq")?,
        state: job_state(row.try_get("state")?)?,
        attempts: row.try_get("attempts")?,
        recoveries: row.try_get("recoveries")?,
        due_at: from_micros(row.try_get("due_at")?)?,
        event_received_at: from_micros(row.try_get("event_received_at")?)?,
        window_start: from_micros(row.try_get("window_start")?)?,
        last_error: row.try_get("last_error")?,
        created_at: from_micros(row.try_get("created_at")?)?,
        updated_at: from_micros(row.try_get("updated_at")?)?,
        finished_at: row.try_get::<Option<i64>, _>("finished_at")?.map(from_micros).transpose()?,
    })
}

const CLAIMED_COLUMNS: &str =
    "id, tenant_id, subscription_id, event_seq, attempts, recoveries, window_start, event_received_at, lease_token";

fn claimed_from_row(row: &SqliteRow) -> StoreResult<ClaimedJob> {
    let token: Option<String> = row.try_get("lease_token")?;
    Ok(ClaimedJob {
        id: uuid_from_text(&row.try_get::<String, _>("id")?)?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: uuid_from_text(&row.try_get::<String, _>("subscription_id")?)?,
        event_seq: row.try_get("event_seq")?,
        attempts: row.try_get("attempts")?,
        recoveries: row.try_get("recoveries")?,
        window_start: from_micros(row.try_get("window_start")?)?,
        event_received_at: from_micros(row.try_get("event_received_at")?)?,
        token: uuid_from_text(&token.ok_or_else(|| StoreError::Corrupt("a claimed job has no lease token".into()))?)?,
    })
}

fn attempt_from_row(row: &SqliteRow) -> StoreResult<AttemptRecord> {
    Ok(AttemptRecord {
        id: uuid_from_text(&row.try_get::<String, _>("id")?)?,
        job_id: uuid_from_text(&row.try_get::<String, _>("job_id")?)?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: uuid_from_text(&row.try_get::<String, _>("subscription_id")?)?,
        attempt: row.try_get("attempt")?,
        started_at: from_micros(row.try_get("started_at")?)?,
        latency_ms: row.try_get("latency_ms")?,
        outcome: row.try_get("outcome")?,
        status_code: row.try_get("status_code")?,
        error: row.try_get("error")?,
        response_body: row.try_get("response_body")?,
        ledger_index: row.try_get("ledger_index")?,
    })
}

fn text(id: Uuid) -> String {
    id.hyphenated().to_string()
}

fn api_key_from_row(row: &SqliteRow) -> StoreResult<ApiKeyRecord> {
    let id: String = row.try_get("id")?;
    let revoked: Option<i64> = row.try_get("revoked_at")?;
    let expires: Option<i64> = row.try_get("expires_at")?;
    Ok(ApiKeyRecord {
        id: uuid_from_text(&id)?,
        tenant_id: if row.try_get::<bool, _>("admin")? { None } else { Some(row.try_get("tenant_id")?) },
        name: row.try_get("name")?,
        key_prefix: row.try_get("key_prefix")?,
        created_at: from_micros(row.try_get("created_at")?)?,
        revoked_at: revoked.map(from_micros).transpose()?,
        expires_at: expires.map(from_micros).transpose()?,
        role: row.try_get("role")?,
    })
}
