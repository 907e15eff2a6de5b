//! The ledger (SPEC §11): entries numbered under their log's head in the one write transaction
//! SQLite allows at a time, so numbers follow commit order.

use crate::sql;
use std::collections::BTreeMap;

use hub_core::ledger::checkpoint::Checkpoint;
use hub_core::ledger::{Hash, Node, leaf_hash};
use sqlx::{Row, Sqlite, SqliteConnection, Transaction};

use super::{DateTime, SqliteStore, StoreResult, Utc, async_trait, from_micros, micros, text};
use crate::model::{cut_point, hash_from, peaks_from_bytes, peaks_to_bytes, start_peaks};
use crate::{Integration, IssuerKeyRecord, Ledger, LedgerEntryRecord, LedgerStart, NewLedgerEntry, Sealed, StoreError};
use uuid::Uuid;

/// Appends `entries` inside the caller's write transaction; their indexes, in the order given.
pub(super) async fn append_in(tx: &mut Transaction<'_, Sqlite>, entries: &[&NewLedgerEntry]) -> StoreResult<Vec<u64>> {
    let mut per_log: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        per_log.entry(e.log.as_str()).or_default().push(i);
    }
    let mut numbers = vec![0u64; entries.len()];
    for (log, positions) in per_log {
        let n = positions.len() as i64;
        // Each entry's time is the latest its log was given so far: never back within a log.
        let latest = positions.iter().map(|i| micros(entries[*i].at)).max().unwrap_or_default();
        let (size, recorded): (i64, i64) = sqlx::query_as(
            "INSERT INTO ledger_heads (log, size, last_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (log) DO UPDATE SET size = size + excluded.size,
                 last_at = max(COALESCE(last_at, excluded.last_at), excluded.last_at)
             RETURNING size, last_at",
        )
        .bind(log)
        .bind(n)
        .bind(latest)
        .fetch_one(&mut **tx)
        .await?;
        for (nth, at) in positions.into_iter().enumerate() {
            let index = (size - n) as u64 + nth as u64;
            let e = entries[at];
            sqlx::query(
                "INSERT INTO ledger_entries (log, idx, recorded_at, kind, data, leaf_hash, event_id, digest_key)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .bind(log)
            .bind(index as i64)
            .bind(recorded)
            .bind(e.kind)
            .bind(&e.data)
            .bind(leaf_hash(index, e.data.as_bytes()).to_vec())
            .bind(e.event_id.map(text))
            .bind(&e.digest_key)
            .execute(&mut **tx)
            .await?;
            numbers[at] = index;
        }
    }
    Ok(numbers)
}

fn entry_from_row(row: &sqlx::sqlite::SqliteRow) -> StoreResult<LedgerEntryRecord> {
    let hash: Vec<u8> = row.try_get("leaf_hash")?;
    Ok(LedgerEntryRecord {
        index: row.try_get::<i64, _>("idx")? as u64,
        at: from_micros(row.try_get("recorded_at")?)?,
        kind: row.try_get("kind")?,
        data: row.try_get("data")?,
        leaf_hash: hash_from(&hash).ok_or_else(|| StoreError::Corrupt("a ledger leaf hash is not 32 bytes".into()))?,
    })
}

fn checkpoint_from_row(row: &sqlx::sqlite::SqliteRow) -> StoreResult<Checkpoint> {
    Ok(Checkpoint {
        size: row.try_get::<i64, _>("size")? as u64,
        root: row.try_get("root")?,
        time: row.try_get("time")?,
        kid: row.try_get("kid")?,
        signature: row.try_get("signature")?,
        note: row.try_get("note")?,
    })
}

#[async_trait]
impl Ledger for SqliteStore {
    async fn append_ledger(&self, entries: &[NewLedgerEntry]) -> StoreResult<Vec<u64>> {
        let mut tx = self.begin_write().await?;
        let numbers = append_in(&mut tx, &entries.iter().collect::<Vec<_>>()).await?;
        tx.commit().await?;
        Ok(numbers)
    }

