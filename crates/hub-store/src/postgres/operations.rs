//! Schema, health, quarantine, the DLQ plane, retention and API keys.

use super::{
    ApiKeyRecord, DateTime, DlqEntry, DlqFilter, MIGRATOR, NewApiKey, NewDlqRecord, Operations, PgStore, PruneKind,
    QuarantineEntry, QuarantineFilter, StoreError, StoreResult, Utc, Uuid, api_key_from_row, async_trait, partitions,
    quarantine_from_row,
};
use crate::sql;
use sqlx::Row;

use crate::Connections;

#[async_trait]
impl Operations for PgStore {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn pending_migrations(&self) -> StoreResult<Vec<i64>> {
        let applied = sqlx::query_scalar(sql::PENDING_MIGRATIONS).fetch_all(&self.pool).await.map_err(StoreError::from);
        crate::pending(&MIGRATOR, applied)
    }

    async fn tenants(&self) -> StoreResult<Vec<crate::TenantSummary>> {
        let events = sqlx::query_as(sql::EVENTS_BY_TENANT).fetch_all(&self.pool).await?;
        let subscriptions = sqlx::query_as(sql::SUBSCRIPTIONS_BY_TENANT).fetch_all(&self.pool).await?;
        let keys = sqlx::query_as(sql::API_KEYS_BY_TENANT).fetch_all(&self.pool).await?;
        let jobs = sqlx::query_as(sql::OPEN_JOBS_BY_TENANT).fetch_all(&self.pool).await?;
        crate::tenant_summaries(events, subscriptions, keys, jobs)
    }

    async fn foreign_tables(&self) -> StoreResult<Vec<String>> {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(crate::foreign(tables))
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    fn connections(&self) -> Connections {
        Connections::of(self.pool.size(), self.pool.num_idle(), self.pool.options().get_max_connections())
    }

    async fn close(&self) {
        self.kept.close().await;
        self.pool.close().await;
    }

    async fn write_dlq_records(&self, records: &[NewDlqRecord]) -> StoreResult<u64> {
        let mut tx = self.pool.begin().await?;
        let mut new = 0;
        for r in records {
            let headers = serde_json::to_value(&r.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let done = sql::bind_dlq_record!(sqlx::query(sql::WRITE_DLQ_RECORDS), r, headers: headers, time: std::convert::identity)
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
                error_message, headers::text AS headers, body, body_bytes, payload_omitted, record_timestamp,
                received_at
             FROM dlq_records
             WHERE ($1::text IS NULL OR source = $1)
               AND ($2::text IS NULL OR tenant_id = $2)
               AND ($3::text IS NULL OR error_class = $3)
               AND ($4::timestamptz IS NULL OR received_at >= $4)
               AND ($5::timestamptz IS NULL OR received_at < $5)
               AND ($6::bigint IS NULL OR id < $6)
             ORDER BY id DESC LIMIT $7",
        )
        .bind(&f.source)
        .bind(&f.tenant)
        .bind(&f.error_class)
        .bind(f.since)
        .bind(f.until)
        .bind(f.before_id)
        .bind(i64::from(f.limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| {
            let headers: String = row.try_get("headers")?;
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
                    record_timestamp: row.try_get("record_timestamp")?,
                    received_at: row.try_get("received_at")?,
                },
            })
        })
        .collect()
    }

