//! The retry curve with full jitter and the last-attempt rule (SPEC §3.2).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::add;

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
    /// The attempt failed in a way no retry can change.
    Permanent,
}

impl DeadReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exhausted => "attempts exhausted",
            Self::Deadline => "retry deadline reached",
            Self::Poison => "poison: lease expired without an outcome too many times",
            Self::Permanent => "permanent failure",
        }
    }
}

fn scale(d: Duration, unit: f64) -> Duration {
    Duration::from_secs_f64(d.as_secs_f64() * unit.clamp(0.0, 1.0))
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
}
