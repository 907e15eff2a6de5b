//! Delivery decisions (SPEC §3.2–3.5), pure: the clock and the randomness are inputs.
//!
//! - [`RetryPolicy`]: the delay before each attempt (full jitter over a fixed curve), the attempt
//!   limit, and the last-attempt rule (an attempt that starts `deadline` or more after the job's
//!   window opened — the event's arrival — is its last).
//! - [`Breaker`]: one per (tenant, destination); opens after consecutive failures, lets a job's
//!   last attempt through anyway, and half-opens after a cool-down that doubles while probes fail.
//! - [`should_auto_disable`]: a failure period that is both continuous for the window and spread
//!   over at least the spread disables the subscription; any success clears the period.
//! - [`is_poison`]: a job whose lease expired without an outcome too many times.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The retry curve and the deadline rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// `curve[n - 1]` bounds the delay before attempt `n`; its length is the attempt limit.
    pub curve: Vec<Duration>,
    /// An attempt starting this long after the window opened is the job's last.
    pub deadline: Duration,
}

/// What happens to a job after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again at this time.
    Retry { due_at: DateTime<Utc> },
    /// No more attempts.
    DeadLetter(DeadReason),
}

/// Why a job was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadReason {
    /// Every attempt of the curve failed.
    Exhausted,
    /// The failed attempt started at or after the deadline.
    Deadline,
    /// Its lease expired without an outcome too many times.
    Poison,
}

impl DeadReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exhausted => "attempts exhausted",
            Self::Deadline => "retry deadline reached",
            Self::Poison => "poison: lease expired without an outcome too many times",
        }
    }
}

fn scale(d: Duration, unit: f64) -> Duration {
    Duration::from_secs_f64(d.as_secs_f64() * unit.clamp(0.0, 1.0))
}

