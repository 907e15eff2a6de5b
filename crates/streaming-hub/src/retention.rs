//! Retention: old records are deleted in bounded batches, by one replica at a time (the store
//! takes a PostgreSQL advisory lock per kind), so the database does not grow without bound.
//!
//! Inbox events are kept at least as long as the longest retry window, and never while a job
//! still refers to one (finished jobs go first, after their own retention).

use std::sync::Arc;
use std::time::Duration;

use hub_store::{PruneKind, Store};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::Config;
use crate::telemetry::metric;

/// How long subscriptions' per-minute statistics are kept: the longest window the API shows
/// (24 h), and a day more.
pub const MINUTES_RETENTION: Duration = Duration::from_secs(48 * 3600);

/// Records deleted per statement: keeps each transaction short.
const BATCH: u32 = 5000;

/// The retention of each kind a configuration asks for; events never shorter than the longest
/// retry window (the deadline plus the longest delay of the curve).
pub fn policies(config: &Config) -> Vec<(PruneKind, Duration)> {
    let longest_retry = config.retry_deadline + config.retry_curve.iter().copied().max().unwrap_or_default();
    vec![
        (PruneKind::Quarantine, config.quarantine_retention),
        (PruneKind::FinishedJobs, config.job_retention),
        (PruneKind::Events, config.event_retention.max(longest_retry)),
        // A type not seen for as long as events are kept leaves the catalog's learned types.
        (PruneKind::SeenTypes, config.event_retention.max(longest_retry)),
        (PruneKind::Minutes, MINUTES_RETENTION),
        // Portal and console sessions go once they have expired.
        (PruneKind::Sessions, Duration::ZERO),
        (PruneKind::Ledger, config.ledger_retention),
    ]
}

/// One pass: each kind, batch after batch, until a batch comes back short.
pub async fn prune_once(store: &dyn Store, clock: &dyn Clock, policies: &[(PruneKind, Duration)]) {
    for (kind, retention) in policies {
        let cutoff = crate::clock::before(clock.now(), *retention);
        let mut total = 0;
        loop {
            match store.prune(*kind, cutoff, BATCH).await {
                Ok(Some(n)) => {
                    total += n;
                    if n < u64::from(BATCH) {
                        // A pass done to its end: what the retention alert watches.
                        let done = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .unwrap_or_default()
                            .as_secs_f64();
                        metrics::gauge!(metric::RETENTION_DONE, "kind" => kind.as_str()).set(done);
                        break;
                    }
                }
                // Another replica is pruning this kind.
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(kind = kind.as_str(), error = %e, "pruning failed");
                    break;
                }
            }
        }
        if total > 0 {
            metrics::counter!(metric::PRUNED, "kind" => kind.as_str()).increment(total);
            tracing::info!(kind = kind.as_str(), deleted = total, "retention pruned old records");
        }
    }
}

/// Prunes every `interval` until `shutdown`.
pub async fn run(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    policies: Vec<(PruneKind, Duration)>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    loop {
        // A pass over a large backlog takes long: shutdown does not wait for it (a batch cut off
        // is rolled back, and the next pass takes it again).
        tokio::select! {
            () = prune_once(store.as_ref(), clock.as_ref(), &policies) => {}
            () = shutdown.cancelled() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = shutdown.cancelled() => return,
        }
    }
}
/// Starts retention: what the policies keep, and the Kafka dead letters on their own schedule.
pub(crate) fn start(config: &Config, common: &crate::Common, launch: &mut crate::supervisor::Launch) {
    launch.spawn(
        "retention",
        run(
            Arc::clone(&common.store),
            Arc::clone(&common.clock),
            policies(config),
            config.prune_interval,
            launch.stop.clone(),
        ),
    );
    launch.spawn(
        "dlq retention",
        run(
            Arc::clone(&common.store),
            Arc::clone(&common.clock),
            vec![(PruneKind::Dlq, config.dlq_retention)],
            config.dlq_prune_interval,
            launch.stop.clone(),
        ),
    );
}
