//! Erasures: tombstones over the inbox, the jobs and attempts of erased events, the DLQ plane and
//! the quarantine, and the erasure's own record.

use super::{
    DateTime, Erasures, SqliteRow, SqliteStore, StoreResult, Utc, Uuid, async_trait, from_micros, micros, text,
    uuid_from_text,
};
use crate::sql;
use sqlx::Row;

use crate::{ErasureCounts, ErasureRecord, ErasureStep, KeptRecords, NewErasure};

const COLUMNS: &str = sql::ERASURE_COLUMNS;

fn erasure_from_row(r: &SqliteRow) -> StoreResult<ErasureRecord> {
    Ok(ErasureRecord {
        id: uuid_from_text(&r.try_get::<String, _>("id")?)?,
        tenant_id: r.try_get("tenant_id")?,
        match_kind: r.try_get("match_kind")?,
        sealed_match: r.try_get("sealed_match")?,
        reason: r.try_get("reason")?,
        requested_by: r.try_get("requested_by")?,
        requested_at: from_micros(r.try_get("requested_at")?)?,
        state: r.try_get("state")?,
        scanned_to: r.try_get("scanned_to")?,
        counts: ErasureCounts {
            scanned: r.try_get("scanned")?,
            events: r.try_get("events")?,
            jobs_cancelled: r.try_get("jobs_cancelled")?,
            responses: r.try_get("responses")?,
            dlq_records: r.try_get("dlq_records")?,
            quarantined: r.try_get("quarantined")?,
        },
        finished_at: r.try_get::<Option<i64>, _>("finished_at")?.map(from_micros).transpose()?,
    })
}

/// A list of seqs or ids as the JSON array `json_each` reads.
fn json_ids(ids: &[i64]) -> String {
    serde_json::to_string(ids).unwrap_or_else(|_| "[]".to_owned())
}

