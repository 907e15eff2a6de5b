//! The inbox: batch writes (events, pull entries and jobs in one transaction), event reads and pull streams.

use super::{
    EVENT_COLUMNS, EventQuery, Inbox, IngestLease, IngestRecord, LeasedAtIngest, PulledEvent, SqliteRow, SqliteStore,
    StoreResult, StoredEvent, StreamEntry, Uuid, WriteOutcome, async_trait, event_from_row, micros, uuid_from_text,
};
use crate::sql;
use sqlx::Row;

use crate::PullRead;

#[async_trait]
impl Inbox for SqliteStore {
    async fn write_batch(&self, batch: &[IngestRecord]) -> StoreResult<Vec<WriteOutcome>> {
        Ok(self.write(batch, None).await?.0)
    }

    async fn write_batch_leased(
        &self,
        batch: &[IngestRecord],
        lease: &IngestLease,
    ) -> StoreResult<(Vec<WriteOutcome>, LeasedAtIngest)> {
        self.write(batch, Some(lease)).await
    }

    async fn event_by_ce_id(&self, tenant: &str, ce_id: Uuid) -> StoreResult<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = ?1 AND ce_id = ?2");
        sqlx::query(&sql)
            .bind(tenant)
            .bind(ce_id.hyphenated().to_string())
            .fetch_optional(&self.reader)
            .await?
            .as_ref()
            .map(event_from_row)
            .transpose()
    }

    async fn list_events(&self, tenant: &str, q: &EventQuery) -> StoreResult<Vec<StoredEvent>> {
        event_log_query("", tenant, q).build().fetch_all(&self.reader).await?.iter().map(event_from_row).collect()
    }

    async fn stream_entries_for_event(&self, tenant: &str, seq: i64) -> StoreResult<Vec<StreamEntry>> {
        let rows: Vec<(String, i64, bool)> = sqlx::query_as(
            // Live entries by `(tenant_id, seq)`, replayed ones by `(tenant_id, event_seq)`: two
            // index probes, whatever the number of the tenant's streams.
            sql::STREAM_ENTRIES_FOR_EVENT,
        )
        .bind(tenant)
        .bind(seq)
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(|(sub, position, read)| Ok(StreamEntry { subscription_id: uuid_from_text(&sub)?, position, read }))
            .collect()
    }

    async fn events_after(&self, tenant: &str, after: i64, limit: u32) -> StoreResult<Vec<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3");
        sqlx::query(&sql)
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn event_by_seq(&self, tenant: &str, seq: i64) -> StoreResult<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = ?1 AND seq = ?2");
        sqlx::query(&sql)
            .bind(tenant)
            .bind(seq)
            .fetch_optional(&self.reader)
            .await?
            .as_ref()
            .map(event_from_row)
            .transpose()
    }

    async fn events_by_seqs(&self, keys: &[(String, i64)]) -> StoreResult<Vec<StoredEvent>> {
        let mut events = Vec::with_capacity(keys.len());
        for (tenant, seq) in keys {
            events.extend(self.event_by_seq(tenant, *seq).await?);
        }
        Ok(events)
    }

    async fn pull_events(
        &self,
        tenant: &str,
        subscription: Uuid,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<PulledEvent>> {
        let sql = pull_page_sql();
        sqlx::query(&sql)
            .bind(subscription.hyphenated().to_string())
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?
            .iter()
            .map(pulled)
            .collect()
    }

    async fn read_pull_page(
        &self,
        tenant: &str,
        subscription: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<PullRead> {
        // The write transaction is the database's one writer: readers take turns.
        let mut tx = self.begin_write().await?;
        let id = subscription.hyphenated().to_string();
        let cursor: Option<i64> =
            sqlx::query_scalar("SELECT pull_cursor FROM subscriptions WHERE tenant_id = ?1 AND id = ?2")
                .bind(tenant)
                .bind(&id)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(cursor) = cursor else { return Ok(PullRead::NoSubscription) };
        if let Some(after) = after {
            let newest: Option<i64> =
                sqlx::query_scalar(sql::TENANT_LAST_SEQ).bind(tenant).fetch_optional(&mut *tx).await?;
            let newest = newest.unwrap_or(0);
            if !hub_core::pull::after_is_known(after, newest) {
                return Ok(PullRead::AfterBeyondNewest { newest });
            }
        }
        let from = hub_core::pull::read_after(cursor, after);
        let sql = pull_page_sql();
        let events = sqlx::query(&sql)
            .bind(&id)
            .bind(tenant)
            .bind(from)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(pulled)
            .collect::<StoreResult<Vec<_>>>()?;
        let moved = hub_core::pull::advance(cursor, after, events.last().map(|e| e.position));
        if moved > cursor {
            sqlx::query(sql::SET_PULL_CURSOR).bind(tenant).bind(&id).bind(moved).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(PullRead::Page { events, cursor: moved })
    }

    async fn newest_seq(&self, tenant: &str) -> StoreResult<i64> {
        let last: Option<i64> =
            sqlx::query_scalar(sql::TENANT_LAST_SEQ).bind(tenant).fetch_optional(&self.reader).await?;
        Ok(last.unwrap_or(0))
    }

    async fn advance_pull_cursor(&self, tenant: &str, subscription: Uuid, to: i64) -> StoreResult<i64> {
        let mut tx = self.begin_write().await?;
        let cursor: Option<i64> = sqlx::query_scalar(
            "UPDATE subscriptions SET pull_cursor = MAX(pull_cursor, ?3)
             WHERE tenant_id = ?1 AND id = ?2 RETURNING pull_cursor",
        )
        .bind(tenant)
        .bind(subscription.hyphenated().to_string())
        .bind(to)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(cursor.unwrap_or(to))
    }

    async fn inbox_size(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM events").fetch_one(&self.reader).await?)
    }
}

/// A pull stream's page after `?3`, at most `?4` entries, of subscription `?1` of tenant `?2`. A
/// live entry's event has the entry's seq; a replayed one names its event.
fn pull_page_sql() -> String {
    let columns: String = EVENT_COLUMNS.split(',').map(|c| format!("e.{}", c.trim())).collect::<Vec<_>>().join(", ");
    format!(
        "SELECT p.seq AS position, {columns} FROM pull_entries p
         JOIN events e ON e.tenant_id = p.tenant_id AND e.seq = COALESCE(p.event_seq, p.seq)
         WHERE p.subscription_id = ?1 AND p.tenant_id = ?2 AND p.seq > ?3
         ORDER BY p.seq LIMIT ?4"
    )
}

fn pulled(row: &SqliteRow) -> StoreResult<PulledEvent> {
    Ok(PulledEvent { position: row.try_get("position")?, event: event_from_row(row)? })
}

/// A page of the event log, with a `prefix` (`EXPLAIN QUERY PLAN ` for the tests), its conditions
/// [`sql::push_event_conditions`]. A time window's page is
/// found on `events_by_time` alone (it holds the primary key, so the window's keys are read and
/// sorted without their rows) and only the page's rows are read: sorting the window's whole rows
/// to keep a page cost a hub holding a million events three times an empty one's (hub-bench
/// scale).
fn event_log_query<'q>(prefix: &str, tenant: &'q str, q: &'q EventQuery) -> sqlx::QueryBuilder<'q, sqlx::Sqlite> {
    let windowed = q.since.is_some() || q.until.is_some();
    let mut sql = sqlx::QueryBuilder::<sqlx::Sqlite>::new(if windowed {
        format!(
            "{prefix}SELECT {} FROM events WHERE (tenant_id, seq) IN (SELECT tenant_id, seq FROM events WHERE tenant_id = ",
            columns(q)
        )
    } else {
        format!("{prefix}SELECT {} FROM events WHERE tenant_id = ", columns(q))
    });
    sql::push_event_conditions(&mut sql, tenant, q, micros);
    // A time window is read through `events_by_time` and its keys sorted: `+seq` is an order
    // no index gives, so the planner cannot walk the tenant's events in order hoping the
    // window comes soon.
    let direction = if q.newest_first { " DESC" } else { "" };
    let order = if windowed { "+seq" } else { "seq" };
    sql.push(format!(" ORDER BY {order}{direction} LIMIT ")).push_bind(i64::from(q.limit));
    if windowed {
        sql.push(format!(") ORDER BY seq{direction}"));
    }
    sql
}

/// How SQLite runs the reads whose cost must not grow with the store (for the tests that hold them
/// to their indexes whatever the statistics say): each statement's `EXPLAIN QUERY PLAN` lines.
#[doc(hidden)]
impl SqliteStore {
    /// The plan of a page of the event log.
    pub async fn explain_event_log(&self, tenant: &str, q: &EventQuery) -> StoreResult<Vec<String>> {
        let rows = event_log_query("EXPLAIN QUERY PLAN ", tenant, q).build().fetch_all(&self.reader).await?;
        rows.iter().map(|row| Ok(row.try_get::<String, _>("detail")?)).collect()
    }

    /// The plans of the counts of open jobs: a subscription's (the listing's), those of each open
    /// state (the metrics') and each subscription's backlog (the statistics').
    pub async fn explain_open_jobs(&self) -> StoreResult<Vec<(&'static str, Vec<String>)>> {
        let mut plans = Vec::new();
        for (name, statement) in [
            ("a subscription's open jobs", super::jobs::OPEN_JOBS),
            ("open job counts", sql::OPEN_JOB_COUNTS),
            ("backlogs", sql::BACKLOGS),
        ] {
            let rows =
                sqlx::query(&format!("EXPLAIN QUERY PLAN {statement}")).bind("[]").fetch_all(&self.reader).await?;
            plans.push((name, rows.iter().map(|row| row.try_get::<String, _>("detail")).collect::<Result<_, _>>()?));
        }
        Ok(plans)
    }
}

/// The columns a page of the event log reads: every one, or all but the bodies.
fn columns(q: &EventQuery) -> std::borrow::Cow<'static, str> {
    if q.without_payload {
        EVENT_COLUMNS.replace(", payload,", ", X'' AS payload,").into()
    } else {
        EVENT_COLUMNS.into()
    }
}
