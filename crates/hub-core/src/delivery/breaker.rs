//! The circuit breaker (SPEC §3.4): one per (tenant, destination).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::add;

/// Breaker settings (SPEC §3.4 decision: 5 failures, 30 s doubling to 10 min).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    pub failure_threshold: u32,
    pub cooldown: Duration,
    pub max_cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self { failure_threshold: 5, cooldown: Duration::from_secs(30), max_cooldown: Duration::from_secs(600) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BreakerState {
    Closed { failures: u32 },
    Open { until: DateTime<Utc>, cooldown: Duration },
    HalfOpen { cooldown: Duration },
}

/// What the breaker lets a job do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// Make the attempt.
    Attempt,
    /// Make the attempt as the half-open probe.
    Probe,
    /// Do not attempt; wait until then without spending an attempt.
    Wait { until: DateTime<Utc> },
}

/// A circuit breaker for one (tenant, destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breaker {
    config: BreakerConfig,
    state: BreakerState,
}

/// A change of breaker state worth counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Opened,
    HalfOpened,
    Closed,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Self {
        Self { config, state: BreakerState::Closed { failures: 0 } }
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.state, BreakerState::Closed { .. })
    }

    pub fn is_open(&self) -> bool {
        matches!(self.state, BreakerState::Open { .. })
    }

    pub fn is_half_open(&self) -> bool {
        matches!(self.state, BreakerState::HalfOpen { .. })
    }

    /// Asks to attempt now; `last_attempt` is true for a job's last attempt, which always runs.
    pub fn permit(&mut self, now: DateTime<Utc>, last_attempt: bool) -> (Permit, Option<Transition>) {
        match self.state {
            BreakerState::Closed { .. } => (Permit::Attempt, None),
            BreakerState::Open { until, cooldown } if now >= until => {
                self.state = BreakerState::HalfOpen { cooldown };
                (Permit::Probe, Some(Transition::HalfOpened))
            }
            BreakerState::Open { until, .. } => {
                if last_attempt {
                    (Permit::Attempt, None)
                } else {
                    (Permit::Wait { until }, None)
                }
            }
            // One probe is in flight: others wait a moment for its outcome.
            BreakerState::HalfOpen { .. } => {
                if last_attempt {
                    (Permit::Attempt, None)
                } else {
                    (Permit::Wait { until: add(now, Duration::from_secs(1)) }, None)
                }
            }
        }
    }

    pub fn on_success(&mut self) -> Option<Transition> {
        let was_closed = self.is_closed();
        self.state = BreakerState::Closed { failures: 0 };
        (!was_closed).then_some(Transition::Closed)
    }

    /// An attempt that never reached the destination (its transform skipped the event or
    /// failed): a probe that was not made gives its turn to the next job at once.
    pub fn on_untried(&mut self, now: DateTime<Utc>) {
        if let BreakerState::HalfOpen { cooldown } = self.state {
            self.state = BreakerState::Open { until: now, cooldown };
        }
    }

    pub fn on_failure(&mut self, now: DateTime<Utc>) -> Option<Transition> {
        match self.state {
            BreakerState::Closed { failures } => {
                let failures = failures + 1;
                if failures >= self.config.failure_threshold {
                    let cooldown = self.config.cooldown;
                    self.state = BreakerState::Open { until: add(now, cooldown), cooldown };
                    Some(Transition::Opened)
                } else {
                    self.state = BreakerState::Closed { failures };
                    None
                }
            }
            BreakerState::HalfOpen { cooldown } => {
                let cooldown = (cooldown * 2).min(self.config.max_cooldown);
                self.state = BreakerState::Open { until: add(now, cooldown), cooldown };
                Some(Transition::Opened)
            }
            // A last attempt that failed while open changes nothing.
            BreakerState::Open { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(h: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + h * 3600, 0).expect("time")
    }

    #[test]
    fn the_breaker_opens_lets_the_last_attempt_through_and_recovers() {
        let mut b = Breaker::new(BreakerConfig::default());
        let now = t(0);
        for _ in 0..4 {
            assert_eq!(b.on_failure(now), None);
            assert_eq!(b.permit(now, false).0, Permit::Attempt);
        }
        assert_eq!(b.on_failure(now), Some(Transition::Opened));
        let open_until = now + chrono::Duration::seconds(30);
        assert_eq!(b.permit(now, false).0, Permit::Wait { until: open_until });
        assert_eq!(b.permit(now, true).0, Permit::Attempt, "a job's last attempt still runs");
        assert_eq!(b.on_failure(now), None, "a failing last attempt does not extend the cool-down");

        // Cool-down over: one probe; its failure doubles the cool-down.
        assert_eq!(b.permit(open_until, false), (Permit::Probe, Some(Transition::HalfOpened)));
        assert!(matches!(b.permit(open_until, false).0, Permit::Wait { .. }), "one probe at a time");
        assert_eq!(b.on_failure(open_until), Some(Transition::Opened));
        let reopened_until = open_until + chrono::Duration::seconds(60);
        assert_eq!(b.permit(open_until, false).0, Permit::Wait { until: reopened_until });

        // A probe that never reached the destination (its transform skipped the event) hands
        // the probe on at once, the cool-down as it was.
        assert_eq!(b.permit(reopened_until, false).0, Permit::Probe);
        b.on_untried(reopened_until);
        assert_eq!(b.permit(reopened_until, false), (Permit::Probe, Some(Transition::HalfOpened)));
        b.on_untried(reopened_until);
        // An attempt not tried while closed changes nothing.
        let mut closed = Breaker::new(BreakerConfig::default());
        closed.on_untried(now);
        assert!(closed.is_closed());

        // The next probe succeeds: closed, attempts flow.
        assert_eq!(b.permit(reopened_until, false).0, Permit::Probe);
        assert_eq!(b.on_success(), Some(Transition::Closed));
        assert_eq!(b.permit(reopened_until, false).0, Permit::Attempt);
    }

    #[test]
    fn the_cool_down_is_capped() {
        let mut b = Breaker::new(BreakerConfig { failure_threshold: 1, ..BreakerConfig::default() });
        let mut now = t(0);
        b.on_failure(now);
        for _ in 0..10 {
            now += chrono::Duration::hours(1);
            assert_eq!(b.permit(now, false).0, Permit::Probe);
            b.on_failure(now);
        }
        assert_eq!(b.permit(now, false).0, Permit::Wait { until: now + chrono::Duration::seconds(600) });
    }
}
