//! The ledger (SPEC §11): entries numbered under their log's head row, whose lock is held until
//! the appending transaction commits, so numbers follow commit order and have no gaps. Delivery
//! outcomes are appended by `hub_record` (migration 0032) with their attempts.

use hub_core::ledger::checkpoint::Checkpoint;
use hub_core::ledger::{Hash, Node};
use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use super::{DateTime, PgStore, StoreResult, Utc, async_trait};
use crate::model::{hash_from, peaks_from_bytes, peaks_to_bytes};
use crate::{Integration, IssuerKeyRecord, Ledger, LedgerEntryRecord, NewLedgerEntry, Sealed, StoreError};

/// Appends entries given as columns; answers `(position in the input, index)`.
const APPEND: &str = "
    WITH given AS (
        SELECT x.ord, x.log, x.kind, x.data, x.event, x.dkey, x.at,
            row_number() OVER (PARTITION BY x.log ORDER BY x.ord) AS nth
        FROM UNNEST($1::text[], $2::text[], $3::text[], $4::uuid[], $5::bytea[], $6::timestamptz[])
            WITH ORDINALITY AS x(log, kind, data, event, dkey, at, ord)
    ), wanted AS (
        SELECT log, count(*) AS n FROM given GROUP BY log
    ), heads AS (
        INSERT INTO ledger_heads AS h (log, size)
        SELECT log, n FROM wanted ORDER BY log
        ON CONFLICT (log) DO UPDATE SET size = h.size + EXCLUDED.size
        RETURNING h.log, h.size
    ), numbered AS (
        SELECT g.*, h.size - w.n + g.nth - 1 AS idx
        FROM given g JOIN wanted w ON w.log = g.log JOIN heads h ON h.log = g.log
    )
    INSERT INTO ledger_entries (log, idx, recorded_at, kind, data, leaf_hash, event_id, digest_key)
    SELECT log, idx, at, kind, data, sha256('\\x00'::bytea || int8send(idx) || convert_to(data, 'UTF8')), event, dkey
    FROM numbered
    RETURNING idx, (SELECT ord FROM numbered n WHERE n.log = ledger_entries.log AND n.idx = ledger_entries.idx)";

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