    async fn prune(&self, kind: PruneKind, older_than: DateTime<Utc>, limit: u32) -> StoreResult<Option<u64>> {
        let mut tx = self.pool.begin().await?;
        // One replica at a time per kind (and per schema: the key includes the channel name).
        let key = format!("{}/prune/{}", self.channel, kind.as_str());
        let locked: bool =
            sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtext($1))").bind(&key).fetch_one(&mut *tx).await?;
        if !locked {
            return Ok(None);
        }
        let limit = i64::from(limit);
        let deleted = match kind {
            PruneKind::Quarantine
            | PruneKind::Dlq
            | PruneKind::Minutes
            | PruneKind::Sessions
            | PruneKind::SeenTypes => {
                let mut n = 0;
                for statement in sql::prune(kind) {
                    n += sqlx::query(statement).bind(older_than).bind(limit).execute(&mut *tx).await?.rows_affected();
                }
                n
            }
            // Finished jobs with their attempts, and inbox events: by day partitions (a day
            // dropped whole when it may go, rows deleted only where a drop cannot do the work).
            PruneKind::FinishedJobs | PruneKind::Events => {
                let family = if kind == PruneKind::Events { partitions::EVENTS } else { partitions::JOBS };
                return self.prune_days(tx, &key, family, older_than, limit).await.map(Some);
            }
            PruneKind::Ledger => {
                super::ledger::ensure_months(&mut tx, Utc::now()).await?;
                let Some(next) = self.recommit(tx, &key).await? else { return Ok(Some(0)) };
                tx = next;
                // Rows of months that had no partition first, so that each log then begins in
                // the oldest month left; then whole months, oldest first, each in a
                // transaction of its own (a drop holds the parent's strongest lock to its commit).
                let mut deleted = super::ledger::cut_defaults(&mut tx, older_than, limit).await?;
                let months = super::ledger::months(&mut tx).await?;
                for month in months.iter().filter(|m| m.ends <= older_than) {
                    let Some(next) = self.recommit(tx, &key).await? else { return Ok(Some(deleted)) };
                    tx = next;
                    match super::ledger::drop_month(&mut tx, month).await? {
                        Some(n) => deleted += n,
                        None => break,
                    }
                }
                deleted
            }
        };
        tx.commit().await?;
        Ok(Some(deleted))
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
        let row = sqlx::query(sql::CREATE_API_KEY)
            .bind(key.id)
            .bind(key.tenant_id.as_deref().unwrap_or(""))
            .bind(&key.name)
            .bind(&key.key_hash)
            .bind(&key.key_prefix)
            .bind(key.created_at)
            .bind(key.tenant_id.is_none())
            .bind(key.expires_at)
            .bind(&key.role)
            .fetch_one(&self.pool)
            .await?;
        api_key_from_row(&row)
    }

    async fn list_api_keys(&self, before: Option<Uuid>, limit: u32) -> StoreResult<Vec<ApiKeyRecord>> {
        sqlx::query(
            "SELECT id, tenant_id, name, key_prefix, created_at, revoked_at, admin, expires_at, role FROM api_keys
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

    async fn count_admin_keys(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM api_keys WHERE admin AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn revoke_api_key(&self, id: Uuid) -> StoreResult<bool> {
        let done = sqlx::query("UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn api_key_by_hash(&self, hash: &[u8]) -> StoreResult<Option<ApiKeyRecord>> {
        sqlx::query(sql::API_KEY_BY_HASH)
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(api_key_from_row)
            .transpose()
    }
}

impl PgStore {
    /// Commits `tx` and begins the next transaction of a prune pass, holding its lock again:
    /// `None` when another replica took the lock in between.
    /// One retention pass over a family's day partitions: the days ahead made, each day that may
    /// go dropped, then old rows deleted where a drop cannot do the work, up to `limit` in all
    /// (see `partitions.rs`). Answers the rows removed; stops early, answering what it removed,
    /// when another replica took the pass's lock between its transactions.
    async fn prune_days(
        &self,
        mut tx: sqlx::Transaction<'static, sqlx::Postgres>,
        key: &str,
        family: partitions::Family,
        older_than: DateTime<Utc>,
        limit: i64,
    ) -> StoreResult<u64> {
        let now = Utc::now();
        let parts = partitions::list(&mut tx, family).await?;
        partitions::ensure_ahead(&mut tx, family, &parts, now).await?;
        // A day's partitions are made, and each partition is dropped, in a transaction of its
        // own: a drop holds the parent table's strongest lock until its commit, so no slower work
        // may follow it in one.
        let mut deleted = 0;
        for part in partitions::drop_candidates(&parts, now) {
            let Some(next) = self.recommit(tx, key).await? else { return Ok(deleted) };
            tx = next;
            deleted += partitions::drop_if_done(&mut tx, family, part, older_than).await?;
        }
        let Some(next) = self.recommit(tx, key).await? else { return Ok(deleted) };
        tx = next;
        let parts = partitions::list(&mut tx, family).await?;
        for part in partitions::row_pruned(&parts, older_than, family.grace) {
            let room = limit - i64::try_from(deleted).unwrap_or(limit);
            if room <= 0 {
                break;
            }
            deleted += partitions::delete_old_rows(&mut tx, family, part, older_than, room).await?;
        }
        tx.commit().await?;
        Ok(deleted)
    }

    async fn recommit(
        &self,
        tx: sqlx::Transaction<'static, sqlx::Postgres>,
        key: &str,
    ) -> StoreResult<Option<sqlx::Transaction<'static, sqlx::Postgres>>> {
        tx.commit().await?;
        let mut tx = self.pool.begin().await?;
        let locked: bool =
            sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtext($1))").bind(key).fetch_one(&mut *tx).await?;
        Ok(locked.then_some(tx))
    }
}
