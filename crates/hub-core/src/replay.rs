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

/// Which matched events a replay gives again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Selection {
    /// Those not delivered and not waiting (the default; [`decide`] with `include_delivered`
    /// false).
    #[default]
    NotDelivered,
    /// Those not waiting, delivered ones too (`include_delivered`).
    Everything,
    /// Those the subscription had and never got (`only_undelivered`): a job of it ended dead or
    /// cancelled, none succeeded and none is waiting. Events it never had are left alone.
    OnlyUndelivered,
}

impl Selection {
    /// From a replay's request flags; `None` when both are asked (they contradict each other).
    pub fn of(include_delivered: bool, only_undelivered: bool) -> Option<Self> {
        match (include_delivered, only_undelivered) {
            (false, false) => Some(Self::NotDelivered),
            (true, false) => Some(Self::Everything),
            (false, true) => Some(Self::OnlyUndelivered),
            (true, true) => None,
        }
    }
}

/// [`decide`] for a [`Selection`].
pub fn select(existing: &[Existing], selection: Selection) -> Decision {
    match selection {
        Selection::NotDelivered => decide(existing, false),
        Selection::Everything => decide(existing, true),
        Selection::OnlyUndelivered if existing.iter().any(|e| matches!(e, Existing::Job(_))) => decide(existing, false),
        Selection::OnlyUndelivered => Decision::Skip,
    }
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

/// The highest `rate` a replay may ask for, in events per second.
pub const MAX_RATE: u32 = 100_000;

/// Whether a replay may take a step now, and how many wanted events it may give in it.
///
/// `None` while the subscription already has `waiting` jobs at or above `pace` (the live path
/// keeps priority: a replay adds work only as fast as the destination takes it), and while the
/// replay's `rate` (wanted events per second) has not earned a worthwhile step since its last one,
/// `elapsed` ago: a tenth of a second's worth, or `batch` when that is less, so a paced replay
/// takes about ten steps a second rather than one per event. Otherwise what the rate earned, at
/// most `batch`: an idle replay does not save up a burst.
pub fn next_step(waiting: u64, pace: u64, batch: u32, rate: u32, elapsed: std::time::Duration) -> Option<u32> {
    if waiting >= pace {
        return None;
    }
    let batch = batch.max(1);
    let earned = (f64::from(rate) * elapsed.as_secs_f64()).floor().min(f64::from(batch));
    // In 0..=batch after the clamp: the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let earned = earned.max(0.0) as u32;
    let worthwhile = (rate / 10).clamp(1, batch);
    (earned >= worthwhile).then_some(earned)
}

/// Where a step that walked `walked` (seqs in order, at most `batch` of them) ends, given that
/// `wanted` of them are wanted and the step may give at most `allowance`: the number of wanted
/// seqs it gives and the seq the replay has walked to. The walk stops at the last wanted event it
/// gives when the allowance runs out first; it reaches `to_seq` when fewer than `batch` events
/// were left.
pub fn step_end(walked: &[i64], wanted: &[i64], allowance: u32, batch: u32, to_seq: i64) -> (usize, i64) {
    let allowance = usize::try_from(allowance).unwrap_or(usize::MAX);
    if allowance > 0 && wanted.len() > allowance {
        return (allowance, wanted[allowance - 1]);
    }
    let walked_to = match walked.last() {
        Some(last) if walked.len() >= usize::try_from(batch.max(1)).unwrap_or(usize::MAX) => *last,
        _ => to_seq,
    };
    (wanted.len(), walked_to)
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
    fn pacing_waits_for_the_destination_and_the_rate() {
        let s = |ms: u64| std::time::Duration::from_millis(ms);
        let cases: &[(u64, u32, u64, Option<u32>)] = &[
            // (waiting, rate, elapsed ms, step) with pace 100 and batch 200
            (0, 100_000, 1_000, Some(200)),
            (99, 100_000, 1_000, Some(200)),
            (100, 100_000, 1_000, None),
            (0, 500, 0, None),
            (0, 500, 99, None),
            (0, 500, 100, Some(50)),
            (0, 500, 250, Some(125)),
            (0, 500, 60_000, Some(200)),
            (0, 5, 199, None),
            (0, 5, 200, Some(1)),
            (0, 1, 999, None),
            (0, 1, 1_000, Some(1)),
            (0, 100_000, 1, None),
            (0, 100_000, 2, Some(200)),
            (0, 100_000, 0, None),
        ];
        for (waiting, rate, ms, expected) in cases {
            assert_eq!(
                next_step(*waiting, 100, 200, *rate, s(*ms)),
                *expected,
                "waiting {waiting}, rate {rate}, {ms} ms"
            );
        }
    }

    #[test]
    fn a_step_ends_where_its_allowance_or_its_batch_runs_out() {
        let walked = [3, 4, 5, 6, 7];
        // (wanted, allowance, batch) -> (given, walked_to), to_seq 20
        type Case<'a> = (&'a [i64], u32, u32, (usize, i64));
        let cases: &[Case] = &[
            (&[3, 5, 7], 10, 5, (3, 7)),
            (&[3, 5, 7], 10, 6, (3, 20)),
            (&[3, 5, 7], 2, 5, (2, 5)),
            (&[3, 5, 7], 1, 5, (1, 3)),
            (&[], 1, 5, (0, 7)),
            (&[3, 5, 7], 3, 5, (3, 7)),
        ];
        for (wanted, allowance, batch, expected) in cases {
            assert_eq!(step_end(&walked, wanted, *allowance, *batch, 20), *expected, "{wanted:?} {allowance} {batch}");
        }
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

        /// Only what was missed is a subset of what was not delivered, never something the
        /// subscription did not have, and a second pass creates nothing.
        #[test]
        fn only_undelivered_is_what_it_had_and_missed(mut has in prop::collection::vec(existing(), 0..5)) {
            if select(&has, Selection::OnlyUndelivered) == Decision::Create {
                prop_assert_eq!(select(&has, Selection::NotDelivered), Decision::Create);
                prop_assert!(has.iter().any(|e| matches!(e, Existing::Job(JobState::Dead | JobState::Cancelled))));
                has.push(Existing::Job(JobState::Pending));
                prop_assert_eq!(select(&has, Selection::OnlyUndelivered), Decision::Skip);
            }
            prop_assert_eq!(select(&[], Selection::OnlyUndelivered), Decision::Skip);
        }

        /// A replay never gives more than its rate earned, nor more than a batch, and never
        /// walks past an event it did not decide on.
        #[test]
        fn steps_keep_to_the_rate(rate in 1u32..=MAX_RATE, ms in 0u64..5_000, batch in 1u32..500, n in 0usize..600, every in 1usize..5) {
            if let Some(allowance) = next_step(0, 100, batch, rate, std::time::Duration::from_millis(ms)) {
                prop_assert!(allowance >= 1 && allowance <= batch);
                prop_assert!(f64::from(allowance) <= f64::from(rate) * (ms as f64) / 1000.0 + 1e-9);
                let walked: Vec<i64> = (1..=n.min(batch as usize)).map(|s| s as i64).collect();
                let wanted: Vec<i64> = walked.iter().copied().filter(|s| (*s as usize).is_multiple_of(every)).collect();
                let (given, walked_to) = step_end(&walked, &wanted, allowance, batch, 10_000);
                prop_assert!(given <= allowance as usize && given <= wanted.len());
                // Every wanted seq up to where the walk stopped is given; none after it.
                prop_assert!(wanted.iter().take(given).all(|s| *s <= walked_to));
                prop_assert!(wanted.iter().skip(given).all(|s| *s > walked_to));
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
