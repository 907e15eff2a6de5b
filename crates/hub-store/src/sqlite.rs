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

use crate::model::{accepted_by_tenant, assign_seqs, ordered};
use crate::{
    AcceptedEvent, ApiKeyRecord, IngestRecord, NewApiKey, Origin, QuarantineEntry, QuarantineFilter, QuarantinedRecord,
    Store, StoreError, StoreResult, StoredEvent, WriteOutcome,
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
        for (seq, event) in inserts {
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
