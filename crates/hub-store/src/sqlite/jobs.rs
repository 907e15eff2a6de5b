//! The delivery job queue: claims with a lease, releases, recorded attempts, lease recovery and redrive.

use super::{
    AttemptRecord, AttemptResult, CLAIMED_COLUMNS, ClaimRequest, ClaimedJob, Completed, DateTime, DeliveryJob,
    JOB_COLUMNS, JobQueue, JobState, Recovery, SYNC_WAITING, SqliteStore, StoreError, StoreResult, Utc, Uuid,
    async_trait, attempt_from_row, claimed_from_row, from_micros, job_from_row, job_state, micros, split_poison, text,
    uuid_from_text,
};
use crate::sql;
use sqlx::Row;

use crate::{BlockedKey, Claim};

/// A subscription's open jobs by state, for `?1` (a JSON array of subscription ids): one count per
/// open state, each from that state's own index (a subscription's finished jobs are never read).
/// Leased jobs have no index by subscription: all of them (the attempts out, a few thousand at
/// most) are read from theirs, which the planner, left to itself, passed over for every job of the
/// subscription (240 ms beside a million finished ones, hub-bench scale).
pub(super) const OPEN_JOBS: &str = "SELECT subscription_id, state, count(*) FROM delivery_jobs
    WHERE state = 'pending' AND subscription_id IN (SELECT value FROM json_each(?1)) GROUP BY 1, 2
    UNION ALL SELECT subscription_id, state, count(*) FROM delivery_jobs
    WHERE state = 'held' AND subscription_id IN (SELECT value FROM json_each(?1)) GROUP BY 1, 2
    UNION ALL SELECT subscription_id, state, count(*) FROM delivery_jobs
    WHERE state = 'dead' AND subscription_id IN (SELECT value FROM json_each(?1)) GROUP BY 1, 2
    UNION ALL SELECT subscription_id, state, count(*) FROM delivery_jobs INDEXED BY delivery_jobs_leased
    WHERE state = 'leased' AND subscription_id IN (SELECT value FROM json_each(?1)) GROUP BY 1, 2";

