//! The replay runner: walks every running replay on, a batch per step, in the background.
//!
//! Each step is one store transaction on the replay's row (`hub_store::Replays::step_replay`), so
//! replicas can all run this loop: their steps of one replay take turns and none walks an event
//! twice. The live path keeps priority: a push subscription with `pace` jobs already waiting
//! gets no more until its destination took some, and those jobs go through the ordinary claims,
//! so the per-destination cap and the tenant rotation hold for them as for any job.

use std::sync::Arc;
use std::time::Duration;

use hub_store::{ReplayLimits, ReplayState, ReplayStep, Store};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::operational::{Notice, Notices};

/// How a runner walks.
#[derive(Debug, Clone, Copy)]
pub struct ReplaySettings {
    /// Events walked per step.
    pub batch: u32,
    /// Waiting jobs of a push subscription above which its replay waits.
    pub pace: u64,
    /// How long to wait when every running replay is paced.
    pub paced: Duration,
    /// How often to look for replays when none runs: one started here wakes the runner at once,
    /// one started through another replica is found within this.
    pub idle: Duration,
}

impl Default for ReplaySettings {
    fn default() -> Self {
        Self { batch: 100, pace: 50, paced: Duration::from_millis(100), idle: Duration::from_secs(5) }
    }
}

/// Runs until `shutdown`. `wake` is notified when a replay starts; `jobs` is notified when a step
/// created jobs to deliver.
pub async fn run(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    settings: ReplaySettings,
    wake: Arc<Notify>,
    jobs: Arc<Notify>,
    notices: Notices,
    shutdown: CancellationToken,
) {
    loop {
        let stepped = tokio::select! {
            stepped = round(store.as_ref(), clock.as_ref(), &settings, &jobs, &notices) => stepped,
            () = shutdown.cancelled() => return,
        };
        let wait = match stepped {
            Ok(Round::Walked) => {
                tokio::task::yield_now().await;
                if shutdown.is_cancelled() {
                    return;
                }
                continue;
            }
            Ok(Round::Paced) => settings.paced,
            Ok(Round::Idle) => settings.idle,
            Err(e) => {
                tracing::warn!(error = %e, "replay step failed; retrying");
                settings.paced
            }
        };
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(wait) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// What one round of steps did.
enum Round {
    /// At least one replay walked on.
    Walked,
    /// Replays run, but every one waits for its destination.
    Paced,
    /// None runs.
    Idle,
}

/// One step of every running replay.
async fn round(
    store: &dyn Store,
    clock: &dyn Clock,
    settings: &ReplaySettings,
    jobs: &Notify,
    notices: &Notices,
) -> hub_store::StoreResult<Round> {
    let running = store.running_replays(100).await?;
    if running.is_empty() {
        return Ok(Round::Idle);
    }
    let mut walked = false;
    for id in running {
        let limits = ReplayLimits { batch: settings.batch, pace: settings.pace, now: clock.now() };
        match store.step_replay(id, &limits).await? {
            ReplayStep::Walked(r) => {
                walked = true;
                if r.progress.created > 0 {
                    jobs.notify_one();
                }
                if r.state != ReplayState::Running {
                    tracing::info!(
                        tenant = %r.tenant_id, subscription = %r.subscription_id, replay = %r.id,
                        state = r.state.as_str(), matched = r.progress.matched, created = r.progress.created,
                        skipped = r.progress.skipped, "replay finished"
                    );
                    notices.emit(Notice::replay_finished(&r));
                }
            }
            ReplayStep::Paced | ReplayStep::Idle => {}
        }
    }
    Ok(if walked { Round::Walked } else { Round::Paced })
}
