//! The per-destination share of workers: how many jobs a destination has in flight and parked,
//! which subscriptions are saturated (left out of claims and ingest leases), and the ready queue's size.
//!
//! The share is work-conserving: a destination holds at most half the workers while another
//! could use them, and may borrow idle ones beyond that while its attempts are quick; see
//! [`Dispatcher::enter`].

use super::*;

/// Idle destinations whose recent attempt time is kept, at most.
const LATENCIES_KEPT: usize = 4096;

impl Dispatcher {
    /// The ready queue's slots: [`READY_ROUNDS`] times what every claimer claims at once, the
    /// room beyond one round going to the jobs this process's ingest leases as it writes them
    /// (under a burst most of them, which then need no claim: one row version and one statement
    /// fewer each).
    pub(super) fn ready_slots(&self) -> usize {
        READY_ROUNDS * CLAIMERS * self.settings.claim_batch.max(1) as usize
    }

    /// How many claimed jobs may wait in the process for one destination: what every claimer
    /// could have claimed for it at once, so a claim rarely has to send a job back.
    pub(super) fn park_limit(&self) -> usize {
        CLAIMERS * self.settings.claim_batch.max(1) as usize
    }

    /// Subscriptions not to claim for now: their destination has its share of workers and a
    /// full set of jobs already waiting for them.
    pub(super) fn saturated_subscriptions(&self) -> Vec<Uuid> {
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
    pub(super) fn set_parked(&self, dest: &str, n: usize) {
        let limit = self.park_limit();
        let was = {
            let mut d = lock(&self.destinations);
            if n == 0 { d.parked.remove(dest) } else { d.parked.insert(dest.to_owned(), n) }
        };
        if was.unwrap_or(0) >= limit && n < limit {
            self.wake.notify_one();
        }
    }

    /// Takes a worker slot on the destination (see [`Destinations::enter`]).
    pub(super) fn enter(&self, sub: Uuid, dest: &str, free: usize) -> bool {
        let (entered, borrowed) = lock(&self.destinations).enter(&self.settings, sub, dest, free);
        if borrowed {
            metrics::counter!(metric::WORKERS_BORROWED).increment(1);
        }
        entered
    }

    /// Gives the destination's slot back (see [`Destinations::leave`]).
    pub(super) fn leave(&self, dest: &str, took: Option<Duration>) {
        lock(&self.destinations).leave(dest, took);
    }
}

impl Destinations {
    /// Takes a worker slot on the destination, with `free` workers idle now: within its share
    /// always; beyond it (borrowing) only while that leaves [`Settings::reserve`] workers idle for
    /// any other destination and this one's attempts are known to be quick
    /// ([`BORROW_LATENCY`]), so what it borrows comes back within milliseconds. A slow
    /// destination, or one not yet measured, never holds more than its share. Answers whether
    /// it entered, and whether on a borrowed worker.
    pub(super) fn enter(&mut self, settings: &Settings, sub: Uuid, dest: &str, free: usize) -> (bool, bool) {
        let cap = settings.per_destination_cap();
        self.of_subscription.insert(sub, dest.to_owned());
        let quick = self.latency.get(dest).is_some_and(|l| *l <= BORROW_LATENCY);
        let n = self.in_flight.entry(dest.to_owned()).or_insert(0);
        let borrowed = *n >= cap;
        if borrowed && !(quick && free > settings.reserve() && *n < settings.workers as usize) {
            return (false, false);
        }
        *n += 1;
        (true, borrowed)
    }

