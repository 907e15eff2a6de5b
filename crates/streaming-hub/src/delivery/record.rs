//! The recorder: outcomes written in groups (one transaction each), then what follows a record —
//! operational events, metrics, and waking the claimers when an ordered key is released.

use std::sync::Arc;

use hub_core::operational::Kind as OperationalKind;
use hub_store::{AttemptResult, Completed};
use tokio::sync::mpsc;

use super::{Dispatcher, RECORD_BATCH, RECORD_LINGER, lock};
use crate::operational::Notice;
use crate::telemetry::metric;

impl Dispatcher {
    /// Writes outcomes as they come, grouped: whatever is waiting when a write starts goes into
    /// that one transaction. Ends when every sender is gone and the queue is empty.
    pub(super) async fn record_loop(self: Arc<Self>, mut outcomes: mpsc::Receiver<AttemptResult>) {
        let mut batch: Vec<AttemptResult> = Vec::with_capacity(RECORD_BATCH);
        while outcomes.recv_many(&mut batch, RECORD_BATCH).await > 0 {
            // Outcomes that end within RECORD_LINGER of each other share a statement: each
            // statement costs the database a commit, and a receiver already has its event, so a
            // moment's wait costs no latency anyone sees (the lease is held meanwhile).
            let until = tokio::time::Instant::now() + RECORD_LINGER;
            while batch.len() < RECORD_BATCH {
                let room = RECORD_BATCH - batch.len();
                match tokio::time::timeout_at(until, outcomes.recv_many(&mut batch, room)).await {
                    Ok(n) if n > 0 => {}
                    _ => break,
                }
            }
            match self.store.complete_attempts(&batch).await {
                Ok(done) => {
                    for (recorded, done) in batch.iter().zip(done) {
                        self.recorded(recorded, done);
                    }
                }
                Err(e) if batch.len() > 1 => {
                    // One bad row must not cost the others their records: write them one by one.
                    tracing::warn!(error = %e, attempts = batch.len(), "recording a batch of attempts failed; recording them one by one");
                    for recorded in &batch {
                        match self.store.complete_attempt(recorded).await {
                            Ok(done) => self.recorded(recorded, done),
                            Err(e) => self.not_recorded(recorded, &e),
                        }
                    }
                }
                Err(e) => self.not_recorded(&batch[0], &e),
            }
            let mut freed = false;
            for recorded in batch.drain(..) {
                lock(&self.in_flight).remove(&recorded.record.job_id);
                lock(&self.dead_letters).remove(&recorded.record.job_id);
                freed |= lock(&self.frees_key).remove(&recorded.record.job_id);
            }
            // The next job of a key that just settled is claimable now.
            if freed {
                self.wake.notify_one();
            }
        }
    }

    pub(super) fn recorded(&self, recorded: &AttemptResult, done: Completed) {
        let (job, a) = (recorded.record.job_id, &recorded.record);
        self.stats.note(recorded, done.job_updated);
        if done.disabled {
            metrics::counter!(metric::AUTO_DISABLED).increment(1);
            tracing::warn!(tenant = %a.tenant_id, subscription = %a.subscription_id, "subscription auto-disabled");
            let reason = match &recorded.health {
                hub_core::delivery::HealthChange::Failure { disable: Some(reason), .. } => reason.clone(),
                _ => String::new(),
            };
            // The hub changed the subscription: its ledger says so, with the hub as the actor.
            crate::ledger::append_soon(
                Arc::clone(&self.store),
                crate::ledger::change_entry(
                    self.clock.now(),
                    Some(&a.tenant_id),
                    &hub_core::ledger::entry::Actor::Hub,
                    "subscription.auto_disabled",
                    serde_json::json!({ "subscription": a.subscription_id }),
                    None,
                    Some(serde_json::json!({ "enabled": false, "disabled_reason": reason })),
                ),
            );
            self.notices.emit(Notice::new(
                &a.tenant_id,
                a.subscription_id,
                OperationalKind::SubscriptionDisabled,
                serde_json::json!({ "reason": reason }),
            ));
        }
        if done.job_updated {
            if let Some(notice) = lock(&self.dead_letters).remove(&job) {
                self.notices.emit(notice);
            }
        }
        if !done.job_updated {
            tracing::warn!(job = %job, "the lease was lost during the attempt; the attempt is recorded");
        }
    }

    pub(super) fn not_recorded(&self, recorded: &AttemptResult, e: &hub_store::StoreError) {
        let job = recorded.record.job_id;
        tracing::error!(job = %job, error = %e, "recording an attempt failed; the lease will expire");
    }
}
