//! Settling one attempt: from what happened to what the job and its subscription become.
//!
//! [`settle`] is the one place that turns a classified outcome into a job transition and a
//! health change, with the reasons an operator reads. It is pure: the time, the subscription's
//! failure period and the jitter draw are inputs, so every rule is a row of a table test.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{AfterFailure, DeadReason, RetryPolicy, should_auto_disable};

/// What one attempt's outcome was, as far as the lifecycle cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeClass<'a> {
    /// The destination acknowledged the event.
    Delivered,
    /// The subscription's transform skipped the event (SPEC §10): the job ends without a
    /// delivery, and the destination, never reached, is neither healthier nor failing.
    Skipped,
    /// The job ends without an attempt (its event was erased): the destination, never reached,
    /// is neither healthier nor failing, and nothing is dead-lettered.
    Cancelled { reason: &'a str },
    /// It failed in a way another attempt may not (a status, a timeout, a refused connection).
    /// `reason` goes with the job (erasure reaches it); `standing` is what may outlive the event,
    /// in the subscription's disabled reason.
    Retryable { reason: &'a str, standing: &'a str },
    /// It failed in a way no later attempt can change (the destination is not allowed, the
    /// event is no longer stored): the job is dead-lettered at once, without spending the curve.
    Permanent { reason: &'a str, standing: &'a str },
}

/// The facts of one attempt when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptFacts {
    /// 1-based.
    pub attempt: u32,
    /// When the job's retry window opened (the event's arrival, or its redrive).
    pub window_start: DateTime<Utc>,
    /// When the attempt started.
    pub started: DateTime<Utc>,
    /// When it ended.
    pub now: DateTime<Utc>,
    /// The first failure of the subscription's open failure period, if one is open.
    pub failing_since: Option<DateTime<Utc>>,
}

/// Auto-disable settings (SPEC §3.5), when it is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoDisable {
    pub window: Duration,
    pub spread: Duration,
}

/// What an attempt does to its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobTransition {
    Succeeded,
    Retry {
        due_at: DateTime<Utc>,
    },
    Dead {
        why: DeadReason,
        reason: String,
    },
    /// Ended without a delivery, for this reason.
    Cancelled {
        reason: String,
    },
}

/// What an attempt does to its subscription's failure period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthChange {
    /// Clears the failure period.
    Success,
    /// Opens or extends it; with `disable`, also disables the subscription with that reason.
    Failure { at: DateTime<Utc>, disable: Option<String> },
    /// Leaves it as it is (the destination was not reached).
    Unchanged,
}

/// The decision for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub transition: JobTransition,
    pub health: HealthChange,
}

