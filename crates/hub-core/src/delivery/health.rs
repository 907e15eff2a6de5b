//! Auto-disable (SPEC §3.5): when an open failure period disables a subscription.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::add;

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
