//! Replicas' heartbeats, the live set, and the jobs of replicas that died.

use std::time::Duration;

use super::{DateTime, PgStore, Recovery, StoreResult, SubscriptionRecord, Utc, Uuid, async_trait};
use crate::{ReplicaRecord, Replicas, lease_tokens_of};
use sqlx::Row;

use super::rows::{SUBSCRIPTION_COLUMNS, subscription_from_row};

#[async_trait]
impl Replicas for PgStore {
    async fn beat(&self, me: &ReplicaRecord, live: Duration) -> StoreResult<Vec<ReplicaRecord>> {
        let rows = sqlx::query(
            "WITH mine AS (
                INSERT INTO replicas (id, name, delivers, started_at, heartbeat_at, pacing)
                VALUES ($1, $2, $3, $4, clock_timestamp(), $5::jsonb)
                ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, delivers = EXCLUDED.delivers,
                    heartbeat_at = EXCLUDED.heartbeat_at, pacing = EXCLUDED.pacing
             )
             SELECT id, name, delivers, started_at, heartbeat_at, pacing::text AS pacing FROM replicas
             WHERE heartbeat_at >= clock_timestamp() - make_interval(secs => $6) AND id <> $1
             ORDER BY id",
        )
        .bind(me.id)
        .bind(&me.name)
        .bind(me.delivers)
        .bind(me.started_at)
        .bind(me.pacing.to_string())
        .bind(live.as_secs_f64())
        .fetch_all(&self.pool)
        .await?;
        let mut all = vec![me.clone()];
        for row in &rows {
            let pacing: String = row.try_get("pacing")?;
            all.push(ReplicaRecord {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                delivers: row.try_get("delivers")?,
                started_at: row.try_get("started_at")?,
                heartbeat_at: row.try_get("heartbeat_at")?,
                pacing: serde_json::from_str(&pacing).unwrap_or_default(),
            });
        }
        all.sort_by_key(|r| r.id);
        Ok(all)
    }

    async fn leave(&self, id: Uuid) -> StoreResult<()> {
        sqlx::query("DELETE FROM replicas WHERE id = $1").bind(id).execute(&self.pool).await?;
        Ok(())
    }

    async fn take_back_departed(
        &self,
        now: DateTime<Utc>,
        live: Duration,
        poison_threshold: u32,
    ) -> StoreResult<Recovery> {
        let mut tx = self.pool.begin().await?;
        let departed: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM replicas WHERE heartbeat_at < clock_timestamp() - make_interval(secs => $1)
                 FOR UPDATE SKIP LOCKED",
        )
        .bind(live.as_secs_f64())
        .fetch_all(&mut *tx)
        .await?;
        if departed.is_empty() {
            return Ok(Recovery::default());
        }
        let (lo, hi): (Vec<Uuid>, Vec<Uuid>) = departed.iter().map(|r| lease_tokens_of(*r)).unzip();
        let held: Vec<(Uuid, i32)> = sqlx::query_as(
            "SELECT j.id, j.recoveries FROM delivery_jobs j
             JOIN UNNEST($1::uuid[], $2::uuid[]) AS r(lo, hi) ON j.lease_token BETWEEN r.lo AND r.hi
             WHERE j.state = 'leased'
             FOR UPDATE OF j SKIP LOCKED",
        )
        .bind(&lo)
        .bind(&hi)
        .fetch_all(&mut *tx)
        .await?;
        let recovery = super::jobs::take_back(
            &mut tx,
            now,
            &held,
            poison_threshold,
            "the replica that held the lease stopped without an outcome; recovered",
        )
        .await?;
        sqlx::query("DELETE FROM replicas WHERE id = ANY($1)").bind(&departed).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(recovery)
    }

    async fn unbucketed_subscriptions(&self, limit: u32) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql = format!("SELECT {SUBSCRIPTION_COLUMNS} FROM subscriptions WHERE pace_bucket IS NULL LIMIT $1");
        sqlx::query(&sql)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(subscription_from_row)
            .collect()
    }

    async fn set_pace_buckets(&self, buckets: &[(Uuid, serde_json::Value, i32)]) -> StoreResult<()> {
        let ids: Vec<Uuid> = buckets.iter().map(|b| b.0).collect();
        let configs: Vec<String> = buckets.iter().map(|b| b.1.to_string()).collect();
        let values: Vec<i32> = buckets.iter().map(|b| b.2).collect();
        sqlx::query(
            "UPDATE subscriptions s SET pace_bucket = u.bucket
             FROM UNNEST($1::uuid[], $2::text[], $3::int[]) AS u(id, config, bucket)
             WHERE s.id = u.id AND s.sink_config = u.config::jsonb",
        )
        .bind(&ids)
        .bind(&configs)
        .bind(&values)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
