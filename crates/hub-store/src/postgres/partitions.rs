//! Inbox retention on the partitioned inbox (migrations 0021–0023).
//!
//! `events` is partitioned by the day of its ids (a UUIDv7 begins with its Unix time in
//! milliseconds, so a UTC day is a range of ids): one partition a day, a default partition for
//! ids of a day without one, and `events_legacy`, the table of the layout before, holding every id
//! before the cutover day of the migration. Each retention pass:
//!
//! 1. creates the partitions of today and the next two days that are missing;
//! 2. drops each partition whose day is over, whose events all arrived before the cutoff and
//!    that no job refers to, with the pull-stream entries of its events: one catalog change
//!    instead of a million row deletions, and no dead rows for vacuum;
//! 3. deletes old events row by row, in bounded batches, only where a drop cannot do the work:
//!    the default partition, the legacy table, and a day partition still there an hour past its
//!    time (a job refers to one of its events, or an event came in with an id of that day long
//!    after it).
//!
//! Events are kept exactly as long as before: each at least the retention after its arrival,
//! none while a job refers to it.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::{StoreError, StoreResult};

/// A table partitioned by the day of its ids: the inbox's `events` (migrations 0021–0023) or
/// `delivery_jobs` (0038–0040, its attempts partitioned beside it, see `job_partitions.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Family {
    /// The partitioned table.
    pub parent: &'static str,
    /// What its day partitions' names begin with, before `YYYYMMDD`.
    pub prefix: &'static str,
    /// The SQL function that makes a day's partition (answers whether it did).
    pub make: &'static str,
    /// How long past its time a day partition waits to be dropped whole before its old rows are
    /// deleted row by row.
    pub grace: Duration,
    /// Days after today whose partitions each pass makes.
    pub ahead: i64,
}

/// Events' ids are their producers', whose clocks may run ahead: two days are made ahead.
pub(crate) const EVENTS: Family =
    Family { parent: "events", prefix: "events_", make: "hub_event_partition", grace: DROP_GRACE, ahead: 2 };
/// Jobs' ids are the hub's own: tomorrow's partition is enough ahead (a pass runs every hour),
/// and every claim probes each partition there is, empty or not.
pub(crate) const JOBS: Family = Family {
    parent: "delivery_jobs",
    prefix: "delivery_jobs_",
    make: "hub_job_partition",
    grace: super::job_partitions::DROP_GRACE,
    ahead: 1,
};

impl Family {
    fn is_jobs(self) -> bool {
        self.parent == JOBS.parent
    }
}

/// How long past its time a day partition waits to be dropped whole before its old events are
/// deleted row by row.
const DROP_GRACE: Duration = Duration::hours(1);

/// One partition of a family's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Partition {
    pub name: String,
    /// When its ids end: `None` for the default partition.
    pub ends: Option<DateTime<Utc>>,
    /// Whether it is a day's (not the default one, nor the table of the layout before).
    pub day: bool,
}

/// The day a day partition's name says (`<prefix>YYYYMMDD`).
pub(crate) fn day_of_name(name: &str, prefix: &str) -> Option<NaiveDate> {
    let digits = name.strip_prefix(prefix)?;
    if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    NaiveDate::parse_from_str(digits, "%Y%m%d").ok()
}

/// The time a UUIDv7 begins with (its first 48 bits, milliseconds since the Unix epoch).
pub(crate) fn id_time(id: Uuid) -> Option<DateTime<Utc>> {
    let b = id.as_bytes();
    let ms = b[..6].iter().fold(0_i64, |acc, byte| (acc << 8) | i64::from(*byte));
    DateTime::from_timestamp_millis(ms)
}

/// The partitions of a family's table, oldest first (the default partition last).
pub(crate) async fn list(tx: &mut Transaction<'_, Postgres>, family: Family) -> StoreResult<Vec<Partition>> {
    let rows: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT c.relname::text,
                substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \\(''([0-9a-f-]+)''\\)')
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = $1::regclass",
    )
    .bind(family.parent)
    .fetch_all(&mut **tx)
    .await?;
    let mut parts = rows
        .into_iter()
        .map(|(name, to)| {
            let ends = match to {
                None => None,
                Some(to) => Some(
                    Uuid::parse_str(&to)
                        .ok()
                        .and_then(id_time)
                        .ok_or_else(|| StoreError::Corrupt(format!("partition {name} ends at {to}")))?,
                ),
            };
            let day = day_of_name(&name, family.prefix).is_some();
            Ok(Partition { name, ends, day })
        })
        .collect::<StoreResult<Vec<_>>>()?;
    parts.sort_by_key(|p| (p.ends.is_none(), p.ends));
    Ok(parts)
}

