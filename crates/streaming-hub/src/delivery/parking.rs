//! The dispatcher's loop state: jobs that may not start yet wait here, leased, by destination.
//!
//! A job the ledger refuses waits behind its destination's earlier jobs (first in, first out):
//! for one of its destination's attempts to end, for any slot (then its destination is queued as
//! *starved* and tried whenever an attempt ends), or for its pace (a timer wakes its destination).
//! A job of a paused destination goes back to the store, due when the pause ends, without an
//! attempt. A job never waits here more than half its lease: it goes back instead, long before
//! the lease could expire.
//!
//! Everything here runs on the loop's own task and only spawns what awaits (attempts, releases),
//! so a destination that hangs never holds the loop.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use hub_store::AttemptResult;
use tokio::sync::{Semaphore, mpsc};
use uuid::Uuid;

use super::capacity::FlightBoard;
use super::targets::Subscribed;
use super::{Dispatcher, Skip, Work, lock};
use crate::telemetry::metric;

use std::time::Instant;

use super::capacity::{Admit, Blocked};

/// Whether a subscription's jobs may be attempted now (enabled and verified).
fn deliverable(sub: &hub_store::SubscriptionRecord) -> bool {
    sub.enabled && sub.verification == hub_core::VerificationState::Active
}

/// A parked job and whether it waits for a slot (rather than for its destination or pace).
struct Waiting {
    work: Work,
    starved: bool,
}

/// Jobs waiting in the process, by destination.
#[derive(Default)]
pub(super) struct Parked {
    by_dest: HashMap<String, VecDeque<Waiting>>,
    /// Destinations whose first job waits for a slot, in the order they started waiting.
    starved: VecDeque<String>,
    /// Destinations with a pace timer set.
    timers: HashSet<String>,
}

impl Parked {
    fn len(&self, dest: &str) -> usize {
        self.by_dest.get(dest).map_or(0, VecDeque::len)
    }

    /// Every waiting job, taken out of the ledger's count.
    pub(super) fn take_all(&mut self, flights: &FlightBoard) -> Vec<Work> {
        let now = Instant::now();
        let mut ledger = flights.lock();
        let mut all = Vec::new();
        for w in self.by_dest.drain().flat_map(|(_, q)| q) {
            if let Some(sub) = w.work.sub.as_deref() {
                ledger.parked(&Admit::of(&w.work.job, sub), w.starved, -1, now);
            }
            all.push(w.work);
        }
        all
    }
}

/// The loop's state: what it needs to start, park and put back jobs.
pub(super) struct Loop {
    pub dispatcher: Arc<Dispatcher>,
    pub parked: Parked,
    pub slots: Arc<Semaphore>,
    pub recorder: mpsc::Sender<AttemptResult>,
    pub finished: mpsc::UnboundedSender<String>,
    /// How many more than its park room a destination may have waiting (what was already in
    /// the ready queue when it saturated) before a job goes back to the store.
    pub extra: usize,
    /// Jobs whose lease was lost, not yet come from the ready queue (the last check's).
    pub lost: HashSet<(Uuid, Uuid)>,
}

impl Loop {
    /// A job from the ready queue: started now, parked, or put back.
    pub(super) fn admit(&mut self, work: Work) {
        if self.lost.remove(&(work.job.id, work.job.token)) {
            return;
        }
        let Some(sub) = work.sub.clone() else {
            // Deleted meanwhile: its jobs were cancelled, this lease is moot.
            lock(&self.dispatcher.in_flight).remove(&work.job.id);
            return;
        };
        if !self.dispatcher.membership.owns(sub.record.pace_bucket, sub.record.id) {
            // Its destination moved to another replica since it was leased: that one paces it.
            self.put_back(work, Skip::DestinationBusy);
            return;
        }
        let dest = sub.key.as_str();
        if self.parked.len(dest) > 0 {
            // Behind its destination's earlier jobs.
            self.park(work, &sub, Blocked::Destination);
            return;
        }
        if let Err((work, blocked)) = self.try_start(work, &sub) {
            self.refused(work, &sub, blocked);
        }
    }

    /// Starts the destination's waiting jobs, first in first out, while the ledger lets them.
    pub(super) fn drain(&mut self, dest: &str) {
        self.parked.timers.remove(dest);
        let lease = self.dispatcher.settings.lease;
        loop {
            let Some(waiting) = self.parked.by_dest.get_mut(dest).and_then(VecDeque::pop_front) else { break };
            let Waiting { work, starved } = waiting;
            let Some(sub) = work.sub.clone() else { continue };
            self.dispatcher.flights.lock().parked(&Admit::of(&work.job, &sub), starved, -1, Instant::now());
            if work.claimed_at.elapsed() > lease / 2 {
                self.put_back(work, Skip::DestinationBusy);
                continue;
            }
            match self.try_start(work, &sub) {
                Ok(()) => {}
                Err((work, blocked @ Blocked::Paused(_))) => self.refused(work, &sub, blocked),
                Err((work, blocked)) => {
                    self.park_front(work, &sub, blocked);
                    break;
                }
            }
        }
        if self.parked.by_dest.get(dest).is_some_and(VecDeque::is_empty) {
            self.parked.by_dest.remove(dest);
        }
    }

