//! Job states, the poison rule, and the one fair-share rule of claims.

use std::fmt;

/// Where a delivery job is in its life.
///
/// `pending` → `leased` (claimed by one worker) → `succeeded`, `dead` (dead-lettered), or back to
/// `pending` (retry, release, or an expired lease recovered). `held` while its subscription is not
/// deliverable (paused, auto-disabled, failed or pending verification), back to `pending` when it
/// is again: claims only ever see `pending` jobs, so no set of subscription states can fill a claim
/// with work that cannot be done. `cancelled` when its subscription was deleted. `dead` goes back to
/// `pending` only by an explicit redrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    Pending,
    Held,
    Leased,
    Succeeded,
    Dead,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 6] =
        [Self::Pending, Self::Held, Self::Leased, Self::Succeeded, Self::Dead, Self::Cancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Held => "held",
            Self::Leased => "leased",
            Self::Succeeded => "succeeded",
            Self::Dead => "dead",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// No attempt will ever be made again (unless a dead job is redriven).
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Dead | Self::Cancelled)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state a job waiting for an attempt is in: `pending` while its subscription is deliverable,
/// `held` while it is not.
pub fn waiting_state(deliverable: bool) -> JobState {
    if deliverable { JobState::Pending } else { JobState::Held }
}

/// Whether a job whose lease has now expired `recoveries` times (this expiry included) is poison
/// at `threshold`: dead-lettered instead of claimed again (SPEC §3.3).
pub fn is_poison(recoveries: u32, threshold: u32) -> bool {
    recoveries >= threshold
}

/// How many jobs each of `tenants` tenants (in visiting order) may give to one claim of `limit`
/// jobs: an even split, the remainder going to the first tenants visited. The shares add up to
/// `limit`; with more tenants than `limit`, the last ones visited get none this round (the
/// rotation visits them first next round).
pub fn fair_shares(limit: u32, tenants: usize) -> Vec<u32> {
    let n = u32::try_from(tenants).unwrap_or(u32::MAX);
    if n == 0 {
        return Vec::new();
    }
    (0..n).map(|i| limit / n + u32::from(i < limit % n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_finish() {
        for state in JobState::ALL {
            assert_eq!(JobState::parse(state.as_str()), Some(state));
        }
        assert_eq!(JobState::parse("Pending"), None);
        let finished: Vec<_> = JobState::ALL.into_iter().filter(|s| s.is_finished()).collect();
        assert_eq!(finished, [JobState::Succeeded, JobState::Dead, JobState::Cancelled]);
    }

    #[test]
    fn poison_at_the_threshold() {
        let cases = [(0, 5, false), (4, 5, false), (5, 5, true), (6, 5, true), (1, 1, true), (0, 0, true)];
        for (recoveries, threshold, poison) in cases {
            assert_eq!(is_poison(recoveries, threshold), poison, "{recoveries} of {threshold}");
        }
    }

    #[test]
    fn shares_split_the_limit_evenly() {
        let cases: [(u32, usize, &[u32]); 6] = [
            (16, 0, &[]),
            (16, 1, &[16]),
            (16, 3, &[6, 5, 5]),
            (16, 16, &[1; 16]),
            (3, 5, &[1, 1, 1, 0, 0]),
            (0, 2, &[0, 0]),
        ];
        for (limit, tenants, expected) in cases {
            assert_eq!(fair_shares(limit, tenants), expected, "{limit} over {tenants}");
        }
    }

    proptest::proptest! {
        #[test]
        fn shares_add_up_and_differ_by_at_most_one(limit in 0u32..10_000, tenants in 1usize..500) {
            let shares = fair_shares(limit, tenants);
            proptest::prop_assert_eq!(shares.len(), tenants);
            proptest::prop_assert_eq!(shares.iter().sum::<u32>(), limit);
            let (min, max) = (shares.iter().min().copied().unwrap_or(0), shares.iter().max().copied().unwrap_or(0));
            proptest::prop_assert!(max - min <= 1);
        }
    }
}