    /// Gives the destination's slot back; `took` is how long the attempt held it (none for a job
    /// that was not attempted), folded into the destination's recent attempt time.
    pub(super) fn leave(&mut self, dest: &str, took: Option<Duration>) {
        if let Some(took) = took {
            match self.latency.get_mut(dest) {
                Some(recent) => *recent = (*recent * 3 + took) / 4,
                None => {
                    self.latency.insert(dest.to_owned(), took);
                }
            }
        }
        let idle = match self.in_flight.get_mut(dest) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n == 0
            }
            None => false,
        };
        // An idle destination needs no bookkeeping: the maps hold only destinations at work, so
        // they stay as small as the work in flight however many destinations tenants create.
        if idle && !self.parked.contains_key(dest) {
            self.in_flight.remove(dest);
            self.of_subscription.retain(|_, of| of != dest);
            // Recent attempt times outlive a pause in a destination's work (its next burst may
            // borrow at once), but not without bound: past the limit only those at work stay.
            if self.latency.len() > LATENCIES_KEPT {
                let Destinations { latency, in_flight, .. } = self;
                latency.retain(|dest, _| in_flight.contains_key(dest));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn settings(workers: u32) -> Settings {
        Settings {
            workers,
            claim_batch: 8,
            idle_interval: Duration::from_millis(100),
            lease: Duration::from_secs(30),
            poison_threshold: 3,
            retry: hub_core::delivery::RetryPolicy {
                curve: vec![Duration::from_secs(1)],
                deadline: Duration::from_secs(60),
            },
            breaker: BreakerConfig::default(),
            auto_disable: None,
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        /// A job of destination `d` arrives.
        Arrive(usize),
        /// The `i`-th attempt in flight ends after this many ms.
        End(usize, u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0..4usize).prop_map(Step::Arrive),
            2 => (0..64usize, prop_oneof![Just(1u64), Just(20), Just(49), Just(51), Just(2_000)])
                .prop_map(|(i, ms)| Step::End(i, ms)),
        ]
    }

    proptest! {
        /// Replays arrivals and attempt ends through the rule as the dispatcher's loop does (a
        /// job that does not enter is parked and retried when one of its destination's attempts
        /// ends). Whatever the order: the pool is never overdrawn; a destination beyond its share
        /// is one whose recent attempts average at most 50 ms, and its entry left the reserve
        /// idle; a destination never measured never passes its share.
        #[test]
        fn borrowing_keeps_the_pool_the_reserve_and_slow_destinations_at_half(
            workers in 1u32..17,
            steps in proptest::collection::vec(step(), 1..200),
        ) {
            let s = settings(workers);
            let mut d = Destinations::default();
            let mut running: Vec<(usize, u64)> = Vec::new();
            let mut parked = [0usize; 4];
            let mut measured = [false; 4];
            let dest = |i: usize| format!("https://d{i}.example");
            let try_enter = |d: &mut Destinations, running: &mut Vec<(usize, u64)>, i: usize, measured: &[bool; 4]| {
                let free = workers as usize - running.len();
                let before = d.in_flight.get(&dest(i)).copied().unwrap_or(0);
                let (entered, borrowed) = d.enter(&s, Uuid::nil(), &dest(i), free);
                if entered {
                    prop_assert!(free > 0, "entered with no idle worker");
                    if borrowed {
                        prop_assert!(measured[i], "an unmeasured destination borrowed");
                        prop_assert!(d.latency[&dest(i)] <= BORROW_LATENCY);
                        prop_assert!(free > s.reserve(), "a borrow took the reserve");
                        prop_assert!(before >= s.per_destination_cap());
                    }
                    running.push((i, 0));
                }
                Ok(entered)
            };
            for st in steps {
                match st {
                    Step::Arrive(i) => {
                        if running.len() == workers as usize || !try_enter(&mut d, &mut running, i, &measured)? {
                            parked[i] += 1;
                        }
                    }
                    Step::End(k, ms) => {
                        if running.is_empty() { continue; }
                        let (i, _) = running.remove(k % running.len());
                        d.leave(&dest(i), Some(Duration::from_millis(ms)));
                        measured[i] = true;
                        if parked[i] > 0 && running.len() < workers as usize && try_enter(&mut d, &mut running, i, &measured)? {
                            parked[i] -= 1;
                        }
                    }
                }
                prop_assert!(running.len() <= workers as usize);
                for i in 0..4 {
                    let n = running.iter().filter(|(j, _)| *j == i).count();
                    prop_assert_eq!(d.in_flight.get(&dest(i)).copied().unwrap_or(0), n);
                    if !measured[i] {
                        prop_assert!(n <= s.per_destination_cap(), "an unmeasured destination past its share");
                    }
                }
            }
        }
    }

    #[test]
    fn a_slow_attempt_ends_the_borrowing() {
        let s = settings(8);
        let mut d = Destinations::default();
        let a = "https://a.example";
        for i in 0..4 {
            assert_eq!(d.enter(&s, Uuid::nil(), a, 8 - i), (true, false), "not measured: its share only");
        }
        assert_eq!(d.enter(&s, Uuid::nil(), a, 4), (false, false), "not measured: no borrowing");
        d.leave(a, Some(Duration::from_millis(2)));
        assert_eq!(d.enter(&s, Uuid::nil(), a, 5), (true, false), "back to its share");
        assert_eq!(d.enter(&s, Uuid::nil(), a, 4), (true, true), "quick: borrows");
        assert_eq!(d.enter(&s, Uuid::nil(), a, 1), (false, false), "never the reserve");
        d.leave(a, Some(Duration::from_millis(2_000)));
        assert_eq!(d.enter(&s, Uuid::nil(), a, 4), (false, false), "one 2 s attempt: no more borrowing");
    }
}