    async fn ledger_backlog(&self) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(sql::LEDGER_BACKLOG).fetch_all(&self.reader).await?)
    }

    async fn integrate_ledger(
        &self,
        log: &str,
        limit: u64,
        seal: &(dyn Fn(Integration) -> Result<Sealed, String> + Send + Sync),
    ) -> StoreResult<Option<u64>> {
        let mut tx = self.begin_write().await?;
        let tree: Option<(i64, Vec<u8>)> = sqlx::query_as("SELECT size, peaks FROM ledger_trees WHERE log = ?1")
            .bind(log)
            .fetch_optional(&mut *tx)
            .await?;
        let (size, peaks) = tree.unwrap_or_default();
        let peaks = peaks_from_bytes(&peaks).ok_or_else(|| StoreError::Corrupt("a ledger tree's peaks".into()))?;
        let appended: i64 =
            sqlx::query_scalar(sql::INTEGRATE_LEDGER).bind(log).fetch_optional(&mut *tx).await?.unwrap_or(0);
        if appended <= size {
            return Ok(None);
        }
        let rows = sqlx::query(
            "SELECT idx, recorded_at, kind, data, leaf_hash FROM ledger_entries
             WHERE log = ?1 AND idx >= ?2 AND idx < ?3 ORDER BY idx",
        )
        .bind(log)
        .bind(size)
        .bind(appended.min(size.saturating_add(limit as i64)))
        .fetch_all(&mut *tx)
        .await?;
        let entries = rows.iter().map(entry_from_row).collect::<StoreResult<Vec<_>>>()?;
        let sealed = seal(Integration { log: log.to_owned(), size: size as u64, peaks, entries })
            .map_err(StoreError::Corrupt)?;
        for (node, hash) in &sealed.nodes {
            sqlx::query("INSERT INTO ledger_nodes (log, level, idx, hash) VALUES (?1, ?2, ?3, ?4)")
                .bind(log)
                .bind(i64::from(node.level))
                .bind(node.index as i64)
                .bind(hash.to_vec())
                .execute(&mut *tx)
                .await?;
        }
        let c = &sealed.checkpoint;
        sqlx::query(
            "INSERT INTO ledger_checkpoints (log, size, root, time, kid, signature, note, signed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .bind(log)
        .bind(c.size as i64)
        .bind(&c.root)
        .bind(&c.time)
        .bind(&c.kid)
        .bind(&c.signature)
        .bind(&c.note)
        .bind(micros(sealed.signed_at))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO ledger_trees (log, size, peaks) VALUES (?1, ?2, ?3)
             ON CONFLICT (log) DO UPDATE SET size = excluded.size, peaks = excluded.peaks",
        )
        .bind(log)
        .bind(c.size as i64)
        .bind(peaks_to_bytes(&sealed.peaks))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(c.size))
    }

    async fn ledger_entries(&self, log: &str, from: u64, limit: u64) -> StoreResult<Vec<LedgerEntryRecord>> {
        let rows = sqlx::query(sql::LEDGER_ENTRIES)
            .bind(log)
            .bind(from.min(i64::MAX as u64) as i64)
            .bind(limit.min(i64::MAX as u64) as i64)
            .fetch_all(&self.reader)
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
            .bind(before.map_or(i64::MAX, |b| b.min(i64::MAX as u64) as i64))
            .bind(limit.min(i64::MAX as u64) as i64)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(entry_from_row).collect()
    }

    async fn ledger_start(&self, log: &str) -> StoreResult<LedgerStart> {
        start_of(&mut *self.reader.acquire().await?, log).await
    }

    async fn ledger_nodes(&self, log: &str, nodes: &[Node]) -> StoreResult<Vec<(Node, Hash)>> {
        let mut conn = self.reader.acquire().await?;
        let start = start_of(&mut conn, log).await?;
        let mut found = nodes_in(&mut conn, log, nodes).await?;
        found.extend(nodes.iter().filter_map(|n| Some((*n, start.peak(*n)?))));
        Ok(found)
    }

    async fn ledger_checkpoints(&self, log: &str, from: u64, to: u64, limit: u64) -> StoreResult<Vec<Checkpoint>> {
        let rows = sqlx::query(sql::LEDGER_CHECKPOINTS)
            .bind(log)
            .bind(from.min(i64::MAX as u64) as i64)
            .bind(to.min(i64::MAX as u64) as i64)
            .bind(limit.min(i64::MAX as u64) as i64)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(checkpoint_from_row).collect()
    }

    async fn latest_ledger_checkpoint(&self, log: &str) -> StoreResult<Option<Checkpoint>> {
        let row = sqlx::query(sql::LATEST_LEDGER_CHECKPOINT).bind(log).fetch_optional(&self.reader).await?;
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
        let ids = serde_json::to_string(&events.iter().map(|u| text(*u)).collect::<Vec<_>>())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut tx = self.begin_write().await?;
        let n = sqlx::query(
            "UPDATE ledger_entries SET digest_key = NULL
             WHERE log = ?1 AND event_id IN (SELECT value FROM json_each(?2)) AND digest_key IS NOT NULL",
        )
        .bind(tenant)
        .bind(ids)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(n)
    }

    async fn digest_key(&self, log: &str, index: u64) -> StoreResult<Option<Vec<u8>>> {
        Ok(sqlx::query_scalar(sql::DIGEST_KEY)
            .bind(log)
            .bind(index.min(i64::MAX as u64) as i64)
            .fetch_optional(&self.reader)
            .await?
            .flatten())
    }
}

