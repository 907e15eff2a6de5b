//! Per-minute delivery statistics of subscriptions. One writer: a roll-up is merged with the
//! stored minute in Rust, inside the write transaction.

use super::{
    DateTime, SqliteRow, SqliteStore, Stats, StoreError, StoreResult, Utc, Uuid, async_trait, from_micros, json,
    micros, text, to_json, uuid_from_text,
};
use crate::sql;
use sqlx::Row;

use crate::{Backlog, MinuteStats};
use hub_core::delivery::stats::{BUCKETS, Histogram};

fn histogram(text: &str) -> StoreResult<Histogram> {
    let counts: Vec<i64> = json("latency", text)?;
    Histogram::try_from(counts)
        .map_err(|v| StoreError::Corrupt(format!("a latency histogram of {} buckets, not {BUCKETS}", v.len())))
}

fn minute_from_row(r: &SqliteRow) -> StoreResult<MinuteStats> {
    Ok(MinuteStats {
        subscription_id: uuid_from_text(&r.try_get::<String, _>("subscription_id")?)?,
        minute: from_micros(r.try_get("minute")?)?,
        tenant_id: r.try_get("tenant_id")?,
        delivered: r.try_get("delivered")?,
        failed: r.try_get("failed")?,
        dead: r.try_get("dead")?,
        skipped: r.try_get("skipped")?,
        latency: histogram(&r.try_get::<String, _>("latency")?)?,
        backlog: r.try_get("backlog")?,
    })
}

#[async_trait]
impl Stats for SqliteStore {
    async fn record_minutes(&self, minutes: &[MinuteStats]) -> StoreResult<()> {
        if minutes.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        for m in minutes {
            let stored = sqlx::query(
                "SELECT subscription_id, minute, tenant_id, delivered, failed, dead, skipped, latency, backlog
                 FROM subscription_minutes WHERE subscription_id = ?1 AND minute = ?2",
            )
            .bind(text(m.subscription_id))
            .bind(micros(m.minute))
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| minute_from_row(&r))
            .transpose()?;
            let mut sum = m.clone();
            if let Some(s) = stored {
                sum.delivered += s.delivered;
                sum.failed += s.failed;
                sum.dead += s.dead;
                sum.skipped += s.skipped;
                hub_core::delivery::stats::add(&mut sum.latency, &s.latency);
                sum.backlog = m.backlog.or(s.backlog);
            }
            let latency = to_json(&sum.latency.to_vec())?;
            sqlx::query(
                "INSERT OR REPLACE INTO subscription_minutes
                     (subscription_id, minute, tenant_id, delivered, failed, dead, latency, backlog, skipped)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .bind(text(sum.subscription_id))
            .bind(micros(sum.minute))
            .bind(&sum.tenant_id)
            .bind(sum.delivered)
            .bind(sum.failed)
            .bind(sum.dead)
            .bind(latency)
            .bind(sum.backlog)
            .bind(sum.skipped)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn minutes(&self, tenant: &str, subscription: Uuid, since: DateTime<Utc>) -> StoreResult<Vec<MinuteStats>> {
        let rows = sqlx::query(sql::MINUTES)
            .bind(text(subscription))
            .bind(tenant)
            .bind(micros(since))
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(minute_from_row).collect()
    }

    async fn backlogs(&self) -> StoreResult<Vec<Backlog>> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(sql::BACKLOGS).fetch_all(&self.reader).await?;
        rows.into_iter()
            .map(|(tenant_id, sub, jobs)| Ok(Backlog { tenant_id, subscription_id: uuid_from_text(&sub)?, jobs }))
            .collect()
    }
}