    /// Gives the destinations waiting for a slot their turn, oldest first, while slots are free.
    pub(super) fn drain_starved(&mut self) {
        for _ in 0..self.parked.starved.len() {
            if self.slots.available_permits() == 0 {
                break;
            }
            let Some(dest) = self.parked.starved.pop_front() else { break };
            let starved_head = self.parked.by_dest.get(&dest).and_then(VecDeque::front).is_some_and(|w| w.starved);
            if starved_head {
                self.drain(&dest);
            }
        }
    }

    /// Drops the waiting jobs whose lease this process no longer holds, and remembers the others
    /// (still in the ready queue) so they are dropped when they come.
    pub(super) fn forget(&mut self, lost: &[(Uuid, Uuid)]) {
        if lost.is_empty() {
            return;
        }
        let lost: HashSet<(Uuid, Uuid)> = lost.iter().copied().collect();
        let now = Instant::now();
        for queue in self.parked.by_dest.values_mut() {
            queue.retain(|w| {
                if !lost.contains(&(w.work.job.id, w.work.job.token)) {
                    return true;
                }
                if let Some(sub) = w.work.sub.as_deref() {
                    self.dispatcher.flights.lock().parked(&Admit::of(&w.work.job, sub), w.starved, -1, now);
                }
                false
            });
        }
        self.parked.by_dest.retain(|_, q| !q.is_empty());
        let mut in_flight = lock(&self.dispatcher.in_flight);
        for (job, token) in &lost {
            if in_flight.get(job) == Some(token) {
                in_flight.remove(job);
            }
        }
        drop(in_flight);
        self.lost = lost;
    }

    /// Gives waiting jobs their subscription as it stands now (`asked`: the ids read, `records`:
    /// those still stored). A changed rate or `max_in_flight` applies to them at once; the jobs
    /// of a subscription deleted, paused, no longer verified or sent elsewhere go back to the
    /// store (a later claim takes them as it now asks).
    pub(super) fn refresh(&mut self, asked: &[Uuid], records: Vec<hub_store::SubscriptionRecord>) {
        let mut latest: HashMap<Uuid, Option<Arc<Subscribed>>> = asked.iter().map(|id| (*id, None)).collect();
        for record in records {
            latest.insert(record.id, Some(Arc::new(Subscribed::new(record))));
        }
        let now = Instant::now();
        let mut touched = Vec::new();
        let mut gone = Vec::new();
        for (dest, queue) in &mut self.parked.by_dest {
            let mut kept = VecDeque::with_capacity(queue.len());
            for mut w in queue.drain(..) {
                let Some(old) = w.work.sub.clone() else { continue };
                let Some(new) = latest.get(&old.record.id) else {
                    kept.push_back(w);
                    continue;
                };
                match new {
                    Some(new) if new.key == old.key && deliverable(&new.record) => {
                        let (a, b) = (&old.record, &new.record);
                        if a.limits != b.limits || a.allowed_rate != b.allowed_rate {
                            // Same destination, same counts: the ledger learns the new rate.
                            let mut ledger = self.dispatcher.flights.lock();
                            ledger.parked(&Admit::of(&w.work.job, new), w.starved, 0, now);
                            w.work.sub = Some(Arc::clone(new));
                            touched.push(dest.clone());
                        }
                        kept.push_back(w);
                    }
                    _ => {
                        self.dispatcher.flights.lock().parked(&Admit::of(&w.work.job, &old), w.starved, -1, now);
                        gone.push(w.work);
                        touched.push(dest.clone());
                    }
                }
            }
            *queue = kept;
        }
        self.parked.by_dest.retain(|_, q| !q.is_empty());
        for work in gone {
            self.put_back(work, Skip::DestinationBusy);
        }
        touched.sort_unstable();
        touched.dedup();
        for dest in touched {
            self.drain(&dest);
        }
    }

    /// Sends back to the store the waiting jobs of destinations this replica no longer paces
    /// (another replica joined, and owns them now) nor helps with (a share withdrawn).
    pub(super) fn disown(&mut self) {
        let membership = Arc::clone(&self.dispatcher.membership);
        let now = Instant::now();
        let mut gone = Vec::new();
        for queue in self.parked.by_dest.values_mut() {
            let mut kept = VecDeque::with_capacity(queue.len());
            for w in queue.drain(..) {
                match w.work.sub.clone() {
                    Some(sub) if !membership.owns(sub.record.pace_bucket, sub.record.id) => {
                        self.dispatcher.flights.lock().parked(&Admit::of(&w.work.job, &sub), w.starved, -1, now);
                        gone.push(w.work);
                    }
                    _ => kept.push_back(w),
                }
            }
            *queue = kept;
        }
        self.parked.by_dest.retain(|_, q| !q.is_empty());
        if !gone.is_empty() {
            tracing::info!(jobs = gone.len(), "waiting jobs of destinations another replica paces now went back");
        }
        for work in gone {
            self.put_back(work, Skip::DestinationBusy);
        }
    }

