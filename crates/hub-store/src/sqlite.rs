//! The SQLite backend: the embedded default, one file, one node.
//!
//! SQLite has one writer at a time, so writes go through a pool of one connection and each write
//! transaction starts with `BEGIN IMMEDIATE` (it takes the write lock up front instead of failing
//! half-way). Reads use a separate pool and, in WAL mode, never wait for the writer. Times are
//! stored as Unix microseconds, UUIDs as lowercase text.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::{Row, Sqlite, SqlitePool, Transaction};
use uuid::Uuid;

use crate::PruneKind;
use crate::model::{MatchTarget, accepted_by_tenant, assign_seqs, match_events, ordered, per_tenant_share};
use crate::{
    AcceptedEvent, ApiKeyRecord, AttemptRecord, AttemptResult, ClaimRequest, ClaimedJob, Completed, DeliveryJob,
    DlqEntry, DlqFilter, HealthUpdate, IngestRecord, JobTransition, NewApiKey, NewDlqRecord, Origin, QuarantineEntry,
    QuarantineFilter, QuarantinedRecord, Recovery, Store, StoreError, StoreResult, StoredEvent, SubscriptionRecord,
    WriteOutcome,
};

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
    async fn complete_in(tx: &mut Transaction<'_, Sqlite>, r: &AttemptResult) -> StoreResult<Completed> {
        let a = &r.record;
        sqlx::query(
            "INSERT INTO delivery_attempts (id, job_id, tenant_id, subscription_id, attempt, started_at,
                latency_ms, outcome, status_code, error, response_body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
        .execute(&mut **tx)
        .await?;
        let (state, due_at, error, finished) = match &r.transition {
            JobTransition::Succeeded => ("succeeded", None, None, Some(r.now)),
            JobTransition::Retry { due_at } => ("pending", Some(*due_at), a.error.clone(), None),
            JobTransition::Dead { reason } => ("dead", None, Some(reason.clone()), Some(r.now)),
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
            HealthUpdate::Success => {
                sqlx::query(
                    "UPDATE subscriptions SET failing_since = NULL, last_failure_at = NULL
                     WHERE id = ?1 AND failing_since IS NOT NULL",
                )
                .bind(text(a.subscription_id))
                .execute(&mut **tx)
                .await?;
                false
            }
            HealthUpdate::Failure { at, disable } => {
                let done = sqlx::query(
                    "UPDATE subscriptions SET failing_since = COALESCE(failing_since, ?2), last_failure_at = ?2,
                        enabled = CASE WHEN ?3 IS NULL THEN enabled ELSE 0 END,
                        disabled_reason = COALESCE(?3, disabled_reason),
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
        };
        Ok(Completed { job_updated: job.rows_affected() == 1, disabled })
    }

    async fn insert_tenant_events(
        tx: &mut Transaction<'_, Sqlite>,
        tenant: &str,
        events: &[(usize, &AcceptedEvent)],
    ) -> StoreResult<Vec<(usize, WriteOutcome)>> {
        let last_seq: i64 = sqlx::query_scalar("SELECT last_seq FROM tenant_sequences WHERE tenant_id = ?1")
            .bind(tenant)
            .fetch_optional(&mut **tx)
            .await?
            .unwrap_or(0);
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
                    received_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                    ?18, ?19, ?20, ?21)",
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
            .execute(&mut **tx)
            .await?;
        }
        Self::insert_matched_work(tx, tenant, &inserts).await?;
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
    /// read per tenant and batch) and writes the jobs and pull entries they create.
    async fn insert_matched_work(
        tx: &mut Transaction<'_, Sqlite>,
        tenant: &str,
        inserts: &[(i64, &AcceptedEvent)],
    ) -> StoreResult<()> {
        let rows: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
            "SELECT id, sink_type, event_types, origin FROM subscriptions
             WHERE tenant_id = ?1 AND enabled = 1 AND verification_state = 'active'",
        )
        .bind(tenant)
        .fetch_all(&mut **tx)
        .await?;
        let targets = rows
            .into_iter()
            .map(|(id, sink, types, origin)| MatchTarget::new(uuid_from_text(&id)?, &sink, &types, origin))
            .collect::<StoreResult<Vec<_>>>()?;
        let work = match_events(tenant, &targets, inserts);
        for (sub, seq) in work.pulls {
            sqlx::query("INSERT INTO pull_entries (subscription_id, seq, tenant_id) VALUES (?1, ?2, ?3)")
                .bind(sub.hyphenated().to_string())
                .bind(seq)
                .bind(tenant)
                .execute(&mut **tx)
                .await?;
        }
        let now = micros(Utc::now());
        for (sub, seq, received) in work.jobs {
            sqlx::query(
                "INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, due_at,
                    event_received_at, window_start, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, 'pending', ?6, ?6, ?6, ?5, ?5)",
            )
            .bind(Uuid::now_v7().hyphenated().to_string())
            .bind(tenant)
            .bind(sub.hyphenated().to_string())
            .bind(seq)
            .bind(now)
            .bind(micros(received))
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    async fn insert_quarantine(tx: &mut Transaction<'_, Sqlite>, record: &QuarantinedRecord) -> StoreResult<i64> {
        let (topic, partition, offset) = record.origin.kafka_parts();
        let headers = serde_json::to_string(&record.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let id = sqlx::query_scalar(
            "INSERT INTO quarantine (tenant_id, source, ce_id, reason_code, reason_field, reason,
                headers, body, body_bytes, origin, kafka_topic, kafka_partition, kafka_offset,
                received_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
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
        .bind(micros(record.received_at))
        .fetch_one(&mut **tx)
        .await?;
        Ok(id)
    }
}

const EVENT_COLUMNS: &str = "tenant_id, seq, ce_id, source, ce_type, resource_type, event_type,
    event_time, schema_version, subject, data_content_type, data_schema, traceparent, tracestate,
    extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset, received_at";

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
const UPDATE_SUBSCRIPTION: &str = "UPDATE subscriptions SET name = ?3, event_types = ?4, origin = ?5,
    sink_type = ?6, sink_config = ?7, signing_secret = ?8, previous_secret = ?9,
    previous_secret_expires_at = ?10, credentials = ?11, enabled = ?12, verification_state = ?13,
    verification_error = ?14, disabled_reason = ?15, updated_at = ?16, failing_since = ?17,
    last_failure_at = ?18
    WHERE tenant_id = ?1 AND id = ?2";

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, <Sqlite as sqlx::Database>::Arguments>;

/// Binds `?1`..`?18` of a subscription write (see [`UPDATE_SUBSCRIPTION`]).
fn bind_subscription<'q>(q: SqliteQuery<'q>, sub: &SubscriptionRecord) -> StoreResult<SqliteQuery<'q>> {
    let event_types = serde_json::to_string(&sub.event_types).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(q.bind(sub.tenant_id.clone())
        .bind(text(sub.id))
        .bind(sub.name.clone())
        .bind(event_types)
        .bind(sub.origin.clone())
        .bind(sub.sink.as_str())
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

const SUBSCRIPTION_COLUMNS: &str = "id, tenant_id, name, event_types, origin, sink_type, sink_config,
    signing_secret, previous_secret, previous_secret_expires_at, credentials, enabled, verification_state,
    verification_error, disabled_reason, failing_since, last_failure_at, pull_cursor, created_at, updated_at";

fn subscription_from_row(row: &SqliteRow) -> StoreResult<SubscriptionRecord> {
    let id = uuid_from_text(&row.try_get::<String, _>("id")?)?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("subscription {id}: {what}"));
    let event_types: String = row.try_get("event_types")?;
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
        sink: hub_core::SinkKind::parse(&sink).ok_or_else(|| corrupt("sink_type"))?,
        sink_config: serde_json::from_str(&sink_config).map_err(|_| corrupt("sink_config"))?,
        signing_secret: row.try_get("signing_secret")?,
        previous_secret: row.try_get("previous_secret")?,
        previous_secret_expires_at: expires.map(from_micros).transpose()?,
        credentials: row.try_get("credentials")?,
        enabled: row.try_get("enabled")?,
        verification: hub_core::VerificationState::parse(&verification).ok_or_else(|| corrupt("verification_state"))?,
        verification_error: row.try_get("verification_error")?,
        disabled_reason: row.try_get("disabled_reason")?,
        failing_since: failing_since.map(from_micros).transpose()?,
        last_failure_at: last_failure_at.map(from_micros).transpose()?,
        pull_cursor: row.try_get("pull_cursor")?,
        created_at: from_micros(row.try_get("created_at")?)?,
        updated_at: from_micros(row.try_get("updated_at")?)?,
    })
}