/// Decides what one attempt does to its job and its subscription. `jitter` in `[0, 1)` draws
/// the retry delay (full jitter).
pub fn settle(
    facts: &AttemptFacts,
    outcome: OutcomeClass<'_>,
    retry: &RetryPolicy,
    auto_disable: Option<AutoDisable>,
    jitter: f64,
) -> Settlement {
    let (reason, standing, retryable) = match outcome {
        OutcomeClass::Delivered => {
            return Settlement { transition: JobTransition::Succeeded, health: HealthChange::Success };
        }
        OutcomeClass::Skipped => {
            return Settlement { transition: JobTransition::Succeeded, health: HealthChange::Unchanged };
        }
        OutcomeClass::Cancelled { reason } => {
            let transition = JobTransition::Cancelled { reason: reason.to_owned() };
            return Settlement { transition, health: HealthChange::Unchanged };
        }
        OutcomeClass::Retryable { reason, standing } => (reason, standing, true),
        OutcomeClass::Permanent { reason, standing } => (reason, standing, false),
    };
    let after = if retryable {
        retry.after_failure(facts.attempt, facts.window_start, facts.started, facts.now, jitter)
    } else {
        AfterFailure::DeadLetter(DeadReason::Permanent)
    };
    let transition = match after {
        AfterFailure::Retry { due_at } => JobTransition::Retry { due_at },
        AfterFailure::DeadLetter(why) => {
            JobTransition::Dead { why, reason: format!("{}: last error: {reason}", why.as_str()) }
        }
    };
    let first = facts.failing_since.unwrap_or(facts.now);
    let disable =
        auto_disable.filter(|a| should_auto_disable(first, facts.now, facts.now, a.window, a.spread)).map(|_| {
            format!(
                "auto-disabled: deliveries failing continuously since {} (last error: {standing})",
                first.to_rfc3339()
            )
        });
    Settlement { transition, health: HealthChange::Failure { at: facts.now, disable } }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + minutes * 60, 0).expect("time")
    }

    fn h(hours: i64) -> i64 {
        hours * 60
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            curve: [0, 5, 300, 1800, 7200, 18_000, 36_000, 36_000].into_iter().map(Duration::from_secs).collect(),
            deadline: Duration::from_secs(24 * 3600),
        }
    }

    const AUTO: AutoDisable =
        AutoDisable { window: Duration::from_secs(120 * 3600), spread: Duration::from_secs(12 * 3600) };

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Job {
        Succeeded,
        RetryAfterSecs(i64),
        Dead(DeadReason),
        Cancelled,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Health {
        Unchanged,
        Cleared,
        Failing,
        Disabled,
    }

    #[test]
    fn settle_table() {
        let refused = OutcomeClass::Retryable { reason: "HTTP 503", standing: "HTTP 503" };
        let permanent = OutcomeClass::Permanent {
            reason: "the event is no longer stored",
            standing: "the event is no longer stored",
        };
        // (case, attempt, window start, started, now, failing since, outcome, auto-disable, jitter, job, health)
        use Health::*;
        // (case, attempt, window start, started, now, failing since, outcome, auto-disable on,
        //  jitter, job, health); times in minutes
        #[rustfmt::skip]
        #[allow(clippy::type_complexity)]
        let cases: [(&str, u32, i64, i64, i64, Option<i64>, OutcomeClass<'_>, bool, f64, Job, Health); 13] = [
            ("delivered", 1, 0, 0, 0, None, OutcomeClass::Delivered, true, 0.5, Job::Succeeded, Cleared),
            ("skipped by the transform: done, the failure period as it was", 3, 0, h(10), h(10), Some(-h(200)), OutcomeClass::Skipped, true, 0.5, Job::Succeeded, Unchanged),
            ("delivered after a long failure period clears it", 5, 0, h(10), h(10), Some(-h(200)), OutcomeClass::Delivered, true, 0.5, Job::Succeeded, Cleared),
            ("first failure: attempt 2 within 5 s", 1, 0, 0, 0, None, refused, true, 0.5, Job::RetryAfterSecs(2), Failing),
            ("third failure: attempt 4 within 30 min", 3, 0, 1, 1, Some(0), refused, true, 1.0, Job::RetryAfterSecs(1800), Failing),
            ("eighth failure exhausts the curve", 8, 0, h(20), h(20), Some(0), refused, true, 0.5, Job::Dead(DeadReason::Exhausted), Failing),
            ("a failure starting 24 h after arrival is the last", 3, 0, h(24), h(24), Some(0), refused, true, 0.5, Job::Dead(DeadReason::Deadline), Failing),
            ("a permanent failure dead-letters at once", 1, 0, 0, 0, None, permanent, true, 0.5, Job::Dead(DeadReason::Permanent), Failing),
            ("120 h continuous and 12 h spread disables", 2, 0, h(1), h(1), Some(-h(121)), refused, true, 0.0, Job::RetryAfterSecs(0), Disabled),
            ("120 h continuous with auto-disable off", 2, 0, h(1), h(1), Some(-h(121)), refused, false, 0.0, Job::RetryAfterSecs(0), Failing),
            ("long but not yet 120 h", 2, 0, h(1), h(1), Some(-h(118)), refused, true, 0.0, Job::RetryAfterSecs(0), Failing),
            ("a permanent failure also counts toward auto-disable", 1, 0, 0, 0, Some(-h(130)), permanent, true, 0.0, Job::Dead(DeadReason::Permanent), Disabled),
            ("an erased event's job ends cancelled, the failure period as it was", 8, 0, h(30), h(30), Some(-h(130)), OutcomeClass::Cancelled { reason: "erased" }, true, 0.0, Job::Cancelled, Unchanged),
        ];
        for (case, attempt, window, started, now, failing, outcome, auto, jitter, job, health) in cases {
            let facts = AttemptFacts {
                attempt,
                window_start: t(window),
                started: t(started),
                now: t(now),
                failing_since: failing.map(t),
            };
            let s = settle(&facts, outcome, &policy(), auto.then_some(AUTO), jitter);
            let got_job = match &s.transition {
                JobTransition::Succeeded => Job::Succeeded,
                JobTransition::Retry { due_at } => Job::RetryAfterSecs((*due_at - t(now)).num_seconds()),
                JobTransition::Dead { why, reason } => {
                    assert!(reason.starts_with(why.as_str()), "{case}: {reason}");
                    Job::Dead(*why)
                }
                JobTransition::Cancelled { reason } => {
                    assert_eq!(reason, "erased", "{case}");
                    Job::Cancelled
                }
            };
            assert_eq!(got_job, job, "{case}");
            let got_health = match &s.health {
                HealthChange::Success => Cleared,
                HealthChange::Unchanged => Unchanged,
                HealthChange::Failure { at, disable: None } => {
                    assert_eq!(*at, t(now), "{case}");
                    Failing
                }
                HealthChange::Failure { disable: Some(reason), .. } => {
                    assert!(reason.starts_with("auto-disabled"), "{case}: {reason}");
                    Disabled
                }
            };
            assert_eq!(got_health, health, "{case}");
        }
    }

    /// The job's reason goes with the job (erasure reaches it); the disabled reason, which
    /// outlives every event, gets the standing one.
    #[test]
    fn a_disabled_reason_holds_the_standing_reason_only() {
        let facts =
            AttemptFacts { attempt: 2, window_start: t(0), started: t(1), now: t(h(130)), failing_since: Some(t(0)) };
        let auto = Some(AutoDisable { window: Duration::from_secs(120 * 3600), spread: Duration::ZERO });
        let outcome = OutcomeClass::Permanent { reason: "threw: cpf 123", standing: "the transform failed" };
        let s = settle(&facts, outcome, &policy(), auto, 0.5);
        assert!(matches!(&s.transition, JobTransition::Dead { reason, .. } if reason.contains("cpf 123")), "{s:?}");
        match &s.health {
            HealthChange::Failure { disable: Some(why), .. } => {
                assert!(why.contains("the transform failed") && !why.contains("cpf"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reasons_name_the_last_error() {
        let facts =
            AttemptFacts { attempt: 8, window_start: t(0), started: t(1), now: t(1), failing_since: Some(t(0)) };
        let s =
            settle(&facts, OutcomeClass::Retryable { reason: "HTTP 500", standing: "HTTP 500" }, &policy(), None, 0.5);
        assert_eq!(
            s.transition,
            JobTransition::Dead {
                why: DeadReason::Exhausted,
                reason: "attempts exhausted: last error: HTTP 500".into()
            }
        );
    }

    proptest::proptest! {
        /// Whatever the draw, a retry is due no earlier than now and no later than the curve's
        /// bound for the next attempt; and a retry is only ever scheduled before the limit.
        #[test]
        fn retries_stay_within_the_curve(attempt in 1u32..=8, started in 0i64..h(30), jitter in 0.0f64..1.0) {
            let facts = AttemptFacts { attempt, window_start: t(0), started: t(started), now: t(started), failing_since: None };
            let s = settle(&facts, OutcomeClass::Retryable { reason: "x", standing: "x" }, &policy(), None, jitter);
            match s.transition {
                JobTransition::Retry { due_at } => {
                    proptest::prop_assert!(attempt < 8 && started < h(24));
                    let bound = policy().curve[attempt as usize];
                    proptest::prop_assert!(due_at >= t(started));
                    proptest::prop_assert!(due_at <= t(started) + chrono::Duration::from_std(bound).expect("bound"));
                }
                JobTransition::Dead { .. } => proptest::prop_assert!(attempt == 8 || started >= h(24)),
                JobTransition::Succeeded | JobTransition::Cancelled { .. } => {
                    proptest::prop_assert!(false, "a failure never succeeds nor is cancelled")
                }
            }
        }
    }
}
