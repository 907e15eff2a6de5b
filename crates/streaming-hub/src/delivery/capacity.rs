//! The per-destination share of workers: how many jobs a destination has in flight and parked,
//! which subscriptions are saturated (left out of claims and ingest leases), and the ready queue's size.

use super::*;

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

    /// Takes a worker slot on the destination, unless it already has its share.
    pub(super) fn enter(&self, sub: Uuid, dest: &str) -> bool {
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

    pub(super) fn leave(&self, dest: &str) {
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
}
