//! The inbox: batch writes (events, pull entries and jobs in one transaction), event reads and pull streams.

use super::{
    EVENT_COLUMNS, EventQuery, Inbox, IngestLease, IngestRecord, LeasedAtIngest, PgRow, PgStore, PulledEvent,
    StoreResult, StoredEvent, StreamEntry, Uuid, WriteOutcome, async_trait, event_from_row,
};
use crate::sql;
use sqlx::Row;

use crate::PullRead;

#[async_trait]
impl Inbox for PgStore {
    async fn write_batch(&self, batch: &[IngestRecord]) -> StoreResult<Vec<WriteOutcome>> {
        Ok(self.on_live_connection(|| self.write(batch, None)).await?.0)
    }

    async fn write_batch_leased(
        &self,
        batch: &[IngestRecord],
        lease: &IngestLease,
    ) -> StoreResult<(Vec<WriteOutcome>, LeasedAtIngest)> {
        self.on_live_connection(|| self.write(batch, Some(lease))).await
    }

    async fn event_by_ce_id(&self, tenant: &str, ce_id: Uuid) -> StoreResult<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND ce_id = $2");
        sqlx::query(&sql)
            .bind(tenant)
            .bind(ce_id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(event_from_row)
            .transpose()
    }

    async fn list_events(&self, tenant: &str, q: &EventQuery) -> StoreResult<Vec<StoredEvent>> {
        self.event_log_rows("", tenant, q).await?.iter().map(event_from_row).collect()
    }