fn add(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

impl RetryPolicy {
    pub fn max_attempts(&self) -> u32 {
        self.curve.len() as u32
    }

    /// The delay before attempt `n` (1-based): uniform in `[0, curve[n-1]]`, `unit` in `[0, 1)`.
    pub fn delay_before(&self, attempt: u32, unit: f64) -> Duration {
        let bound = self.curve.get(attempt.saturating_sub(1) as usize).copied().unwrap_or_default();
        scale(bound, unit)
    }

    /// Whether attempt `attempt` (1-based), starting at `started`, is the job's last.
    pub fn is_last(&self, attempt: u32, window_start: DateTime<Utc>, started: DateTime<Utc>) -> bool {
        attempt >= self.max_attempts() || started >= add(window_start, self.deadline)
    }

    /// Decides after attempt `attempt` failed; `unit` in `[0, 1)` draws the jitter.
    pub fn after_failure(
        &self,
        attempt: u32,
        window_start: DateTime<Utc>,
        started: DateTime<Utc>,
        now: DateTime<Utc>,
        unit: f64,
    ) -> AfterFailure {
        if attempt >= self.max_attempts() {
            return AfterFailure::DeadLetter(DeadReason::Exhausted);
        }
        if started >= add(window_start, self.deadline) {
            return AfterFailure::DeadLetter(DeadReason::Deadline);
        }
        AfterFailure::Retry { due_at: add(now, self.delay_before(attempt + 1, unit)) }
    }
}

/// A job whose lease expired `recoveries` times (this one included) is poison at `threshold`.
pub fn is_poison(recoveries: u32, threshold: u32) -> bool {
    recoveries >= threshold
}

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

/// Whether an open failure period disables the subscription: continuous for at least `window`
/// (from its first failure to now) **and** spread over at least `spread` (first to last failure).
pub fn should_auto_disable(
    first_failure: DateTime<Utc>,
    last_failure: DateTime<Utc>,
    now: DateTime<Utc>,
    window: Duration,
    spread: Duration,
) -> bool {
    now >= add(first_failure, window) && last_failure >= add(first_failure, spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(h: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + h * 3600, 0).expect("time")
    }

    fn spec_policy() -> RetryPolicy {
        RetryPolicy {
            curve: [0, 5, 300, 1800, 7200, 18_000, 36_000, 36_000].into_iter().map(Duration::from_secs).collect(),
            deadline: Duration::from_secs(24 * 3600),
        }
    }

    #[test]
    fn full_jitter_draws_between_zero_and_the_curve() {
        let p = spec_policy();
        for (attempt, bound) in [(1, 0), (2, 5), (3, 300), (4, 1800), (5, 7200), (6, 18_000), (7, 36_000), (8, 36_000)]
        {
            assert_eq!(p.delay_before(attempt, 0.0), Duration::ZERO, "attempt {attempt}");
            assert_eq!(p.delay_before(attempt, 0.5), Duration::from_secs_f64(bound as f64 / 2.0), "attempt {attempt}");
            assert!(p.delay_before(attempt, 0.999_999) <= Duration::from_secs(bound));
        }
        // A seeded sequence of draws stays within bounds and is not constant.
        let mut x: u64 = 42;
        let draws: Vec<Duration> = (0..100)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                p.delay_before(3, (x >> 11) as f64 / (1u64 << 53) as f64)
            })
            .collect();
        assert!(draws.iter().all(|d| *d <= Duration::from_secs(300)));
        assert!(
            draws.iter().any(|d| *d < Duration::from_secs(100)) && draws.iter().any(|d| *d > Duration::from_secs(200))
        );
    }

    #[test]
    fn retries_follow_the_curve_until_the_limit() {
        let p = spec_policy();
        let cases = [
            (
                "first failure retries at jitter * 5s",
                1,
                0,
                0.5,
                AfterFailure::Retry { due_at: t(0) + chrono::Duration::milliseconds(2500) },
            ),
            ("seventh failure retries", 7, 0, 0.0, AfterFailure::Retry { due_at: t(0) }),
            ("eighth failure is the end", 8, 0, 0.5, AfterFailure::DeadLetter(DeadReason::Exhausted)),
        ];
        for (case, attempt, started_h, unit, expected) in cases {
            assert_eq!(p.after_failure(attempt, t(0), t(started_h), t(started_h), unit), expected, "{case}");
        }
    }

    #[test]
    fn an_attempt_starting_24h_after_arrival_is_the_last() {
        let p = spec_policy();
        assert!(!p.is_last(3, t(0), t(23)));
        assert!(p.is_last(3, t(0), t(24)));
        assert!(p.is_last(8, t(0), t(1)));
        assert_eq!(p.after_failure(3, t(0), t(24), t(24), 0.5), AfterFailure::DeadLetter(DeadReason::Deadline));
        // Started just before the deadline: one more attempt is scheduled, and that one is the last.
        assert!(matches!(p.after_failure(3, t(0), t(23), t(23), 0.5), AfterFailure::Retry { .. }));
    }

    #[test]
    fn a_short_curve_from_configuration() {
        let p =
            RetryPolicy { curve: vec![Duration::ZERO, Duration::from_millis(10)], deadline: Duration::from_secs(60) };
        assert_eq!(p.max_attempts(), 2);
        assert!(matches!(p.after_failure(1, t(0), t(0), t(0), 0.9), AfterFailure::Retry { .. }));
        assert_eq!(p.after_failure(2, t(0), t(0), t(0), 0.9), AfterFailure::DeadLetter(DeadReason::Exhausted));
    }

    #[test]
    fn poison_at_the_threshold() {
        assert!(!is_poison(4, 5));
        assert!(is_poison(5, 5));
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

    #[test]
    fn auto_disable_needs_both_continuity_and_spread() {
        let (w, s) = (Duration::from_secs(120 * 3600), Duration::from_secs(12 * 3600));
        let cases = [
            ("too recent", 0, 100, 100, false),
            ("long but not spread", 0, 11, 130, false),
            ("spread but not long", 0, 13, 119, false),
            ("both", 0, 13, 120, true),
            ("both, well past", 0, 119, 200, true),
        ];
        for (case, first, last, now, expected) in cases {
            assert_eq!(should_auto_disable(t(first), t(last), t(now), w, s), expected, "{case}");
        }
    }
}
