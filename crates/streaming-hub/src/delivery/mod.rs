//! The dispatcher: push deliveries as attempts in flight (SPEC §3, §10).
//!
//! Claimers lease due jobs in batches (the store interleaves tenants) and hand them to one loop,
//! which starts each as an attempt task when the ledger (`capacity.rs`) has a slot for it, or
//! parks it in the process, leased, until one of its destination's attempts ends, a slot frees,
//! or its pace allows. Each task makes exactly one attempt and hands the outcome to the recorder;
//! a task holds no database connection while its request is out. Decisions — retry
//! delay, last attempt, dead letter, breaker, auto-disable — come from `hub-core`; the worker
//! only carries them out. New jobs wake the loop at once (in-process, and PostgreSQL `NOTIFY`
//! from other replicas); the idle interval is only a fallback. Expired leases (a worker that
//! died) are recovered, and poison jobs dead-lettered, by the same loop.
//!
//! **Invariants:** attempts in flight never pass the replica's bound, a destination's allowance,
//! a subscription's `max_in_flight` or pace, nor (while another tenant waits) a tenant's share
//! (`capacity.rs`); the loop never waits on the database or a destination, so one tenant's
//! hanging receivers delay no other tenant's start; a job is attempted only while leased by this
//! process; an open breaker or a `Retry-After` holds jobs back without spending their attempts,
//! except (for the breaker) a job's last attempt.

mod attempt;
mod breakers;
mod capacity;
mod claims;
mod handoff;
pub mod membership;
mod parking;
mod record;
pub mod replay;
mod room;
pub mod stats;
pub mod targets;
pub mod transform;
pub mod verify;

pub use breakers::BreakerBoard;
pub use capacity::{FlightBoard, Stall};
pub use handoff::Handoff;
pub use membership::Membership;
pub(crate) use room::{Handle, start};

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hub_core::delivery::{Breaker, BreakerConfig, RetryPolicy};
use hub_sinks::Sink;
use hub_store::{ClaimedJob, Store, StoredEvent, SubscriptionRecord};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use self::targets::Subscribed;
use crate::clock::Clock;
use crate::operational::{Notice, Notices};
use crate::secrets::Sealer;

/// How the dispatcher runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Attempts in flight at once (`STREAMING_HUB_MAX_IN_FLIGHT`).
    pub max_in_flight: u32,
    /// The share of the slots a tenant may hold while another waits.
    pub tenant_share: f64,
    pub claim_batch: u32,
    pub idle_interval: Duration,
    pub lease: Duration,
    pub poison_threshold: u32,
    pub retry: RetryPolicy,
    pub breaker: BreakerConfig,
    /// `(window, spread)` when auto-disable is on.
    pub auto_disable: Option<(Duration, Duration)>,
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
    /// What is in flight, and who may start next.
    flights: FlightBoard,
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
    /// Where subscriptions' transforms run (`None`: a subscription with one fails its attempts).
    transforms: Option<hub_transform::Pool>,
    /// This replica among the others: the destinations it paces, its lease tokens.
    membership: Arc<Membership>,
}

/// The ready queue of a running dispatcher and its slots.
#[derive(Debug, Clone)]
struct Intake {
    ready: mpsc::Sender<(Work, OwnedSemaphorePermit)>,
    slots: Arc<Semaphore>,
}

/// Claims in flight at once: while one waits for the database, the other's jobs are attempted.
const CLAIMERS: usize = 2;
/// The ready queue holds this many rounds of claims (see `Dispatcher::ready_slots`).
const READY_ROUNDS: usize = 4;
/// The most one claim asks for, however many slots are free.
const MAX_CLAIM: u32 = 256;
/// How often jobs waiting in the process are looked over (stale ones go back to the store).
const PARK_SWEEP: Duration = Duration::from_millis(250);
/// How many windows of tenants one claim looks through when those it visits give nothing.
const EMPTY_WINDOWS: usize = 4;
/// How often the subscriptions of jobs waiting in the process are read again, and their leases
/// checked.
const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// Leases checked a round, at most.
const LEASES_CHECKED: usize = 10_000;

/// What the refresh read for the loop: the subscriptions asked for (`records`: those still
/// stored) and the jobs whose lease this process no longer holds.
struct Fresh {
    asked: Vec<Uuid>,
    records: Vec<SubscriptionRecord>,
    /// `(job, token)`: a later lease of the same job is another.
    lost: Vec<(Uuid, Uuid)>,
}
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
    /// Its destination asked to be left alone until then.
    Paused(DateTime<Utc>),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a dispatcher works with, shared with the rest of the process.
