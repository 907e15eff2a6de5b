//! Per-minute delivery statistics of subscriptions.

use super::{DateTime, PgStore, Stats, StoreError, StoreResult, Utc, Uuid, async_trait};
use crate::sql;
use sqlx::Row;

use crate::{Backlog, MinuteStats};
use hub_core::delivery::stats::{BUCKETS, Histogram};

fn histogram(stored: Vec<i64>) -> StoreResult<Histogram> {
    Histogram::try_from(stored)
        .map_err(|v| StoreError::Corrupt(format!("a latency histogram of {} buckets, not {BUCKETS}", v.len())))
}

#[async_trait]
impl Stats for PgStore {
    async fn record_minutes(&self, minutes: &[MinuteStats]) -> StoreResult<()> {
        if minutes.is_empty() {
            return Ok(());
        }
        // In key order, so two replicas adding at once never wait on each other in a circle.
        let mut rows: Vec<&MinuteStats> = minutes.iter().collect();
        rows.sort_by_key(|m| (m.subscription_id, m.minute));
        // A histogram travels as text (`{1,0,…}`): UNNEST of a two-dimensional array would
        // flatten it.
        let latency: Vec<String> = rows
            .iter()
            .map(|m| format!("{{{}}}", m.latency.iter().map(i64::to_string).collect::<Vec<_>>().join(",")))
            .collect();
        sqlx::query(
            "INSERT INTO subscription_minutes AS s
                 (subscription_id, minute, tenant_id, delivered, failed, dead, latency, backlog, skipped)
             SELECT t.sub, t.minute, t.tenant, t.delivered, t.failed, t.dead, t.latency::bigint[], t.backlog, t.skipped
             FROM UNNEST($1::uuid[], $2::timestamptz[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[],
                         $7::text[], $8::bigint[], $9::bigint[])
                 AS t(sub, minute, tenant, delivered, failed, dead, latency, backlog, skipped)
             ON CONFLICT (subscription_id, minute) DO UPDATE SET
                 delivered = s.delivered + excluded.delivered,
                 skipped = s.skipped + excluded.skipped,
                 failed = s.failed + excluded.failed,
                 dead = s.dead + excluded.dead,
                 latency = ARRAY(SELECT a + b FROM UNNEST(s.latency, excluded.latency) AS l(a, b)),
                 backlog = COALESCE(excluded.backlog, s.backlog)",
        )
        .bind(rows.iter().map(|m| m.subscription_id).collect::<Vec<_>>())
        .bind(rows.iter().map(|m| m.minute).collect::<Vec<_>>())
        .bind(rows.iter().map(|m| m.tenant_id.clone()).collect::<Vec<_>>())
        .bind(rows.iter().map(|m| m.delivered).collect::<Vec<_>>())
        .bind(rows.iter().map(|m| m.failed).collect::<Vec<_>>())
        .bind(rows.iter().map(|m| m.dead).collect::<Vec<_>>())
        .bind(latency)
        .bind(rows.iter().map(|m| m.backlog).collect::<Vec<_>>())
        .bind(rows.iter().map(|m| m.skipped).collect::<Vec<_>>())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn minutes(&self, tenant: &str, subscription: Uuid, since: DateTime<Utc>) -> StoreResult<Vec<MinuteStats>> {
        let rows = sqlx::query(sql::MINUTES).bind(subscription).bind(tenant).bind(since).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                Ok(MinuteStats {
                    subscription_id: r.try_get("subscription_id")?,
                    minute: r.try_get("minute")?,
                    tenant_id: r.try_get("tenant_id")?,
                    delivered: r.try_get("delivered")?,
                    failed: r.try_get("failed")?,
                    dead: r.try_get("dead")?,
                    skipped: r.try_get("skipped")?,
                    latency: histogram(r.try_get("latency")?)?,
                    backlog: r.try_get("backlog")?,
                })
            })
            .collect()
    }

    async fn backlogs(&self) -> StoreResult<Vec<Backlog>> {
        let rows: Vec<(String, Uuid, i64)> = self.read_open_jobs(sql::BACKLOGS).await?;
        Ok(rows
            .into_iter()
            .map(|(tenant_id, subscription_id, jobs)| Backlog { tenant_id, subscription_id, jobs })
            .collect())
    }
}
