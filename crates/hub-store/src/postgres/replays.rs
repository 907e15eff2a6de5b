//! Replays: starting one (its window resolved to seqs) and walking it on, a batch per transaction.

use super::{
    DateTime, EVENT_COLUMNS, HashMap, JobState, MatchRow, MatchTarget, NewReplay, PgRow, PgStore, ReplayLimits,
    ReplayRecord, ReplayStart, ReplayState, ReplayStep, Replays, StoreError, StoreResult, Utc, Uuid, async_trait,
    event_from_row, job_state,
};
use crate::sql;
use hub_core::replay::{Existing, Progress, TimeWindow, next_step, step_end};
use sqlx::Row;

use crate::UndeliveredEvent;
use crate::model::{WalkedEvent, plan_replay, wanted};

const REPLAY_COLUMNS: &str = sql::REPLAY_COLUMNS;

/// Arrival times and seqs agree only up to the group commit (a batch takes its seqs when it
/// commits, after its events were received): the seq bounds of a time window are widened by this
/// much, and each event's arrival is then checked exactly.
const ARRIVAL_SLACK: chrono::Duration = chrono::Duration::seconds(60);

fn replay_from_row(row: &PgRow) -> StoreResult<ReplayRecord> {
    let state: String = row.try_get("state")?;
    let count = |name: &str| -> StoreResult<u64> { Ok(u64::try_from(row.try_get::<i64, _>(name)?).unwrap_or(0)) };
    Ok(ReplayRecord {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: row.try_get("subscription_id")?,
        window: TimeWindow { since: row.try_get("since")?, until: row.try_get("until")? },
        from_seq: row.try_get("from_seq")?,
        to_seq: row.try_get("to_seq")?,
        include_delivered: row.try_get("include_delivered")?,
        only_undelivered: row.try_get("only_undelivered")?,
        filters: row
            .try_get::<Option<String>, _>("filters")?
            .map(|f| serde_json::from_str(&f).map_err(|e| StoreError::Corrupt(format!("a replay's filters: {e}"))))
            .transpose()?,
        state: ReplayState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown replay state {state:?}")))?,
        walked_to: row.try_get("walked_to")?,
        progress: Progress { matched: count("matched")?, created: count("created")?, skipped: count("skipped")? },
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        finished_at: row.try_get("finished_at")?,
        rate: u32::try_from(row.try_get::<i64, _>("rate")?).unwrap_or(hub_core::replay::MAX_RATE),
    })
}

#[async_trait]
impl Replays for PgStore {
    async fn start_replay(&self, r: &NewReplay) -> StoreResult<ReplayStart> {
        let mut tx = self.pool.begin().await?;
        // Starts for one subscription take turns on its row.
        let found: Option<Uuid> =
            sqlx::query_scalar("SELECT id FROM subscriptions WHERE tenant_id = $1 AND id = $2 FOR UPDATE")
                .bind(&r.tenant_id)
                .bind(r.subscription_id)
                .fetch_optional(&mut *tx)
                .await?;
        if found.is_none() {
            return Ok(ReplayStart::NoSubscription);
        }
        if let Some(row) = sqlx::query(sql::RUNNING_REPLAY).bind(r.subscription_id).fetch_optional(&mut *tx).await? {
            return Ok(ReplayStart::Busy(replay_from_row(&row)?));
        }
        let newest: i64 =
            sqlx::query_scalar(sql::TENANT_LAST_SEQ).bind(&r.tenant_id).fetch_optional(&mut *tx).await?.unwrap_or(0);
        let mut from = r.from_seq.unwrap_or(1).max(1);
        let mut to = r.to_seq.map_or(newest, |t| t.min(newest));
        if let Some(since) = r.window.since {
            let first: Option<i64> = sqlx::query_scalar(sql::FIRST_SEQ_SINCE)
                .bind(&r.tenant_id)
                .bind(since - ARRIVAL_SLACK)
                .fetch_one(&mut *tx)
                .await?;
            from = from.max(first.unwrap_or(newest + 1));
        }
        if let Some(until) = r.window.until {
            let last: Option<i64> = sqlx::query_scalar(sql::LAST_SEQ_BEFORE)
                .bind(&r.tenant_id)
                .bind(until + ARRIVAL_SLACK)
                .fetch_one(&mut *tx)
                .await?;
            to = to.min(last.unwrap_or(0));
        }
        // An empty window is a replay that is done at once.
        let empty = to < from;
        let row = sqlx::query(sql::INSERT_REPLAY)
            .bind(r.id)
            .bind(&r.tenant_id)
            .bind(r.subscription_id)
            .bind(r.window.since)
            .bind(r.window.until)
            .bind(from)
            .bind(to.max(from - 1))
            .bind(r.include_delivered)
            .bind(if empty { ReplayState::Done } else { ReplayState::Running }.as_str())
            .bind(from - 1)
            .bind(r.now)
            .bind(empty.then_some(r.now))
            .bind(i64::from(r.rate))
            .bind(r.only_undelivered)
            .bind(r.filters.as_ref().map(serde_json::Value::to_string))
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(ReplayStart::Started(replay_from_row(&row)?))
    }

