//! Replays: starting one (its window resolved to seqs) and walking it on, a batch per transaction.

use super::{
    DateTime, EVENT_COLUMNS, HashMap, JobState, MatchRow, MatchTarget, NewReplay, ReplayLimits, ReplayRecord,
    ReplayStart, ReplayState, ReplayStep, Replays, SqliteRow, SqliteStore, StoreError, StoreResult, Utc, Uuid,
    async_trait, event_from_row, from_micros, job_state, micros, text, uuid_from_text,
};
use crate::sql;
use hub_core::replay::{Existing, Progress, TimeWindow, next_step, step_end};
use sqlx::Row;

use crate::UndeliveredEvent;
use crate::model::{WalkedEvent, plan_replay, wanted};

const REPLAY_COLUMNS: &str = sql::REPLAY_COLUMNS;

/// See the PostgreSQL backend: seq bounds of a time window are widened by this much.
const ARRIVAL_SLACK: chrono::Duration = chrono::Duration::seconds(60);

fn replay_from_row(row: &SqliteRow) -> StoreResult<ReplayRecord> {
    let state: String = row.try_get("state")?;
    let count = |name: &str| -> StoreResult<u64> { Ok(u64::try_from(row.try_get::<i64, _>(name)?).unwrap_or(0)) };
    let time = |name: &str| -> StoreResult<Option<DateTime<Utc>>> {
        row.try_get::<Option<i64>, _>(name)?.map(from_micros).transpose()
    };
    Ok(ReplayRecord {
        id: uuid_from_text(&row.try_get::<String, _>("id")?)?,
        tenant_id: row.try_get("tenant_id")?,
        subscription_id: uuid_from_text(&row.try_get::<String, _>("subscription_id")?)?,
        window: TimeWindow { since: time("since")?, until: time("until")? },
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
        created_at: from_micros(row.try_get("created_at")?)?,
        updated_at: from_micros(row.try_get("updated_at")?)?,
        finished_at: time("finished_at")?,
        rate: u32::try_from(row.try_get::<i64, _>("rate")?).unwrap_or(hub_core::replay::MAX_RATE),
    })
}

fn json_list<T: serde::Serialize>(items: &[T]) -> StoreResult<String> {
    serde_json::to_string(items).map_err(|e| StoreError::Corrupt(e.to_string()))
}