#[async_trait]
impl Erasures for SqliteStore {
    async fn create_erasure(&self, new: &NewErasure) -> StoreResult<()> {
        sqlx::query(sql::CREATE_ERASURE)
            .bind(text(new.id))
            .bind(&new.tenant_id)
            .bind(&new.match_kind)
            .bind(&new.sealed_match)
            .bind(&new.reason)
            .bind(&new.requested_by)
            .bind(micros(new.requested_at))
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    async fn erasure(&self, id: Uuid) -> StoreResult<Option<ErasureRecord>> {
        let row = sqlx::query(sql::ERASURE).bind(text(id)).fetch_optional(&self.reader).await?;
        row.as_ref().map(erasure_from_row).transpose()
    }

    async fn list_erasures(
        &self,
        tenant: Option<&str>,
        before: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<ErasureRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM erasures
             WHERE (?1 IS NULL OR tenant_id = ?1) AND (?2 IS NULL OR id < ?2)
             ORDER BY id DESC LIMIT ?3"
        ))
        .bind(tenant)
        .bind(before.map(text))
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(erasure_from_row).collect()
    }

    async fn running_erasures(&self, tenant: &str) -> StoreResult<Vec<ErasureRecord>> {
        let rows = sqlx::query(sql::RUNNING_ERASURES).bind(tenant).fetch_all(&self.writer).await?;
        rows.iter().map(erasure_from_row).collect()
    }

    async fn claim_erasure(
        &self,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> StoreResult<Option<ErasureRecord>> {
        let row = sqlx::query(&format!(
            "UPDATE erasures SET lease_until = ?2
             WHERE id = (SELECT id FROM erasures
                         WHERE state = 'running' AND (lease_until IS NULL OR lease_until < ?1)
                         ORDER BY requested_at, id LIMIT 1)
             RETURNING {COLUMNS}"
        ))
        .bind(micros(now))
        .bind(micros(lease_until))
        .fetch_optional(&self.writer)
        .await?;
        row.as_ref().map(erasure_from_row).transpose()
    }

    async fn erase_events(&self, step: &ErasureStep<'_>) -> StoreResult<ErasureCounts> {
        let mut tx = self.begin_write().await?;
        let mut counts = ErasureCounts { scanned: step.scanned, ..ErasureCounts::default() };
        if !step.seqs.is_empty() {
            let seqs = json_ids(step.seqs);
            counts.events = sqlx::query(
                "UPDATE events SET payload = ?3, subject = NULL, extensions = '{}', data_content_type = 'application/json',
                        data_schema = NULL, erased_by = ?4
                 WHERE tenant_id = ?1 AND seq IN (SELECT value FROM json_each(?2)) AND erased_by IS NULL",
            )
            .bind(step.tenant_id)
            .bind(&seqs)
            .bind(step.tombstone)
            .bind(text(step.erasure))
            .execute(&mut *tx)
            .await?
            .rows_affected() as i64;
            // A leased job is cancelled too: the lease is taken from its dispatcher, which drops
            // the job if it still waits (a send already under way is not recalled).
            counts.jobs_cancelled = sqlx::query(
                "UPDATE delivery_jobs SET state = 'cancelled', finished_at = ?3, updated_at = ?3, lease_expires_at = NULL,
                        lease_token = NULL, last_error = 'erased', ordering_key = NULL
                 WHERE tenant_id = ?1 AND event_seq IN (SELECT value FROM json_each(?2)) AND state IN ('pending', 'held', 'leased')",
            )
            .bind(step.tenant_id)
            .bind(&seqs)
            .bind(micros(step.now))
            .execute(&mut *tx)
            .await?
            .rows_affected() as i64;
            // Their other jobs keep no text derived from the event: an ordering key is its subject
            // or partition key, an error may quote it (a transform's throw).
            sqlx::query(
                "UPDATE delivery_jobs SET ordering_key = NULL,
                        last_error = CASE WHEN last_error IS NULL THEN NULL ELSE 'erased' END
                 WHERE tenant_id = ?1 AND event_seq IN (SELECT value FROM json_each(?2)) AND state <> 'leased'
                   AND (ordering_key IS NOT NULL OR last_error <> 'erased')",
            )
            .bind(step.tenant_id)
            .bind(&seqs)
            .execute(&mut *tx)
            .await?;
            counts.responses = sqlx::query(
                "UPDATE delivery_attempts SET response_body = NULL
                 WHERE job_id IN (SELECT id FROM delivery_jobs
                                  WHERE tenant_id = ?1 AND event_seq IN (SELECT value FROM json_each(?2)))
                   AND response_body IS NOT NULL",
            )
            .bind(step.tenant_id)
            .bind(&seqs)
            .execute(&mut *tx)
            .await?
            .rows_affected() as i64;
            sqlx::query(
                "UPDATE delivery_attempts SET error = 'erased'
                 WHERE job_id IN (SELECT id FROM delivery_jobs
                                  WHERE tenant_id = ?1 AND event_seq IN (SELECT value FROM json_each(?2)))
                   AND error <> 'erased'",
            )
            .bind(step.tenant_id)
            .bind(&seqs)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "UPDATE erasures SET scanned_to = MAX(scanned_to, ?2), scanned = scanned + ?3, events = events + ?4,
                    jobs_cancelled = jobs_cancelled + ?5, responses = responses + ?6, lease_until = ?7
             WHERE id = ?1",
        )
        .bind(text(step.erasure))
        .bind(step.scanned_to)
        .bind(counts.scanned)
        .bind(counts.events)
        .bind(counts.jobs_cancelled)
        .bind(counts.responses)
        .bind(micros(step.lease_until))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(counts)
    }

    async fn erase_kept(
        &self,
        erasure: Uuid,
        tenant: &str,
        kind: KeptRecords,
        ids: &[i64],
        tombstone: &[u8],
    ) -> StoreResult<i64> {
        let (table, column) = match kind {
            KeptRecords::Dlq => ("dlq_records", "dlq_records"),
            KeptRecords::Quarantine => ("quarantine", "quarantined"),
        };
        let mut tx = self.begin_write().await?;
        let n = sqlx::query(&format!(
            "UPDATE {table} SET body = ?3, body_bytes = length(?3),
                    headers = (SELECT COALESCE(json_group_object(key, value), '{{}}') FROM json_each({table}.headers)
                               WHERE key IN ('ce-id', 'ce_id', 'ce-type', 'ce_type', 'ce-time', 'ce_time')),
                    erased_by = ?4
             WHERE tenant_id = ?1 AND id IN (SELECT value FROM json_each(?2)) AND erased_by IS NULL"
        ))
        .bind(tenant)
        .bind(json_ids(ids))
        .bind(tombstone)
        .bind(text(erasure))
        .execute(&mut *tx)
        .await?
        .rows_affected() as i64;
        sqlx::query(&format!("UPDATE erasures SET {column} = {column} + ?2 WHERE id = ?1"))
            .bind(text(erasure))
            .bind(n)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(n)
    }

    async fn finish_erasure(&self, id: Uuid, now: DateTime<Utc>) -> StoreResult<()> {
        sqlx::query(sql::FINISH_ERASURE).bind(text(id)).bind(micros(now)).execute(&self.writer).await?;
        // The write-ahead log still holds the pages as they were: copy it into the file and empty
        // it (a reader holding an old snapshot can delay that to the next checkpoint).
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&self.writer).await?;
        Ok(())
    }
}