/// Creates the partitions of today and the next days that are missing (never one inside the
/// range another partition already holds). Answers how many it created.
pub(crate) async fn ensure_ahead(
    tx: &mut Transaction<'_, Postgres>,
    family: Family,
    parts: &[Partition],
    now: DateTime<Utc>,
) -> StoreResult<u32> {
    let covered_until = parts.iter().filter(|p| !p.day).filter_map(|p| p.ends).max();
    let mut created = 0;
    for n in 0..=family.ahead {
        let day = now.date_naive() + Duration::days(n);
        let starts = day.and_hms_opt(0, 0, 0).map(|t| t.and_utc());
        if covered_until.is_some_and(|until| starts.is_some_and(|s| s < until)) {
            continue;
        }
        let made: bool =
            sqlx::query_scalar(&format!("SELECT {}($1)", family.make)).bind(day).fetch_one(&mut **tx).await?;
        created += u32::from(made);
    }
    Ok(created)
}

/// The partitions whose time is over, oldest first: each is dropped whole if it may go.
pub(crate) fn drop_candidates(parts: &[Partition], now: DateTime<Utc>) -> Vec<&Partition> {
    parts.iter().filter(|p| p.ends.is_some_and(|ends| ends <= now)).collect()
}

/// Drops `part` with its events' pull-stream entries when every event in it arrived before
/// `cutoff` and no job refers to one of them. Answers the events dropped (0 when it stays).
pub(crate) async fn drop_if_expired(
    tx: &mut Transaction<'_, Postgres>,
    part: &Partition,
    cutoff: DateTime<Utc>,
) -> StoreResult<u64> {
    let table = quoted(&part.name);
    // Served by the partition's index on `received_at`.
    let recent: bool = sqlx::query_scalar(&format!("SELECT EXISTS (SELECT 1 FROM {table} WHERE received_at >= $1)"))
        .bind(cutoff)
        .fetch_one(&mut **tx)
        .await?;
    if recent {
        return Ok(0);
    }
    let referred: bool = sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM {table} e
                        WHERE EXISTS (SELECT 1 FROM delivery_jobs j
                                      WHERE j.tenant_id = e.tenant_id AND j.event_seq = e.seq))"
    ))
    .fetch_one(&mut **tx)
    .await?;
    if referred {
        return Ok(0);
    }
    // Pull-stream entries refer to an event by its seq: a matched one by `seq`, a replayed one by
    // `event_seq` (each statement is served by its own index).
    sqlx::query(&format!(
        "DELETE FROM pull_entries p USING {table} e
         WHERE p.event_seq IS NULL AND p.tenant_id = e.tenant_id AND p.seq = e.seq"
    ))
    .execute(&mut **tx)
    .await?;
    sqlx::query(&format!(
        "DELETE FROM pull_entries p USING {table} e
         WHERE p.event_seq IS NOT NULL AND p.tenant_id = e.tenant_id AND p.event_seq = e.seq"
    ))
    .execute(&mut **tx)
    .await?;
    let count: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(&mut **tx).await?;
    // Dropping a partition takes the parent's strongest lock until the commit that follows; behind
    // a long reader it would hold up every writer queued after it, so it gives up instead and the
    // next pass tries again.
    sqlx::query("SET LOCAL lock_timeout = '2s'").execute(&mut **tx).await?;
    sqlx::query(&format!("DROP TABLE {table}")).execute(&mut **tx).await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// The partitions whose old rows are deleted row by row: the default partition, the legacy
/// table, and day partitions left `grace` past their time (an hour for the inbox's).
pub(crate) fn row_pruned(parts: &[Partition], cutoff: DateTime<Utc>, grace: Duration) -> Vec<&Partition> {
    parts.iter().filter(|p| !p.day || p.ends.is_some_and(|ends| ends + grace <= cutoff)).collect()
}

/// Drops `part` of `family` when all of it may go (`drop_if_expired`, or for jobs
/// `job_partitions::drop_if_finished`). Answers the rows dropped.
pub(crate) async fn drop_if_done(
    tx: &mut Transaction<'_, Postgres>,
    family: Family,
    part: &Partition,
    cutoff: DateTime<Utc>,
) -> StoreResult<u64> {
    if family.is_jobs() {
        super::job_partitions::drop_if_finished(tx, part, cutoff).await
    } else {
        drop_if_expired(tx, part, cutoff).await
    }
}