    async fn undelivered(
        &self,
        tenant: &str,
        subscription: Uuid,
        window: TimeWindow,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<UndeliveredEvent>> {
        let rows = sqlx::query(
            "SELECT e.seq, e.ce_id, e.resource_type, e.event_type, e.received_at, g.attempts, g.state, g.last_error
             FROM (SELECT j.event_seq, max(j.attempts)::bigint AS attempts,
                          (array_agg(j.state ORDER BY j.updated_at DESC, j.id DESC))[1] AS state,
                          (array_agg(j.last_error ORDER BY j.updated_at DESC, j.id DESC))[1] AS last_error
                   FROM delivery_jobs j
                   WHERE j.tenant_id = $1 AND j.subscription_id = $2 AND j.event_seq > $3
                   GROUP BY j.event_seq
                   HAVING bool_and(j.state IN ('dead', 'cancelled'))) g
             JOIN events e ON e.tenant_id = $1 AND e.seq = g.event_seq
             WHERE ($4::timestamptz IS NULL OR e.received_at >= $4) AND ($5::timestamptz IS NULL OR e.received_at < $5)
             ORDER BY g.event_seq
             LIMIT $6",
        )
        .bind(tenant)
        .bind(subscription)
        .bind(after.unwrap_or(0))
        .bind(window.since)
        .bind(window.until)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let state: String = row.try_get("state")?;
                Ok(UndeliveredEvent {
                    seq: row.try_get("seq")?,
                    ce_id: row.try_get("ce_id")?,
                    resource_type: row.try_get("resource_type")?,
                    event_type: row.try_get("event_type")?,
                    received_at: row.try_get("received_at")?,
                    state: JobState::parse(&state)
                        .ok_or_else(|| StoreError::Corrupt(format!("unknown job state {state:?}")))?,
                    attempts: row.try_get("attempts")?,
                    last_error: row.try_get("last_error")?,
                })
            })
            .collect()
    }

    async fn replay(&self, tenant: &str, subscription: Uuid, id: Uuid) -> StoreResult<Option<ReplayRecord>> {
        sqlx::query(sql::REPLAY)
            .bind(tenant)
            .bind(subscription)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(replay_from_row)
            .transpose()
    }

    async fn running_replays(&self, limit: u32) -> StoreResult<Vec<Uuid>> {
        Ok(sqlx::query_scalar(sql::RUNNING_REPLAYS).bind(i64::from(limit)).fetch_all(&self.pool).await?)
    }

    async fn step_replay(&self, id: Uuid, limits: &ReplayLimits) -> StoreResult<ReplayStep> {
        let mut tx = self.pool.begin().await?;
        let sql = format!("SELECT {REPLAY_COLUMNS} FROM replays WHERE id = $1 FOR UPDATE");
        let Some(row) = sqlx::query(&sql).bind(id).fetch_optional(&mut *tx).await? else {
            return Ok(ReplayStep::Idle);
        };
        let replay = replay_from_row(&row)?;
        if replay.state != ReplayState::Running {
            return Ok(ReplayStep::Idle);
        }
        let tenant = replay.tenant_id.as_str();
        let sub: Option<(Uuid, String, String, Option<String>, bool, String, bool, i64, String, String)> =
            sqlx::query_as(
                "SELECT id, sink_type, event_types::text, origin, enabled, verification_state,
                verified_at IS NOT NULL, pull_cursor, filters::text, ordering
             FROM subscriptions WHERE tenant_id = $1 AND id = $2",
            )
            .bind(tenant)
            .bind(replay.subscription_id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some((
            sub_id,
            sink,
            event_types,
            origin,
            enabled,
            verification,
            verified_before,
            cursor,
            filters,
            ordering,
        )) = sub
        else {
            let row = sqlx::query(sql::CANCEL_REPLAY).bind(id).bind(limits.now).fetch_one(&mut *tx).await?;
            tx.commit().await?;
            return Ok(ReplayStep::Walked(replay_from_row(&row)?));
        };
        let target = MatchTarget::new(MatchRow {
            id: sub_id,
            sink,
            event_types,
            origin,
            // A replay's own filters select in place of the subscription's.
            filters: replay.filters.as_ref().map_or(filters, serde_json::Value::to_string),
            ordering,
            enabled,
            verification,
            verified_before,
            // A replay's jobs are never leased at ingest.
            pace_bucket: None,
        })?;
        let push = target.sink.is_push();
        // The live path keeps priority: a push subscription's replay waits while its destination
        // has `pace` jobs waiting, and every replay keeps to its rate.
        let waiting = if push {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM (SELECT 1 FROM delivery_jobs
                     WHERE subscription_id = $1 AND state IN ('pending', 'leased') LIMIT $2) w",
            )
            .bind(sub_id)
            .bind(i64::try_from(limits.pace).unwrap_or(i64::MAX))
            .fetch_one(&mut *tx)
            .await?;
            u64::try_from(waiting).unwrap_or(0)
        } else {
            0
        };
        let elapsed = (limits.now - replay.updated_at).to_std().unwrap_or_default();
        let Some(allowance) = next_step(waiting, limits.pace, limits.batch, replay.rate, elapsed) else {
            return Ok(ReplayStep::Paced);
        };
        // With content filters a replay reads whole events (the filters look at attributes and
        // body); without, the columns the event-key filter needs.
        let walked: Vec<WalkedEvent> = if target.filters.is_empty() {
            let walked: Vec<(i64, String, String, String, DateTime<Utc>, bool)> =
                sqlx::query_as(sql::REPLAY_EVENTS_AFTER)
                    .bind(tenant)
                    .bind(replay.walked_to)
                    .bind(replay.to_seq)
                    .bind(i64::from(limits.batch.max(1)))
                    .fetch_all(&mut *tx)
                    .await?;
            walked
                .into_iter()
                .map(|(seq, resource_type, event_type, source, received_at, erased)| WalkedEvent {
                    seq,
                    resource_type,
                    event_type,
                    source,
                    received_at,
                    erased,
                    event: None,
                })
                .collect()
        } else {
            let sql = format!(
                "SELECT {EVENT_COLUMNS} FROM events
                 WHERE tenant_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4"
            );
            sqlx::query(&sql)
                .bind(tenant)
                .bind(replay.walked_to)
                .bind(replay.to_seq)
                .bind(i64::from(limits.batch.max(1)))
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|row| event_from_row(row).map(WalkedEvent::whole))
                .collect::<StoreResult<_>>()?
        };
        // What the subscription already has of the events it wants.
        let mut wanted = wanted(&target, &replay.window, &walked);
        let seqs: Vec<i64> = walked.iter().map(|e| e.seq).collect();
        let (given, walked_to) = step_end(&seqs, &wanted, allowance, limits.batch, replay.to_seq);
        wanted.truncate(given);
        let mut existing: HashMap<i64, Vec<Existing>> = HashMap::new();
        if !wanted.is_empty() {
            if push {
                let jobs: Vec<(i64, String)> = sqlx::query_as(
                    "SELECT event_seq, state FROM delivery_jobs
                     WHERE tenant_id = $1 AND event_seq = ANY($2) AND subscription_id = $3",
                )
                .bind(tenant)
                .bind(&wanted)
                .bind(sub_id)
                .fetch_all(&mut *tx)
                .await?;
                for (seq, state) in jobs {
                    existing.entry(seq).or_default().push(Existing::Job(job_state(state)?));
                }
            } else {
                let entries: Vec<(i64, i64)> = sqlx::query_as(
                    "SELECT COALESCE(event_seq, seq), seq FROM pull_entries
                     WHERE subscription_id = $1 AND ((seq = ANY($2) AND event_seq IS NULL) OR event_seq = ANY($2))",
                )
                .bind(sub_id)
                .bind(&wanted)
                .fetch_all(&mut *tx)
                .await?;
                for (seq, position) in entries {
                    existing.entry(seq).or_default().push(Existing::Entry { read: position <= cursor });
                }
            }
        }
        let (create, progress) = plan_replay(&wanted, replay.selection(), &existing);
        if !create.is_empty() {
            if push {
                let state = hub_core::delivery::waiting_state(
                    target.enabled && target.verification == hub_core::VerificationState::Active,
                );
                let received: HashMap<i64, DateTime<Utc>> = walked.iter().map(|e| (e.seq, e.received_at)).collect();
                let ids: Vec<Uuid> = create.iter().map(|_| Uuid::now_v7()).collect();
                let times: Vec<DateTime<Utc>> =
                    create.iter().map(|s| received.get(s).copied().unwrap_or(limits.now)).collect();
                // A replayed job's retry window starts now, not at its event's arrival.
                sqlx::query(
                    "WITH new_jobs AS (
                        INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, due_at,
                            event_received_at, window_start, created_at, updated_at, ordering_key)
                        SELECT t.id, $2, $3, t.seq, $4, $5, t.received, $5, $5, $5,
                            -- hub_core::routing::ordering_key, in SQL
                            CASE WHEN $9 THEN (
                                SELECT LEFT(COALESCE(NULLIF(e.extensions->>'partitionkey', ''), NULLIF(e.subject, '')), 256)
                                FROM events e WHERE e.tenant_id = $2 AND e.seq = t.seq) END
                        FROM UNNEST($1::uuid[], $6::bigint[], $7::timestamptz[]) AS t(id, seq, received)
                     )
                     SELECT pg_notify($8, '') WHERE $4 = 'pending'",
                )
                .bind(&ids)
                .bind(tenant)
                .bind(sub_id)
                .bind(state.as_str())
                .bind(limits.now)
                .bind(&create)
                .bind(&times)
                .bind(&self.channel)
                .bind(target.ordering == hub_core::Ordering::Key)
                .execute(&mut *tx)
                .await?;
            } else {
                // New positions after every one a reader may have seen, from the tenant's sequence.
                let k = i64::try_from(create.len()).unwrap_or(i64::MAX);
                let last: i64 =
                    sqlx::query_scalar(sql::ADVANCE_TENANT_SEQUENCE).bind(tenant).bind(k).fetch_one(&mut *tx).await?;
                let positions: Vec<i64> = (last - k + 1..=last).collect();
                sqlx::query(
                    "INSERT INTO pull_entries (subscription_id, seq, tenant_id, event_seq)
                     SELECT $1, p, $2, e FROM UNNEST($3::bigint[], $4::bigint[]) AS t(p, e)",
                )
                .bind(sub_id)
                .bind(tenant)
                .bind(&positions)
                .bind(&create)
                .execute(&mut *tx)
                .await?;
            }
        }
        let done = walked_to >= replay.to_seq;
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let row = sqlx::query(sql::ADVANCE_REPLAY)
            .bind(id)
            .bind(walked_to)
            .bind(count(progress.matched))
            .bind(count(progress.created))
            .bind(count(progress.skipped))
            .bind(if done { ReplayState::Done } else { ReplayState::Running }.as_str())
            .bind(done.then_some(limits.now))
            .bind(limits.now)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(ReplayStep::Walked(replay_from_row(&row)?))
    }
}