async fn start_of(conn: &mut SqliteConnection, log: &str) -> StoreResult<LedgerStart> {
    let row: Option<(i64, Vec<u8>)> = sqlx::query_as("SELECT start_size, start_peaks FROM ledger_trees WHERE log = ?1")
        .bind(log)
        .fetch_optional(conn)
        .await?;
    row.map_or(Ok(LedgerStart::default()), |(size, peaks)| start_from(log, size, &peaks))
}

/// A start as stored: its size and its encoded peaks.
fn start_from(log: &str, size: i64, peaks: &[u8]) -> StoreResult<LedgerStart> {
    let peaks = peaks_from_bytes(peaks).ok_or_else(|| StoreError::Corrupt(format!("{log}: the start's peaks")))?;
    Ok(LedgerStart { size: size as u64, peaks })
}

/// The hashes of `nodes` the store holds: leaves from the entries, others from the nodes.
async fn nodes_in(conn: &mut SqliteConnection, log: &str, nodes: &[Node]) -> StoreResult<Vec<(Node, Hash)>> {
    let mut found = Vec::with_capacity(nodes.len());
    for node in nodes {
        let hash: Option<Vec<u8>> = if node.level == 0 {
            sqlx::query_scalar("SELECT leaf_hash FROM ledger_entries WHERE log = ?1 AND idx = ?2")
                .bind(log)
                .bind(node.index as i64)
                .fetch_optional(&mut *conn)
                .await?
        } else {
            sqlx::query_scalar("SELECT hash FROM ledger_nodes WHERE log = ?1 AND level = ?2 AND idx = ?3")
                .bind(log)
                .bind(i64::from(node.level))
                .bind(node.index as i64)
                .fetch_optional(&mut *conn)
                .await?
        };
        if let Some(hash) = hash.as_deref().and_then(hash_from) {
            found.push((*node, hash));
        }
    }
    Ok(found)
}

/// Retention: deletes each log's oldest entries recorded before `cutoff` (up to about `limit` in
/// all), with the nodes wholly below them and the checkpoints of fewer entries; the log then
/// begins after them, with that tree's peaks kept as its start. Answers the entries deleted.
pub(super) async fn prune(tx: &mut Transaction<'_, Sqlite>, cutoff: DateTime<Utc>, limit: i64) -> StoreResult<u64> {
    // The logs whose first kept entry is past retention.
    let logs: Vec<(String, i64, i64, Vec<u8>)> = sqlx::query_as(
        "SELECT t.log, t.size, t.start_size, t.start_peaks FROM ledger_trees t
         WHERE EXISTS (SELECT 1 FROM ledger_entries e WHERE e.log = t.log AND e.idx = t.start_size AND e.recorded_at < ?1)
         ORDER BY t.log",
    )
    .bind(micros(cutoff))
    .fetch_all(&mut **tx)
    .await?;
    let mut deleted = 0u64;
    for (log, integrated, start, stored_peaks) in logs {
        let room = limit - i64::try_from(deleted).unwrap_or(limit);
        if room <= 0 {
            break;
        }
        let previous = start_from(&log, start, &stored_peaks)?;
        let oldest: Vec<(i64, i64)> =
            sqlx::query_as(sql::CUT_DEFAULTS).bind(&log).bind(room).fetch_all(&mut **tx).await?;
        let oldest =
            oldest.into_iter().map(|(i, at)| Ok((i as u64, from_micros(at)?))).collect::<StoreResult<Vec<_>>>()?;
        let Some(size) = cut_point(&oldest, cutoff, integrated as u64) else { continue };
        let found = nodes_in(&mut *tx, &log, &hub_core::ledger::peaks(size)).await?;
        let peaks = start_peaks(size, &previous, &found)
            .ok_or_else(|| StoreError::Corrupt(format!("{log}: a peak of the tree of {size} entries is missing")))?;
        sqlx::query(sql::MOVE_START)
            .bind(&log)
            .bind(size as i64)
            .bind(peaks_to_bytes(&peaks))
            .execute(&mut **tx)
            .await?;
        deleted += sqlx::query("DELETE FROM ledger_entries WHERE log = ?1 AND idx < ?2")
            .bind(&log)
            .bind(size as i64)
            .execute(&mut **tx)
            .await?
            .rows_affected();
        // A node (level, idx) covers entries idx·2^level .. (idx+1)·2^level: wholly below
        // `size` when idx < size >> level.
        for level in 1..64i64 {
            sqlx::query("DELETE FROM ledger_nodes WHERE log = ?1 AND level = ?2 AND idx < ?3")
                .bind(&log)
                .bind(level)
                .bind((size >> level) as i64)
                .execute(&mut **tx)
                .await?;
        }
        sqlx::query("DELETE FROM ledger_checkpoints WHERE log = ?1 AND size < ?2")
            .bind(&log)
            .bind(size as i64)
            .execute(&mut **tx)
            .await?;
    }
    Ok(deleted)
}
