//! Replay: the rules that decide which inbox events a replay gives a subscription again.
//!
//! A replay walks a window of a tenant's inbox in seq order. An event is **matched** when it lies
//! in the window (its seq within `[from_seq, to_seq]` and its arrival within `[since, until)`) and
//! the subscription's filter wants it ([`crate::filter::wants`]: its patterns and origin, whatever
//! the subscription's state — replay is how a subscription recovers what arrived while it was not
//! taking events). A matched event is then **created** (a new job, or a new entry at the end of a
//! pull stream) or **skipped** by [`decide`]: never while the subscription still has it waiting,
//! and not when it was already delivered unless the request asks for it. Whatever runs a replay
//! twice over the same window therefore creates nothing the second time.

use chrono::{DateTime, Utc};

use crate::delivery::JobState;

/// The part of a replay request that bounds it in time (arrival at the hub). `since` is
/// inclusive, `until` exclusive; either may be open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeWindow {
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

impl TimeWindow {
    /// Whether an event received at `received_at` lies in the window.
    pub fn contains(&self, received_at: DateTime<Utc>) -> bool {
        self.since.is_none_or(|s| received_at >= s) && self.until.is_none_or(|u| received_at < u)
    }
}

/// What a subscription already has of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// A push job in this state.
    Job(JobState),
    /// A pull stream entry, already read (at or below the cursor) or not yet.
    Entry { read: bool },
}

impl Existing {
    /// It will still reach the subscription without a replay.
    fn waiting(self) -> bool {
        match self {
            Existing::Job(state) => matches!(state, JobState::Pending | JobState::Held | JobState::Leased),
            Existing::Entry { read } => !read,
        }
    }

    /// It reached the subscription.
    fn delivered(self) -> bool {
        match self {
            Existing::Job(state) => state == JobState::Succeeded,
            Existing::Entry { read } => read,
        }
    }
}

/// What a replay does with one matched event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Create,
    Skip,
}

/// Whether a replay gives the subscription this matched event again, given everything it already
/// has of it: skipped while any of it is still waiting (pending, held, leased, or unread in the
/// stream); skipped when one was delivered, unless `include_delivered`; created otherwise (never
/// had it, or only dead-lettered or cancelled jobs).
pub fn decide(existing: &[Existing], include_delivered: bool) -> Decision {
    if existing.iter().any(|e| e.waiting()) {
        return Decision::Skip;
    }
    if !include_delivered && existing.iter().any(|e| e.delivered()) {
        return Decision::Skip;
    }
    Decision::Create
}

/// A replay's progress counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Events in the window that the subscription's filter wants.
    pub matched: u64,
    /// Of those, given to the subscription again.
    pub created: u64,
    /// Of those, left alone (see [`decide`]).
    pub skipped: u64,
}

impl Progress {
    pub fn count(&mut self, decision: Decision) {
        self.matched += 1;
        match decision {
            Decision::Create => self.created += 1,
            Decision::Skip => self.skipped += 1,
        }
    }
}

/// Where a replay stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplayState {
    /// Walking its window.
    Running,
    /// Walked its whole window.
    Done,
    /// Stopped before the end: its subscription was deleted.
    Cancelled,
}

impl ReplayState {
    pub const ALL: [ReplayState; 3] = [Self::Running, Self::Done, Self::Cancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Done => "done",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// How many events past a replay's cursor it may walk now: `None` while the subscription already
/// has `waiting` jobs at or above `pace` (the live path keeps priority: a replay adds work only as
/// fast as the destination takes it), otherwise up to `batch`.
pub fn next_step(waiting: u64, pace: u64, batch: u32) -> Option<u32> {
    (waiting < pace).then_some(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().expect("time")
    }

    #[test]
    fn the_time_window_includes_since_and_excludes_until() {
        let w = TimeWindow { since: Some(t("2026-01-01T00:00:00Z")), until: Some(t("2026-01-02T00:00:00Z")) };
        assert!(w.contains(t("2026-01-01T00:00:00Z")));
        assert!(w.contains(t("2026-01-01T23:59:59.999999Z")));
        assert!(!w.contains(t("2026-01-02T00:00:00Z")));
        assert!(!w.contains(t("2025-12-31T23:59:59Z")));
        assert!(TimeWindow::default().contains(t("1999-01-01T00:00:00Z")));
    }

    #[test]
    fn decisions_by_what_the_subscription_already_has() {
        use Decision::*;
        use Existing::*;
        use JobState::*;
        let cases: &[(&[Existing], bool, Decision)] = &[
            (&[], false, Create),
            (&[Job(Pending)], false, Skip),
            (&[Job(Held)], true, Skip),
            (&[Job(Leased)], true, Skip),
            (&[Job(Succeeded)], false, Skip),
            (&[Job(Succeeded)], true, Create),
            (&[Job(Dead)], false, Create),
            (&[Job(Cancelled)], false, Create),
            (&[Job(Dead), Job(Succeeded)], false, Skip),
            (&[Job(Dead), Job(Pending)], true, Skip),
            (&[Entry { read: false }], true, Skip),
            (&[Entry { read: true }], false, Skip),
            (&[Entry { read: true }], true, Create),
        ];
        for (existing, include, expected) in cases {
            assert_eq!(decide(existing, *include), *expected, "{existing:?} include_delivered={include}");
        }
    }

    #[test]
    fn pacing_waits_for_the_destination() {
        assert_eq!(next_step(0, 100, 200), Some(200));
        assert_eq!(next_step(99, 100, 200), Some(200));
        assert_eq!(next_step(100, 100, 200), None);
    }

    fn existing() -> impl Strategy<Value = Existing> {
        prop_oneof![
            prop::sample::select(JobState::ALL.to_vec()).prop_map(Existing::Job),
            any::<bool>().prop_map(|read| Existing::Entry { read }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Replaying what a replay created creates nothing: once an event was given again, it is
        /// waiting, and a second pass skips it whatever it asks.
        #[test]
        fn a_second_pass_creates_nothing(mut has in prop::collection::vec(existing(), 0..5), include in any::<bool>()) {
            if decide(&has, include) == Decision::Create {
                has.push(Existing::Job(JobState::Pending));
                prop_assert_eq!(decide(&has, include), Decision::Skip);
                prop_assert_eq!(decide(&has, !include), Decision::Skip);
            }
        }

        /// Something still waiting is never doubled; asking for delivered ones only adds.
        #[test]
        fn waiting_wins_and_include_only_adds(has in prop::collection::vec(existing(), 0..5)) {
            if has.iter().any(|e| e.waiting()) {
                prop_assert_eq!(decide(&has, true), Decision::Skip);
            }
            if decide(&has, false) == Decision::Create {
                prop_assert_eq!(decide(&has, true), Decision::Create);
            }
        }

        #[test]
        fn counters_add_up(decisions in prop::collection::vec(any::<bool>(), 0..50)) {
            let mut p = Progress::default();
            for d in &decisions {
                p.count(if *d { Decision::Create } else { Decision::Skip });
            }
            prop_assert_eq!(p.matched, p.created + p.skipped);
            prop_assert_eq!(p.created as usize, decisions.iter().filter(|d| **d).count());
        }
    }
}
