//! The inbox: batch writes (events, pull entries and jobs in one transaction), event reads and pull streams.

use super::*;

#[async_trait]
impl Inbox for SqliteStore {
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
        sqlx::query(&sql)
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
        sqlx::query(&sql)
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn event_by_seq(&self, tenant: &str, seq: i64) -> StoreResult<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = ?1 AND seq = ?2");
        sqlx::query(&sql)
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
        sqlx::query(&sql)
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

    async fn newest_seq(&self, tenant: &str) -> StoreResult<i64> {
        let last: Option<i64> = sqlx::query_scalar("SELECT last_seq FROM tenant_sequences WHERE tenant_id = ?1")
            .bind(tenant)
            .fetch_optional(&self.reader)
            .await?;
        Ok(last.unwrap_or(0))
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

    async fn inbox_size(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM events").fetch_one(&self.reader).await?)
    }
}