pub struct Parts {
    pub store: Arc<dyn Store>,
    pub sealer: Arc<Sealer>,
    pub sinks: Arc<dyn Sink>,
    pub clock: Arc<dyn Clock>,
    /// Woken when jobs are written (by this process's ingest or another's notification).
    pub wake: Arc<Notify>,
    pub notices: Notices,
    /// Each destination's breaker and its attempts in flight, as the API shows them.
    pub breakers: BreakerBoard,
    pub flights: FlightBoard,
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts").finish_non_exhaustive()
    }
}

impl Dispatcher {
    pub fn new(parts: Parts, settings: Settings) -> Self {
        let Parts { store, sealer, sinks, clock, wake, notices, breakers: board, flights } = parts;
        Self {
            store,
            sealer,
            sinks,
            clock,
            wake,
            settings,
            breakers: Mutex::new(HashMap::new()),
            board,
            flights,
            in_flight: Mutex::new(HashMap::new()),
            notices,
            dead_letters: Mutex::new(HashMap::new()),
            frees_key: Mutex::new(HashSet::new()),
            intake: Mutex::new(None),
            stats: Arc::default(),
            transforms: None,
            membership: Membership::solo(),
        }
    }

    /// Paces only the destinations `membership` owns among the live replicas.
    pub fn with_membership(mut self, membership: Arc<Membership>) -> Self {
        self.membership = membership;
        self
    }

    /// Runs subscriptions' transforms on `pool`.
    pub fn with_transforms(mut self, pool: hub_transform::Pool) -> Self {
        self.transforms = Some(pool);
        self
    }

    /// The per-minute statistics this dispatcher's recorder notes ([`stats::run`] flushes them).
    pub fn stats(&self) -> Arc<stats::Rollup> {
        Arc::clone(&self.stats)
    }