/// Deletes up to `limit` old rows of `part` of `family` (`delete_rows`, or for jobs
/// `job_partitions::delete_rows`). Answers how many.
pub(crate) async fn delete_old_rows(
    tx: &mut Transaction<'_, Postgres>,
    family: Family,
    part: &Partition,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> StoreResult<u64> {
    if family.is_jobs() {
        super::job_partitions::delete_rows(tx, part, cutoff, limit).await
    } else {
        delete_rows(tx, part, cutoff, limit).await
    }
}

/// Deletes up to `limit` events of `part` that arrived before `cutoff` and no job refers to,
/// with their pull-stream entries. Answers how many.
pub(crate) async fn delete_rows(
    tx: &mut Transaction<'_, Postgres>,
    part: &Partition,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> StoreResult<u64> {
    let table = quoted(&part.name);
    let gone: Vec<(String, i64)> = sqlx::query_as(&format!(
        "DELETE FROM {table} WHERE (tenant_id, seq) IN (
            SELECT e.tenant_id, e.seq FROM {table} e
            WHERE e.received_at < $1
              AND NOT EXISTS (SELECT 1 FROM delivery_jobs j WHERE j.tenant_id = e.tenant_id AND j.event_seq = e.seq)
            ORDER BY e.received_at LIMIT $2)
         RETURNING tenant_id, seq"
    ))
    .bind(cutoff)
    .bind(limit)
    .fetch_all(&mut **tx)
    .await?;
    let (tenants, seqs): (Vec<String>, Vec<i64>) = gone.iter().cloned().unzip();
    sqlx::query(
        "DELETE FROM pull_entries
         WHERE (tenant_id, COALESCE(event_seq, seq)) IN (SELECT * FROM UNNEST($1::text[], $2::bigint[]))",
    )
    .bind(&tenants)
    .bind(&seqs)
    .execute(&mut **tx)
    .await?;
    Ok(gone.len() as u64)
}

/// A partition's name as an identifier (names are the store's own; quoted all the same).
pub(crate) fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, ends: Option<&str>) -> Partition {
        Partition {
            name: name.into(),
            ends: ends.map(|e| DateTime::parse_from_rfc3339(e).expect("time").with_timezone(&Utc)),
            day: day_of_name(name, "events_").is_some(),
        }
    }

    #[test]
    fn a_day_uuid_begins_with_its_milliseconds() {
        let id = Uuid::parse_str("019adc5b-e000-0000-0000-000000000000").expect("uuid");
        assert_eq!(id_time(id).expect("time").to_rfc3339(), "2025-12-02T00:00:00+00:00");
        assert_eq!(id_time(Uuid::nil()).expect("time").timestamp(), 0);
        let now = Uuid::now_v7();
        assert!((id_time(now).expect("time") - Utc::now()).num_seconds().abs() < 5);
    }

    #[test]
    fn only_day_partitions_are_named_by_their_day() {
        assert_eq!(day_of_name("events_20261203", "events_"), NaiveDate::from_ymd_opt(2026, 12, 3));
        assert_eq!(day_of_name("delivery_jobs_20261203", JOBS.prefix), NaiveDate::from_ymd_opt(2026, 12, 3));
        for other in ["events_legacy", "events_default", "events_2026120", "events_20261332", "jobs_20261203"] {
            assert_eq!(day_of_name(other, EVENTS.prefix), None, "{other}");
        }
        for other in ["delivery_jobs_legacy", "delivery_jobs_default", "events_20261203"] {
            assert_eq!(day_of_name(other, JOBS.prefix), None, "{other}");
        }
    }

    #[test]
    fn rows_are_deleted_only_where_a_drop_cannot_do_the_work() {
        let parts = [
            part("events_legacy", Some("2026-12-05T00:00:00Z")),
            part("events_20261205", Some("2026-12-06T00:00:00Z")),
            part("events_20261206", Some("2026-12-07T00:00:00Z")),
            part("events_default", None),
        ];
        let cutoff = DateTime::parse_from_rfc3339("2026-12-06T00:59:00Z").expect("time").with_timezone(&Utc);
        let names: Vec<&str> = row_pruned(&parts, cutoff, DROP_GRACE).iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["events_legacy", "events_default"], "the day just past its time waits to be dropped");
        let names: Vec<&str> =
            row_pruned(&parts, cutoff + Duration::minutes(1), DROP_GRACE).iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["events_legacy", "events_20261205", "events_default"], "an hour past its time");
    }
}
