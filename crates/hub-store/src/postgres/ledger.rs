//! The ledger (SPEC §11): entries numbered under their log's head row, whose lock is held until
//! the appending transaction commits, so numbers follow commit order and have no gaps. Delivery
//! outcomes are appended by `hub_record` (migration 0032) with their attempts.

use crate::sql;
use std::collections::HashMap;

use hub_core::ledger::checkpoint::Checkpoint;
use hub_core::ledger::{Hash, Node};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Postgres, Row, Transaction};
use uuid::Uuid;

use super::{DateTime, PgStore, StoreResult, Utc, async_trait};
use crate::model::{cut_point, hash_from, peaks_from_bytes, peaks_to_bytes, start_peaks};
use crate::{Integration, IssuerKeyRecord, Ledger, LedgerEntryRecord, LedgerStart, NewLedgerEntry, Sealed, StoreError};

/// Appends entries given as columns (migration 0033); answers `(index, position in the input)`.
const APPEND: &str =
    "SELECT idx, ord FROM hub_ledger_append($1::text[], $2::text[], $3::text[], $4::uuid[], $5::bytea[],
    $6::timestamptz[])";

fn entry_from_row(row: &PgRow) -> StoreResult<LedgerEntryRecord> {
    let hash: Vec<u8> = row.try_get("leaf_hash")?;
    Ok(LedgerEntryRecord {
        index: row.try_get::<i64, _>("idx")? as u64,
        at: row.try_get("recorded_at")?,
        kind: row.try_get("kind")?,
        data: row.try_get("data")?,
        leaf_hash: hash_from(&hash).ok_or_else(|| StoreError::Corrupt("a ledger leaf hash is not 32 bytes".into()))?,
    })
}

fn checkpoint_from_row(row: &PgRow) -> StoreResult<Checkpoint> {
    Ok(Checkpoint {
        size: row.try_get::<i64, _>("size")? as u64,
        root: row.try_get("root")?,
        time: row.try_get("time")?,
        kid: row.try_get("kid")?,
        signature: row.try_get("signature")?,
        note: row.try_get("note")?,
    })
}

fn clamp(n: u64) -> i64 {
    n.min(i64::MAX as u64) as i64
}