#[async_trait]
impl JobQueue for SqliteStore {
    async fn list_jobs(
        &self,
        tenant: &str,
        subscription: Uuid,
        state: Option<JobState>,
        after: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryJob>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM delivery_jobs
             WHERE tenant_id = ?1 AND subscription_id = ?2 AND (?3 IS NULL OR state = ?3)
               AND (?4 IS NULL OR id > ?4)
             ORDER BY id LIMIT ?5"
        );
        sqlx::query(&sql)
            .bind(tenant)
            .bind(subscription.hyphenated().to_string())
            .bind(state.map(JobState::as_str))
            .bind(after.map(|u| u.hyphenated().to_string()))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(job_from_row)
            .collect()
    }

    async fn claim_jobs(&self, req: &ClaimRequest) -> StoreResult<Claim> {
        let now = micros(req.now);
        let mut tx = self.begin_write().await?;
        let limit = i64::from(req.limit.max(1));
        let tenants_sql = "WITH RECURSIVE t(tenant_id) AS (
                SELECT (SELECT tenant_id FROM delivery_jobs
                        WHERE state = 'pending' AND due_at <= ?1 AND tenant_id > ?2
                        ORDER BY tenant_id LIMIT 1)
                UNION ALL
                SELECT (SELECT d.tenant_id FROM delivery_jobs d
                        WHERE d.state = 'pending' AND d.due_at <= ?1 AND d.tenant_id > t.tenant_id
                        ORDER BY d.tenant_id LIMIT 1)
                FROM t WHERE t.tenant_id IS NOT NULL
             )
             SELECT tenant_id FROM t WHERE tenant_id IS NOT NULL LIMIT ?3";
        let mut tenants: Vec<String> = sqlx::query_scalar(tenants_sql)
            .bind(now)
            .bind(req.after_tenant.clone().unwrap_or_default())
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        if (tenants.len() as i64) < limit && req.after_tenant.is_some() {
            let wrapped: Vec<String> =
                sqlx::query_scalar(tenants_sql).bind(now).bind("").bind(limit).fetch_all(&mut *tx).await?;
            for t in wrapped {
                if !tenants.contains(&t) && (tenants.len() as i64) < limit {
                    tenants.push(t);
                }
            }
        }
        let visited = tenants.last().cloned();
        let mut claimed: Vec<ClaimedJob> = Vec::new();
        let excluded = serde_json::to_string(&req.exclude_subscriptions.iter().map(|u| text(*u)).collect::<Vec<_>>())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let owned = req
            .owned
            .buckets
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let shared = serde_json::to_string(&req.owned.shared.iter().map(|u| text(*u)).collect::<Vec<_>>())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let sql = format!(
            "UPDATE delivery_jobs SET state = 'leased', lease_expires_at = ?3, lease_token = ?4, updated_at = ?2
             WHERE id IN (
                SELECT d.id FROM delivery_jobs d JOIN subscriptions s ON s.id = d.subscription_id
                WHERE d.tenant_id = ?1 AND d.state = 'pending' AND d.due_at <= ?2
                  AND s.enabled = 1 AND s.verification_state = 'active'
                  AND d.subscription_id NOT IN (SELECT value FROM json_each(?5))
                  -- hub_core::delivery::owners: only the destinations it paces
                  AND (?7 IS NULL OR COALESCE(s.pace_bucket, 0) IN (SELECT value FROM json_each(?7))
                       OR d.subscription_id IN (SELECT value FROM json_each(?8)))
                  -- hub_core::Ordering::Key: not while an earlier job of its key waits
                  AND (d.ordering_key IS NULL OR NOT EXISTS (
                      SELECT 1 FROM delivery_jobs e
                      WHERE e.subscription_id = d.subscription_id AND e.ordering_key = d.ordering_key
                        AND e.event_seq < d.event_seq AND e.state IN ('pending', 'leased', 'held')))
                ORDER BY d.due_at LIMIT ?6)
             RETURNING {CLAIMED_COLUMNS}"
        );
        // Every tenant gets its share; what a tenant could not use goes round again to those that
        // filled theirs, so one claim is both fair and full.
        let mut active = tenants;
        while !active.is_empty() && (claimed.len() as u32) < req.limit {
            let shares = hub_core::delivery::fair_shares(req.limit - claimed.len() as u32, active.len());
            let mut still = Vec::new();
            for (tenant, want) in active.iter().zip(shares) {
                if want == 0 {
                    break;
                }
                let rows = sqlx::query(&sql)
                    .bind(tenant)
                    .bind(now)
                    .bind(micros(req.lease_until))
                    .bind(text(req.token))
                    .bind(&excluded)
                    .bind(i64::from(want))
                    .bind(&owned)
                    .bind(&shared)
                    .fetch_all(&mut *tx)
                    .await?;
                if rows.len() as u32 == want {
                    still.push(tenant.clone());
                }
                for row in &rows {
                    claimed.push(claimed_from_row(row)?);
                }
            }
            active = still;
        }
        tx.commit().await?;
        Ok(Claim { jobs: claimed, visited })
    }

    async fn release_job(&self, job: Uuid, token: Uuid, due_at: DateTime<Utc>) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE delivery_jobs SET state = 'pending', due_at = ?3, lease_expires_at = NULL, lease_token = NULL,
                updated_at = ?4
             WHERE id = ?1 AND lease_token = ?2 AND state = 'leased'",
        )
        .bind(text(job))
        .bind(text(token))
        .bind(micros(due_at))
        .bind(micros(Utc::now()))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    async fn lost_leases(&self, held: &[(Uuid, Uuid)]) -> StoreResult<Vec<Uuid>> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        // Ids are hyphenated hex: a JSON array of them needs no escaping.
        let ids =
            format!("[{}]", held.iter().map(|(job, _)| format!("\"{}\"", text(*job))).collect::<Vec<_>>().join(","));
        let rows: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT id, CASE WHEN state = 'leased' THEN lease_token END FROM delivery_jobs
             WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(ids)
        .fetch_all(&self.reader)
        .await?;
        let now: std::collections::HashMap<String, Option<String>> = rows.into_iter().collect();
        Ok(held
            .iter()
            .filter(|(job, token)| {
                now.get(&text(*job)).is_none_or(|held| held.as_deref() != Some(text(*token).as_str()))
            })
            .map(|(job, _)| *job)
            .collect())
    }

    async fn complete_attempts(&self, results: &[AttemptResult]) -> StoreResult<Vec<Completed>> {
        let mut tx = self.begin_write().await?;
        let entries: Vec<&crate::NewLedgerEntry> = results.iter().filter_map(|r| r.ledger.as_ref()).collect();
        let mut numbers = super::ledger::append_in(&mut tx, &entries).await?.into_iter();
        let mut done = Vec::with_capacity(results.len());
        for r in results {
            let number = if r.ledger.is_some() { numbers.next() } else { None };
            done.push(Self::complete_in(&mut tx, r, number).await?);
        }
        tx.commit().await?;
        Ok(done)
    }

    async fn recover_expired_leases(&self, now: DateTime<Utc>, poison_threshold: u32) -> StoreResult<Recovery> {
        let mut tx = self.begin_write().await?;
        let expired: Vec<(String, i32)> =
            sqlx::query_as("SELECT id, recoveries FROM delivery_jobs WHERE state = 'leased' AND lease_expires_at < ?1")
                .bind(micros(now))
                .fetch_all(&mut *tx)
                .await?;
        let recovery =
            take_back(&mut tx, now, &expired, poison_threshold, "lease expired without an outcome; recovered").await?;
        tx.commit().await?;
        Ok(recovery)
    }

    async fn jobs_for_event(&self, tenant: &str, seq: i64) -> StoreResult<Vec<DeliveryJob>> {
        sqlx::query(sql::JOBS_FOR_EVENT)
            .bind(tenant)
            .bind(seq)
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(job_from_row)
            .collect()
    }

    async fn attempts_for_jobs(&self, tenant: &str, jobs: &[Uuid]) -> StoreResult<Vec<AttemptRecord>> {
        let ids = serde_json::to_string(&jobs.iter().map(|u| text(*u)).collect::<Vec<_>>())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "SELECT id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms, outcome, status_code,
                error, response_body, ledger_index
             FROM delivery_attempts
             WHERE tenant_id = ?1 AND job_id IN (SELECT value FROM json_each(?2))
             ORDER BY job_id, attempt, started_at",
        )
        .bind(tenant)
        .bind(ids)
        .fetch_all(&self.reader)
        .await?
        .iter()
        .map(attempt_from_row)
        .collect()
    }

    async fn redrive(
        &self,
        tenant: &str,
        subscription: Uuid,
        since: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE delivery_jobs SET attempts = 0, recoveries = 0, due_at = ?4,
                state = (SELECT CASE WHEN enabled = 1 AND verification_state = 'active' THEN 'pending' ELSE 'held' END
                         FROM subscriptions WHERE id = ?2),
                window_start = ?4, last_error = NULL, finished_at = NULL, updated_at = ?4
             WHERE tenant_id = ?1 AND subscription_id = ?2 AND state = 'dead'
               AND (?3 IS NULL OR finished_at >= ?3)",
        )
        .bind(tenant)
        .bind(text(subscription))
        .bind(since.map(micros))
        .bind(micros(now))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }

    async fn reconcile_waiting_jobs(&self) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let mut moved = 0;
        for (from, to, when) in SYNC_WAITING {
            let sql = format!(
                "UPDATE delivery_jobs SET state = '{to}', updated_at = ?1
                 WHERE state = '{from}' AND subscription_id IN (SELECT id FROM subscriptions WHERE {when})"
            );
            moved += sqlx::query(&sql).bind(micros(Utc::now())).execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
        Ok(moved)
    }

    async fn listen_for_jobs(&self, _notify: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<()> {
        // One node: every job is created in this process, which wakes its dispatcher directly.
        Ok(())
    }

    async fn job_counts(&self) -> StoreResult<Vec<(JobState, i64)>> {
        // The open states from their own indexes, the finished ones by reading them (SQLite keeps
        // no statistics to estimate them from; an embedded store holds a single node's history).
        let mut counts: Vec<(String, i64)> = sqlx::query_as(sql::OPEN_JOB_COUNTS).fetch_all(&self.reader).await?;
        counts.extend(
            sqlx::query_as::<_, (String, i64)>(
                "SELECT state, count(*) FROM delivery_jobs WHERE state IN ('succeeded', 'cancelled') GROUP BY state",
            )
            .fetch_all(&self.reader)
            .await?,
        );
        counts.into_iter().map(|(state, n)| Ok((job_state(state)?, n))).collect()
    }

    async fn open_jobs(&self, subscriptions: &[Uuid]) -> StoreResult<Vec<(Uuid, JobState, i64)>> {
        let ids: Vec<String> = subscriptions.iter().map(|u| u.hyphenated().to_string()).collect();
        let counts: Vec<(String, String, i64)> = sqlx::query_as(OPEN_JOBS)
            .bind(serde_json::to_string(&ids).map_err(|e| StoreError::Corrupt(e.to_string()))?)
            .fetch_all(&self.reader)
            .await?;
        counts.into_iter().map(|(sub, state, n)| Ok((uuid_from_text(&sub)?, job_state(state)?, n))).collect()
    }

    async fn blocked_keys(&self, tenant: &str, subscription: Uuid, limit: u32) -> StoreResult<Vec<BlockedKey>> {
        sqlx::query(sql::BLOCKED_KEYS)
            .bind(tenant)
            .bind(text(subscription))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(|row| {
                Ok(BlockedKey {
                    key: row.try_get("blocked_key")?,
                    waiting: row.try_get("waiting")?,
                    head: job_from_row(row)?,
                })
            })
            .collect()
    }

    async fn count_blocked_keys(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::COUNT_BLOCKED_KEYS).fetch_one(&self.reader).await?)
    }

    async fn oldest_due_pending(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        let oldest: Option<i64> =
            sqlx::query_scalar(sql::OLDEST_DUE_PENDING).bind(micros(now)).fetch_one(&self.reader).await?;
        oldest.map(from_micros).transpose()
    }
}

