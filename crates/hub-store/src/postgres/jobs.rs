//! The delivery job queue: claims with a lease, releases, recorded attempts, lease recovery and redrive.

use super::{
    AttemptColumns, AttemptRecord, AttemptResult, BTreeMap, ClaimRequest, ClaimedJob, Completed, DateTime, DeliveryJob,
    JOB_COLUMNS, JobQueue, JobState, PgStore, Recovery, SYNC_WAITING, StoreResult, Utc, Uuid, async_trait,
    attempt_from_row, claimed_from_row, completions, delivered_only, job_from_row, job_state, record_query,
    split_poison,
};
use crate::sql;
use sqlx::Row;

use crate::{BlockedKey, Claim};

#[async_trait]
impl JobQueue for PgStore {
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
             WHERE tenant_id = $1 AND subscription_id = $2 AND ($3::text IS NULL OR state = $3)
               AND ($4::uuid IS NULL OR id > $4)
             ORDER BY id LIMIT $5"
        );
        sqlx::query(&sql)
            .bind(tenant)
            .bind(subscription)
            .bind(state.map(JobState::as_str))
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(job_from_row)
            .collect()
    }

    async fn claim_jobs(&self, req: &ClaimRequest) -> StoreResult<Claim> {
        let limit = i64::from(req.limit.max(1));
        // `hub_claim` (migrations 0041, 0042): the first round picks the tenants with due work
        // after the last one served, each given an even share of the limit, in one statement.
        let claim = |again: Option<(&[String], &[i64])>| {
            sqlx::query("SELECT * FROM hub_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)")
                .bind(req.after_tenant.clone().unwrap_or_default())
                .bind(req.now)
                .bind(req.lease_until)
                .bind(req.token)
                .bind(&req.exclude_subscriptions)
                .bind(limit)
                .bind(&req.owned.buckets)
                .bind(&req.owned.shared)
                .bind(again.map(|(tenants, _)| tenants.to_vec()))
                .bind(again.map(|(_, wants)| wants.to_vec()))
        };
        let mut taken = self.kept.take(&self.pool).await?;
        let mut rows = claim(None).fetch_all(&mut *taken.conn).await?;
        let visited: Option<String> = rows.first().map(|row| row.try_get("visited")).transpose()?.flatten();
        let mut claimed: Vec<ClaimedJob> = Vec::new();
        loop {
            let mut got: BTreeMap<String, (i64, i64)> = BTreeMap::new();
            for row in &rows {
                if row.try_get::<Option<Uuid>, _>("id")?.is_none() {
                    continue;
                }
                let job = claimed_from_row(row)?;
                let want: i64 = row.try_get("want")?;
                let entry = got.entry(job.tenant_id.clone()).or_insert((0, want));
                entry.0 += 1;
                claimed.push(job);
            }
            // What a tenant could not use goes round again to those that filled their share, so
            // one claim is both fair and full.
            let filled: Vec<String> = got.into_iter().filter(|(_, (n, want))| n >= want).map(|(t, _)| t).collect();
            if filled.is_empty() || (claimed.len() as u32) >= req.limit {
                break;
            }
            let wants: Vec<i64> = hub_core::delivery::fair_shares(req.limit - claimed.len() as u32, filled.len())
                .into_iter()
                .map(i64::from)
                .collect();
            rows = claim(Some((&filled, &wants))).fetch_all(&mut *taken.conn).await?;
        }
        self.kept.give_back(taken);
        Ok(Claim { jobs: claimed, visited })
    }

    async fn release_job(&self, job: Uuid, token: Uuid, due_at: DateTime<Utc>) -> StoreResult<bool> {
        // The job is found by its primary key alone (the subquery: a plan cannot take another
        // index for it), its lease checked on the row: naming the state in the lookup let a plan
        // cached while the table was nearly empty read the whole partial index of leased jobs
        // instead (see migration 0026).
        let done = sqlx::query(
            "UPDATE delivery_jobs SET state = 'pending', due_at = $3, lease_expires_at = NULL, lease_token = NULL,
                updated_at = now()
             WHERE id = (SELECT id FROM delivery_jobs WHERE id = $1)
               AND lease_token = $2 AND state = 'leased'",
        )
        .bind(job)
        .bind(token)
        .bind(due_at)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn lost_leases(&self, held: &[(Uuid, Uuid)]) -> StoreResult<Vec<Uuid>> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = held.iter().map(|(job, _)| *job).collect();
        let rows: Vec<(Uuid, Option<Uuid>)> = sqlx::query_as(
            "SELECT id, CASE WHEN state = 'leased' THEN lease_token END FROM delivery_jobs WHERE id = ANY($1)",
        )
        .bind(&ids)
        .fetch_all(&self.pool)
        .await?;
        let now: std::collections::HashMap<Uuid, Option<Uuid>> = rows.into_iter().collect();
        Ok(held
            .iter()
            .filter(|(job, token)| now.get(job).is_none_or(|held| *held != Some(*token)))
            .map(|(job, _)| *job)
            .collect())
    }

    async fn complete_attempts(&self, results: &[AttemptResult]) -> StoreResult<Vec<Completed>> {
        self.on_live_connection(|| self.record(results)).await
    }

    async fn recover_expired_leases(&self, now: DateTime<Utc>, poison_threshold: u32) -> StoreResult<Recovery> {
        let mut tx = self.pool.begin().await?;
        let expired: Vec<(Uuid, i32)> = sqlx::query_as(
            "SELECT id, recoveries FROM delivery_jobs WHERE state = 'leased' AND lease_expires_at < $1
             FOR UPDATE SKIP LOCKED",
        )
        .bind(now)
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
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(job_from_row)
            .collect()
    }

    async fn attempts_for_jobs(&self, tenant: &str, jobs: &[Uuid]) -> StoreResult<Vec<AttemptRecord>> {
        sqlx::query(
            "SELECT id, job_id, tenant_id, subscription_id, attempt, started_at, latency_ms, outcome, status_code,
                error, response_body, ledger_index
             FROM delivery_attempts WHERE tenant_id = $1 AND job_id = ANY($2) ORDER BY job_id, attempt, started_at",
        )
        .bind(tenant)
        .bind(jobs)
        .fetch_all(&self.pool)
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
        let done = sqlx::query(
            "UPDATE delivery_jobs SET attempts = 0, recoveries = 0, due_at = $4,
                state = (SELECT CASE WHEN enabled AND verification_state = 'active' THEN 'pending' ELSE 'held' END
                         FROM subscriptions WHERE id = $2),
                window_start = $4, last_error = NULL, finished_at = NULL, updated_at = $4
             WHERE tenant_id = $1 AND subscription_id = $2 AND state = 'dead'
               AND ($3::timestamptz IS NULL OR finished_at >= $3)",
        )
        .bind(tenant)
        .bind(subscription)
        .bind(since)
        .bind(now)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() > 0 {
            sqlx::query("SELECT pg_notify($1, '')").bind(&self.channel).execute(&self.pool).await?;
        }
        Ok(done.rows_affected())
    }

    async fn reconcile_waiting_jobs(&self) -> StoreResult<u64> {
        let mut moved = 0;
        let mut released = false;
        for (from, to, when) in SYNC_WAITING {
            let sql = format!(
                "UPDATE delivery_jobs j SET state = '{to}', updated_at = now()
                 FROM subscriptions s
                 WHERE j.subscription_id = s.id AND j.state = '{from}' AND {when}"
            );
            let done = sqlx::query(&sql).execute(&self.pool).await?;
            moved += done.rows_affected();
            released |= to == "pending" && done.rows_affected() > 0;
        }
        if released {
            sqlx::query("SELECT pg_notify($1, '')").bind(&self.channel).execute(&self.pool).await?;
        }
        Ok(moved)
    }

    async fn listen_for_jobs(&self, notify: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<()> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(&self.channel).await?;
        tokio::spawn(async move {
            loop {
                match listener.recv().await {
                    Ok(_) => notify.notify_one(),
                    // The store is closing: the listener's connection goes back to be closed.
                    Err(sqlx::Error::PoolClosed) => return,
                    // The listener reconnects by itself on the next recv; wake the dispatcher so it
                    // polls meanwhile.
                    Err(_) => {
                        notify.notify_one();
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(())
    }

    async fn job_counts(&self) -> StoreResult<Vec<(JobState, i64)>> {
        // The open states exactly; the finished ones (succeeded, cancelled: millions waiting for
        // retention) as PostgreSQL's statistics estimate them, since counting them read every
        // finished job at each refresh (100–700 ms of a core every 15 s beside five million).
        let mut counts: Vec<(String, i64)> = self.read_open_jobs(sql::OPEN_JOB_COUNTS).await?;
        let finished: Vec<(String, i64)> = sqlx::query_as(
            // Summed over the partitions (autovacuum analyses each, never the partitioned table).
            "SELECT v.state, sum(v.freq * GREATEST(c.reltuples, 0))::bigint
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             JOIN pg_stats s ON s.schemaname = current_schema() AND s.tablename = c.relname AND s.attname = 'state'
             CROSS JOIN LATERAL unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS v(state, freq)
             WHERE i.inhparent = to_regclass('delivery_jobs') AND v.state IN ('succeeded', 'cancelled')
             GROUP BY v.state",
        )
        .fetch_all(&self.pool)
        .await?;
        counts.extend(finished);
        counts.into_iter().map(|(state, n)| Ok((job_state(state)?, n))).collect()
    }

    async fn open_jobs(&self, subscriptions: &[Uuid]) -> StoreResult<Vec<(Uuid, JobState, i64)>> {
        let counts: Vec<(Uuid, String, i64)> = sqlx::query_as(
            // One count per open state, each from that state's own index (a subscription's
            // finished jobs, millions of them, are never read).
            "SELECT subscription_id, state, count(*) FROM delivery_jobs
             WHERE state = 'pending' AND subscription_id = ANY($1) GROUP BY 1, 2
             UNION ALL SELECT subscription_id, state, count(*) FROM delivery_jobs
             WHERE state = 'held' AND subscription_id = ANY($1) GROUP BY 1, 2
             UNION ALL SELECT subscription_id, state, count(*) FROM delivery_jobs
             WHERE state = 'dead' AND subscription_id = ANY($1) GROUP BY 1, 2
             UNION ALL SELECT subscription_id, state, count(*) FROM delivery_jobs
             WHERE state = 'leased' AND subscription_id = ANY($1) GROUP BY 1, 2",
        )
        .bind(subscriptions)
        .fetch_all(&self.pool)
        .await?;
        counts.into_iter().map(|(sub, state, n)| Ok((sub, job_state(state)?, n))).collect()
    }

    async fn blocked_keys(&self, tenant: &str, subscription: Uuid, limit: u32) -> StoreResult<Vec<BlockedKey>> {
        sqlx::query(sql::BLOCKED_KEYS)
            .bind(tenant)
            .bind(subscription)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
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
        Ok(sqlx::query_scalar(sql::COUNT_BLOCKED_KEYS).fetch_one(&self.pool).await?)
    }

    async fn oldest_due_pending(&self, now: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
        Ok(sqlx::query_scalar(sql::OLDEST_DUE_PENDING).bind(now).fetch_one(&self.pool).await?)
    }
}

impl PgStore {
    /// Records attempts (see [`JobQueue::complete_attempts`]).
    async fn record(&self, results: &[AttemptResult]) -> StoreResult<Vec<Completed>> {
        if results.is_empty() {
            return Ok(Vec::new());
        }
        let cols = AttemptColumns::of(results);
        // The usual case, every attempt delivered: one statement (so one transaction) records
        // them, moves their jobs and clears their subscriptions' failure marks.
        if delivered_only(results) {
            let mut taken = self.kept.take(&self.pool).await?;
            let moved = record_query(&cols, true).fetch_all(&mut *taken.conn).await?;
            self.kept.give_back(taken);
            return Ok(completions(results, &moved, None));
        }
        // Otherwise the subscriptions' health changes follow, in order, in the same transaction.
        // Their rows are locked first: `hub_record` takes the ledger heads of the batch's tenants
        // last, and every transaction that holds both must take a subscription before a head (the
        // delivered path's clearing does, inside `hub_record`), or two replicas recording for one
        // tenant could wait on each other.
        let mut tx = self.pool.begin().await?;
        let mut subscriptions: Vec<Uuid> = results.iter().map(|r| r.record.subscription_id).collect();
        subscriptions.sort_unstable();
        subscriptions.dedup();
        sqlx::query("SELECT id FROM subscriptions WHERE id = ANY($1) ORDER BY id FOR UPDATE")
            .bind(&subscriptions)
            .execute(&mut *tx)
            .await?;
        let moved = record_query(&cols, false).fetch_all(&mut *tx).await?;
        let mut disabled = vec![false; results.len()];
        for (i, r) in results.iter().enumerate() {
            disabled[i] = Self::apply_health(&mut tx, r.record.subscription_id, &r.health).await?;
            if disabled[i] {
                Self::sync_waiting_jobs(&mut tx, r.record.subscription_id).await?;
            }
        }
        tx.commit().await?;
        Ok(completions(results, &moved, Some(&disabled)))
    }
}

/// Takes back leased jobs `(id, recoveries so far)` without an outcome: pending again, due at
/// once, with `note` as their last error, or dead as poison once `hub_core::delivery::is_poison`
/// says so for their recovery count.
pub(super) async fn take_back(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    now: DateTime<Utc>,
    jobs: &[(Uuid, i32)],
    poison_threshold: u32,
    note: &str,
) -> StoreResult<Recovery> {
    if jobs.is_empty() {
        return Ok(Recovery::default());
    }
    let (all, poison) = split_poison(jobs, poison_threshold);
    sqlx::query(
        "UPDATE delivery_jobs SET recoveries = recoveries + 1,
            state = CASE WHEN id = ANY($3) THEN 'dead' ELSE 'pending' END,
            finished_at = CASE WHEN id = ANY($3) THEN $1 ELSE NULL END,
            last_error = CASE WHEN id = ANY($3) THEN $4 ELSE $5 END,
            due_at = $1, lease_expires_at = NULL, lease_token = NULL, updated_at = $1
         WHERE id = ANY($2)",
    )
    .bind(now)
    .bind(&all)
    .bind(&poison)
    .bind(hub_core::delivery::DeadReason::Poison.as_str())
    .bind(note)
    .execute(&mut **tx)
    .await?;
    Ok(Recovery { recovered: (all.len() - poison.len()) as u64, poisoned: poison.len() as u64 })
}

/// A read transaction in which the planner reads a table whole only when no index serves: the
/// counts of open jobs, each from its state's own partial index (with the statistics of a nearly
/// empty table, a count of the pending jobs read every job).
pub(super) const SEQSCAN_OFF: &str = "BEGIN; SET LOCAL enable_seqscan = off";

impl PgStore {
    /// The rows of `statement`, a count of open jobs, read with sequential scans off
    /// ([`SEQSCAN_OFF`]).
    pub(super) async fn read_open_jobs<T>(&self, statement: &'static str) -> StoreResult<Vec<T>>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
    {
        let mut tx = self.pool.begin_with(SEQSCAN_OFF).await?;
        let rows = sqlx::query_as(statement).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    }
}
