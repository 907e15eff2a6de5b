//! The slots of attempts in flight and who may take one (SPEC §10).
//!
//! The [`Ledger`] counts what is in flight per replica, tenant, destination and subscription,
//! and decides whether one more attempt may start now ([`Ledger::try_enter`]): not while its
//! destination is paused by a `Retry-After`; within its destination's adaptive allowance
//! (`hub_core::delivery::inflight::Allowance`); within its subscription's own `max_in_flight`;
//! within its tenant's share of the replica's slots while another tenant waits for one
//! (`tenant_may_start`); and at its subscription's pace (its own `per_second` and the rate its
//! receiver declared). A job that may not start waits in the process, leased (the run loop
//! parks it), or goes back to the store when its destination is paused.
//!
//! **Invariants:** the slots are never overdrawn; a destination never has more attempts out
//! than its allowance, nor a subscription more than its `max_in_flight`; a tenant beyond its
//! share never takes the last eighth of the slots, nor a slot while another tenant's job waits
//! for one; no subscription starts faster than its rate. The maps hold only what is at work, or
//! what must be remembered (a learned allowance, a pace), and are bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use hub_store::{ClaimedJob, SubscriptionRecord};
use uuid::Uuid;

use super::targets::Subscribed;
use super::{lock, targets};

use std::time::Instant;

use hub_core::delivery::inflight::{
    Allowance, Limits, Pace, ShareFacts, Signal, helper_share, reserve, tenant_may_start,
};

/// Idle destinations whose learned allowance is kept, at most.
const ALLOWANCES_KEPT: usize = 4096;

/// What a job needs to be let in: whose it is and where it goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Admit<'a> {
    pub tenant: &'a str,
    pub subscription: Uuid,
    pub dest: &'a str,
    pub limits: Limits,
    /// The receiver's declared rate, requests per minute.
    pub allowed_rate: Option<f64>,
}

impl<'a> Admit<'a> {
    /// Whether it promised a receiver anything: limits, or a declared rate.
    fn limited(&self) -> bool {
        self.limits != Limits::default() || self.allowed_rate.is_some()
    }

    pub(super) fn of(job: &'a ClaimedJob, sub: &'a Subscribed) -> Self {
        Self {
            tenant: &job.tenant_id,
            subscription: sub.record.id,
            dest: &sub.key,
            limits: sub.record.limits,
            allowed_rate: sub.record.allowed_rate,
        }
    }
}

/// Why a job may not start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Blocked {
    /// No slot is free, or its tenant has its share while another waits: any attempt that ends
    /// may let it in.
    Slots,
    /// Its destination has its allowance out, or its subscription its `max_in_flight`: one of
    /// theirs must end first.
    Destination,
    /// Its subscription's pace lets the next attempt start then.
    Rate(Instant),
    /// Its destination asked to be left alone until then (`Retry-After`).
    Paused(Instant),
}

#[derive(Debug)]
struct Dest {
    in_flight: usize,
    parked: usize,
    allowance: Allowance,
    paused_until: Option<Instant>,
}

#[derive(Debug, Default)]
struct Sub {
    in_flight: usize,
    parked: usize,
    pace: Pace,
    /// The rate that applied when it was last seen, attempts per second.
    rate: Option<f64>,
    /// It has limits, or its receiver declared a rate, when it was last seen.
    limited: bool,
    dest: String,
}

#[derive(Debug, Default)]
struct Tenant {
    in_flight: usize,
    /// Its jobs waiting in the process for a slot (not for their destination).
    starved: usize,
}

/// What one replica has in flight, and who may start next.
#[derive(Debug)]
pub struct Ledger {
    max: usize,
    share: f64,
    total: usize,
    starved: usize,
    dests: HashMap<String, Dest>,
    subs: HashMap<Uuid, Sub>,
    tenants: HashMap<String, Tenant>,
    /// Since when the slots have been full (all but the reserve, as much as one tenant may
    /// hold), with no attempt ended since.
    full_since: Option<Instant>,
    /// When the dispatch loop last turned (`None` while no loop runs).
    turned: Option<Instant>,
}

/// Why a replica's delivery is stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// The dispatch loop has not turned (it turns at least every quarter second).
    Loop,
    /// The slots are full (all but the reserve) and no attempt has ended (each ends within its
    /// timeout).
    Slots,
}

