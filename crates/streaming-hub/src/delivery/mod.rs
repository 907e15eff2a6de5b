//! The dispatcher: a pool of workers making push deliveries (SPEC §3).
//!
//! One loop claims due jobs in small batches with a lease (the store interleaves tenants) and
//! hands each to a worker, which makes exactly one attempt and records it. Decisions — retry
//! delay, last attempt, dead letter, breaker, auto-disable — come from `hub-core`; the worker
//! only carries them out. New jobs wake the loop at once (in-process, and PostgreSQL `NOTIFY`
//! from other replicas); the idle interval is only a fallback. Expired leases (a worker that
//! died) are recovered, and poison jobs dead-lettered, by the same loop.
//!
//! **Invariants:** a destination never holds more than half the workers; a job is attempted only
//! while leased by this worker; an open breaker holds jobs back without spending their attempts,
//! except a job's last attempt.

pub mod replay;
pub mod targets;
pub mod verify;

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
    /// At most half the workers (and at least one) per destination.
    pub fn per_destination_cap(&self) -> usize {
        (self.workers as usize / 2).max(1)
    }
}

#[derive(Debug, Default)]
struct Destinations {
    in_flight: HashMap<String, usize>,
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

/// The breakers of this process that are not closed, by the subscription whose job last moved
/// each: what listings show. Breakers are per destination; a subscription sharing one shows it
/// once its own jobs meet it.
#[derive(Debug, Clone, Default)]
pub struct BreakerBoard(Arc<Mutex<HashMap<Uuid, &'static str>>>);

impl BreakerBoard {
    /// `closed`, `open` or `half_open`.
    pub fn state(&self, subscription: Uuid) -> &'static str {
        lock(&self.0).get(&subscription).copied().unwrap_or("closed")
    }

    fn moved(&self, subscription: Uuid, transition: Transition) {
        let mut board = lock(&self.0);
        match transition {
            Transition::Opened => board.insert(subscription, "open"),
            Transition::HalfOpened => board.insert(subscription, "half_open"),
            Transition::Closed => board.remove(&subscription),
        };
    }
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
        }
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
            if !self.enter(sub.record.id, &dest) {
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
                    self.leave(&dest);
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

    /// One of the claimers keeping the ready queue filled: once half a batch of the queue is free
    /// it claims as many jobs as fit (at most a batch), and waits for new work (a notification,
    /// or the idle interval) when none is due. The first claimer also recovers expired leases.
    async fn claim_loop(
        self: Arc<Self>,
        index: usize,
        ready: mpsc::Sender<(Work, OwnedSemaphorePermit)>,
        slots: Arc<Semaphore>,
        shutdown: CancellationToken,
    ) {
        let batch = self.settings.claim_batch.max(1);
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
    async fn claim(&self, limit: u32, after_tenant: &mut Option<String>) -> hub_store::StoreResult<Vec<Work>> {
        let now = self.clock.now();
        let mut request = ClaimRequest {
            now,
            lease_until: now + chrono::Duration::from_std(self.settings.lease).unwrap_or(chrono::Duration::MAX),
            token: Uuid::now_v7(),
            limit,
            after_tenant: after_tenant.clone(),
            exclude_subscriptions: self.saturated_subscriptions(),
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

    async fn recover(&self) {
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

    /// The ready queue's slots: [`READY_ROUNDS`] times what every claimer claims at once, the
    /// room beyond one round going to the jobs this process's ingest leases as it writes them
    /// (under a burst most of them, which then need no claim: one row version and one statement
    /// fewer each).
    fn ready_slots(&self) -> usize {
        READY_ROUNDS * CLAIMERS * self.settings.claim_batch.max(1) as usize
    }

    /// How many claimed jobs may wait in the process for one destination: what every claimer
    /// could have claimed for it at once, so a claim rarely has to send a job back.
    fn park_limit(&self) -> usize {
        CLAIMERS * self.settings.claim_batch.max(1) as usize
    }

    /// Subscriptions not to claim for now: their destination has its share of workers and a
    /// full set of jobs already waiting for them.
    fn saturated_subscriptions(&self) -> Vec<Uuid> {
        let cap = self.settings.per_destination_cap();
        let limit = self.park_limit();
        let d = lock(&self.destinations);
        d.of_subscription
            .iter()
            .filter(|(_, dest)| {
                d.in_flight.get(*dest).copied().unwrap_or(0) >= cap
                    && d.parked.get(*dest).copied().unwrap_or(0) >= limit
            })
            .map(|(sub, _)| *sub)
            .collect()
    }

    /// Records how many jobs wait for a destination; when it drops below the limit the
    /// destination's subscriptions are claimable again, so the claimers are woken.
    fn set_parked(&self, dest: &str, n: usize) {
        let limit = self.park_limit();
        let was = {
            let mut d = lock(&self.destinations);
            if n == 0 { d.parked.remove(dest) } else { d.parked.insert(dest.to_owned(), n) }
        };
        if was.unwrap_or(0) >= limit && n < limit {
            self.wake.notify_one();
        }
    }

    /// Takes a worker slot on the destination, unless it already has its share.
    fn enter(&self, sub: Uuid, dest: &str) -> bool {
        let cap = self.settings.per_destination_cap();
        let mut d = lock(&self.destinations);
        d.of_subscription.insert(sub, dest.to_owned());
        let n = d.in_flight.entry(dest.to_owned()).or_insert(0);
        if *n >= cap {
            return false;
        }
        *n += 1;
        true
    }

    fn leave(&self, dest: &str) {
        let mut d = lock(&self.destinations);
        let idle = match d.in_flight.get_mut(dest) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n == 0
            }
            None => false,
        };
        // An idle destination needs no bookkeeping: the maps hold only destinations at work, so
        // they stay as small as the work in flight however many destinations tenants create.
        if idle && !d.parked.contains_key(dest) {
            d.in_flight.remove(dest);
            d.of_subscription.retain(|_, of| of != dest);
        }
    }

    fn breaker_permit(&self, job: &ClaimedJob, dest: &str, now: DateTime<Utc>, last: bool) -> Permit {
        let mut breakers = lock(&self.breakers);
        let breaker = breakers
            .entry((job.tenant_id.clone(), dest.to_owned()))
            .or_insert_with(|| Breaker::new(self.settings.breaker));
        let (permit, transition) = breaker.permit(now, last);
        count_transition(transition);
        self.breaker_notice(job, transition);
        if transition.is_some() {
            breaker_gauges(&breakers);
        }
        permit
    }

    /// `breaker_opened` and `breaker_closed`, about the subscription whose attempt moved it.
    fn breaker_notice(&self, job: &ClaimedJob, transition: Option<Transition>) {
        if let Some(t) = transition {
            self.board.moved(job.subscription_id, t);
        }
        let kind = match transition {
            Some(Transition::Opened) => OperationalKind::BreakerOpened,
            Some(Transition::Closed) => OperationalKind::BreakerClosed,
            _ => return,
        };
        self.notices.emit(Notice::new(&job.tenant_id, job.subscription_id, kind, serde_json::json!({})));
    }

    fn breaker_outcome(&self, job: &ClaimedJob, dest: &str, delivered: bool, now: DateTime<Utc>) {
        let tenant = job.tenant_id.as_str();
        let mut breakers = lock(&self.breakers);
        if let Some(breaker) = breakers.get_mut(&(tenant.to_owned(), dest.to_owned())) {
            let transition = if delivered { breaker.on_success() } else { breaker.on_failure(now) };
            count_transition(transition);
            self.breaker_notice(job, transition);
            if breaker.is_closed() && delivered {
                // A healthy destination needs no entry.
                breakers.remove(&(tenant.to_owned(), dest.to_owned()));
            }
            if transition.is_some() {
                breaker_gauges(&breakers);
            }
        }
    }

    async fn release(&self, job: &ClaimedJob, due_at: DateTime<Utc>) {
        if let Err(e) = self.store.release_job(job.id, job.token, due_at).await {
            tracing::warn!(job = %job.id, error = %e, "releasing a job failed; its lease will expire");
        }
    }

    /// One claimed job: exactly one attempt, its outcome handed to the recorder; or a release
    /// without an attempt.
    async fn attempt(
        self: Arc<Self>,
        work: Work,
        sub: Arc<Subscribed>,
        dest: String,
        _worker: OwnedSemaphorePermit,
        recorder: mpsc::Sender<AttemptResult>,
        finished: mpsc::UnboundedSender<String>,
    ) {
        let Work { job, event, .. } = work;
        let attempt = (job.attempts + 1).max(1) as u32;
        let span = tracing::info_span!(
            "attempt",
            tenant = %job.tenant_id,
            subscription = %job.subscription_id,
            job = %job.id,
            attempt,
            sink = sub.record.sink.as_str(),
        );
        // The trace's `job` span continues the event's trace (`crate::trace`).
        let traced = crate::trace_span!(
            "job",
            tenant = %job.tenant_id,
            subscription = %job.subscription_id,
            job = %job.id,
            attempt,
            sink = sub.record.sink.as_str(),
        );
        if let Some(e) = event.as_deref().filter(|_| crate::trace::on()) {
            crate::trace::continue_from(
                &traced,
                &[
                    crate::trace::remote(e.trace.as_deref(), None),
                    crate::trace::remote(e.traceparent.as_deref(), e.tracestate.as_deref()),
                ],
            );
        }
        let recorded =
            self.attempt_in_span(&job, &sub, event.as_deref(), &dest, attempt, &traced).instrument(span).await;
        drop(traced);
        self.leave(&dest);
        // A job parked for this destination may go now.
        let _ = finished.send(dest);
        match recorded {
            Some(result) => {
                if recorder.send(result).await.is_err() {
                    tracing::error!(job = %job.id, "the recorder stopped; the lease will expire");
                }
            }
            None => {
                lock(&self.in_flight).remove(&job.id);
            }
        }
    }

    async fn skip(&self, job: &ClaimedJob, why: Skip) {
        let due = match why {
            // Another worker will free a slot soon; try again shortly.
            Skip::DestinationBusy => self.clock.now() + chrono::Duration::milliseconds(50),
            Skip::BreakerOpen(until) => until,
        };
        self.release(job, due).await;
    }

    /// Makes the attempt and decides its outcome; `None` when the job was put back without one.
    async fn attempt_in_span(
        &self,
        job: &ClaimedJob,
        sub: &Subscribed,
        event: Option<&StoredEvent>,
        dest: &str,
        attempt: u32,
        traced: &tracing::Span,
    ) -> Option<AttemptResult> {
        let started = self.clock.now();
        let last = self.settings.retry.is_last(attempt, job.window_start, started);
        match self.breaker_permit(job, dest, started, last) {
            Permit::Wait { until } => {
                self.skip(job, Skip::BreakerOpen(until)).await;
                return None;
            }
            Permit::Attempt | Permit::Probe => {}
        }
        let delivery_id = Uuid::now_v7();
        let clock_start = Instant::now();
        let outcome = match event {
            Some(event) => {
                let span = if crate::trace::on() {
                    tracing::info_span!(
                        target: "streaming_hub::trace",
                        parent: traced,
                        "attempt",
                        otel.kind = "producer",
                        delivery = %delivery_id,
                        outcome = tracing::field::Empty,
                        failure = tracing::field::Empty,
                        http.response.status_code = tracing::field::Empty,
                        otel.status_code = tracing::field::Empty,
                    )
                } else {
                    tracing::Span::none()
                };
                let outcome = self.deliver(sub, event, attempt, delivery_id, started).await;
                crate::trace::attempted(&span, &outcome);
                outcome
            }
            None => Outcome::Failed(Failure {
                retryable: false,
                kind: FailureKind::Refused,
                reason: "the event is no longer stored".to_owned(),
                status: None,
                response: None,
            }),
        };
        let latency = clock_start.elapsed();
        let now = self.clock.now();
        self.breaker_outcome(job, dest, outcome.is_delivered(), now);
        let attempted = Attempted { job, sub: &sub.record, number: attempt, delivery_id, started, latency, now };
        let result = self.record(&attempted, outcome);
        if sub.record.ordering == hub_core::Ordering::Key && !matches!(result.transition, JobTransition::Retry { .. }) {
            lock(&self.frees_key).insert(job.id);
        }
        if let JobTransition::Dead { reason, .. } = &result.transition {
            // Not for an operational event's own job: failing subscriptions would tell each
            // other about each other without end.
            if event.is_none_or(|e| hub_core::operational::announces_dead_letter(&e.resource_type)) {
                let mut data = serde_json::json!({
                    "job_id": job.id,
                    "event_id": event.map(|e| e.ce_id),
                    "event_type": event.map(StoredEvent::event_key),
                    "attempts": attempt,
                    "reason": reason,
                });
                // With ordering by key, the dead letter released its key: say which moved on.
                if sub.record.ordering == hub_core::Ordering::Key
                    && let Some(key) = event.and_then(|e| hub_core::routing::ordering_key(e))
                {
                    data["ordering_key"] = serde_json::Value::String(key);
                }
                lock(&self.dead_letters).insert(
                    job.id,
                    Notice::new(&job.tenant_id, job.subscription_id, OperationalKind::JobDeadLettered, data),
                );
            }
        }
        Some(result)
    }

    async fn deliver(
        &self,
        subscribed: &Subscribed,
        event: &StoredEvent,
        attempt: u32,
        delivery_id: Uuid,
        now: DateTime<Utc>,
    ) -> Outcome {
        let sub = &subscribed.record;
        let content_type = event.data_content_type.as_deref().unwrap_or("application/json");
        let ordering_key = match sub.ordering {
            hub_core::Ordering::Key => hub_core::routing::ordering_key(event),
            hub_core::Ordering::None => None,
        };
        let message = Message {
            tenant: &event.tenant_id,
            subscription_id: sub.id,
            ce_id: event.ce_id,
            source: &event.source,
            ce_type: &event.ce_type,
            resource_type: &event.resource_type,
            event_type: &event.event_type,
            time: &event.event_time,
            schema_version: &event.schema_version,
            subject: event.subject.as_deref(),
            content_type,
            data_schema: event.data_schema.as_deref(),
            traceparent: event.traceparent.as_deref(),
            tracestate: event.tracestate.as_deref(),
            extensions: &event.extensions,
            ordering_key: ordering_key.as_deref(),
            payload: &event.payload,
            attempt,
            delivery_id,
        };
        // The attempt must end well inside the lease, or another worker could take the job.
        let max_timeout = self.settings.lease.mul_f64(0.8);
        let destination = match &subscribed.destination {
            Ok(destination) => destination,
            Err(reason) => return config_failure(reason.clone()),
        };
        match targets::secrets(sub, &self.sealer, now) {
            Ok(secrets) => self.sinks.deliver(destination, &secrets, &message, max_timeout).await,
            Err(reason) => config_failure(reason),
        }
    }

    /// The attempt's record and its settlement (`hub_core::delivery::settle`): what it does to the
    /// job and to the subscription.
    fn record(&self, attempt: &Attempted, outcome: Outcome) -> AttemptResult {
        let Attempted { job, sub, number, delivery_id, started, latency, now } = attempt;
        let sink = sub.sink.as_str();
        metrics::histogram!(metric::ATTEMPT_SECONDS, "sink" => sink).record(latency.as_secs_f64());
        let facts = AttemptFacts {
            attempt: *number,
            window_start: job.window_start,
            started: *started,
            now: *now,
            failing_since: sub.failing_since,
        };
        let auto_disable = self.settings.auto_disable.map(|(window, spread)| AutoDisable { window, spread });
        let (class, status, error, response) = match &outcome {
            Outcome::Delivered { status, response } => {
                metrics::counter!(metric::DELIVERY_ATTEMPTS, "sink" => sink, "outcome" => "delivered").increment(1);
                tracing::debug!(delivery = %delivery_id, status = ?status, "delivered");
                (OutcomeClass::Delivered, *status, None, response.clone())
            }
            Outcome::Failed(f) => {
                metrics::counter!(metric::DELIVERY_ATTEMPTS, "sink" => sink, "outcome" => "failed").increment(1);
                let kind = crate::telemetry::failure_kind(f.kind, f.status);
                metrics::counter!(metric::DELIVERY_FAILURES, "sink" => sink, "kind" => kind).increment(1);
                tracing::warn!(delivery = %delivery_id, kind = f.kind.as_str(), status = ?f.status, reason = %f.reason, retryable = f.retryable, "delivery attempt failed");
                // What the tenant reads (attempts, dead letters) never tells unreachable from
                // refused by the guard; the log line above and the metric keep the cause.
                let class = if f.retryable {
                    OutcomeClass::Retryable { reason: f.tenant_reason() }
                } else {
                    OutcomeClass::Permanent { reason: f.tenant_reason() }
                };
                (class, f.status, Some(format!("{}: {}", f.tenant_kind(), f.tenant_reason())), f.response.clone())
            }
        };
        let settlement = settle(&facts, class, &self.settings.retry, auto_disable, rand::rng().random());
        if matches!(settlement.transition, JobTransition::Dead { .. }) {
            metrics::counter!(metric::JOBS_DEAD, "sink" => sink).increment(1);
        }
        AttemptResult {
            token: job.token,
            record: AttemptRecord {
                id: *delivery_id,
                job_id: job.id,
                tenant_id: job.tenant_id.clone(),
                subscription_id: job.subscription_id,
                attempt: *number as i32,
                started_at: *started,
                latency_ms: latency.as_millis() as i64,
                outcome: if outcome.is_delivered() { "delivered" } else { "failed" }.to_owned(),
                status_code: status.map(i32::from),
                error,
                response_body: response,
            },
            transition: settlement.transition,
            health: settlement.health,
            now: *now,
        }
    }

    /// Writes outcomes as they come, grouped: whatever is waiting when a write starts goes into
    /// that one transaction. Ends when every sender is gone and the queue is empty.
    async fn record_loop(self: Arc<Self>, mut outcomes: mpsc::Receiver<AttemptResult>) {
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

    fn recorded(&self, recorded: &AttemptResult, done: Completed) {
        let (job, a) = (recorded.record.job_id, &recorded.record);
        if done.disabled {
            metrics::counter!(metric::AUTO_DISABLED).increment(1);
            tracing::warn!(tenant = %a.tenant_id, subscription = %a.subscription_id, "subscription auto-disabled");
            let reason = match &recorded.health {
                hub_core::delivery::HealthChange::Failure { disable: Some(reason), .. } => reason.clone(),
                _ => String::new(),
            };
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

    fn not_recorded(&self, recorded: &AttemptResult, e: &hub_store::StoreError) {
        let job = recorded.record.job_id;
        tracing::error!(job = %job, error = %e, "recording an attempt failed; the lease will expire");
    }
}

fn config_failure(reason: String) -> Outcome {
    Outcome::Failed(Failure { retryable: true, kind: FailureKind::Refused, reason, status: None, response: None })
}

/// `streaming_hub_breakers{state}` from the breakers of this process.
fn breaker_gauges(breakers: &HashMap<(String, String), Breaker>) {
    let open = breakers.values().filter(|b| b.is_open()).count();
    let half_open = breakers.values().filter(|b| b.is_half_open()).count();
    metrics::gauge!(metric::BREAKERS, "state" => "open").set(open as f64);
    metrics::gauge!(metric::BREAKERS, "state" => "half_open").set(half_open as f64);
}

fn count_transition(t: Option<Transition>) {
    let Some(t) = t else { return };
    let to = match t {
        Transition::Opened => "open",
        Transition::HalfOpened => "half_open",
        Transition::Closed => "closed",
    };
    metrics::counter!(metric::BREAKER_TRANSITIONS, "to" => to).increment(1);
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