    /// Looks over every waiting job: a destination whose first job waited too long is drained
    /// (which puts stale jobs back), and the starved get their turn.
    pub(super) fn sweep(&mut self) {
        let half = self.dispatcher.settings.lease / 2;
        let stale: Vec<String> = self
            .parked
            .by_dest
            .iter()
            .filter(|(_, q)| q.front().is_some_and(|w| w.work.claimed_at.elapsed() > half))
            .map(|(d, _)| d.clone())
            .collect();
        for dest in stale {
            self.drain(&dest);
        }
        self.drain_starved();
    }

    /// Takes a slot and spawns the attempt, or hands the job back with why it may not start.
    fn try_start(&mut self, work: Work, sub: &Arc<Subscribed>) -> Result<(), (Work, Blocked)> {
        let d = &self.dispatcher;
        let mut admit = Admit::of(&work.job, sub);
        if let Some(cap) = d.membership.helper_cap(sub.record.pace_bucket, sub.record.id) {
            // Another replica paces this hot destination and shares it: this one's part.
            let cap = u32::try_from(cap).unwrap_or(u32::MAX);
            admit.limits.max_in_flight = Some(admit.limits.max_in_flight.map_or(cap, |m| m.min(cap)));
        }
        let now = Instant::now();
        if let Err(blocked) = d.flights.lock().try_enter(&admit, now) {
            return Err((work, blocked));
        }
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            // The ledger and the slots always agree; should they not, the ledger gives way.
            d.flights.lock().leave(&admit, None, None, now);
            return Err((work, Blocked::Slots));
        };
        metrics::gauge!(metric::IN_FLIGHT).increment(1.0);
        let (recorder, finished) = (self.recorder.clone(), self.finished.clone());
        tokio::spawn(Arc::clone(d).attempt(work, Arc::clone(sub), slot, recorder, finished));
        Ok(())
    }

    /// A job the ledger refused when it came: parked, or put back.
    fn refused(&mut self, work: Work, sub: &Arc<Subscribed>, blocked: Blocked) {
        match blocked {
            Blocked::Paused(until) => {
                let wait = until.saturating_duration_since(Instant::now());
                let due = self.dispatcher.clock.now() + chrono::Duration::from_std(wait).unwrap_or_default();
                self.put_back(work, Skip::Paused(due));
            }
            blocked => self.park(work, sub, blocked),
        }
    }

    fn park(&mut self, work: Work, sub: &Arc<Subscribed>, blocked: Blocked) {
        let room = self.dispatcher.flights.lock().park_room(&sub.key, self.dispatcher.park_limit()) + self.extra;
        if self.parked.len(&sub.key) >= room {
            self.put_back(work, Skip::DestinationBusy);
            return;
        }
        let waiting = self.waiting(work, sub, blocked);
        self.parked.by_dest.entry(sub.key.clone()).or_default().push_back(waiting);
    }

    fn park_front(&mut self, work: Work, sub: &Arc<Subscribed>, blocked: Blocked) {
        let waiting = self.waiting(work, sub, blocked);
        self.parked.by_dest.entry(sub.key.clone()).or_default().push_front(waiting);
    }

    /// Counts the job as waiting, and arranges for its wake-up.
    fn waiting(&mut self, work: Work, sub: &Arc<Subscribed>, blocked: Blocked) -> Waiting {
        let starved = blocked == Blocked::Slots;
        self.dispatcher.flights.lock().parked(&Admit::of(&work.job, sub), starved, 1, Instant::now());
        match blocked {
            Blocked::Slots => self.parked.starved.push_back(sub.key.clone()),
            Blocked::Rate(when) => {
                if self.parked.timers.insert(sub.key.clone()) {
                    metrics::counter!(metric::RATE_WAITS).increment(1);
                    let (finished, dest) = (self.finished.clone(), sub.key.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep_until(tokio::time::Instant::from_std(when)).await;
                        let _ = finished.send(dest);
                    });
                }
            }
            Blocked::Destination | Blocked::Paused(_) => {}
        }
        Waiting { work, starved }
    }

    /// Sends a job back to the store without an attempt, off the loop.
    fn put_back(&self, work: Work, why: Skip) {
        let d = Arc::clone(&self.dispatcher);
        tokio::spawn(async move {
            d.skip(&work.job, why).await;
            lock(&d.in_flight).remove(&work.job.id);
        });
    }
}
