//! The PostgreSQL backend: production, shared by any number of replicas.
//!
//! A batch locks the sequence row of each of its tenants (in tenant order, so two batches never
//! deadlock), checks which ids the tenant already has, and inserts the new events with one
//! `UNNEST` statement per tenant.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use crate::model::{accepted_by_tenant, assign_seqs, ordered};
use crate::{
    AcceptedEvent, ApiKeyRecord, IngestRecord, NewApiKey, Origin, QuarantineEntry, QuarantineFilter, QuarantinedRecord,
    Store, StoreError, StoreResult, StoredEvent, WriteOutcome,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// The PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// Connects a pool; with `schema`, every connection works inside that schema.
    pub async fn connect(dsn: &str, schema: Option<&str>, max_connections: u32) -> StoreResult<Self> {
        let mut options = PgConnectOptions::from_str(dsn)?.application_name("streaming-hub");
        if let Some(schema) = schema {
            options = options.options([("search_path", schema)]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect_with(options)
            .await?;
        Ok(Self { pool })
    }

    /// The pool, for the service's own PostgreSQL-only needs (notifications, advisory locks).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn insert_tenant_events(
        tx: &mut Transaction<'_, Postgres>,
        tenant: &str,
        events: &[(usize, &AcceptedEvent)],
    ) -> StoreResult<Vec<(usize, WriteOutcome)>> {
        // Locks the tenant's sequence row until commit: writers of one tenant take turns.
        let last_seq: i64 = sqlx::query_scalar(
            "INSERT INTO tenant_sequences (tenant_id, last_seq) VALUES ($1, 0)
             ON CONFLICT (tenant_id) DO UPDATE SET last_seq = tenant_sequences.last_seq
             RETURNING last_seq",
        )
        .bind(tenant)
        .fetch_one(&mut **tx)
        .await?;

        let ids: Vec<Uuid> = events.iter().map(|(_, e)| e.envelope.id().as_uuid()).collect();
        let existing: HashMap<Uuid, i64> =
            sqlx::query_as("SELECT ce_id, seq FROM events WHERE tenant_id = $1 AND ce_id = ANY($2)")
                .bind(tenant)
                .bind(&ids)
                .fetch_all(&mut **tx)
                .await?
                .into_iter()
                .collect();

        let (outcomes, inserts, new_last) = assign_seqs(events, &existing, last_seq);
        if inserts.is_empty() {
            return Ok(outcomes);
        }
        let mut cols = EventColumns::default();
        for (seq, event) in &inserts {
            cols.push(*seq, event);
        }
        sqlx::query(
            "INSERT INTO events (tenant_id, seq, ce_id, source, ce_type, resource_type, event_type,
                event_time, schema_version, subject, data_content_type, data_schema, traceparent,
                tracestate, extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset,
                received_at)
             SELECT $1, t.seq, t.ce_id, t.source, t.ce_type, t.resource_type, t.event_type,
                t.event_time, t.schema_version, t.subject, t.data_content_type, t.data_schema,
                t.traceparent, t.tracestate, t.extensions::jsonb, t.payload, t.origin, t.kafka_topic,
                t.kafka_partition, t.kafka_offset, t.received_at
             FROM UNNEST($2::bigint[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[],
                $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[],
                $14::text[], $15::text[], $16::bytea[], $17::text[], $18::text[], $19::int[],
                $20::bigint[], $21::timestamptz[])
             AS t(seq, ce_id, source, ce_type, resource_type, event_type, event_time,
                schema_version, subject, data_content_type, data_schema, traceparent, tracestate,
                extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset, received_at)",
        )
        .bind(tenant)
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
        .execute(&mut **tx)
        .await?;

        sqlx::query("UPDATE tenant_sequences SET last_seq = $2 WHERE tenant_id = $1")
            .bind(tenant)
            .bind(new_last)
            .execute(&mut **tx)
            .await?;
        Ok(outcomes)
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
}

impl EventColumns {
    fn push(&mut self, seq: i64, event: &AcceptedEvent) {
        let env = &event.envelope;
        let (topic, partition, offset) = event.origin.kafka_parts();
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
    }
}

const EVENT_COLUMNS: &str = "tenant_id, seq, ce_id, source, ce_type, resource_type, event_type,
    event_time, schema_version, subject, data_content_type, data_schema, traceparent, tracestate,
    extensions::text AS extensions, payload, origin, kafka_topic, kafka_partition, kafka_offset,
    received_at";

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

fn api_key_from_row(row: &PgRow) -> StoreResult<ApiKeyRecord> {
    Ok(ApiKeyRecord {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        name: row.try_get("name")?,
        key_prefix: row.try_get("key_prefix")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

#[async_trait]
impl Store for PgStore {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn pending_migrations(&self) -> StoreResult<Vec<i64>> {
        let applied = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::from);
        crate::pending(&MIGRATOR, applied)
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn write_batch(&self, batch: &[IngestRecord]) -> StoreResult<Vec<WriteOutcome>> {
        let mut tx = self.pool.begin().await?;
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
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND ce_id = $2");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(ce_id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(event_from_row)
            .transpose()
    }

    async fn events_after(&self, tenant: &str, after: i64, limit: u32) -> StoreResult<Vec<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND seq > $2 ORDER BY seq LIMIT $3");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn list_quarantine(&self, f: &QuarantineFilter) -> StoreResult<Vec<QuarantineEntry>> {
        sqlx::query(
            "SELECT id, tenant_id, source, ce_id, reason_code, reason_field, reason,
                headers::text AS headers, body, body_bytes, origin, kafka_topic, kafka_partition,
                kafka_offset, received_at
             FROM quarantine
             WHERE ($1::text IS NULL OR tenant_id = $1)
               AND ($2::text IS NULL OR source = $2)
               AND ($3::text IS NULL OR reason_code = $3)
               AND ($4::text IS NULL OR origin = $4)
               AND ($5::timestamptz IS NULL OR received_at >= $5)
               AND ($6::timestamptz IS NULL OR received_at < $6)
               AND ($7::bigint IS NULL OR id < $7)
             ORDER BY id DESC
             LIMIT $8",
        )
        .bind(&f.tenant)
        .bind(&f.source)
        .bind(&f.reason_code)
        .bind(&f.origin)
        .bind(f.since)
        .bind(f.until)
        .bind(f.before_id)
        .bind(i64::from(f.limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(quarantine_from_row)
        .collect()
    }

    async fn create_api_key(&self, key: &NewApiKey) -> StoreResult<ApiKeyRecord> {
        let row = sqlx::query(
            "INSERT INTO api_keys (id, tenant_id, name, key_hash, key_prefix, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             RETURNING id, tenant_id, name, key_prefix, created_at, revoked_at",
        )
        .bind(key.id)
        .bind(&key.tenant_id)
        .bind(&key.name)
        .bind(&key.key_hash)
        .bind(&key.key_prefix)
        .bind(key.created_at)
        .fetch_one(&self.pool)
        .await?;
        api_key_from_row(&row)
    }

    async fn list_api_keys(&self, before: Option<Uuid>, limit: u32) -> StoreResult<Vec<ApiKeyRecord>> {
        sqlx::query(
            "SELECT id, tenant_id, name, key_prefix, created_at, revoked_at FROM api_keys
             WHERE ($1::uuid IS NULL OR id < $1) ORDER BY id DESC LIMIT $2",
        )
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(api_key_from_row)
        .collect()
    }

    async fn revoke_api_key(&self, id: Uuid) -> StoreResult<bool> {
        let done = sqlx::query("UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn api_key_by_hash(&self, hash: &[u8]) -> StoreResult<Option<ApiKeyRecord>> {
        sqlx::query(
            "SELECT id, tenant_id, name, key_prefix, created_at, revoked_at FROM api_keys
             WHERE key_hash = $1 AND revoked_at IS NULL",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(api_key_from_row)
        .transpose()
    }
}