#[async_trait]
impl Ledger for PgStore {
    async fn append_ledger(&self, entries: &[NewLedgerEntry]) -> StoreResult<Vec<u64>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, i64)> = sqlx::query_as(APPEND)
            .bind(entries.iter().map(|e| e.log.as_str()).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.kind).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.data.as_str()).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.event_id).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.digest_key.clone()).collect::<Vec<_>>())
            .bind(entries.iter().map(|e| e.at).collect::<Vec<_>>())
            .fetch_all(&self.pool)
            .await?;
        let mut numbers = vec![0u64; entries.len()];
        for (idx, ord) in rows {
            if let Some(n) = usize::try_from(ord - 1).ok().and_then(|i| numbers.get_mut(i)) {
                *n = idx as u64;
            }
        }
        Ok(numbers)
    }

    async fn ledger_backlog(&self) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(sql::LEDGER_BACKLOG).fetch_all(&self.pool).await?)
    }

    async fn integrate_ledger(
        &self,
        log: &str,
        limit: u64,
        seal: &(dyn Fn(Integration) -> Result<Sealed, String> + Send + Sync),
    ) -> StoreResult<Option<u64>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO ledger_trees (log, size, peaks) VALUES ($1, 0, '') ON CONFLICT (log) DO NOTHING")
            .bind(log)
            .execute(&mut *tx)
            .await?;
        // Another replica integrating this log now: it will have done it.
        let Some((size, peaks, last_at)): Option<(i64, Vec<u8>, Option<DateTime<Utc>>)> =
            sqlx::query_as("SELECT size, peaks, last_at FROM ledger_trees WHERE log = $1 FOR UPDATE SKIP LOCKED")
                .bind(log)
                .fetch_optional(&mut *tx)
                .await?
        else {
            return Ok(None);
        };
        let peaks = peaks_from_bytes(&peaks).ok_or_else(|| StoreError::Corrupt("a ledger tree's peaks".into()))?;
        // Committed appends only: an appender holds the head's row until it commits.
        let appended: i64 =
            sqlx::query_scalar(sql::INTEGRATE_LEDGER).bind(log).fetch_optional(&mut *tx).await?.unwrap_or(0);
        if appended <= size {
            return Ok(None);
        }
        // Entries after the tree's last were recorded no earlier than it (times never go back
        // within a log): the months before it are not read.
        let rows = sqlx::query(
            "SELECT idx, recorded_at, kind, data, leaf_hash FROM ledger_entries
             WHERE log = $1 AND idx >= $2 AND idx < $3 AND recorded_at >= COALESCE($4, '-infinity') ORDER BY idx",
        )
        .bind(log)
        .bind(size)
        .bind(appended.min(size.saturating_add(clamp(limit))))
        .bind(last_at)
        .fetch_all(&mut *tx)
        .await?;
        let entries = rows.iter().map(entry_from_row).collect::<StoreResult<Vec<_>>>()?;
        // A node's and a checkpoint's time is their last entry's, so each is dropped with the
        // month of the last entry it covers.
        let times: Vec<DateTime<Utc>> = entries.iter().map(|e| e.at).collect();
        let time_of =
            |last: u64| usize::try_from(last.wrapping_sub(size as u64)).ok().and_then(|i| times.get(i)).copied();
        let sealed = seal(Integration { log: log.to_owned(), size: size as u64, peaks, entries })
            .map_err(StoreError::Corrupt)?;
        let node_times = sealed
            .nodes
            .iter()
            .map(|(n, _)| time_of(n.first_leaf() + n.width() - 1))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| StoreError::Corrupt(format!("{log}: a new node covers no new entry")))?;
        sqlx::query(
            "INSERT INTO ledger_nodes (log, level, idx, hash, recorded_at)
             SELECT $1, level, idx, hash, at
             FROM UNNEST($2::smallint[], $3::bigint[], $4::bytea[], $5::timestamptz[]) AS u(level, idx, hash, at)",
        )
        .bind(log)
        .bind(sealed.nodes.iter().map(|(n, _)| i16::from(n.level)).collect::<Vec<_>>())
        .bind(sealed.nodes.iter().map(|(n, _)| n.index as i64).collect::<Vec<_>>())
        .bind(sealed.nodes.iter().map(|(_, h)| h.to_vec()).collect::<Vec<_>>())
        .bind(node_times)
        .execute(&mut *tx)
        .await?;
        let c = &sealed.checkpoint;
        let last = time_of(c.size.saturating_sub(1))
            .ok_or_else(|| StoreError::Corrupt(format!("{log}: a checkpoint covers no new entry")))?;
        sqlx::query(
            "INSERT INTO ledger_checkpoints (log, size, root, time, kid, signature, note, signed_at, recorded_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(log)
        .bind(c.size as i64)
        .bind(&c.root)
        .bind(&c.time)
        .bind(&c.kid)
        .bind(&c.signature)
        .bind(&c.note)
        .bind(sealed.signed_at)
        .bind(last)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE ledger_trees SET size = $2, peaks = $3, last_at = $4 WHERE log = $1")
            .bind(log)
            .bind(c.size as i64)
            .bind(peaks_to_bytes(&sealed.peaks))
            .bind(last)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(c.size))
    }

    async fn ledger_entries(&self, log: &str, from: u64, limit: u64) -> StoreResult<Vec<LedgerEntryRecord>> {
        let rows = sqlx::query(sql::LEDGER_ENTRIES)
            .bind(log)
            .bind(clamp(from))
            .bind(clamp(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(entry_from_row).collect()
    }

    async fn ledger_entries_of_kind(
        &self,
        log: &str,
        kind: &str,
        before: Option<u64>,
        limit: u64,
    ) -> StoreResult<Vec<LedgerEntryRecord>> {
        let rows = sqlx::query(sql::LEDGER_ENTRIES_OF_KIND)
            .bind(log)
            .bind(kind)
            .bind(before.map_or(i64::MAX, clamp))
            .bind(clamp(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(entry_from_row).collect()
    }

    async fn ledger_start(&self, log: &str) -> StoreResult<LedgerStart> {
        start_of(&mut *self.pool.acquire().await?, log).await
    }

    async fn ledger_nodes(&self, log: &str, nodes: &[Node]) -> StoreResult<Vec<(Node, Hash)>> {
        let mut conn = self.pool.acquire().await?;
        let start = start_of(&mut conn, log).await?;
        let mut found = nodes_in(&mut conn, log, nodes).await?;
        found.extend(nodes.iter().filter_map(|n| Some((*n, start.peak(*n)?))));
        Ok(found)
    }

    async fn ledger_checkpoints(&self, log: &str, from: u64, to: u64, limit: u64) -> StoreResult<Vec<Checkpoint>> {
        let rows = sqlx::query(sql::LEDGER_CHECKPOINTS)
            .bind(log)
            .bind(clamp(from))
            .bind(clamp(to))
            .bind(clamp(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(checkpoint_from_row).collect()
    }

    async fn latest_ledger_checkpoint(&self, log: &str) -> StoreResult<Option<Checkpoint>> {
        let row = sqlx::query(sql::LATEST_LEDGER_CHECKPOINT).bind(log).fetch_optional(&self.pool).await?;
        row.as_ref().map(checkpoint_from_row).transpose()
    }

    async fn ledger_keys(&self) -> StoreResult<Vec<IssuerKeyRecord>> {
        super::issuer::keys_in(self, "ledger_keys").await
    }

    async fn add_ledger_key(&self, key: &IssuerKeyRecord, retire_others: Option<DateTime<Utc>>) -> StoreResult<()> {
        super::issuer::add_key_to(self, "ledger_keys", key, retire_others).await
    }

    async fn forget_digest_keys(&self, tenant: &str, events: &[Uuid]) -> StoreResult<u64> {
        if events.is_empty() {
            return Ok(0);
        }
        Ok(sqlx::query(
            "UPDATE ledger_entries SET digest_key = NULL
             WHERE log = $1 AND event_id = ANY($2) AND digest_key IS NOT NULL",
        )
        .bind(tenant)
        .bind(events)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }

    async fn digest_key(&self, log: &str, index: u64) -> StoreResult<Option<Vec<u8>>> {
        Ok(sqlx::query_scalar(sql::DIGEST_KEY).bind(log).bind(clamp(index)).fetch_optional(&self.pool).await?.flatten())
    }
}

/// A log's tree as retention reads it: the entries it holds, and where the kept ones begin.
struct Tree {
    size: u64,
    start: LedgerStart,
}

/// The trees of `logs` that exist, by log; `lock` takes their rows (in log order) until the
/// commit.
async fn trees_of(conn: &mut PgConnection, logs: &[&str], lock: bool) -> StoreResult<HashMap<String, Tree>> {
    let rows: Vec<(String, i64, i64, Vec<u8>)> = sqlx::query_as(if lock {
        "SELECT log, size, start_size, start_peaks FROM ledger_trees WHERE log = ANY($1) ORDER BY log FOR UPDATE"
    } else {
        "SELECT log, size, start_size, start_peaks FROM ledger_trees WHERE log = ANY($1)"
    })
    .bind(logs)
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|(log, size, start, peaks)| {
            let peaks =
                peaks_from_bytes(&peaks).ok_or_else(|| StoreError::Corrupt(format!("{log}: the start's peaks")))?;
            Ok((log, Tree { size: size as u64, start: LedgerStart { size: start as u64, peaks } }))
        })
        .collect()
}

/// Where `log`'s kept entries begin.
async fn start_of(conn: &mut PgConnection, log: &str) -> StoreResult<LedgerStart> {
    Ok(trees_of(conn, &[log], false).await?.remove(log).map(|t| t.start).unwrap_or_default())
}

/// The hashes of `nodes` the store holds: leaves from the entries, others from the nodes.
async fn nodes_in(conn: &mut PgConnection, log: &str, nodes: &[Node]) -> StoreResult<Vec<(Node, Hash)>> {
    let (leaves, inner): (Vec<&Node>, Vec<&Node>) = nodes.iter().partition(|n| n.level == 0);
    let mut rows: Vec<(i16, i64, Vec<u8>)> =
        sqlx::query_as("SELECT 0::smallint, idx, leaf_hash FROM ledger_entries WHERE log = $1 AND idx = ANY($2)")
            .bind(log)
            .bind(leaves.iter().map(|n| n.index as i64).collect::<Vec<_>>())
            .fetch_all(&mut *conn)
            .await?;
    rows.extend(
        sqlx::query_as::<_, (i16, i64, Vec<u8>)>(
            "SELECT n.level, n.idx, n.hash FROM ledger_nodes n
             JOIN UNNEST($2::smallint[], $3::bigint[]) AS u(level, idx) ON n.level = u.level AND n.idx = u.idx
             WHERE n.log = $1",
        )
        .bind(log)
        .bind(inner.iter().map(|n| i16::from(n.level)).collect::<Vec<_>>())
        .bind(inner.iter().map(|n| n.index as i64).collect::<Vec<_>>())
        .fetch_all(&mut *conn)
        .await?,
    );
    Ok(rows
        .into_iter()
        .filter_map(|(level, idx, hash)| Some((Node::new(u8::try_from(level).ok()?, idx as u64), hash_from(&hash)?)))
        .collect())
}

/// Makes `log` begin at `size`: keeps that tree's peaks as its start (the caller holds the
/// tree's row).
async fn move_start(conn: &mut PgConnection, log: &str, previous: &LedgerStart, size: u64) -> StoreResult<()> {
    let wanted = hub_core::ledger::peaks(size);
    let found = nodes_in(&mut *conn, log, &wanted).await?;
    let peaks = start_peaks(size, previous, &found)
        .ok_or_else(|| StoreError::Corrupt(format!("{log}: a peak of the tree of {size} entries is missing")))?;
    sqlx::query(sql::MOVE_START).bind(log).bind(size as i64).bind(peaks_to_bytes(&peaks)).execute(conn).await?;
    Ok(())
}

/// Deletes `log`'s rows below `size` from `entries`, `nodes` and `checkpoints` (the tables or
/// partitions named): its entries, the nodes wholly below, the checkpoints of fewer entries (the
/// one of exactly `size` entries, if any, stays: the start's peaks fold into its root).
async fn forget_below(conn: &mut PgConnection, tables: [&str; 3], log: &str, size: u64) -> StoreResult<u64> {
    let [entries, nodes, checkpoints] = tables;
    let gone = sqlx::query(&format!("DELETE FROM {entries} WHERE log = $1 AND idx < $2"))
        .bind(log)
        .bind(size as i64)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    // A node (level, idx) covers entries idx·2^level .. (idx+1)·2^level: below `size` when
    // idx < size >> level; one index range per level.
    sqlx::query(&format!(
        "DELETE FROM {nodes} n USING generate_series(1, 63) AS l(level)
         WHERE n.log = $1 AND n.level = l.level AND n.idx < ($2::bigint >> l.level)"
    ))
    .bind(log)
    .bind(size as i64)
    .execute(&mut *conn)
    .await?;
    sqlx::query(&format!("DELETE FROM {checkpoints} WHERE log = $1 AND size < $2"))
        .bind(log)
        .bind(size as i64)
        .execute(&mut *conn)
        .await?;
    Ok(gone)
}

const TABLES: [&str; 3] = ["ledger_entries", "ledger_nodes", "ledger_checkpoints"];
const DEFAULTS: [&str; 3] = ["ledger_entries_default", "ledger_nodes_default", "ledger_checkpoints_default"];

/// Makes the partitions of this month and the next that are missing.
pub(super) async fn ensure_months(tx: &mut Transaction<'_, Postgres>, now: DateTime<Utc>) -> StoreResult<()> {
    use chrono::Datelike;
    let this = now.date_naive().with_day(1).unwrap_or(now.date_naive());
    for month in [this, this + chrono::Months::new(1)] {
        sqlx::query("SELECT hub_ledger_partition($1)").bind(month).execute(&mut **tx).await?;
    }
    Ok(())
}

/// Deletes, a log at a time, the rows recorded before `cutoff` that wait in the default
/// partitions (a month that had no partition then), up to about `limit` entries.
pub(super) async fn cut_defaults(
    tx: &mut Transaction<'_, Postgres>,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> StoreResult<u64> {
    let logs: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT log FROM ledger_entries_default WHERE recorded_at < $1 ORDER BY log LIMIT 1000",
    )
    .bind(cutoff)
    .fetch_all(&mut **tx)
    .await?;
    let mut deleted = 0u64;
    for log in logs {
        let room = limit - i64::try_from(deleted).unwrap_or(limit);
        if room <= 0 {
            break;
        }
        // Not sealed yet: nothing of it may go.
        let Some(tree) = trees_of(&mut *tx, &[&log], true).await?.remove(&log) else { continue };
        let oldest: Vec<(i64, DateTime<Utc>)> =
            sqlx::query_as(sql::CUT_DEFAULTS).bind(&log).bind(room).fetch_all(&mut **tx).await?;
        let oldest: Vec<(u64, DateTime<Utc>)> = oldest.into_iter().map(|(i, at)| (i as u64, at)).collect();
        let Some(size) = cut_point(&oldest, cutoff, tree.size) else { continue };
        move_start(&mut *tx, &log, &tree.start, size).await?;
        deleted += forget_below(&mut *tx, TABLES, &log, size).await?;
    }
    Ok(deleted)
}

/// A month's partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Month {
    /// `YYYYMM`, as the partitions' names end.
    pub suffix: String,
    /// When the month ends.
    pub ends: DateTime<Utc>,
}

/// The months the ledger has partitions for, oldest first.
pub(super) async fn months(tx: &mut Transaction<'_, Postgres>) -> StoreResult<Vec<Month>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'ledger_entries'::regclass",
    )
    .fetch_all(&mut **tx)
    .await?;
    let mut months: Vec<Month> = names.iter().filter_map(|n| month_of(n)).collect();
    months.sort_by_key(|m| m.ends);
    Ok(months)
}

/// The month a partition's name says (`ledger_entries_YYYYMM`).
pub(super) fn month_of(name: &str) -> Option<Month> {
    let suffix = name.strip_prefix("ledger_entries_")?;
    if suffix.len() != 6 || !suffix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let first = chrono::NaiveDate::parse_from_str(&format!("{suffix}01"), "%Y%m%d").ok()?;
    let ends = (first + chrono::Months::new(1)).and_hms_opt(0, 0, 0)?.and_utc();
    Some(Month { suffix: suffix.to_owned(), ends })
}

/// Drops a month whose time is past retention: every log it holds then begins after its last
/// entry there. Only when each of those logs begins in this month (nothing older is left) and
/// its tree holds the month's entries; answers the entries dropped, or `None` when it must wait.
pub(super) async fn drop_month(tx: &mut Transaction<'_, Postgres>, month: &Month) -> StoreResult<Option<u64>> {
    let [entries, nodes, checkpoints] = TABLES.map(|t| format!("{t}_{}", month.suffix));
    let runs: Vec<(String, i64, i64)> =
        sqlx::query_as(&format!("SELECT log, min(idx), max(idx) FROM {entries} GROUP BY log ORDER BY log"))
            .fetch_all(&mut **tx)
            .await?;
    let logs: Vec<&str> = runs.iter().map(|(log, _, _)| log.as_str()).collect();
    let trees = trees_of(&mut *tx, &logs, true).await?;
    for (log, first, last) in &runs {
        let ready = trees.get(log).is_some_and(|t| (*last as u64) < t.size && t.start.size == *first as u64);
        if !ready {
            // Older entries of the log are left (in a default partition), or the month's are
            // not sealed yet: the next pass tries again.
            return Ok(None);
        }
    }
    let mut dropped = 0u64;
    for (log, first, last) in &runs {
        let size = (*last + 1) as u64;
        let previous =
            trees.get(log).map(|t| &t.start).ok_or_else(|| StoreError::Corrupt(format!("{log}: no tree")))?;
        move_start(&mut *tx, log, previous, size).await?;
        forget_below(&mut *tx, DEFAULTS, log, size).await?;
        dropped += (last - first + 1) as u64;
    }
    // Dropping a partition takes the parent's strongest lock until the commit that follows:
    // behind a long reader it gives up, and the next pass tries again.
    sqlx::query("SET LOCAL lock_timeout = '2s'").execute(&mut **tx).await?;
    sqlx::query(&format!("DROP TABLE IF EXISTS {entries}, {nodes}, {checkpoints}")).execute(&mut **tx).await?;
    Ok(Some(dropped))
}