impl Stall {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Loop => "the dispatch loop stopped turning",
            Self::Slots => "the delivery slots are full and no attempt ends",
        }
    }
}

/// What the API shows of a subscription's delivery in this replica.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flight {
    pub in_flight: usize,
    /// The destination's current allowance (`None` before its first attempt here).
    pub allowance: Option<usize>,
    /// How long its destination stays paused by a `Retry-After`.
    pub paused_for: Option<Duration>,
    /// The rate that applies, attempts per second.
    pub rate: Option<f64>,
}

impl Ledger {
    pub fn new(max: usize, share: f64) -> Self {
        Self {
            max: max.max(1),
            share,
            total: 0,
            starved: 0,
            dests: HashMap::new(),
            subs: HashMap::new(),
            tenants: HashMap::new(),
            full_since: None,
            turned: None,
        }
    }

    /// The dispatch loop turned (`None`: it stopped running, by design).
    pub(super) fn turned(&mut self, now: Option<Instant>) {
        self.turned = now;
    }

    /// Whether delivery has made no progress for `after`: the loop has not turned, or every slot
    /// has been held with no attempt ending.
    pub fn stall(&self, now: Instant, after: Duration) -> Option<Stall> {
        let older = |t: Option<Instant>| t.is_some_and(|t| now.saturating_duration_since(t) > after);
        if older(self.turned) {
            Some(Stall::Loop)
        } else if older(self.full_since) {
            Some(Stall::Slots)
        } else {
            None
        }
    }

    /// Attempts in flight in this replica.
    pub fn in_flight(&self) -> usize {
        self.total
    }

    fn dest(&mut self, key: &str, ceiling: usize) -> &mut Dest {
        if !self.dests.contains_key(key) {
            self.dests.insert(
                key.to_owned(),
                Dest { in_flight: 0, parked: 0, allowance: Allowance::new(ceiling), paused_until: None },
            );
        }
        self.dests.get_mut(key).expect("inserted above")
    }

    /// Takes a slot for the job, or says why it may not start now. Nothing is counted when it
    /// may not.
    pub(super) fn try_enter(&mut self, a: &Admit<'_>, now: Instant) -> Result<(), Blocked> {
        let max = self.max;
        let dest = self.dest(a.dest, max);
        if let Some(until) = dest.paused_until {
            if until > now {
                return Err(Blocked::Paused(until));
            }
            dest.paused_until = None;
        }
        if dest.in_flight >= dest.allowance.current() {
            return Err(Blocked::Destination);
        }
        let sub = self.subs.entry(a.subscription).or_default();
        if a.limits.max_in_flight.is_some_and(|cap| sub.in_flight >= cap as usize) {
            return Err(Blocked::Destination);
        }
        let held = self.tenants.get(a.tenant).map_or(0, |t| t.in_flight);
        let others_waiting = self.starved > self.tenants.get(a.tenant).map_or(0, |t| t.starved);
        if !tenant_may_start(held, max, max - self.total, self.share, others_waiting) {
            return Err(Blocked::Slots);
        }
        let sub = self.subs.get_mut(&a.subscription).expect("inserted above");
        sub.rate = a.limits.rate(a.allowed_rate);
        sub.limited = a.limited();
        if let Some(rate) = sub.rate {
            sub.pace.take(rate, now).map_err(Blocked::Rate)?;
        }
        sub.in_flight += 1;
        a.dest.clone_into(&mut sub.dest);
        self.dests.get_mut(a.dest).expect("inserted above").in_flight += 1;
        self.tenants.entry(a.tenant.to_owned()).or_default().in_flight += 1;
        self.total += 1;
        if self.total >= self.max - reserve(self.max) && self.full_since.is_none() {
            self.full_since = Some(now);
        }
        Ok(())
    }