/// Takes back leased jobs `(id, recoveries so far)` without an outcome: pending again, due at
/// once, with `note` as their last error, or dead as poison once `hub_core::delivery::is_poison`
/// says so for their recovery count.
pub(super) async fn take_back(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    now: DateTime<Utc>,
    jobs: &[(String, i32)],
    poison_threshold: u32,
    note: &str,
) -> StoreResult<Recovery> {
    if jobs.is_empty() {
        return Ok(Recovery::default());
    }
    let (all, poison) = split_poison(jobs, poison_threshold);
    let all = serde_json::to_string(&all).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let poison_json = serde_json::to_string(&poison).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let done = sqlx::query(
        "UPDATE delivery_jobs SET recoveries = recoveries + 1,
            state = CASE WHEN id IN (SELECT value FROM json_each(?3)) THEN 'dead' ELSE 'pending' END,
            finished_at = CASE WHEN id IN (SELECT value FROM json_each(?3)) THEN ?1 ELSE NULL END,
            last_error = CASE WHEN id IN (SELECT value FROM json_each(?3)) THEN ?4 ELSE ?5 END,
            due_at = ?1, lease_expires_at = NULL, lease_token = NULL, updated_at = ?1
         WHERE id IN (SELECT value FROM json_each(?2))",
    )
    .bind(micros(now))
    .bind(all)
    .bind(poison_json)
    .bind(hub_core::delivery::DeadReason::Poison.as_str())
    .bind(note)
    .execute(&mut **tx)
    .await?;
    let recovered = done.rows_affected().saturating_sub(poison.len() as u64);
    Ok(Recovery { recovered, poisoned: poison.len() as u64 })
}
