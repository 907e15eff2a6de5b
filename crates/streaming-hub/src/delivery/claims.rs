//! Claims: each claimer keeps the ready queue filled with leased jobs (interleaving tenants,
//! leaving out destinations that have all they can take), and the first one also recovers
//! expired leases and reconciles waiting jobs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hub_store::{ClaimRequest, StoredEvent};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::targets::Subscribed;
use super::{Dispatcher, EMPTY_WINDOWS, RECONCILE_EVERY, Work, lock};
use crate::telemetry::metric;

impl Dispatcher {
    /// One of the claimers keeping the ready queue filled: once half a batch of the queue is free
    /// it claims as many jobs as fit (at most a batch), and waits for new work (a notification,
    /// or the idle interval) when none is due. The first claimer also recovers expired leases.
    pub(super) async fn claim_loop(
        self: Arc<Self>,
        index: usize,
        ready: mpsc::Sender<(Work, OwnedSemaphorePermit)>,
        slots: Arc<Semaphore>,
        shutdown: CancellationToken,
    ) {
        let mut after_tenant: Option<String> = None;
        let mut last_recovery: Option<Instant> = None;
        let mut last_reconcile: Option<Instant> = None;
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            if index == 0 && last_recovery.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                self.recover().await;
                last_recovery = Some(Instant::now());
            }
            if index == 0 && last_reconcile.is_none_or(|t| t.elapsed() >= RECONCILE_EVERY) {
                match self.store.reconcile_waiting_jobs().await {
                    Ok(0) => {}
                    Ok(moved) => tracing::info!(jobs = moved, "waiting jobs moved to their subscription's state"),
                    Err(e) => tracing::warn!(error = %e, "reconciling waiting jobs failed"),
                }
                last_reconcile = Some(Instant::now());
            }
            // Sized by the slots free now: a claim brings what they can start.
            let batch = self.claim_size();
            let mut room = tokio::select! {
                room = Arc::clone(&slots).acquire_many_owned(batch.div_ceil(2)) => match room {
                    Ok(room) => room,
                    Err(_) => break,
                },
                () = shutdown.cancelled() => break,
            };
            while room.num_permits() < batch as usize {
                match Arc::clone(&slots).try_acquire_owned() {
                    Ok(more) => room.merge(more),
                    Err(_) => break,
                }
            }
            match self.claim(room.num_permits() as u32, &mut after_tenant).await {
                Ok(work) if work.is_empty() => {
                    drop(room);
                    tokio::select! {
                        () = self.wake.notified() => {}
                        () = tokio::time::sleep(self.settings.idle_interval) => {}
                        () = shutdown.cancelled() => break,
                    }
                }
                Ok(work) => {
                    for w in work {
                        // A claim never returns more jobs than it has slots for.
                        let sent = match room.split(1) {
                            Some(slot) => ready.send((w, slot)).await.map_err(|e| e.0.0),
                            None => Err(w),
                        };
                        if let Err(w) = sent {
                            self.release(&w.job, self.clock.now()).await;
                            lock(&self.in_flight).remove(&w.job.id);
                        }
                    }
                }
                Err(e) => {
                    drop(room);
                    tracing::warn!(error = %e, "claiming jobs failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(self.settings.idle_interval.max(Duration::from_millis(500))) => {}
                        () = shutdown.cancelled() => break,
                    }
                }
            }
        }
    }

    /// Leases up to `limit` jobs and loads, in one query each, their subscriptions and events.
    pub(super) async fn claim(
        &self,
        limit: u32,
        after_tenant: &mut Option<String>,
    ) -> hub_store::StoreResult<Vec<Work>> {
        let now = self.clock.now();
        let mut request = ClaimRequest {
            now,
            lease_until: crate::clock::after(now, self.settings.lease),
            token: self.membership.token(),
            limit,
            after_tenant: after_tenant.clone(),
            exclude_subscriptions: self.saturated_subscriptions(),
            owned: self.membership.owned(),
        };
        let started = Instant::now();
        let mut jobs = Vec::new();
        // Tenants visited with nothing to give (their jobs' destinations all saturated) do not
        // pin the rotation: it moves past them, a few windows at once, before the claimer waits.
        for _ in 0..EMPTY_WINDOWS {
            let claim = self.store.claim_jobs(&request).await?;
            if claim.visited.is_some() {
                after_tenant.clone_from(&claim.visited);
                request.after_tenant.clone_from(&claim.visited);
            }
            jobs = claim.jobs;
            if !jobs.is_empty() || claim.visited.is_none() {
                break;
            }
        }
        tracing::debug!(asked = limit, jobs = jobs.len(), ms = started.elapsed().as_secs_f64() * 1000.0, "claimed");
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        lock(&self.in_flight).extend(jobs.iter().map(|j| (j.id, j.token)));
        let mut sub_ids: Vec<Uuid> = jobs.iter().map(|j| j.subscription_id).collect();
        sub_ids.sort_unstable();
        sub_ids.dedup();
        let keys: Vec<(String, i64)> = jobs.iter().map(|j| (j.tenant_id.clone(), j.event_seq)).collect();
        let (subs, events) =
            match tokio::try_join!(self.store.subscriptions_by_ids(&sub_ids), self.store.events_by_seqs(&keys)) {
                Ok(loaded) => loaded,
                Err(e) => {
                    for job in &jobs {
                        self.release(job, now).await;
                        lock(&self.in_flight).remove(&job.id);
                    }
                    return Err(e);
                }
            };
        tracing::debug!(ms = started.elapsed().as_secs_f64() * 1000.0, "loaded");
        let claimed_at = Instant::now();
        let subs: HashMap<Uuid, Arc<Subscribed>> =
            subs.into_iter().map(|s| (s.id, Arc::new(Subscribed::new(s)))).collect();
        let events: HashMap<(String, i64), Arc<StoredEvent>> =
            events.into_iter().map(|e| ((e.tenant_id.clone(), e.seq), Arc::new(e))).collect();
        Ok(jobs
            .into_iter()
            .map(|job| {
                // A subscription is only ever its own tenant's.
                let sub = subs.get(&job.subscription_id).filter(|s| s.record.tenant_id == job.tenant_id).cloned();
                // One event can be claimed for several subscriptions at once: each gets it.
                let event = events.get(&(job.tenant_id.clone(), job.event_seq)).cloned();
                Work { job, sub, event, claimed_at }
            })
            .collect())
    }

    pub(super) async fn recover(&self) {
        match self.store.recover_expired_leases(self.clock.now(), self.settings.poison_threshold).await {
            Ok(r) if r.recovered + r.poisoned > 0 => {
                tracing::warn!(recovered = r.recovered, poisoned = r.poisoned, "expired leases taken back");
                metrics::counter!(metric::LEASES_RECOVERED).increment(r.recovered);
                metrics::counter!(metric::JOBS_POISONED).increment(r.poisoned);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "recovering expired leases failed"),
        }
    }
}
