//! The dispatcher: a pool of workers making push deliveries (SPEC §3).
//!
//! One loop claims due jobs in small batches with a lease (the store interleaves tenants) and
//! hands each to a worker, which makes exactly one attempt and records it. Decisions — retry
//! delay, last attempt, dead letter, breaker, auto-disable — come from `hub-core`; the worker
//! only carries them out. New jobs wake the loop at once (in-process, and PostgreSQL `NOTIFY`
//! from other replicas); the idle interval is only a fallback. Expired leases (a worker that
//! died) are recovered, and poison jobs dead-lettered, by the same loop.
//!
//! **Invariants:** a destination holds more than half the workers only while it borrows idle ones
//! with quick attempts, leaving a reserve idle (`capacity.rs`); a job is attempted only
//! while leased by this worker; an open breaker holds jobs back without spending their attempts,
//! except a job's last attempt.

mod attempt;
mod breakers;
mod capacity;
mod claims;
mod record;
pub mod replay;
pub mod stats;
pub mod targets;
pub mod verify;

pub use breakers::BreakerBoard;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hub_core::delivery::{
    AttemptFacts, AutoDisable, Breaker, BreakerConfig, JobTransition, OutcomeClass, Permit, RetryPolicy, Transition,
    settle,
};
use hub_sinks::{Failure, FailureKind, Message, Outcome, Sink};
use hub_store::{
    AttemptRecord, AttemptResult, ClaimRequest, ClaimedJob, Completed, IngestLease, Store, StoredEvent,
    SubscriptionRecord,
};
use rand::Rng;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use self::targets::Subscribed;
use crate::clock::Clock;
use crate::operational::{Notice, Notices};
use crate::secrets::Sealer;
use crate::telemetry::metric;
use hub_core::operational::Kind as OperationalKind;

/// How the dispatcher runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub workers: u32,
    pub claim_batch: u32,
    pub idle_interval: Duration,
    pub lease: Duration,
    pub poison_threshold: u32,
    pub retry: RetryPolicy,
    pub breaker: BreakerConfig,
    /// `(window, spread)` when auto-disable is on.
    pub auto_disable: Option<(Duration, Duration)>,
}

impl Settings {
    /// A destination's share: half the workers (and at least one). It may borrow idle workers
    /// beyond it (see `Dispatcher::enter`).
    pub fn per_destination_cap(&self) -> usize {
        (self.workers as usize / 2).max(1)
    }

    /// Workers a destination borrowing beyond its share leaves idle, so another destination's
    /// first job starts at once: an eighth of the pool, at least one.
    pub fn reserve(&self) -> usize {
        (self.workers as usize / 8).max(1)
    }
}

/// A destination borrows idle workers beyond its share only while its recent attempts (a moving
/// average) take at most this long, so the workers it borrows are back within milliseconds when
/// another destination needs them.
const BORROW_LATENCY: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
struct Destinations {
    in_flight: HashMap<String, usize>,
    /// How long the destination's recent attempts took (a moving average).
    latency: HashMap<String, Duration>,
    /// Claimed jobs waiting for the destination's share of workers.
    parked: HashMap<String, usize>,
    of_subscription: HashMap<Uuid, String>,
}

/// The push delivery engine of one process.
#[derive(Debug)]
pub struct Dispatcher {
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    sinks: Arc<dyn Sink>,
    clock: Arc<dyn Clock>,
    wake: Arc<Notify>,
    settings: Settings,
    breakers: Mutex<HashMap<(String, String), Breaker>>,
    board: BreakerBoard,
    destinations: Mutex<Destinations>,
    /// Jobs being attempted now, with their lease tokens.
    in_flight: Mutex<HashMap<Uuid, Uuid>>,
    /// Operational events.
    notices: Notices,
    /// The dead-letter notice of an attempt waiting for its record: emitted only once the store
    /// took the job's death (the lease may have been lost meanwhile).
    dead_letters: Mutex<HashMap<Uuid, Notice>>,
    /// Jobs of subscriptions ordered by key whose attempt settles them (delivered or dead): once
    /// recorded, the next job of their key may be claimed, so the claimers are woken.
    frees_key: Mutex<HashSet<Uuid>>,
    /// Where jobs leased at ingest come in while the dispatcher runs (see [`Dispatcher::reserve`]).
    intake: Mutex<Option<Intake>>,
    /// Recorded attempts rolled up by subscription and minute (`stats.rs`).
    stats: Arc<stats::Rollup>,
}