const CHECKPOINT_COLUMNS: &str = "size, root, time, kid, signature, note";

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
        Ok(sqlx::query_scalar(
            "SELECT h.log FROM ledger_heads h LEFT JOIN ledger_trees t ON t.log = h.log
             WHERE h.size > COALESCE(t.size, 0) ORDER BY h.log",
        )
        .fetch_all(&self.pool)
        .await?)
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
        let Some((size, peaks)): Option<(i64, Vec<u8>)> =
            sqlx::query_as("SELECT size, peaks FROM ledger_trees WHERE log = $1 FOR UPDATE SKIP LOCKED")
                .bind(log)
                .fetch_optional(&mut *tx)
                .await?
        else {
            return Ok(None);
        };
        let peaks = peaks_from_bytes(&peaks).ok_or_else(|| StoreError::Corrupt("a ledger tree's peaks".into()))?;
        // Committed appends only: an appender holds the head's row until it commits.
        let appended: i64 = sqlx::query_scalar("SELECT size FROM ledger_heads WHERE log = $1")
            .bind(log)
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or(0);
        if appended <= size {
            return Ok(None);
        }
        let rows = sqlx::query(
            "SELECT idx, recorded_at, kind, data, leaf_hash FROM ledger_entries
             WHERE log = $1 AND idx >= $2 AND idx < $3 ORDER BY idx",
        )
        .bind(log)
        .bind(size)
        .bind(appended.min(size.saturating_add(clamp(limit))))
        .fetch_all(&mut *tx)
        .await?;
        let entries = rows.iter().map(entry_from_row).collect::<StoreResult<Vec<_>>>()?;
        let sealed = seal(Integration { log: log.to_owned(), size: size as u64, peaks, entries })
            .map_err(StoreError::Corrupt)?;
        sqlx::query(
            "INSERT INTO ledger_nodes (log, level, idx, hash)
             SELECT $1, level, idx, hash FROM UNNEST($2::smallint[], $3::bigint[], $4::bytea[]) AS u(level, idx, hash)",
        )
        .bind(log)
        .bind(sealed.nodes.iter().map(|(n, _)| i16::from(n.level)).collect::<Vec<_>>())
        .bind(sealed.nodes.iter().map(|(n, _)| n.index as i64).collect::<Vec<_>>())
        .bind(sealed.nodes.iter().map(|(_, h)| h.to_vec()).collect::<Vec<_>>())
        .execute(&mut *tx)
        .await?;
        let c = &sealed.checkpoint;
        sqlx::query(
            "INSERT INTO ledger_checkpoints (log, size, root, time, kid, signature, note, signed_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(log)
        .bind(c.size as i64)
        .bind(&c.root)
        .bind(&c.time)
        .bind(&c.kid)
        .bind(&c.signature)
        .bind(&c.note)
        .bind(sealed.signed_at)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE ledger_trees SET size = $2, peaks = $3 WHERE log = $1")
            .bind(log)
            .bind(c.size as i64)
            .bind(peaks_to_bytes(&sealed.peaks))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(c.size))
    }

    async fn ledger_entries(&self, log: &str, from: u64, limit: u64) -> StoreResult<Vec<LedgerEntryRecord>> {
        let rows = sqlx::query(
            "SELECT idx, recorded_at, kind, data, leaf_hash FROM ledger_entries
             WHERE log = $1 AND idx >= $2 ORDER BY idx LIMIT $3",
        )
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
        let rows = sqlx::query(
            "SELECT idx, recorded_at, kind, data, leaf_hash FROM ledger_entries
             WHERE log = $1 AND kind = $2 AND idx < $3 ORDER BY idx DESC LIMIT $4",
        )
        .bind(log)
        .bind(kind)
        .bind(before.map_or(i64::MAX, clamp))
        .bind(clamp(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(entry_from_row).collect()
    }

    async fn ledger_nodes(&self, log: &str, nodes: &[Node]) -> StoreResult<Vec<(Node, Hash)>> {
        let (leaves, inner): (Vec<&Node>, Vec<&Node>) = nodes.iter().partition(|n| n.level == 0);
        let mut rows: Vec<(i16, i64, Vec<u8>)> =
            sqlx::query_as("SELECT 0::smallint, idx, leaf_hash FROM ledger_entries WHERE log = $1 AND idx = ANY($2)")
                .bind(log)
                .bind(leaves.iter().map(|n| n.index as i64).collect::<Vec<_>>())
                .fetch_all(&self.pool)
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
            .fetch_all(&self.pool)
            .await?,
        );
        Ok(rows
            .into_iter()
            .filter_map(|(level, idx, hash)| {
                Some((Node::new(u8::try_from(level).ok()?, idx as u64), hash_from(&hash)?))
            })
            .collect())
    }

    async fn ledger_checkpoints(&self, log: &str, from: u64, to: u64, limit: u64) -> StoreResult<Vec<Checkpoint>> {
        let rows = sqlx::query(&format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM ledger_checkpoints WHERE log = $1 AND size >= $2 AND size <= $3
             ORDER BY size LIMIT $4"
        ))
        .bind(log)
        .bind(clamp(from))
        .bind(clamp(to))
        .bind(clamp(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(checkpoint_from_row).collect()
    }

    async fn latest_ledger_checkpoint(&self, log: &str) -> StoreResult<Option<Checkpoint>> {
        let row = sqlx::query(&format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM ledger_checkpoints WHERE log = $1 ORDER BY size DESC LIMIT 1"
        ))
        .bind(log)
        .fetch_optional(&self.pool)
        .await?;
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
        Ok(sqlx::query_scalar("SELECT digest_key FROM ledger_entries WHERE log = $1 AND idx = $2")
            .bind(log)
            .bind(clamp(index))
            .fetch_optional(&self.pool)
            .await?
            .flatten())
    }
}
