//! The inbox: batch writes (events, pull entries and jobs in one transaction), event reads and pull streams.

use super::*;

#[async_trait]
impl Inbox for PgStore {
    async fn write_batch(&self, batch: &[IngestRecord]) -> StoreResult<Vec<WriteOutcome>> {
        let mut tx = self.pool.begin().await?;
        let mut outcomes = Self::insert_accepted(&mut tx, batch, &self.channel).await?;
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
        sqlx::query(&sql)
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
        sqlx::query(&sql)
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn event_by_seq(&self, tenant: &str, seq: i64) -> StoreResult<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND seq = $2");
        sqlx::query(&sql)
            .bind(tenant)
            .bind(seq)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(event_from_row)
            .transpose()
    }

    async fn events_by_seqs(&self, keys: &[(String, i64)]) -> StoreResult<Vec<StoredEvent>> {
        let (tenants, seqs): (Vec<&str>, Vec<i64>) = keys.iter().map(|(t, s)| (t.as_str(), *s)).unzip();
        // One primary-key probe per event, whatever the table's statistics say: only the primary
        // key can serve a row comparison on `(tenant_id, seq)` in its order, so the planner cannot
        // walk the `(tenant_id, ce_id)` index over the tenant's every event instead (it did, when
        // it believed the table small). A missing event probes to the next one, which the outer
        // condition drops.
        let sql = format!(
            "SELECT e.* FROM UNNEST($1::text[], $2::bigint[]) AS k(tenant_id, seq)
             CROSS JOIN LATERAL (SELECT {EVENT_COLUMNS} FROM events
                                 WHERE (tenant_id, seq) >= (k.tenant_id, k.seq)
                                 ORDER BY tenant_id, seq LIMIT 1) e
             WHERE e.tenant_id = k.tenant_id AND e.seq = k.seq"
        );
        sqlx::query(&sql).bind(tenants).bind(seqs).fetch_all(&self.pool).await?.iter().map(event_from_row).collect()
    }

    async fn pull_events(
        &self,
        tenant: &str,
        subscription: Uuid,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<StoredEvent>> {
        // `USING` merges tenant_id and seq; every other column exists only in events.
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM pull_entries p
             JOIN events e USING (tenant_id, seq)
             WHERE p.subscription_id = $1 AND p.tenant_id = $2 AND p.seq > $3
             ORDER BY p.seq LIMIT $4"
        );
        sqlx::query(&sql)
            .bind(subscription)
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn newest_seq(&self, tenant: &str) -> StoreResult<i64> {
        let last: Option<i64> = sqlx::query_scalar("SELECT last_seq FROM tenant_sequences WHERE tenant_id = $1")
            .bind(tenant)
            .fetch_optional(&self.pool)
            .await?;
        Ok(last.unwrap_or(0))
    }

    async fn advance_pull_cursor(&self, tenant: &str, subscription: Uuid, to: i64) -> StoreResult<i64> {
        let cursor: Option<i64> = sqlx::query_scalar(
            "UPDATE subscriptions SET pull_cursor = GREATEST(pull_cursor, $3)
             WHERE tenant_id = $1 AND id = $2 RETURNING pull_cursor",
        )
        .bind(tenant)
        .bind(subscription)
        .bind(to)
        .fetch_optional(&self.pool)
        .await?;
        Ok(cursor.unwrap_or(to))
    }

    async fn inbox_size(&self) -> StoreResult<i64> {
        // `to_regclass` resolves `events` through the search_path (the configured schema).
        let estimate: Option<f32> =
            sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = to_regclass('events')")
                .fetch_optional(&self.pool)
                .await?
                .flatten();
        Ok(estimate.map_or(0, |n| n.max(0.0) as i64))
    }
}
