//! Schema, health, quarantine, the DLQ plane, retention and API keys.

use super::{
    ApiKeyRecord, DateTime, DlqEntry, DlqFilter, MIGRATOR, NewApiKey, NewDlqRecord, Operations, PruneKind,
    QuarantineEntry, QuarantineFilter, SqliteStore, StoreError, StoreResult, Utc, Uuid, api_key_from_row, async_trait,
    from_micros, micros, quarantine_from_row,
};
use crate::sql;
use sqlx::Row;

use crate::Connections;

#[async_trait]
impl Operations for SqliteStore {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.writer).await?;
        Ok(())
    }

    async fn pending_migrations(&self) -> StoreResult<Vec<i64>> {
        let applied =
            sqlx::query_scalar(sql::PENDING_MIGRATIONS).fetch_all(&self.reader).await.map_err(StoreError::from);
        crate::pending(&MIGRATOR, applied)
    }

    async fn tenants(&self) -> StoreResult<Vec<crate::TenantSummary>> {
        let events = sqlx::query_as(sql::EVENTS_BY_TENANT).fetch_all(&self.reader).await?;
        let subscriptions = sqlx::query_as(sql::SUBSCRIPTIONS_BY_TENANT).fetch_all(&self.reader).await?;
        let keys = sqlx::query_as(sql::API_KEYS_BY_TENANT).fetch_all(&self.reader).await?;
        let jobs = sqlx::query_as(sql::OPEN_JOBS_BY_TENANT).fetch_all(&self.reader).await?;
        crate::tenant_summaries(events, subscriptions, keys, jobs)
    }

    async fn foreign_tables(&self) -> StoreResult<Vec<String>> {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
        )
        .fetch_all(&self.reader)
        .await?;
        Ok(crate::foreign(tables))
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    fn connections(&self) -> Connections {
        let of = |p: &sqlx::SqlitePool| Connections::of(p.size(), p.num_idle(), p.options().get_max_connections());
        of(&self.reader).and(of(&self.writer))
    }

    async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }

    async fn write_dlq_records(&self, records: &[NewDlqRecord]) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let mut new = 0;
        for r in records {
            let headers = serde_json::to_string(&r.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let done = sql::bind_dlq_record!(sqlx::query(sql::WRITE_DLQ_RECORDS), r, headers: headers, time: micros)
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
            PruneKind::Quarantine
            | PruneKind::Dlq
            | PruneKind::Minutes
            | PruneKind::Sessions
            | PruneKind::SeenTypes => {
                let mut n = 0;
                for statement in sql::prune(kind) {
                    n += sqlx::query(statement).bind(cutoff).bind(limit).execute(&mut *tx).await?.rows_affected();
                }
                n
            }
            PruneKind::FinishedJobs => {
                let doomed = sql::finished_jobs_to_prune("delivery_jobs");
                sqlx::query(&format!("DELETE FROM delivery_attempts WHERE job_id IN ({doomed})"))
                    .bind(cutoff)
                    .bind(limit)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(&format!("DELETE FROM delivery_jobs WHERE id IN ({doomed})"))
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
                    sqlx::query("DELETE FROM pull_entries WHERE tenant_id = ?1 AND COALESCE(event_seq, seq) = ?2")
                        .bind(tenant)
                        .bind(seq)
                        .execute(&mut *tx)
                        .await?;
                }
                gone.len() as u64
            }
            PruneKind::Ledger => super::ledger::prune(&mut tx, older_than, limit).await?,
        };
        tx.commit().await?;
        Ok(Some(deleted))
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
        let row = sqlx::query(sql::CREATE_API_KEY)
            .bind(key.id.hyphenated().to_string())
            .bind(key.tenant_id.as_deref().unwrap_or(""))
            .bind(&key.name)
            .bind(&key.key_hash)
            .bind(&key.key_prefix)
            .bind(micros(key.created_at))
            .bind(key.tenant_id.is_none())
            .bind(key.expires_at.map(micros))
            .bind(&key.role)
            .fetch_one(&mut *tx)
            .await?;
        let record = api_key_from_row(&row)?;
        tx.commit().await?;
        Ok(record)
    }

    async fn list_api_keys(&self, before: Option<Uuid>, limit: u32) -> StoreResult<Vec<ApiKeyRecord>> {
        sqlx::query(
            "SELECT id, tenant_id, name, key_prefix, created_at, revoked_at, admin, expires_at, role FROM api_keys
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

    async fn count_admin_keys(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM api_keys WHERE admin AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?1)",
        )
        .bind(micros(Utc::now()))
        .fetch_one(&self.reader)
            .await?)
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
        sqlx::query(sql::API_KEY_BY_HASH)
            .bind(hash)
            .fetch_optional(&self.reader)
            .await?
            .as_ref()
            .map(api_key_from_row)
            .transpose()
    }
}
