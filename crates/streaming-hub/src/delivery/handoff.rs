//! What ingest sees of the dispatcher: [`Handoff`], two calls and nothing else.
//!
//! ```text
//!   ingest (a group of posts)                     dispatcher (this process)
//!   ─────────────────────────                     ─────────────────────────
//!   handoff.reserve(n) ──────────────────────────▶ room in the ready queue, if any, and an
//!        │                                         IngestLease (token, lease end, limit,
//!        │                                         subscriptions to leave pending)
//!   store.write_batch_leased(records, &lease)      (one transaction: events, jobs; up to
//!        │                                         `limit` jobs leased to this process)
//!   handoff.hand_over(reservation, leased, events) ▶ leased jobs join the ready queue with the
//!                                                  subscriptions and events the write held
//! ```
//!
//! No room (the dispatcher stopped, or its ready queue is full), or no handoff at all (a replica
//! that does not deliver): the jobs are written `pending` and the claimers find them. Either way
//! a job is leased exactly once; a job that cannot be handed over is released at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use hub_store::{IngestLease, StoredEvent};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use uuid::Uuid;

use super::targets::Subscribed;
use super::{Dispatcher, Work, lock};
use crate::telemetry::metric;

/// Room in the ready queue that this process's ingest reserved for the jobs it is writing:
/// `lease` is what the store leases them with (see [`hub_store::IngestLease`]).
#[derive(Debug)]
pub struct Reservation {
    pub lease: IngestLease,
    room: OwnedSemaphorePermit,
    ready: mpsc::Sender<(Work, OwnedSemaphorePermit)>,
}

/// This process's dispatcher as ingest sees it.
#[derive(Debug, Clone)]
pub struct Handoff(Arc<Dispatcher>);

impl Handoff {
    pub fn new(dispatcher: Arc<Dispatcher>) -> Self {
        Self(dispatcher)
    }

    /// Room for up to `max` jobs of the events about to be written (see [`Dispatcher::reserve`]).
    pub fn reserve(&self, max: usize) -> Option<Reservation> {
        self.0.reserve(max)
    }

    /// Hands the jobs leased under `reservation` to the dispatcher, in the background.
    pub fn hand_over(
        &self,
        reservation: Reservation,
        leased: hub_store::LeasedAtIngest,
        events: HashMap<(String, i64), Arc<StoredEvent>>,
    ) {
        let dispatcher = Arc::clone(&self.0);
        tokio::spawn(async move { dispatcher.hand_over(reservation, leased, events).await });
    }
}

impl Dispatcher {
    /// The fast path at steady load: room for up to `max` jobs that this process's ingest leases
    /// to these workers as it writes them, so a lone event costs no claim and no read. There is
    /// room only while the dispatcher runs and its ready queue has free slots now; a claimer
    /// waiting for slots is served first. Destinations that have as many jobs waiting as they can
    /// start soon, or are paused, are left out (their jobs stay `pending`, for claims).
    pub(super) fn reserve(&self, max: usize) -> Option<Reservation> {
        let intake = lock(&self.intake).clone()?;
        let n = intake.slots.available_permits().min(max);
        if n == 0 {
            return None;
        }
        let room = Arc::clone(&intake.slots).try_acquire_many_owned(u32::try_from(n).ok()?).ok()?;
        let now = self.clock.now();
        let lease = IngestLease {
            token: self.membership.token(),
            until: crate::clock::after(now, self.settings.lease),
            limit: n,
            exclude_subscriptions: self.saturated_subscriptions(),
            owned: self.membership.owned(),
        };
        Some(Reservation { lease, room, ready: intake.ready })
    }

    /// Hands the jobs the store leased under `reservation` to the workers, with the
    /// subscriptions the write read and their events as written (`events`, by tenant and seq),
    /// so nothing is read again. A job that cannot be handed over is released at once, so nothing
    /// waits for a lease to expire.
    pub(super) async fn hand_over(
        &self,
        reservation: Reservation,
        leased: hub_store::LeasedAtIngest,
        events: HashMap<(String, i64), Arc<StoredEvent>>,
    ) {
        let Reservation { mut room, ready, .. } = reservation;
        let hub_store::LeasedAtIngest { jobs, subscriptions: subs, .. } = leased;
        if jobs.is_empty() {
            return;
        }
        metrics::counter!(metric::JOBS_LEASED_AT_INGEST).increment(jobs.len() as u64);
        lock(&self.in_flight).extend(jobs.iter().map(|j| (j.id, j.token)));
        let subs: HashMap<Uuid, Arc<Subscribed>> =
            subs.into_iter().map(|s| (s.id, Arc::new(Subscribed::new(s)))).collect();
        let claimed_at = Instant::now();
        for job in jobs {
            let sub = subs.get(&job.subscription_id).filter(|s| s.record.tenant_id == job.tenant_id).cloned();
            let event = events.get(&(job.tenant_id.clone(), job.event_seq)).cloned();
            let work = Work { job, sub, event, claimed_at };
            let sent = match room.split(1) {
                Some(slot) => ready.send((work, slot)).await.map_err(|e| e.0.0),
                None => Err(work),
            };
            if let Err(work) = sent {
                self.release(&work.job, self.clock.now()).await;
                lock(&self.in_flight).remove(&work.job.id);
            }
        }
    }
}