    /// Gives the slot back; `felt` is what the attempt's outcome tells the destination's
    /// allowance (none for a job put back without an attempt), `pause` a `Retry-After`. Answers
    /// whether the allowance was cut.
    pub(super) fn leave(&mut self, a: &Admit<'_>, felt: Option<Signal>, pause: Option<Duration>, now: Instant) -> bool {
        self.total = self.total.saturating_sub(1);
        self.full_since = None;
        if let Some(t) = self.tenants.get_mut(a.tenant) {
            t.in_flight = t.in_flight.saturating_sub(1);
            if t.in_flight == 0 && t.starved == 0 {
                self.tenants.remove(a.tenant);
            }
        }
        if let Some(s) = self.subs.get_mut(&a.subscription) {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
        let mut cut = false;
        if let Some(d) = self.dests.get_mut(a.dest) {
            if let Some(signal) = felt {
                cut = d.allowance.on(signal, d.in_flight, now);
            }
            d.in_flight = d.in_flight.saturating_sub(1);
            if let Some(pause) = pause {
                let until = now + pause;
                d.paused_until = Some(d.paused_until.map_or(until, |u| u.max(until)));
            }
        }
        self.forget_sub(a.subscription, now);
        self.forget_idle_dests(now);
        cut
    }

    /// Counts a job waiting in the process for its destination (`starved`: for a slot).
    pub(super) fn parked(&mut self, a: &Admit<'_>, starved: bool, delta: isize, now: Instant) {
        let apply = |n: &mut usize| *n = n.saturating_add_signed(delta);
        apply(&mut self.dest(a.dest, self.max).parked);
        let sub = self.subs.entry(a.subscription).or_default();
        apply(&mut sub.parked);
        sub.rate = a.limits.rate(a.allowed_rate);
        sub.limited = a.limited();
        a.dest.clone_into(&mut sub.dest);
        if starved {
            apply(&mut self.starved);
            apply(&mut self.tenants.entry(a.tenant.to_owned()).or_default().starved);
            if let Some(t) = self.tenants.get(a.tenant)
                && t.in_flight == 0
                && t.starved == 0
            {
                self.tenants.remove(a.tenant);
            }
        }
        if delta < 0 {
            self.forget_sub(a.subscription, now);
        }
    }

    /// Subscriptions not to claim for now (nor lease at ingest): their destination is paused,
    /// or has as many jobs waiting as it can start soon (`park_limit` at least, or its
    /// allowance; for a paced subscription, what its pace starts in a quarter of the lease).
    pub(super) fn saturated(&self, park_limit: usize, lease: Duration, now: Instant) -> Vec<Uuid> {
        self.subs
            .iter()
            .filter(|(_, s)| {
                let Some(d) = self.dests.get(&s.dest) else { return false };
                d.paused_until.is_some_and(|u| u > now)
                    || d.parked >= park_limit.max(d.allowance.current())
                    || s.rate.is_some_and(|rate| s.parked as f64 >= (rate * lease.as_secs_f64() / 4.0).max(1.0))
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// Subscriptions with jobs waiting here (their limits are read again while they wait).
    pub(super) fn parked_subscriptions(&self) -> Vec<Uuid> {
        self.subs.iter().filter(|(_, s)| s.parked > 0).map(|(id, _)| *id).collect()
    }

    /// How many jobs a destination may have waiting here before its jobs are left in the store.
    pub(super) fn park_room(&self, dest: &str, park_limit: usize) -> usize {
        self.dests.get(dest).map_or(park_limit, |d| park_limit.max(d.allowance.current()))
    }

    /// What a subscription's delivery looks like here (`dest`: its destination's key).
    pub fn flight(&self, subscription: Uuid, dest: &str, rate: Option<f64>, now: Instant) -> Flight {
        let d = self.dests.get(dest);
        Flight {
            in_flight: self.subs.get(&subscription).map_or(0, |s| s.in_flight),
            allowance: d.map(|d| d.allowance.current()),
            paused_for: d.and_then(|d| d.paused_until).and_then(|u| u.checked_duration_since(now)),
            rate,
        }
    }

    /// Every subscription this replica paces now, with what its delivery looks like here and
    /// how many attempts each of the other `replicas - 1` may have out at its destination
    /// ([`helper_share`]; at most `max`, those with attempts in flight first).
    fn pacing(&self, now: Instant, max: usize, replicas: usize) -> Vec<(Uuid, Flight, Option<usize>)> {
        let mut all: Vec<(Uuid, Flight, Option<usize>)> = self
            .subs
            .iter()
            .map(|(id, s)| {
                let share = self.dests.get(&s.dest).and_then(|d| {
                    helper_share(&ShareFacts {
                        allowance: d.allowance.current(),
                        calm: d.allowance.calm(now),
                        in_flight: d.in_flight,
                        limited: s.limited,
                        paused: d.paused_until.is_some_and(|u| u > now),
                        breaker_closed: true,
                        replicas,
                    })
                });
                (*id, self.flight(*id, &s.dest, s.rate, now), share)
            })
            .collect();
        all.sort_by_key(|(id, f, _)| (std::cmp::Reverse(f.in_flight), *id));
        all.truncate(max);
        all
    }

    /// A subscription with nothing in flight, nothing waiting, no pace to remember and no
    /// paused destination is forgotten.
    fn forget_sub(&mut self, id: Uuid, now: Instant) {
        if let Some(s) = self.subs.get(&id)
            && s.in_flight == 0
            && s.parked == 0
            && !s.pace.holds_after(now)
            && self.dests.get(&s.dest).is_none_or(|d| d.paused_until.is_none_or(|u| u <= now))
        {
            self.subs.remove(&id);
        }
    }

    /// Past the bound, destinations with nothing in flight, waiting or paused are forgotten
    /// (their allowance starts over when they come back).
    fn forget_idle_dests(&mut self, now: Instant) {
        if self.dests.len() > ALLOWANCES_KEPT {
            self.dests.retain(|_, d| d.in_flight > 0 || d.parked > 0 || d.paused_until.is_some_and(|u| u > now));
            let dests = &self.dests;
            self.subs.retain(|_, s| s.in_flight > 0 || s.parked > 0 || dests.contains_key(&s.dest));
        }
    }
}

/// The ledger of a dispatcher, shared with the API, which shows each subscription's part.
/// Subscriptions a heartbeat publishes the pacing of, at most.
const PACING_PUBLISHED: usize = 2_000;

#[derive(Debug, Clone)]
pub struct FlightBoard(Arc<Mutex<Ledger>>);

impl FlightBoard {
    pub fn new(max: usize, share: f64) -> Self {
        Self(Arc::new(Mutex::new(Ledger::new(max, share))))
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        lock(&self.0)
    }

    /// What `sub`'s delivery looks like in this replica.
    pub fn flight(&self, sub: &SubscriptionRecord) -> Flight {
        let dest = targets::destination_key(sub, &targets::destination(sub));
        self.lock().flight(sub.id, &dest, sub.limits.rate(sub.allowed_rate), Instant::now())
    }

    /// What this replica paces now, as its heartbeat publishes it for the other replicas'
    /// listings: per subscription, its attempts in flight, its destination's allowance and pause
    /// (a wall-clock instant), the rate that applies, and its breaker when not closed.
    /// A hot destination it shares (`helper_share`) carries `share`: how many attempts each
    /// other replica may have out at it.
    pub(super) fn pacing(
        &self,
        now: DateTime<Utc>,
        breakers: &super::BreakerBoard,
        replicas: usize,
    ) -> serde_json::Value {
        let flights = self.lock().pacing(Instant::now(), PACING_PUBLISHED, replicas);
        let mut not_closed: HashMap<Uuid, &'static str> = breakers.not_closed().into_iter().collect();
        let mut all: Vec<serde_json::Value> = flights
            .into_iter()
            .map(|(id, f, share)| {
                let breaker = not_closed.remove(&id).unwrap_or("closed");
                serde_json::json!({
                    "subscription": id,
                    "in_flight": f.in_flight,
                    "allowance": f.allowance,
                    "paused_until": f.paused_for.map(|d| now + chrono::Duration::from_std(d).unwrap_or_default()),
                    "rate_per_second": f.rate,
                    "breaker": breaker,
                    "share": share.filter(|_| breaker == "closed"),
                })
            })
            .collect();
        all.extend(
            not_closed
                .into_iter()
                .take(PACING_PUBLISHED)
                .map(|(id, b)| serde_json::json!({"subscription": id, "breaker": b})),
        );
        serde_json::Value::Array(all)
    }

    /// Whether this replica's delivery has made no progress for `after` (see [`Ledger::stall`]).
    pub fn stall(&self, after: Duration) -> Option<Stall> {
        self.lock().stall(Instant::now(), after)
    }
}

#[cfg(test)]
mod tests;