/// The ready queue of a running dispatcher and its slots.
#[derive(Debug, Clone)]
struct Intake {
    ready: mpsc::Sender<(Work, OwnedSemaphorePermit)>,
    slots: Arc<Semaphore>,
}

/// Room in the ready queue that this process's ingest reserved for the jobs it is writing:
/// `lease` is what the store leases them with (see [`hub_store::IngestLease`]).
#[derive(Debug)]
pub struct Reservation {
    pub lease: IngestLease,
    room: OwnedSemaphorePermit,
    ready: mpsc::Sender<(Work, OwnedSemaphorePermit)>,
}

/// Claims in flight at once: while one waits for the database, the other's jobs are attempted.
const CLAIMERS: usize = 2;
/// The ready queue holds this many rounds of claims (see `Dispatcher::ready_slots`).
const READY_ROUNDS: usize = 4;
/// How many windows of tenants one claim looks through when those it visits give nothing.
const EMPTY_WINDOWS: usize = 4;
/// How often stranded waiting jobs are put in the state their subscription asks for.
const RECONCILE_EVERY: Duration = Duration::from_secs(5);
/// Outcomes waiting for the recorder, at most.
const RECORDER_QUEUE: usize = 1024;
/// Outcomes written in one transaction, at most.
const RECORD_BATCH: usize = 256;
/// How long the recorder waits for more outcomes to write with the first one waiting.
const RECORD_LINGER: Duration = Duration::from_millis(3);

/// A leased job with what its attempt needs, loaded at claim time.
struct Work {
    job: ClaimedJob,
    /// `None` when the subscription was deleted meanwhile.
    sub: Option<Arc<Subscribed>>,
    /// `None` when the event is no longer stored.
    event: Option<Arc<StoredEvent>>,
    claimed_at: Instant,
}

/// One attempt that was made, before its outcome is settled.
struct Attempted<'a> {
    job: &'a ClaimedJob,
    sub: &'a SubscriptionRecord,
    /// 1-based.
    number: u32,
    delivery_id: Uuid,
    started: DateTime<Utc>,
    latency: Duration,
    now: DateTime<Utc>,
}