    /// Runs until `shutdown`, then waits (up to `drain`) for attempts in flight.
    ///
    /// Claims run ahead of the attempts: [`CLAIMERS`] claimers keep a ready queue of leased jobs
    /// filled (each claim sized by the free slots), so a slot that frees takes its next job
    /// without a round trip. The loop starts each job the ledger lets in as a task of its own and
    /// parks the rest (`parking.rs`); it never awaits the database or a destination. Outcomes are
    /// written by a recorder that groups them into one transaction (see `record_loop`).
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken, drain: Duration) {
        let max = self.settings.max_in_flight as usize;
        // Mirrors the ledger's count of attempts in flight, so the drain can wait for them all.
        let slots = Arc::new(Semaphore::new(max));
        let (recorder, outcomes) = mpsc::channel(RECORDER_QUEUE);
        let recording = tokio::spawn(Arc::clone(&self).record_loop(outcomes));
        // Claimed jobs wait here for the loop, each holding a slot of the ready queue; claimers
        // refill it while attempts run.
        let ready_slots = self.ready_slots();
        let room = Arc::new(Semaphore::new(ready_slots));
        let (ready, mut queue) = mpsc::channel::<(Work, OwnedSemaphorePermit)>(ready_slots);
        *lock(&self.intake) = Some(Intake { ready: ready.clone(), slots: Arc::clone(&room) });
        let claimers: Vec<_> = (0..CLAIMERS)
            .map(|i| tokio::spawn(Arc::clone(&self).claim_loop(i, ready.clone(), Arc::clone(&room), shutdown.clone())))
            .collect();
        drop(ready);
        let (finished_tx, mut finished) = mpsc::unbounded_channel::<String>();
        let mut loop_ = parking::Loop {
            dispatcher: Arc::clone(&self),
            parked: parking::Parked::default(),
            slots: Arc::clone(&slots),
            recorder: recorder.clone(),
            finished: finished_tx,
            extra: ready_slots,
            lost: HashSet::new(),
        };
        // Waiting jobs' subscriptions are read again every second, so a change of limits reaches
        // them (the store is read off the loop).
        let (fresh_tx, mut fresh) = mpsc::channel(1);
        let refreshing = tokio::spawn(Arc::clone(&self).refresh_loop(fresh_tx, shutdown.clone()));
        let mut owners = self.membership.watch();
        let mut sweep = tokio::time::interval(PARK_SWEEP);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.flights.lock().turned(Some(Instant::now()));
            tokio::select! {
                work = queue.recv() => match work {
                    Some((work, _slot)) => loop_.admit(work),
                    None => break,
                },
                Some(dest) = finished.recv() => {
                    loop_.drain(&dest);
                    loop_.drain_starved();
                }
                _ = sweep.tick() => loop_.sweep(),
                Ok(()) = owners.changed() => loop_.disown(),
                Some(fresh) = fresh.recv() => {
                    loop_.forget(&fresh.lost);
                    loop_.refresh(&fresh.asked, fresh.records);
                }
                () = shutdown.cancelled() => break,
            }
        }
        self.flights.lock().turned(None);
        refreshing.abort();
        // No more jobs from ingest: the ready queue closes once the claimers and any handover
        // under way are done.
        lock(&self.intake).take();
        for work in loop_.parked.take_all(&self.flights) {
            self.release(&work.job, self.clock.now()).await;
            lock(&self.in_flight).remove(&work.job.id);
        }
        drop(loop_);
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
        let deadline = Instant::now() + drain;
        let finished = tokio::time::timeout(drain, slots.acquire_many(max as u32)).await.is_ok();
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

    /// Every [`REFRESH_EVERY`], reads the subscriptions of the jobs waiting in the process and
    /// hands them to the loop (see `parking::Loop::refresh`).
    async fn refresh_loop(self: Arc<Self>, fresh: mpsc::Sender<Fresh>, shutdown: CancellationToken) {
        let mut every = tokio::time::interval(REFRESH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                () = shutdown.cancelled() => return,
            }
            // Leases taken away meanwhile (an erasure cancelled the job, its subscription was
            // deleted): the jobs still waiting here are dropped, never attempted.
            let held: Vec<(Uuid, Uuid)> =
                lock(&self.in_flight).iter().take(LEASES_CHECKED).map(|(job, token)| (*job, *token)).collect();
            let lost = match self.store.lost_leases(&held).await {
                Ok(lost) => {
                    let lost: HashSet<Uuid> = lost.into_iter().collect();
                    held.into_iter().filter(|(job, _)| lost.contains(job)).collect()
                }
                Err(e) => {
                    tracing::debug!(error = %e, "checking the leases held failed; tried again");
                    Vec::new()
                }
            };
            let asked = self.flights.lock().parked_subscriptions();
            let records = if asked.is_empty() {
                Vec::new()
            } else {
                match self.store.subscriptions_by_ids(&asked).await {
                    Ok(records) => records,
                    Err(e) => {
                        tracing::debug!(error = %e, "reading waiting jobs' subscriptions failed; tried again");
                        continue;
                    }
                }
            };
            if asked.is_empty() && lost.is_empty() {
                continue;
            }
            if fresh.send(Fresh { asked, records, lost }).await.is_err() {
                return;
            }
        }
    }

    /// The ready queue's slots: [`READY_ROUNDS`] of the largest claim every claimer may make,
    /// the room beyond one round going to the jobs this process's ingest leases as it writes them.
    pub(super) fn ready_slots(&self) -> usize {
        READY_ROUNDS * CLAIMERS * self.claim_ceiling() as usize
    }

    /// The largest claim: enough to fill an eighth of the slots (at most [`MAX_CLAIM`]), never
    /// less than the configured batch.
    fn claim_ceiling(&self) -> u32 {
        self.settings.claim_batch.max(1).max((self.settings.max_in_flight / 8).min(MAX_CLAIM))
    }

    /// What the next claim asks for (Little's law: what the free slots can start now, split
    /// between the claimers), between the configured batch and [`Self::claim_ceiling`].
    pub(super) fn claim_size(&self) -> u32 {
        let free = (self.settings.max_in_flight as usize).saturating_sub(self.flights.lock().in_flight());
        let share = u32::try_from(free / CLAIMERS).unwrap_or(u32::MAX);
        share.clamp(self.settings.claim_batch.max(1), self.claim_ceiling())
    }

    /// How many claimed jobs may wait in the process for one destination at least: what every
    /// claimer could have claimed for it at once (a destination with a larger allowance may
    /// have that many).
    pub(super) fn park_limit(&self) -> usize {
        CLAIMERS * self.settings.claim_batch.max(1) as usize
    }

    /// Subscriptions not to claim (nor lease at ingest) for now: see [`capacity::Ledger::saturated`].
    pub(super) fn saturated_subscriptions(&self) -> Vec<Uuid> {
        self.flights.lock().saturated(self.park_limit(), self.settings.lease, std::time::Instant::now())
    }
}

/// The settings a configuration asks for.
pub fn settings(config: &crate::config::Config) -> Settings {
    Settings {
        max_in_flight: config.max_in_flight,
        tenant_share: config.tenant_in_flight_share,
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