#[async_trait]
impl Replays for SqliteStore {
    async fn start_replay(&self, r: &NewReplay) -> StoreResult<ReplayStart> {
        let mut tx = self.begin_write().await?;
        let found: Option<String> = sqlx::query_scalar("SELECT id FROM subscriptions WHERE tenant_id = ?1 AND id = ?2")
            .bind(&r.tenant_id)
            .bind(text(r.subscription_id))
            .fetch_optional(&mut *tx)
            .await?;
        if found.is_none() {
            return Ok(ReplayStart::NoSubscription);
        }
        if let Some(row) =
            sqlx::query(sql::RUNNING_REPLAY).bind(text(r.subscription_id)).fetch_optional(&mut *tx).await?
        {
            return Ok(ReplayStart::Busy(replay_from_row(&row)?));
        }
        let newest: i64 =
            sqlx::query_scalar(sql::TENANT_LAST_SEQ).bind(&r.tenant_id).fetch_optional(&mut *tx).await?.unwrap_or(0);
        let mut from = r.from_seq.unwrap_or(1).max(1);
        let mut to = r.to_seq.map_or(newest, |t| t.min(newest));
        if let Some(since) = r.window.since {
            let first: Option<i64> = sqlx::query_scalar(sql::FIRST_SEQ_SINCE)
                .bind(&r.tenant_id)
                .bind(micros(since - ARRIVAL_SLACK))
                .fetch_one(&mut *tx)
                .await?;
            from = from.max(first.unwrap_or(newest + 1));
        }
        if let Some(until) = r.window.until {
            let last: Option<i64> = sqlx::query_scalar(sql::LAST_SEQ_BEFORE)
                .bind(&r.tenant_id)
                .bind(micros(until + ARRIVAL_SLACK))
                .fetch_one(&mut *tx)
                .await?;
            to = to.min(last.unwrap_or(0));
        }
        let empty = to < from;
        let row = sqlx::query(sql::INSERT_REPLAY)
            .bind(text(r.id))
            .bind(&r.tenant_id)
            .bind(text(r.subscription_id))
            .bind(r.window.since.map(micros))
            .bind(r.window.until.map(micros))
            .bind(from)
            .bind(to.max(from - 1))
            .bind(r.include_delivered)
            .bind(if empty { ReplayState::Done } else { ReplayState::Running }.as_str())
            .bind(from - 1)
            .bind(micros(r.now))
            .bind(empty.then_some(micros(r.now)))
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
        let latest = |column: &str| {
            format!(
                "(SELECT k.{column} FROM delivery_jobs k
                  WHERE k.tenant_id = ?1 AND k.subscription_id = ?2 AND k.event_seq = g.event_seq
                  ORDER BY k.updated_at DESC, k.id DESC LIMIT 1)"
            )
        };
        let sql = format!(
            "SELECT e.seq, e.ce_id, e.resource_type, e.event_type, e.received_at, g.attempts,
                    {} AS state, {} AS last_error
             FROM (SELECT j.event_seq, max(j.attempts) AS attempts
                   FROM delivery_jobs j
                   WHERE j.tenant_id = ?1 AND j.subscription_id = ?2 AND j.event_seq > ?3
                   GROUP BY j.event_seq
                   HAVING sum(j.state NOT IN ('dead', 'cancelled')) = 0) g
             JOIN events e ON e.tenant_id = ?1 AND e.seq = g.event_seq
             WHERE (?4 IS NULL OR e.received_at >= ?4) AND (?5 IS NULL OR e.received_at < ?5)
             ORDER BY g.event_seq
             LIMIT ?6",
            latest("state"),
            latest("last_error"),
        );
        let rows = sqlx::query(&sql)
            .bind(tenant)
            .bind(text(subscription))
            .bind(after.unwrap_or(0))
            .bind(window.since.map(micros))
            .bind(window.until.map(micros))
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|row| {
                let state: String = row.try_get("state")?;
                let ce_id: String = row.try_get("ce_id")?;
                Ok(UndeliveredEvent {
                    seq: row.try_get("seq")?,
                    ce_id: uuid_from_text(&ce_id)?,
                    resource_type: row.try_get("resource_type")?,
                    event_type: row.try_get("event_type")?,
                    received_at: from_micros(row.try_get("received_at")?)?,
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
            .bind(text(subscription))
            .bind(text(id))
            .fetch_optional(&self.reader)
            .await?
            .as_ref()
            .map(replay_from_row)
            .transpose()
    }

    async fn running_replays(&self, limit: u32) -> StoreResult<Vec<Uuid>> {
        let ids: Vec<String> =
            sqlx::query_scalar(sql::RUNNING_REPLAYS).bind(i64::from(limit)).fetch_all(&self.reader).await?;
        ids.iter().map(|id| uuid_from_text(id)).collect()
    }

    async fn step_replay(&self, id: Uuid, limits: &ReplayLimits) -> StoreResult<ReplayStep> {
        let mut tx = self.begin_write().await?;
        let sql = format!("SELECT {REPLAY_COLUMNS} FROM replays WHERE id = ?1");
        let Some(row) = sqlx::query(&sql).bind(text(id)).fetch_optional(&mut *tx).await? else {
            return Ok(ReplayStep::Idle);
        };
        let replay = replay_from_row(&row)?;
        if replay.state != ReplayState::Running {
            return Ok(ReplayStep::Idle);
        }
        let tenant = replay.tenant_id.as_str();
        let sub: Option<(String, String, String, Option<String>, bool, String, bool, i64, String, String)> =
            sqlx::query_as(
                "SELECT id, sink_type, event_types, origin, enabled, verification_state,
                verified_at IS NOT NULL, pull_cursor, filters, ordering
             FROM subscriptions WHERE tenant_id = ?1 AND id = ?2",
            )
            .bind(tenant)
            .bind(text(replay.subscription_id))
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
            let row =
                sqlx::query(sql::CANCEL_REPLAY).bind(text(id)).bind(micros(limits.now)).fetch_one(&mut *tx).await?;
            tx.commit().await?;
            return Ok(ReplayStep::Walked(replay_from_row(&row)?));
        };
        let target = MatchTarget::new(MatchRow {
            id: uuid_from_text(&sub_id)?,
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
                     WHERE subscription_id = ?1 AND state IN ('pending', 'leased') LIMIT ?2)",
            )
            .bind(&sub_id)
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
            let walked: Vec<(i64, String, String, String, i64, bool)> = sqlx::query_as(sql::REPLAY_EVENTS_AFTER)
                .bind(tenant)
                .bind(replay.walked_to)
                .bind(replay.to_seq)
                .bind(i64::from(limits.batch.max(1)))
                .fetch_all(&mut *tx)
                .await?;
            walked
                .into_iter()
                .map(|(seq, resource_type, event_type, source, received_at, erased)| {
                    Ok(WalkedEvent {
                        seq,
                        resource_type,
                        event_type,
                        source,
                        received_at: from_micros(received_at)?,
                        erased,
                        event: None,
                    })
                })
                .collect::<StoreResult<_>>()?
        } else {
            let sql = format!(
                "SELECT {EVENT_COLUMNS} FROM events
                 WHERE tenant_id = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4"
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
        let mut wanted = wanted(&target, &replay.window, &walked);
        let seqs: Vec<i64> = walked.iter().map(|e| e.seq).collect();
        let (given, walked_to) = step_end(&seqs, &wanted, allowance, limits.batch, replay.to_seq);
        wanted.truncate(given);
        let mut existing: HashMap<i64, Vec<Existing>> = HashMap::new();
        if !wanted.is_empty() {
            let seqs = json_list(&wanted)?;
            if push {
                let jobs: Vec<(i64, String)> = sqlx::query_as(
                    "SELECT event_seq, state FROM delivery_jobs
                     WHERE tenant_id = ?1 AND event_seq IN (SELECT value FROM json_each(?2)) AND subscription_id = ?3",
                )
                .bind(tenant)
                .bind(&seqs)
                .bind(&sub_id)
                .fetch_all(&mut *tx)
                .await?;
                for (seq, state) in jobs {
                    existing.entry(seq).or_default().push(Existing::Job(job_state(state)?));
                }
            } else {
                let entries: Vec<(i64, i64)> = sqlx::query_as(
                    "SELECT COALESCE(event_seq, seq), seq FROM pull_entries
                     WHERE subscription_id = ?1
                       AND ((seq IN (SELECT value FROM json_each(?2)) AND event_seq IS NULL)
                            OR event_seq IN (SELECT value FROM json_each(?2)))",
                )
                .bind(&sub_id)
                .bind(&seqs)
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
                for seq in &create {
                    // A replayed job's retry window starts now, not at its event's arrival.
                    sqlx::query(
                        "INSERT INTO delivery_jobs (id, tenant_id, subscription_id, event_seq, state, due_at,
                            event_received_at, window_start, created_at, updated_at, ordering_key)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6, ?6, ?6,
                            -- hub_core::routing::ordering_key, in SQL
                            CASE WHEN ?8 THEN (
                                SELECT substr(COALESCE(NULLIF(json_extract(e.extensions, '$.partitionkey'), ''),
                                                       NULLIF(e.subject, '')), 1, 256)
                                FROM events e WHERE e.tenant_id = ?2 AND e.seq = ?4) END)",
                    )
                    .bind(text(Uuid::now_v7()))
                    .bind(tenant)
                    .bind(&sub_id)
                    .bind(seq)
                    .bind(state.as_str())
                    .bind(micros(limits.now))
                    .bind(micros(received.get(seq).copied().unwrap_or(limits.now)))
                    .bind(target.ordering == hub_core::Ordering::Key)
                    .execute(&mut *tx)
                    .await?;
                }
            } else {
                // New positions after every one a reader may have seen, from the tenant's sequence.
                let k = i64::try_from(create.len()).unwrap_or(i64::MAX);
                let last: i64 =
                    sqlx::query_scalar(sql::ADVANCE_TENANT_SEQUENCE).bind(tenant).bind(k).fetch_one(&mut *tx).await?;
                for (position, seq) in (last - k + 1..=last).zip(&create) {
                    sqlx::query(
                        "INSERT INTO pull_entries (subscription_id, seq, tenant_id, event_seq) VALUES (?1, ?2, ?3, ?4)",
                    )
                    .bind(&sub_id)
                    .bind(position)
                    .bind(tenant)
                    .bind(seq)
                    .execute(&mut *tx)
                    .await?;
                }
            }
        }
        let done = walked_to >= replay.to_seq;
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let row = sqlx::query(sql::ADVANCE_REPLAY)
            .bind(text(id))
            .bind(walked_to)
            .bind(count(progress.matched))
            .bind(count(progress.created))
            .bind(count(progress.skipped))
            .bind(if done { ReplayState::Done } else { ReplayState::Running }.as_str())
            .bind(done.then_some(micros(limits.now)))
            .bind(micros(limits.now))
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(ReplayStep::Walked(replay_from_row(&row)?))
    }
}
