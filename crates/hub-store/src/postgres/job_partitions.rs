//! Job and attempt retention on partitioned jobs (migrations 0038–0040).
//!
//! `delivery_jobs` is partitioned by the day of its ids (UUIDv7s the hub makes with the job) and
//! `delivery_attempts` by the day of their job's id, with the same bounds: a day's attempts live
//! beside their jobs. Each retention pass:
//!
//! 1. creates the partitions of today and tomorrow that are missing (job ids are the hub's own, so
//!    a day ahead is enough, and each partition costs every claim a probe);
//! 2. drops the jobs and attempts of each day that is over, once none of its jobs is open
//!    (pending, leased or held) and every one finished before the cutoff: two catalog changes
//!    instead of a million row deletions, and no dead rows for vacuum;
//! 3. deletes finished jobs with their attempts row by row, in bounded batches, only where a drop
//!    cannot do the work: the default partitions, the tables of the layout before, and a day still
//!    there three days past its time (one of its jobs is held by a paused subscription, was
//!    redriven, or retries past the default retry window of 34 hours).
//!
//! Jobs are kept exactly as long as before or longer: each finished one at least the retention
//! after it finished, none while it is open.

use chrono::{DateTime, Duration, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::partitions::{Partition, quoted};
use crate::StoreResult;

/// How long past its time a day's jobs wait to be dropped whole before its finished jobs are
/// deleted row by row: longer than the default longest retry window (a 24 h deadline and a 10 h
/// last delay), so a day whose jobs all finish on their schedule goes whole.
pub(crate) const DROP_GRACE: Duration = Duration::days(3);

/// The attempts' partition beside a jobs' partition (`delivery_jobs_X` → `delivery_attempts_X`).
pub(crate) fn attempts_of(jobs: &str) -> String {
    match jobs.strip_prefix("delivery_jobs_") {
        Some(rest) => format!("delivery_attempts_{rest}"),
        None => jobs.to_owned(),
    }
}

/// Drops the day `part` with its attempts when none of its jobs is open and every one finished
/// before `cutoff`. Answers the jobs dropped (0 when it stays).
pub(crate) async fn drop_if_finished(
    tx: &mut Transaction<'_, Postgres>,
    part: &Partition,
    cutoff: DateTime<Utc>,
) -> StoreResult<u64> {
    let jobs = quoted(&part.name);
    let attempts = quoted(&attempts_of(&part.name));
    // Gives up rather than queue behind a long reader (every writer would queue behind it): the
    // next pass tries again.
    sqlx::query("SET LOCAL lock_timeout = '2s'").execute(&mut **tx).await?;
    // Writers to the day's rows (a redrive of one of its dead jobs) wait for this transaction, so
    // what is checked is what is dropped.
    sqlx::query(&format!("LOCK TABLE {jobs}, {attempts} IN SHARE MODE")).execute(&mut **tx).await?;
    // Each condition is one probe of its own partial index (the open states') or of the finished
    // jobs' index (its last entry, and its entries without a finish time).
    let keeps: bool = sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM {jobs} WHERE state = 'pending')
             OR EXISTS (SELECT 1 FROM {jobs} WHERE state = 'leased')
             OR EXISTS (SELECT 1 FROM {jobs} WHERE state = 'held')
             OR EXISTS (SELECT 1 FROM {jobs} WHERE state IN ('succeeded', 'dead', 'cancelled')
                                                AND (finished_at >= $1 OR finished_at IS NULL))"
    ))
    .bind(cutoff)
    .fetch_one(&mut **tx)
    .await?;
    if keeps {
        return Ok(0);
    }
    let count: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {jobs}")).fetch_one(&mut **tx).await?;
    sqlx::query(&format!("DROP TABLE {jobs}, {attempts}")).execute(&mut **tx).await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Deletes up to `limit` jobs of `part` that finished before `cutoff`, with their attempts.
/// Answers how many.
pub(crate) async fn delete_rows(
    tx: &mut Transaction<'_, Postgres>,
    part: &Partition,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> StoreResult<u64> {
    let jobs = quoted(&part.name);
    let attempts = quoted(&attempts_of(&part.name));
    let ids: Vec<Uuid> = sqlx::query_scalar(&crate::sql::finished_jobs_to_prune(&jobs))
        .bind(cutoff)
        .bind(limit)
        .fetch_all(&mut **tx)
        .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    sqlx::query(&format!("DELETE FROM {attempts} WHERE job_id = ANY($1)")).bind(&ids).execute(&mut **tx).await?;
    let done = sqlx::query(&format!("DELETE FROM {jobs} WHERE id = ANY($1)")).bind(&ids).execute(&mut **tx).await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_days_attempts_are_named_after_its_jobs() {
        assert_eq!(attempts_of("delivery_jobs_20261207"), "delivery_attempts_20261207");
        assert_eq!(attempts_of("delivery_jobs_legacy"), "delivery_attempts_legacy");
        assert_eq!(attempts_of("delivery_jobs_default"), "delivery_attempts_default");
    }
}