const JOB_COLUMNS: &str = "id, tenant_id, subscription_id, event_seq, state, attempts, recoveries, due_at,
    event_received_at, window_start, last_error, created_at, updated_at, finished_at";

fn job_from_row(row: &SqliteRow) -> StoreResult<DeliveryJob> {
    Ok(DeliveryJob {
        id: uuid_from_text(&row.try_get::<String, _>("id")?)?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: uuid_from_text(&row.try_get::<String, _>("subscription_id")?)?,
        event_seq: row.try_get("event_seq")?,
        state: row.try_get("state")?,
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
    })
}

fn text(id: Uuid) -> String {
    id.hyphenated().to_string()
}

fn api_key_from_row(row: &SqliteRow) -> StoreResult<ApiKeyRecord> {
    let id: String = row.try_get("id")?;
    let revoked: Option<i64> = row.try_get("revoked_at")?;
    Ok(ApiKeyRecord {
        id: uuid_from_text(&id)?,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        key_prefix: row.try_get("key_prefix")?,
        created_at: from_micros(row.try_get("created_at")?)?,
        revoked_at: revoked.map(from_micros).transpose()?,
    })
}

#[async_trait]
impl Store for SqliteStore {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.writer).await?;
        Ok(())
    }

    async fn pending_migrations(&self) -> StoreResult<Vec<i64>> {
        let applied = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(&self.reader)
            .await
            .map_err(StoreError::from);
        crate::pending(&MIGRATOR, applied)
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    async fn write_batch(&self, batch: &[IngestRecord]) -> StoreResult<Vec<WriteOutcome>> {
        let mut tx = self.begin_write().await?;
        let mut outcomes = Vec::with_capacity(batch.len());
        for (tenant, events) in accepted_by_tenant(batch) {
            outcomes.extend(Self::insert_tenant_events(&mut tx, tenant, &events).await?);
        }
        for (i, record) in batch.iter().enumerate() {
            if let IngestRecord::Quarantined(q) = record {
                let id = Self::insert_quarantine(&mut tx, q).await?;
                outcomes.push((i, WriteOutcome::Quarantined { id }));
            }
        }
        tx.commit().await?;
        ordered(batch.len(), outcomes)
    }

    async fn event_by_ce_id(&self, tenant: &str, ce_id: Uuid) -> StoreResult<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = ?1 AND ce_id = ?2");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(ce_id.hyphenated().to_string())
            .fetch_optional(&self.reader)
            .await?
            .as_ref()
            .map(event_from_row)
            .transpose()
    }

    async fn events_after(&self, tenant: &str, after: i64, limit: u32) -> StoreResult<Vec<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn create_subscription(&self, sub: &SubscriptionRecord) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        let insert = sqlx::query(
            "INSERT INTO subscriptions (tenant_id, id, name, event_types, origin, sink_type, sink_config,
                signing_secret, previous_secret, previous_secret_expires_at, credentials, enabled,
                verification_state, verification_error, disabled_reason, updated_at, failing_since,
                last_failure_at, pull_cursor, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
        );
        bind_subscription(insert, sub)?.bind(sub.pull_cursor).bind(micros(sub.created_at)).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn subscription(&self, tenant: &str, id: Uuid) -> StoreResult<Option<SubscriptionRecord>> {
        let sql = format!("SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE tenant_id = ?1 AND id = ?2");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(id.hyphenated().to_string())
            .fetch_optional(&self.reader)
            .await?
            .as_ref()
            .map(subscription_from_row)
            .transpose()
    }

    async fn list_subscriptions(
        &self,
        tenant: &str,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!(
            "SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions
             WHERE tenant_id = ?1 AND (?2 IS NULL OR id > ?2) ORDER BY id LIMIT ?3"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(after.map(|u| u.hyphenated().to_string()))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(subscription_from_row)
            .collect()
    }

    async fn update_subscription(&self, sub: &SubscriptionRecord) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = bind_subscription(sqlx::query(UPDATE_SUBSCRIPTION), sub)?.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_subscription(&self, tenant: &str, id: Uuid) -> StoreResult<bool> {
        let id_text = id.hyphenated().to_string();
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("DELETE FROM subscriptions WHERE tenant_id = ?1 AND id = ?2")
            .bind(tenant)
            .bind(&id_text)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE delivery_jobs SET state = 'cancelled', lease_expires_at = NULL, updated_at = ?2
             WHERE subscription_id = ?1 AND state IN ('pending', 'leased')",
        )
        .bind(&id_text)
        .bind(micros(Utc::now()))
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM pull_entries WHERE subscription_id = ?1").bind(&id_text).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn pull_events(
        &self,
        tenant: &str,
        subscription: Uuid,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<StoredEvent>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM pull_entries p
             JOIN events e USING (tenant_id, seq)
             WHERE p.subscription_id = ?1 AND p.tenant_id = ?2 AND p.seq > ?3
             ORDER BY p.seq LIMIT ?4"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(subscription.hyphenated().to_string())
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn advance_pull_cursor(&self, tenant: &str, subscription: Uuid, to: i64) -> StoreResult<i64> {
        let mut tx = self.begin_write().await?;
        let cursor: Option<i64> = sqlx::query_scalar(
            "UPDATE subscriptions SET pull_cursor = MAX(pull_cursor, ?3)
             WHERE tenant_id = ?1 AND id = ?2 RETURNING pull_cursor",
        )
        .bind(tenant)
        .bind(subscription.hyphenated().to_string())
        .bind(to)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(cursor.unwrap_or(to))
    }

    async fn list_jobs(
        &self,
        tenant: &str,
        subscription: Uuid,
        state: Option<&str>,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryJob>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM delivery_jobs
             WHERE tenant_id = ?1 AND subscription_id = ?2 AND (?3 IS NULL OR state = ?3)
               AND (?4 IS NULL OR id > ?4)
             ORDER BY id LIMIT ?5"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(subscription.hyphenated().to_string())
            .bind(state)
            .bind(after.map(|u| u.hyphenated().to_string()))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(job_from_row)
            .collect()
    }

    async fn event_by_seq(&self, tenant: &str, seq: i64) -> StoreResult<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = ?1 AND seq = ?2");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(seq)
            .fetch_optional(&self.reader)
            .await?
            .as_ref()
            .map(event_from_row)
            .transpose()
    }

    async fn events_by_seqs(&self, keys: &[(String, i64)]) -> StoreResult<Vec<StoredEvent>> {
        let mut events = Vec::with_capacity(keys.len());
        for (tenant, seq) in keys {
            events.extend(self.event_by_seq(tenant, *seq).await?);
        }
        Ok(events)
    }

    async fn subscriptions_by_ids(&self, ids: &[Uuid]) -> StoreResult<Vec<SubscriptionRecord>> {
        let ids = serde_json::to_string(&ids.iter().map(|u| text(*u)).collect::<Vec<_>>())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let sql =
            format!("SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE id IN (SELECT value FROM json_each(?1))");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(ids)
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(subscription_from_row)
            .collect()
    }

    async fn claim_jobs(&self, req: &ClaimRequest) -> StoreResult<Vec<ClaimedJob>> {
        let now = micros(req.now);
        let mut tx = self.begin_write().await?;
        let limit = i64::from(req.limit.max(1));
        let tenants_sql = "WITH RECURSIVE t(tenant_id) AS (
                SELECT (SELECT tenant_id FROM delivery_jobs
                        WHERE state = 'pending' AND due_at <= ?1 AND tenant_id > ?2
                        ORDER BY tenant_id LIMIT 1)
                UNION ALL
                SELECT (SELECT d.tenant_id FROM delivery_jobs d
                        WHERE d.state = 'pending' AND d.due_at <= ?1 AND d.tenant_id > t.tenant_id
                        ORDER BY d.tenant_id LIMIT 1)
                FROM t WHERE t.tenant_id IS NOT NULL
             )
             SELECT tenant_id FROM t WHERE tenant_id IS NOT NULL LIMIT ?3";
        let mut tenants: Vec<String> = sqlx::query_scalar(tenants_sql)
            .bind(now)
            .bind(req.after_tenant.clone().unwrap_or_default())
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        if (tenants.len() as i64) < limit && req.after_tenant.is_some() {
            let wrapped: Vec<String> =
                sqlx::query_scalar(tenants_sql).bind(now).bind("").bind(limit).fetch_all(&mut *tx).await?;
            for t in wrapped {
                if !tenants.contains(&t) && (tenants.len() as i64) < limit {
                    tenants.push(t);
                }
            }
        }
        let mut claimed: Vec<ClaimedJob> = Vec::new();
        let excluded = serde_json::to_string(&req.exclude_subscriptions.iter().map(|u| text(*u)).collect::<Vec<_>>())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let sql = format!(
            "UPDATE delivery_jobs SET state = 'leased', lease_expires_at = ?3, lease_token = ?4, updated_at = ?2
             WHERE id IN (
                SELECT d.id FROM delivery_jobs d JOIN subscriptions s ON s.id = d.subscription_id
                WHERE d.tenant_id = ?1 AND d.state = 'pending' AND d.due_at <= ?2
                  AND s.enabled = 1 AND s.verification_state = 'active'
                  AND d.subscription_id NOT IN (SELECT value FROM json_each(?5))
                ORDER BY d.due_at LIMIT ?6)
             RETURNING {CLAIMED_COLUMNS}"
        );
        // Every tenant gets its share; what a tenant could not use goes round again to those that
        // filled theirs, so one claim is both fair and full.
        let mut active = tenants;
        while !active.is_empty() && (claimed.len() as u32) < req.limit {
            let share = per_tenant_share(req.limit - claimed.len() as u32, active.len());
            let mut still = Vec::new();
            for tenant in &active {
                let want = share.min(req.limit - claimed.len() as u32);
                if want == 0 {
                    break;
                }
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(tenant)
                    .bind(now)
                    .bind(micros(req.lease_until))
                    .bind(text(req.token))
                    .bind(&excluded)
                    .bind(i64::from(want))
                    .fetch_all(&mut *tx)
                    .await?;
                if rows.len() as u32 == want {
                    still.push(tenant.clone());
                }
                for row in &rows {
                    claimed.push(claimed_from_row(row)?);
                }
            }
            active = still;
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn release_job(&self, job: Uuid, token: Uuid, due_at: DateTime<Utc>) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE delivery_jobs SET state = 'pending', due_at = ?3, lease_expires_at = NULL, lease_token = NULL,
                updated_at = ?4
             WHERE id = ?1 AND lease_token = ?2 AND state = 'leased'",
        )
        .bind(text(job))
        .bind(text(token))
        .bind(micros(due_at))
        .bind(micros(Utc::now()))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    async fn complete_attempts(&self, results: &[AttemptResult]) -> StoreResult<Vec<Completed>> {
        let mut tx = self.begin_write().await?;
        let mut done = Vec::with_capacity(results.len());
        for r in results {
            done.push(Self::complete_in(&mut tx, r).await?);
        }
        tx.commit().await?;
        Ok(done)
    }

    async fn recover_expired_leases(&self, now: DateTime<Utc>, poison_threshold: u32) -> StoreResult<Recovery> {
        let mut tx = self.begin_write().await?;
        let states: Vec<String> = sqlx::query_scalar(
            "UPDATE delivery_jobs SET recoveries = recoveries + 1,
                state = CASE WHEN recoveries + 1 >= ?2 THEN 'dead' ELSE 'pending' END,
                finished_at = CASE WHEN recoveries + 1 >= ?2 THEN ?1 ELSE NULL END,
                last_error = CASE WHEN recoveries + 1 >= ?2 THEN ?3
                                  ELSE 'lease expired without an outcome; recovered' END,
                due_at = ?1, lease_expires_at = NULL, lease_token = NULL, updated_at = ?1
             WHERE state = 'leased' AND lease_expires_at < ?1
             RETURNING state",
        )
        .bind(micros(now))
        .bind(i64::from(poison_threshold))
        .bind(hub_core::delivery::DeadReason::Poison.as_str())
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let poisoned = states.iter().filter(|s| s.as_str() == "dead").count() as u64;
        Ok(Recovery { recovered: states.len() as u64 - poisoned, poisoned })
    }

    async fn attempts_for_jobs(&self, tenant: &str, jobs: &[Uuid]) -> StoreResult<Vec<AttemptRecord>> {
        let ids = serde_json::to_string(&jobs.iter().map(|u| text(*u)).collect::<Vec<_>>())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "SELECT id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms, outcome, status_code,
                error, response_body
             FROM delivery_attempts
             WHERE tenant_id = ?1 AND job_id IN (SELECT value FROM json_each(?2))
             ORDER BY job_id, attempt, started_at",
        )
        .bind(tenant)
        .bind(ids)
        .fetch_all(&self.reader)
        .await?
        .iter()
        .map(attempt_from_row)
        .collect()
    }

    async fn redrive(
        &self,
        tenant: &str,
        subscription: Uuid,
        since: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE delivery_jobs SET state = 'pending', attempts = 0, recoveries = 0, due_at = ?4,
                window_start = ?4, last_error = NULL, finished_at = NULL, updated_at = ?4
             WHERE tenant_id = ?1 AND subscription_id = ?2 AND state = 'dead'
               AND (?3 IS NULL OR finished_at >= ?3)",
        )
        .bind(tenant)
        .bind(text(subscription))
        .bind(since.map(micros))
        .bind(micros(now))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }

    async fn listen_for_jobs(&self, _notify: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<()> {
        // One node: every job is created in this process, which wakes its dispatcher directly.
        Ok(())
    }

    async fn write_dlq_records(&self, records: &[NewDlqRecord]) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let mut new = 0;
        for r in records {
            let headers = serde_json::to_string(&r.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let done = sqlx::query(
                "INSERT INTO dlq_records (topic, kafka_partition, kafka_offset, source, tenant_id, ce_id, ce_type,
                    error_class, error_message, headers, body, body_bytes, payload_omitted, record_timestamp,
                    received_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
                 ON CONFLICT (topic, kafka_partition, kafka_offset) DO NOTHING",
            )
            .bind(&r.topic)
            .bind(r.partition)
            .bind(r.offset)
            .bind(&r.source)
            .bind(&r.tenant_id)
            .bind(&r.ce_id)
            .bind(&r.ce_type)
            .bind(&r.error_class)
            .bind(&r.error_message)
            .bind(headers)
            .bind(&r.body)
            .bind(r.body_bytes)
            .bind(r.payload_omitted)
            .bind(r.record_timestamp.map(micros))
            .bind(micros(r.received_at))
            .execute(&mut *tx)
            .await?;
            new += done.rows_affected();
        }
        tx.commit().await?;
        Ok(new)
    }

    async fn list_dlq(&self, f: &DlqFilter) -> StoreResult<Vec<DlqEntry>> {
        sqlx::query(
            "SELECT id, topic, kafka_partition, kafka_offset, source, tenant_id, ce_id, ce_type, error_class,
                error_message, headers, body, body_bytes, payload_omitted, record_timestamp, received_at
             FROM dlq_records
             WHERE (?1 IS NULL OR source = ?1)
               AND (?2 IS NULL OR tenant_id = ?2)
               AND (?3 IS NULL OR error_class = ?3)
               AND (?4 IS NULL OR received_at >= ?4)
               AND (?5 IS NULL OR received_at < ?5)
               AND (?6 IS NULL OR id < ?6)
             ORDER BY id DESC LIMIT ?7",
        )
        .bind(&f.source)
        .bind(&f.tenant)
        .bind(&f.error_class)
        .bind(f.since.map(micros))
        .bind(f.until.map(micros))
        .bind(f.before_id)
        .bind(i64::from(f.limit))
        .fetch_all(&self.reader)
        .await?
        .iter()
        .map(|row| {
            let headers: String = row.try_get("headers")?;
            let ts: Option<i64> = row.try_get("record_timestamp")?;
            Ok(DlqEntry {
                id: row.try_get("id")?,
                record: NewDlqRecord {
                    topic: row.try_get("topic")?,
                    partition: row.try_get("kafka_partition")?,
                    offset: row.try_get("kafka_offset")?,
                    source: row.try_get("source")?,
                    tenant_id: row.try_get("tenant_id")?,
                    ce_id: row.try_get("ce_id")?,
                    ce_type: row.try_get("ce_type")?,
                    error_class: row.try_get("error_class")?,
                    error_message: row.try_get("error_message")?,
                    headers: serde_json::from_str(&headers).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                    body: row.try_get("body")?,
                    body_bytes: row.try_get("body_bytes")?,
                    payload_omitted: row.try_get("payload_omitted")?,
                    record_timestamp: ts.map(from_micros).transpose()?,
                    received_at: from_micros(row.try_get("received_at")?)?,
                },
            })
        })
        .collect()
    }

    async fn prune(&self, kind: PruneKind, older_than: DateTime<Utc>, limit: u32) -> StoreResult<Option<u64>> {
        // One node: no other replica to coordinate with.
        let mut tx = self.begin_write().await?;
        let (cutoff, limit) = (micros(older_than), i64::from(limit));
        let deleted = match kind {
            PruneKind::Quarantine => sqlx::query(
                "DELETE FROM quarantine WHERE id IN
                    (SELECT id FROM quarantine WHERE received_at < ?1 ORDER BY id LIMIT ?2)",
            )
            .bind(cutoff)
            .bind(limit)
            .execute(&mut *tx)
            .await?
            .rows_affected(),
            PruneKind::Dlq => sqlx::query(
                "DELETE FROM dlq_records WHERE id IN
                    (SELECT id FROM dlq_records WHERE received_at < ?1 ORDER BY id LIMIT ?2)",
            )
            .bind(cutoff)
            .bind(limit)
            .execute(&mut *tx)
            .await?
            .rows_affected(),
            PruneKind::FinishedJobs => {
                let doomed = "SELECT id FROM delivery_jobs
                     WHERE state IN ('succeeded', 'dead', 'cancelled') AND COALESCE(finished_at, updated_at) < ?1
                     LIMIT ?2";
                sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM delivery_attempts WHERE job_id IN ({doomed})")))
                    .bind(cutoff)
                    .bind(limit)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM delivery_jobs WHERE id IN ({doomed})")))
                    .bind(cutoff)
                    .bind(limit)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
            PruneKind::Events => {
                let gone: Vec<(String, i64)> = sqlx::query_as(
                    "DELETE FROM events WHERE (tenant_id, seq) IN (
                        SELECT e.tenant_id, e.seq FROM events e
                        WHERE e.received_at < ?1
                          AND NOT EXISTS (SELECT 1 FROM delivery_jobs j WHERE j.tenant_id = e.tenant_id AND j.event_seq = e.seq)
                        ORDER BY e.received_at LIMIT ?2)
                     RETURNING tenant_id, seq",
                )
                .bind(cutoff)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
                for (tenant, seq) in &gone {
                    sqlx::query("DELETE FROM pull_entries WHERE tenant_id = ?1 AND seq = ?2")
                        .bind(tenant)
                        .bind(seq)
                        .execute(&mut *tx)
                        .await?;
                }
                gone.len() as u64
            }
        };
        tx.commit().await?;
        Ok(Some(deleted))
    }

    async fn inbox_size(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM events").fetch_one(&self.reader).await?)
    }

    async fn job_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        Ok(sqlx::query_as("SELECT state, count(*) FROM delivery_jobs GROUP BY state").fetch_all(&self.reader).await?)
    }

    async fn list_quarantine(&self, f: &QuarantineFilter) -> StoreResult<Vec<QuarantineEntry>> {
        sqlx::query(
            "SELECT id, tenant_id, source, ce_id, reason_code, reason_field, reason, headers, body,
                body_bytes, origin, kafka_topic, kafka_partition, kafka_offset, received_at
             FROM quarantine
             WHERE (?1 IS NULL OR tenant_id = ?1)
               AND (?2 IS NULL OR source = ?2)
               AND (?3 IS NULL OR reason_code = ?3)
               AND (?4 IS NULL OR origin = ?4)
               AND (?5 IS NULL OR received_at >= ?5)
               AND (?6 IS NULL OR received_at < ?6)
               AND (?7 IS NULL OR id < ?7)
             ORDER BY id DESC
             LIMIT ?8",
        )
        .bind(&f.tenant)
        .bind(&f.source)
        .bind(&f.reason_code)
        .bind(&f.origin)
        .bind(f.since.map(micros))
        .bind(f.until.map(micros))
        .bind(f.before_id)
        .bind(i64::from(f.limit))
        .fetch_all(&self.reader)
        .await?
        .iter()
        .map(quarantine_from_row)
        .collect()
    }

    async fn create_api_key(&self, key: &NewApiKey) -> StoreResult<ApiKeyRecord> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "INSERT INTO api_keys (id, tenant_id, name, key_hash, key_prefix, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             RETURNING id, tenant_id, name, key_prefix, created_at, revoked_at",
        )
        .bind(key.id.hyphenated().to_string())
        .bind(&key.tenant_id)
        .bind(&key.name)
        .bind(&key.key_hash)
        .bind(&key.key_prefix)
        .bind(micros(key.created_at))
        .fetch_one(&mut *tx)
        .await?;
        let record = api_key_from_row(&row)?;
        tx.commit().await?;
        Ok(record)
    }

    async fn list_api_keys(&self, before: Option<Uuid>, limit: u32) -> StoreResult<Vec<ApiKeyRecord>> {
        sqlx::query(
            "SELECT id, tenant_id, name, key_prefix, created_at, revoked_at FROM api_keys
             WHERE (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2",
        )
        .bind(before.map(|u| u.hyphenated().to_string()))
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?
        .iter()
        .map(api_key_from_row)
        .collect()
    }

    async fn revoke_api_key(&self, id: Uuid) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL")
            .bind(id.hyphenated().to_string())
            .bind(micros(Utc::now()))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    async fn api_key_by_hash(&self, hash: &[u8]) -> StoreResult<Option<ApiKeyRecord>> {
        sqlx::query(
            "SELECT id, tenant_id, name, key_prefix, created_at, revoked_at FROM api_keys
             WHERE key_hash = ?1 AND revoked_at IS NULL",
        )
        .bind(hash)
        .fetch_optional(&self.reader)
        .await?
        .as_ref()
        .map(api_key_from_row)
        .transpose()
    }
}