/// Why a job is put back without an attempt.
enum Skip {
    DestinationBusy,
    BreakerOpen(DateTime<Utc>),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        sealer: Arc<Sealer>,
        sinks: Arc<dyn Sink>,
        clock: Arc<dyn Clock>,
        wake: Arc<Notify>,
        settings: Settings,
        notices: Notices,
        board: BreakerBoard,
    ) -> Self {
        Self {
            store,
            sealer,
            sinks,
            clock,
            wake,
            settings,
            breakers: Mutex::new(HashMap::new()),
            board,
            destinations: Mutex::new(Destinations::default()),
            in_flight: Mutex::new(HashMap::new()),
            notices,
            dead_letters: Mutex::new(HashMap::new()),
            frees_key: Mutex::new(HashSet::new()),
            intake: Mutex::new(None),
            stats: Arc::default(),
        }
    }

    /// The per-minute statistics this dispatcher's recorder notes ([`stats::run`] flushes them).
    pub fn stats(&self) -> Arc<stats::Rollup> {
        Arc::clone(&self.stats)
    }

    /// The fast path at steady load: room for up to `max` jobs that this process's ingest leases
    /// to these workers as it writes them, so a lone event costs no claim and no read. There is
    /// room only while the dispatcher runs and its ready queue has free slots now; a claimer
    /// waiting for slots is served first. Destinations that have all the workers they may take,
    /// and a full set of jobs waiting, are left out (their jobs stay `pending`, for claims).
    pub fn reserve(&self, max: usize) -> Option<Reservation> {
        let intake = lock(&self.intake).clone()?;
        let n = intake.slots.available_permits().min(max);
        if n == 0 {
            return None;
        }
        let room = Arc::clone(&intake.slots).try_acquire_many_owned(u32::try_from(n).ok()?).ok()?;
        let now = self.clock.now();
        let lease = IngestLease {
            token: Uuid::now_v7(),
            until: now + chrono::Duration::from_std(self.settings.lease).unwrap_or(chrono::Duration::MAX),
            limit: n,
            exclude_subscriptions: self.saturated_subscriptions(),
        };
        Some(Reservation { lease, room, ready: intake.ready })
    }

    /// Hands the jobs the store leased under `reservation` to the workers, with the
    /// subscriptions the write read and their events as written (`events`, by tenant and seq),
    /// so nothing is read again. A job that cannot be handed over is released at once, so nothing
    /// waits for a lease to expire.
    pub async fn hand_over(
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

    /// Runs until `shutdown`, then waits (up to `drain`) for attempts in flight.
    ///
    /// Claims run ahead of the workers: [`CLAIMERS`] claimers keep a ready queue of leased jobs
    /// filled (each claim at most `claim_batch` jobs), so a worker that finishes takes its next
    /// job without a round trip. Outcomes are written by a recorder that groups them into one
    /// transaction (see `record_loop`).
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken, drain: Duration) {
        let workers = Arc::new(Semaphore::new(self.settings.workers as usize));
        let (recorder, outcomes) = mpsc::channel(RECORDER_QUEUE);
        let recording = tokio::spawn(Arc::clone(&self).record_loop(outcomes));
        // Claimed jobs wait here for a worker, each holding a slot of the ready queue; claimers
        // refill it while workers attempt, so no worker waits for a claim's round trip.
        let ready_slots = self.ready_slots();
        let slots = Arc::new(Semaphore::new(ready_slots));
        let (ready, mut queue) = mpsc::channel::<(Work, OwnedSemaphorePermit)>(ready_slots);
        *lock(&self.intake) = Some(Intake { ready: ready.clone(), slots: Arc::clone(&slots) });
        let claimers: Vec<_> = (0..CLAIMERS)
            .map(|i| tokio::spawn(Arc::clone(&self).claim_loop(i, ready.clone(), Arc::clone(&slots), shutdown.clone())))
            .collect();
        drop(ready);
        // Jobs whose destination has its share of workers wait here (leased) for one of its
        // attempts to end, instead of taking a worker or going back to the store.
        let mut parked: HashMap<String, VecDeque<Work>> = HashMap::new();
        // A destination counts as saturated (no more claims or ingest leases for it) from
        // `park_limit` parked jobs on; what was already in the ready queue then may still
        // arrive and is parked too, so a claim's jobs are not sent back one statement each. Past
        // both (which claims and leases never reach) a job goes back to the store.
        let park_limit = self.park_limit() + ready_slots;
        let (finished_tx, mut finished) = mpsc::unbounded_channel::<String>();
        loop {
            let work = tokio::select! {
                work = queue.recv() => match work {
                    Some((work, _slot)) => work,
                    None => break,
                },
                Some(dest) = finished.recv() => {
                    let Some(work) = parked.get_mut(&dest).and_then(VecDeque::pop_front) else { continue };
                    self.set_parked(&dest, parked.get(&dest).map_or(0, VecDeque::len));
                    // A job never waits here for more than half its lease: it goes back instead,
                    // long before the lease could expire and another worker take it.
                    if work.claimed_at.elapsed() > self.settings.lease / 2 {
                        self.release(&work.job, self.clock.now()).await;
                        lock(&self.in_flight).remove(&work.job.id);
                        let _ = finished_tx.send(dest);
                        continue;
                    }
                    work
                }
                () = shutdown.cancelled() => break,
            };
            let Some(sub) = work.sub.clone() else {
                // Deleted meanwhile: its jobs were cancelled, this lease is moot.
                lock(&self.in_flight).remove(&work.job.id);
                continue;
            };
            let dest = sub.key.clone();
            if !self.enter(sub.record.id, &dest, workers.available_permits()) {
                let waiting = parked.entry(dest.clone()).or_default();
                if waiting.len() < park_limit {
                    waiting.push_back(work);
                    self.set_parked(&dest, waiting.len());
                } else {
                    let this = Arc::clone(&self);
                    tokio::spawn(async move {
                        this.skip(&work.job, Skip::DestinationBusy).await;
                        lock(&this.in_flight).remove(&work.job.id);
                    });
                }
                continue;
            }
            let permit = tokio::select! {
                permit = Arc::clone(&workers).acquire_owned() => permit.ok(),
                () = shutdown.cancelled() => None,
            };
            match permit {
                Some(permit) => {
                    let (recorder, finished) = (recorder.clone(), finished_tx.clone());
                    tokio::spawn(Arc::clone(&self).attempt(work, sub, dest, permit, recorder, finished));
                }
                None => {
                    self.leave(&dest, None);
                    self.release(&work.job, self.clock.now()).await;
                    lock(&self.in_flight).remove(&work.job.id);
                    break;
                }
            }
        }
        // No more jobs from ingest: the ready queue closes once the claimers and any handover
        // under way are done.
        lock(&self.intake).take();
        for work in parked.into_values().flatten() {
            self.release(&work.job, self.clock.now()).await;
            lock(&self.in_flight).remove(&work.job.id);
        }
        // Jobs claimed but not started go back at once.
        for claimer in claimers {
            let _ = claimer.await;
        }
        queue.close();
        while let Some((work, _)) = queue.recv().await {
            self.release(&work.job, self.clock.now()).await;
            lock(&self.in_flight).remove(&work.job.id);
        }
        // Drain: attempts in flight finish within the shutdown timeout and their outcomes are
        // written; the leases of those that do not are released, so another replica takes the jobs
        // at once.
        let all = self.settings.workers;
        let deadline = Instant::now() + drain;
        let finished = tokio::time::timeout(drain, workers.acquire_many(all)).await.is_ok();
        drop(recorder);
        if tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), recording).await.is_err() {
            tracing::warn!("shutdown timeout reached while recording outcomes");
        }
        if !finished || !lock(&self.in_flight).is_empty() {
            let unfinished: Vec<(Uuid, Uuid)> = lock(&self.in_flight).iter().map(|(j, t)| (*j, *t)).collect();
            tracing::warn!(jobs = unfinished.len(), "shutdown timeout reached; releasing unfinished leases");
            for (job, token) in unfinished {
                if let Err(e) = self.store.release_job(job, token, self.clock.now()).await {
                    tracing::warn!(job = %job, error = %e, "releasing a lease failed; it will expire");
                }
            }
        }
    }
}

/// The settings a configuration asks for.
pub fn settings(config: &crate::config::Config) -> Settings {
    Settings {
        workers: config.dispatch_workers,
        claim_batch: config.dispatch_claim_batch,
        idle_interval: config.dispatch_idle_interval,
        lease: config.dispatch_lease,
        poison_threshold: config.poison_threshold,
        retry: RetryPolicy { curve: config.retry_curve.clone(), deadline: config.retry_deadline },
        breaker: BreakerConfig {
            failure_threshold: config.breaker_failures,
            cooldown: config.breaker_cooldown,
            max_cooldown: config.breaker_max_cooldown,
        },
        auto_disable: config
            .autodisable_enabled
            .then_some((config.autodisable_failure_window, config.autodisable_failure_spread)),
    }
}
