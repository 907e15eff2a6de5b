//! Replicas' heartbeats, the live set, and the jobs of replicas that died (an embedded hub is its
//! own only replica; the calls are those of PostgreSQL).

use std::time::Duration;

use super::{
    DateTime, Recovery, SqliteStore, StoreResult, SubscriptionRecord, Utc, Uuid, async_trait, from_micros, micros,
    subscription_from_row, text, uuid_from_text,
};
use crate::{ReplicaRecord, Replicas, lease_tokens_of};
use sqlx::Row;

fn ago(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    now - chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

#[async_trait]
impl Replicas for SqliteStore {
    async fn beat(&self, me: &ReplicaRecord, live: Duration) -> StoreResult<Vec<ReplicaRecord>> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO replicas (id, name, delivers, started_at, heartbeat_at, pacing) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, delivers = excluded.delivers,
                heartbeat_at = excluded.heartbeat_at, pacing = excluded.pacing",
        )
        .bind(text(me.id))
        .bind(&me.name)
        .bind(me.delivers)
        .bind(micros(me.started_at))
        .bind(micros(Utc::now()))
        .bind(me.pacing.to_string())
        .execute(&mut *tx)
        .await?;
        let rows = sqlx::query(
            "SELECT id, name, delivers, started_at, heartbeat_at, pacing FROM replicas
             WHERE heartbeat_at >= ?1 AND id <> ?2",
        )
        .bind(micros(ago(Utc::now(), live)))
        .bind(text(me.id))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut all = vec![me.clone()];
        for row in &rows {
            let pacing: String = row.try_get("pacing")?;
            all.push(ReplicaRecord {
                id: uuid_from_text(&row.try_get::<String, _>("id")?)?,
                name: row.try_get("name")?,
                delivers: row.try_get("delivers")?,
                started_at: from_micros(row.try_get("started_at")?)?,
                heartbeat_at: from_micros(row.try_get("heartbeat_at")?)?,
                pacing: serde_json::from_str(&pacing).unwrap_or_default(),
            });
        }
        all.sort_by_key(|r| r.id);
        Ok(all)
    }

    async fn leave(&self, id: Uuid) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM replicas WHERE id = ?1").bind(text(id)).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn take_back_departed(
        &self,
        now: DateTime<Utc>,
        live: Duration,
        poison_threshold: u32,
    ) -> StoreResult<Recovery> {
        let mut tx = self.begin_write().await?;
        let departed: Vec<String> = sqlx::query_scalar("SELECT id FROM replicas WHERE heartbeat_at < ?1")
            .bind(micros(ago(Utc::now(), live)))
            .fetch_all(&mut *tx)
            .await?;
        let mut recovery = Recovery::default();
        for id in &departed {
            let (lo, hi) = lease_tokens_of(uuid_from_text(id)?);
            let held: Vec<(String, i32)> = sqlx::query_as(
                "SELECT id, recoveries FROM delivery_jobs
                 WHERE state = 'leased' AND lease_token BETWEEN ?1 AND ?2",
            )
            .bind(text(lo))
            .bind(text(hi))
            .fetch_all(&mut *tx)
            .await?;
            let r = super::jobs::take_back(
                &mut tx,
                now,
                &held,
                poison_threshold,
                "the replica that held the lease stopped without an outcome; recovered",
            )
            .await?;
            recovery.recovered += r.recovered;
            recovery.poisoned += r.poisoned;
            sqlx::query("DELETE FROM replicas WHERE id = ?1").bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(recovery)
    }

    async fn unbucketed_subscriptions(&self, limit: u32) -> StoreResult<Vec<SubscriptionRecord>> {
        let sql =
            format!("SELECT {} FROM subscriptions WHERE pace_bucket IS NULL LIMIT ?1", super::SUBSCRIPTION_COLUMNS);
        sqlx::query(&sql)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(subscription_from_row)
            .collect()
    }

    async fn set_pace_buckets(&self, buckets: &[(Uuid, serde_json::Value, i32)]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        for (id, config, bucket) in buckets {
            sqlx::query("UPDATE subscriptions SET pace_bucket = ?3 WHERE id = ?1 AND sink_config = ?2")
                .bind(text(*id))
                .bind(config.to_string())
                .bind(bucket)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
