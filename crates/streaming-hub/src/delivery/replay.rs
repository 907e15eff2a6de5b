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
use hub_core::operational::Kind;

/// How a runner walks.
#[derive(Debug, Clone, Copy)]
pub struct ReplaySettings {
    /// Events walked per step.
    pub batch: u32,
    /// Waiting jobs of a push subscription above which its replay waits.
    pub pace: u64,
    /// How long to wait when no replay could go on (all paced, or none running).
    pub idle: Duration,
}

impl Default for ReplaySettings {
    fn default() -> Self {
        Self { batch: 100, pace: 50, idle: Duration::from_millis(100) }
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
        let walked = match round(store.as_ref(), clock.as_ref(), &settings, &jobs, &notices).await {
            Ok(walked) => walked,
            Err(e) => {
                tracing::warn!(error = %e, "replay step failed; retrying");
                false
            }
        };
        if walked {
            tokio::task::yield_now().await;
            if shutdown.is_cancelled() {
                return;
            }
            continue;
        }
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(settings.idle) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// One step of every running replay; true when at least one walked on.
async fn round(
    store: &dyn Store,
    clock: &dyn Clock,
    settings: &ReplaySettings,
    jobs: &Notify,
    notices: &Notices,
) -> hub_store::StoreResult<bool> {
    let mut walked = false;
    for id in store.running_replays(100).await? {
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
                    let data = serde_json::json!({
                        "replay_id": r.id,
                        "state": r.state.as_str(),
                        "from_seq": r.from_seq,
                        "to_seq": r.to_seq,
                        "matched": r.progress.matched,
                        "created": r.progress.created,
                        "skipped": r.progress.skipped,
                    });
                    notices.emit(Notice::new(&r.tenant_id, r.subscription_id, Kind::ReplayFinished, data));
                }
            }
            ReplayStep::Paced | ReplayStep::Idle => {}
        }
    }
    Ok(walked)
}
