//! Per-minute statistics of each subscription's deliveries (`GET /v1/subscriptions/{id}/stats`):
//! the recorder notes every recorded attempt here, in memory; every [`FLUSH_EVERY`] the roll-up is
//! added to the store in one statement, and every `STREAMING_HUB_METRICS_INTERVAL` (at most a
//! minute) the backlog (pending and held jobs) of every subscription with open jobs is sampled
//! into the same rows, the minute's last sample standing. Nothing is written per
//! attempt.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, DurationRound, Utc};
use hub_core::delivery::JobTransition;
use hub_core::delivery::stats::{BUCKETS, bucket_of};
use hub_store::{AttemptResult, MinuteStats, Store};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;

/// How often the roll-up is added to the store.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);
/// Minutes held between flushes, at most (beyond it a minute's counts are dropped).
const MAX_HELD: usize = 100_000;

/// The start of `t`'s minute.
pub fn minute_of(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(chrono::Duration::minutes(1)).unwrap_or(t)
}

/// Attempts recorded since the last flush, by subscription and minute.
#[derive(Debug, Default)]
pub struct Rollup {
    held: Mutex<HashMap<(Uuid, DateTime<Utc>), MinuteStats>>,
}

impl Rollup {
    /// Notes a recorded attempt; `job_updated`: the store took its transition (a dead letter
    /// counts only then).
    pub fn note(&self, recorded: &AttemptResult, job_updated: bool) {
        let a = &recorded.record;
        let minute = minute_of(a.started_at);
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let full = held.len() >= MAX_HELD;
        let m = match held.entry((a.subscription_id, minute)) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(_) if full => return,
            std::collections::hash_map::Entry::Vacant(v) => v.insert(empty(&a.tenant_id, a.subscription_id, minute)),
        };
        match a.outcome.as_str() {
            "delivered" => m.delivered += 1,
            // Not a delivery: no latency of a destination either.
            "skipped" => {
                m.skipped += 1;
                return;
            }
            _ => m.failed += 1,
        }
        if job_updated && matches!(recorded.transition, JobTransition::Dead { .. }) {
            m.dead += 1;
        }
        m.latency[bucket_of(a.latency_ms)] += 1;
    }

    /// Adds what is held to the store; kept for the next flush when the store fails.
    pub async fn flush(&self, store: &dyn Store) {
        let taken: Vec<MinuteStats> = {
            let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            held.drain().map(|(_, m)| m).collect()
        };
        if taken.is_empty() {
            return;
        }
        if let Err(e) = store.record_minutes(&taken).await {
            tracing::warn!(error = %e, minutes = taken.len(), "could not record delivery statistics; keeping them for the next try");
            let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for m in taken {
                match held.get_mut(&(m.subscription_id, m.minute)) {
                    Some(h) => {
                        h.delivered += m.delivered;
                        h.failed += m.failed;
                        h.dead += m.dead;
                        h.skipped += m.skipped;
                        hub_core::delivery::stats::add(&mut h.latency, &m.latency);
                    }
                    None => {
                        held.insert((m.subscription_id, m.minute), m);
                    }
                }
            }
        }
    }
}

fn empty(tenant: &str, subscription: Uuid, minute: DateTime<Utc>) -> MinuteStats {
    MinuteStats {
        tenant_id: tenant.to_owned(),
        subscription_id: subscription,
        minute,
        delivered: 0,
        failed: 0,
        dead: 0,
        skipped: 0,
        latency: [0_i64; BUCKETS],
        backlog: None,
    }
}

/// Samples every subscription's backlog into the current minute. The store lists only
/// subscriptions with open jobs; one that had some at the previous sample (`before`) and has
/// none now is written as 0, so a backlog that emptied reads 0 rather than its last value.
pub(super) async fn sample_backlogs(store: &dyn Store, clock: &dyn Clock, before: &mut HashMap<Uuid, String>) {
    let minute = minute_of(clock.now());
    match store.backlogs().await {
        Ok(backlogs) => {
            let mut now: HashMap<Uuid, String> = HashMap::with_capacity(backlogs.len());
            let mut rows: Vec<MinuteStats> = Vec::with_capacity(backlogs.len());
            for b in backlogs {
                rows.push(MinuteStats { backlog: Some(b.jobs), ..empty(&b.tenant_id, b.subscription_id, minute) });
                now.insert(b.subscription_id, b.tenant_id);
            }
            for (sub, tenant) in before.iter().filter(|(sub, _)| !now.contains_key(*sub)) {
                rows.push(MinuteStats { backlog: Some(0), ..empty(tenant, *sub, minute) });
            }
            match store.record_minutes(&rows).await {
                Ok(()) => *before = now,
                Err(e) => tracing::warn!(error = %e, "could not record the backlog sample"),
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not sample the backlogs"),
    }
}

/// Flushes every [`FLUSH_EVERY`] and samples backlogs every `sample_every` (at most a minute)
/// until `stop`, then flushes once more.
pub async fn run(
    rollup: Arc<Rollup>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    sample_every: Duration,
    stop: CancellationToken,
) {
    let sample_every = sample_every.min(Duration::from_secs(60));
    let tick = FLUSH_EVERY.min(sample_every);
    let mut last_sample: Option<tokio::time::Instant> = None;
    let mut open: HashMap<Uuid, String> = HashMap::new();
    loop {
        if last_sample.is_none_or(|t| t.elapsed() >= sample_every) {
            sample_backlogs(store.as_ref(), clock.as_ref(), &mut open).await;
            last_sample = Some(tokio::time::Instant::now());
        }
        tokio::select! {
            () = tokio::time::sleep(tick) => rollup.flush(store.as_ref()).await,
            () = stop.cancelled() => {
                rollup.flush(store.as_ref()).await;
                return;
            }
        }
    }
}