    async fn stream_entries_for_event(&self, tenant: &str, seq: i64) -> StoreResult<Vec<StreamEntry>> {
        let rows: Vec<(Uuid, i64, bool)> = sqlx::query_as(
            // Live entries by `(tenant_id, seq)`, replayed ones by `(tenant_id, event_seq)`: two
            // index probes, whatever the number of the tenant's streams.
            sql::STREAM_ENTRIES_FOR_EVENT,
        )
        .bind(tenant)
        .bind(seq)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(subscription_id, position, read)| StreamEntry { subscription_id, position, read })
            .collect())
    }

    async fn events_after(&self, tenant: &str, after: i64, limit: u32) -> StoreResult<Vec<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND seq > $2 ORDER BY seq LIMIT $3");
        sqlx::query(&sql)
            .bind(tenant)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(event_from_row)
            .collect()
    }

    async fn event_by_seq(&self, tenant: &str, seq: i64) -> StoreResult<Option<StoredEvent>> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE tenant_id = $1 AND seq = $2");
        sqlx::query(&sql)
            .bind(tenant)
            .bind(seq)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(event_from_row)
            .transpose()
    }

    async fn events_by_seqs(&self, keys: &[(String, i64)]) -> StoreResult<Vec<StoredEvent>> {
        let (tenants, seqs): (Vec<&str>, Vec<i64>) = keys.iter().map(|(t, s)| (t.as_str(), *s)).unzip();
        // One primary-key probe per event, whatever the table's statistics say: only the primary
        // key can serve a row comparison on `(tenant_id, seq)` in its order, so the planner cannot
        // walk the `(tenant_id, ce_id)` index over the tenant's every event instead (it did, when
        // it believed the table small). A missing event probes to the next one, which the outer
        // condition drops.
        let sql = format!(
            "SELECT e.* FROM UNNEST($1::text[], $2::bigint[]) AS k(tenant_id, seq)
             CROSS JOIN LATERAL (SELECT {EVENT_COLUMNS} FROM events
                                 WHERE (tenant_id, seq) >= (k.tenant_id, k.seq)
                                 ORDER BY tenant_id, seq LIMIT 1) e
             WHERE e.tenant_id = k.tenant_id AND e.seq = k.seq"
        );
        // A claim's load: on a kept connection, like the claim.
        let mut taken = self.kept.take(&self.pool).await?;
        let rows = sqlx::query(&sql).bind(tenants).bind(seqs).fetch_all(&mut *taken.conn).await?;
        self.kept.give_back(taken);
        rows.iter().map(event_from_row).collect()
    }

    async fn pull_events(
        &self,
        tenant: &str,
        subscription: Uuid,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<PulledEvent>> {
        let mut tx = self.pool.begin_with(SORTING_OFF).await?;
        let sql = pull_page_sql("");
        let rows = pull_page(&sql, subscription, tenant, after, limit).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        rows.iter().map(pulled).collect()
    }

    async fn read_pull_page(
        &self,
        tenant: &str,
        subscription: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<PullRead> {
        let mut tx = self.pool.begin_with(SORTING_OFF).await?;
        // Readers of one subscription take turns on its row (a lock that ingest's inserts of
        // its stream entries, which only share it for their foreign key, do not wait for).
        let cursor: Option<i64> = sqlx::query_scalar(
            "SELECT pull_cursor FROM subscriptions WHERE tenant_id = $1 AND id = $2 FOR NO KEY UPDATE",
        )
        .bind(tenant)
        .bind(subscription)
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
        let sql = pull_page_sql("");
        let events = pull_page(&sql, subscription, tenant, from, limit)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(pulled)
            .collect::<StoreResult<Vec<_>>>()?;
        let moved = hub_core::pull::advance(cursor, after, events.last().map(|e| e.position));
        if moved > cursor {
            sqlx::query(sql::SET_PULL_CURSOR).bind(tenant).bind(subscription).bind(moved).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(PullRead::Page { events, cursor: moved })
    }

    async fn newest_seq(&self, tenant: &str) -> StoreResult<i64> {
        let last: Option<i64> =
            sqlx::query_scalar(sql::TENANT_LAST_SEQ).bind(tenant).fetch_optional(&self.pool).await?;
        Ok(last.unwrap_or(0))
    }

    async fn advance_pull_cursor(&self, tenant: &str, subscription: Uuid, to: i64) -> StoreResult<i64> {
        let cursor: Option<i64> = sqlx::query_scalar(
            "UPDATE subscriptions SET pull_cursor = GREATEST(pull_cursor, $3)
             WHERE tenant_id = $1 AND id = $2 RETURNING pull_cursor",
        )
        .bind(tenant)
        .bind(subscription)
        .bind(to)
        .fetch_optional(&self.pool)
        .await?;
        Ok(cursor.unwrap_or(to))
    }

    async fn inbox_size(&self) -> StoreResult<i64> {
        // The sum of the partitions' estimates (the partitioned table has none of its own);
        // `to_regclass` resolves `events` through the search_path (the configured schema).
        let estimate: Option<f64> = sqlx::query_scalar(
            "SELECT sum(GREATEST(c.reltuples, 0))::float8 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = to_regclass('events')",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(estimate.map_or(0, |n| n as i64))
    }
}

/// A page of the event log: only the filters given are in the statement (one statement per
/// combination), so every plan is made for its filters: a type names `events_by_key`, no filter
/// walks the primary key. A generic `($n IS NULL OR …)` plan could use neither. `prefix` goes
/// before it (`EXPLAIN …` for the plan's tests).
///
/// Its cost is its page's, whatever the statistics say (`event_log_and_pull_pages_read_their_page_
/// whatever_the_statistics_say`). Without a time window it runs with sorting off
/// ([`SORTING_OFF`]): every partition's index gives its rows in `seq` order and a merge takes
/// the page, where statistics of a small inbox chose to read the tenant's every event and sort
/// them. A time window is read through `(tenant_id, received_at)` and its rows sorted: it orders
/// by `seq + 0`, which no index gives, so the planner cannot walk the primary key in order hoping
/// the window comes soon (with a window at the end of a long history, the walk read all of it).
/// Its cost is the tenant's events in the window, never the rest of the inbox.
fn event_log_query<'a>(prefix: &str, tenant: &'a str, q: &'a EventQuery) -> sqlx::QueryBuilder<'a, sqlx::Postgres> {
    let mut sql = sqlx::QueryBuilder::<sqlx::Postgres>::new(format!(
        "{prefix}SELECT {} FROM events WHERE tenant_id = ",
        columns(q)
    ));
    sql::push_event_conditions(&mut sql, tenant, q, |t| t);
    let order = if windowed(q) { "seq + 0" } else { "seq" };
    sql.push(format!(" ORDER BY {order}{} LIMIT ", if q.newest_first { " DESC" } else { "" }))
        .push_bind(i64::from(q.limit));
    sql
}

/// Whether a page of the event log is of a time window.
fn windowed(q: &EventQuery) -> bool {
    q.since.is_some() || q.until.is_some()
}

impl PgStore {
    /// A page of the event log's rows (its plan's, with an `EXPLAIN` `prefix`), planned for its
    /// values every time (an unnamed statement: the generic plan a prepared one falls back to
    /// after five runs estimates a time window as a few rows). A page of a time window is one
    /// statement; any other runs in a transaction of its own, which turns sorting off for it
    /// alone ([`SORTING_OFF`]).
    async fn event_log_rows(&self, prefix: &str, tenant: &str, q: &EventQuery) -> StoreResult<Vec<PgRow>> {
        let mut query = event_log_query(prefix, tenant, q);
        let statement = query.build().persistent(false);
        if windowed(q) {
            return Ok(statement.fetch_all(&self.pool).await?);
        }
        let mut tx = self.pool.begin_with(SORTING_OFF).await?;
        let rows = statement.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    }
}

/// A read transaction in which the planner sorts only when nothing else gives the order.
const SORTING_OFF: &str = "BEGIN; SET LOCAL enable_sort = off";

/// How PostgreSQL runs the reads whose cost must not grow with the inbox (for the tests that hold
/// them to their page whatever the statistics say): each statement run under `EXPLAIN (ANALYZE,
/// FORMAT JSON)`, its plan as PostgreSQL gives it.
#[doc(hidden)]
impl PgStore {
    /// The plan of a page of the event log.
    pub async fn explain_event_log(&self, tenant: &str, q: &EventQuery) -> StoreResult<serde_json::Value> {
        let rows = self.event_log_rows(EXPLAIN, tenant, q).await?;
        Ok(rows.first().map(|row| row.try_get(0)).transpose()?.unwrap_or_default())
    }

    /// The plan of a pull stream's page after `after`.
    pub async fn explain_pull_page(
        &self,
        tenant: &str,
        subscription: Uuid,
        after: i64,
        limit: u32,
    ) -> StoreResult<serde_json::Value> {
        let mut tx = self.pool.begin_with(SORTING_OFF).await?;
        let sql = pull_page_sql(EXPLAIN);
        let plan = pull_page(&sql, subscription, tenant, after, limit).fetch_one(&mut *tx).await?.try_get(0)?;
        tx.rollback().await?;
        Ok(plan)
    }

    /// The plans of the counts the metrics and statistics refresh: the jobs of each open state and
    /// each subscription's backlog.
    pub async fn explain_job_counts(&self) -> StoreResult<Vec<(&'static str, serde_json::Value)>> {
        let mut plans = Vec::new();
        for (name, statement) in [("open job counts", crate::sql::OPEN_JOB_COUNTS), ("backlogs", crate::sql::BACKLOGS)]
        {
            let mut tx = self.pool.begin_with(super::jobs::SEQSCAN_OFF).await?;
            let plan = sqlx::query_scalar(&format!("{EXPLAIN}{statement}")).fetch_one(&mut *tx).await?;
            tx.rollback().await?;
            plans.push((name, plan));
        }
        Ok(plans)
    }
}

const EXPLAIN: &str = "EXPLAIN (ANALYZE, FORMAT JSON) ";

/// A pull stream's page after `$3`, at most `$4` entries, of subscription `$1` of tenant `$2`. A
/// live entry's event has the entry's seq; a replayed one names its event. Each side is a probe
/// whatever the statistics say (with those of a small inbox the planner read the tenant's every
/// stream entry, and every event of the tenant for each entry): only the primary keys can serve
/// a row comparison in their order, so the entries are read from the stream's own key and each
/// event is the first at or after its `(tenant_id, seq)`, which the outer condition checks is
/// the one (a missing event probes to the next, and the entry is left out as a join would).
/// The stream's entries are bounded by two row comparisons: beside an equality on the stream,
/// the index took the equality for its start and read the stream's every entry up to `$3`
/// (35 ms a page in the middle of a million). Read with sorting off ([`SORTING_OFF`]): the
/// partitions' keys merged, never all read and sorted.
fn pull_page_sql(prefix: &str) -> String {
    format!(
        "{prefix}SELECT p.seq AS position, e.* FROM pull_entries p
         CROSS JOIN LATERAL (SELECT {EVENT_COLUMNS} FROM events
                             WHERE (tenant_id, seq) >= (p.tenant_id, COALESCE(p.event_seq, p.seq))
                             ORDER BY tenant_id, seq LIMIT 1) e
         WHERE (p.subscription_id, p.seq) > ($1, $3) AND (p.subscription_id, p.seq) <= ($1, 9223372036854775807)
           AND p.tenant_id = $2
           AND e.tenant_id = p.tenant_id AND e.seq = COALESCE(p.event_seq, p.seq)
         ORDER BY p.subscription_id, p.seq LIMIT $4"
    )
}

/// The pull page's statement with its arguments.
fn pull_page<'q>(
    sql: &'q str,
    subscription: Uuid,
    tenant: &'q str,
    after: i64,
    limit: u32,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sql).bind(subscription).bind(tenant).bind(after).bind(i64::from(limit))
}

fn pulled(row: &PgRow) -> StoreResult<PulledEvent> {
    Ok(PulledEvent { position: row.try_get("position")?, event: event_from_row(row)? })
}

/// The columns a page of the event log reads: every one, or all but the bodies.
fn columns(q: &EventQuery) -> std::borrow::Cow<'static, str> {
    if q.without_payload {
        EVENT_COLUMNS.replace(", payload,", ", ''::bytea AS payload,").into()
    } else {
        EVENT_COLUMNS.into()
    }
}
