//! The work one evaluation of a subscription's filters may do (SPEC §10, "Filter budget"),
//! counted in steps, not wall time: a step is one unit of the evaluators' inner work (a node of an
//! expression, a position a wildcard pattern tries, 64 bytes a function reads or builds, a
//! value a content pattern compares). [`measured`] runs an evaluation under a budget; the
//! evaluators [`spend`] as they go and, once the budget is gone, answer "no match" at once. The
//! meter is the evaluating thread's own (a filter is evaluated on one thread from start to end),
//! so the evaluators' signatures stay those of pure functions; without a budget running, nothing
//! is counted.
//!
//! A budget also bounds what a function may build: a string of more than [`MAX_BUILT`] bytes is
//! an evaluation error, whatever steps are left.

use std::cell::Cell;

/// Steps in one millisecond of evaluation on one core of the reference machine: what
/// `STREAMING_HUB_FILTER_BUDGET` is converted with. A step measured 8–12 ns in a release build
/// on two cores (`routing::meter::tests::a_step_is_a_few_nanoseconds`, `--release --nocapture`),
/// so 100 000 steps are about a millisecond, rounded toward less work.
pub const STEPS_PER_MS: u64 = 100_000;

/// The longest string a function may build (`CONCAT`, `LOWER`, …), in bytes.
pub const MAX_BUILT: usize = 1 << 20;

/// Bytes one step reads or builds.
pub const BYTES_PER_STEP: usize = 64;

thread_local! {
    /// Steps left for the evaluation running on this thread; `None` when none is measured.
    static LEFT: Cell<Option<u64>> = const { Cell::new(None) };
    static EXHAUSTED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `evaluate` with `steps` to spend; answers its value and whether the budget ran out (then
/// the value is whatever the evaluators answered once it had: a non-match).
pub fn measured<T>(steps: u64, evaluate: impl FnOnce() -> T) -> (T, bool) {
    let outer = (LEFT.get(), EXHAUSTED.get());
    LEFT.set(Some(steps));
    EXHAUSTED.set(false);
    let value = evaluate();
    let exhausted = EXHAUSTED.get();
    LEFT.set(outer.0);
    EXHAUSTED.set(outer.1);
    (value, exhausted)
}

/// Spends `n` steps; false once the budget is gone (and for every call after, in this
/// evaluation). Always true when no budget runs.
pub fn spend(n: u64) -> bool {
    match LEFT.get() {
        None => true,
        Some(left) if !EXHAUSTED.get() && left >= n => {
            LEFT.set(Some(left - n));
            true
        }
        Some(_) => {
            EXHAUSTED.set(true);
            LEFT.set(Some(0));
            false
        }
    }
}

/// Spends the steps of reading or building `bytes` bytes.
pub fn spend_bytes(bytes: usize) -> bool {
    spend(1 + (bytes / BYTES_PER_STEP) as u64)
}

/// Steps left to the running evaluation (`None` when none is measured).
pub fn left() -> Option<u64> {
    LEFT.get()
}

/// Whether the running evaluation's budget is gone.
pub fn exhausted() -> bool {
    EXHAUSTED.get()
}

/// The steps a budget of `budget` grants.
pub fn steps_for(budget: std::time::Duration) -> u64 {
    let micros = u64::try_from(budget.as_micros()).unwrap_or(u64::MAX);
    micros.saturating_mul(STEPS_PER_MS) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_runs_out_and_stays_out() {
        let ((), out) = measured(10, || {
            assert!(spend(4));
            assert!(spend(6));
            assert!(!spend(1));
            assert!(!spend(0), "once out, out");
            assert!(exhausted());
        });
        assert!(out);
        assert!(spend(1_000_000), "no budget outside a measured evaluation");
        let ((), out) = measured(10, || assert!(spend(10)));
        assert!(!out);
        // Nested: the inner budget is its own, the outer one resumes.
        let ((), out) = measured(5, || {
            let ((), inner) = measured(1, || assert!(!spend(2)));
            assert!(inner);
            assert!(spend(5));
        });
        assert!(!out);
        assert_eq!(steps_for(std::time::Duration::from_millis(1)), STEPS_PER_MS);
    }

    use proptest::prelude::*;
    use serde_json::{Value as Json, json};

    use super::super::{Filters, JsonEvent};

    const ONE_MS: u64 = STEPS_PER_MS;

    fn event(subject: &str, data: Json) -> Json {
        json!({"specversion": "1.0", "id": "e1", "source": "lender", "type": "t", "subject": subject, "data": data})
    }

    fn within(filters: Json, event: &Json, steps: u64) -> (bool, bool) {
        let f = Filters::compile(&filters).unwrap_or_else(|e| panic!("{filters}: {e}"));
        let view = JsonEvent::new(event.as_object().expect("object"));
        let b = f.matches_within(&view, steps);
        (b.matches, b.exhausted)
    }

    /// The review's attacks, each within a budget of 1 ms: they run out of it (no match) instead
    /// of running for seconds or building hundreds of megabytes.
    #[test]
    fn the_reviews_attacks_run_out_of_their_budget() {
        let subject = "a".repeat(1_900_000);
        let e = event(&subject, json!({"s": "a".repeat(1_000_000)}));
        let like = format!("subject LIKE '%{}b'", "a".repeat(4_000));
        assert_eq!(within(json!([{"sql": like}]), &e, ONE_MS), (false, true));
        let concat = format!("LENGTH(CONCAT({})) > 0", vec!["subject"; 450].join(", "));
        // A result over the size bound is an error (no match) before anything is built.
        assert!(!within(json!([{"sql": concat}]), &e, ONE_MS).0);
        let wild = format!("*{}b*", "a".repeat(1_020));
        let four =
            json!([{"data": {"s": [{"wildcard": wild}, {"wildcard": wild}, {"wildcard": wild}, {"wildcard": wild}]}}]);
        assert_eq!(within(four, &e, ONE_MS), (false, true));
        // The same filters over a small event match or not as written, well inside the budget.
        let small = event("loan-7", json!({"s": "xaab"}));
        assert_eq!(within(json!([{"sql": "subject LIKE 'loan-%'"}]), &small, ONE_MS), (true, false));
        assert_eq!(within(json!([{"data": {"s": [{"wildcard": "*aab"}]}}]), &small, ONE_MS), (true, false));
    }

    fn adversarial_filter() -> impl Strategy<Value = Json> {
        let long = |n: usize| {
            prop::collection::vec(prop_oneof![Just('a'), Just('%'), Just('_'), Just('b')], 0..n)
                .prop_map(|v| v.into_iter().collect::<String>())
        };
        prop_oneof![
            long(300).prop_map(|p| json!({"sql": format!("subject LIKE '{}'", p.replace('\'', ""))})),
            (1usize..40).prop_map(|n| json!({"sql": format!("LENGTH(CONCAT({})) > 3", vec!["subject"; n].join(", "))})),
            (1usize..40).prop_map(|n| json!({"sql": format!("UPPER(LOWER(CONCAT_WS(subject, {}))) = 'X'", vec!["subject"; n].join(", "))})),
            long(300).prop_map(|p| json!({"data": {"s": [{"wildcard": p.replace('%', "*")}]}})),
            long(60).prop_map(|p| json!({"data": {"$or": [{"s": [{"prefix": p.clone()}]}, {"t": [{"equals-ignore-case": p}]}]}})),
            long(60).prop_map(|p| json!({"any": [{"prefix": {"subject": format!("a{p}")}}, {"not": {"suffix": {"subject": format!("{p}b")}}}]})),
            long(40).prop_map(|p| json!({"sql": format!("SUBSTRING(subject, 2) LIKE '%{}' OR subject IN ('a', 'b', '{}')", p.replace('\'', ""), p.replace('\'', ""))})),
        ]
    }

    proptest! {
        /// Whatever the filter and the value: within a budget the answer is the unbudgeted one,
        /// or the budget ran out and it is no match; a larger budget never runs out sooner; and a
        /// budget of zero always runs out.
        #[test]
        fn every_dialect_keeps_its_budget(
            filters in prop::collection::vec(adversarial_filter(), 1..4),
            subject_len in prop_oneof![0usize..50, 1_000usize..20_000],
            data_len in prop_oneof![0usize..50, 1_000usize..20_000],
            steps in prop_oneof![0u64..1_000, 1_000u64..200_000],
        ) {
            let e = event(&"a".repeat(subject_len), json!({"s": "a".repeat(data_len), "t": "A".repeat(data_len / 2)}));
            let filters = Json::Array(filters);
            let f = Filters::compile(&filters).expect("compiles");
            let view = JsonEvent::new(e.as_object().expect("object"));
            let free = f.matches(&view);
            let small = f.matches_within(&view, steps);
            let large = f.matches_within(&view, u64::MAX / 4);
            prop_assert_eq!(large.matches, free);
            prop_assert!(!large.exhausted);
            if small.exhausted {
                prop_assert!(!small.matches);
            } else {
                prop_assert_eq!(small.matches, free);
            }
            let zero = f.matches_within(&view, 0);
            prop_assert!(zero.exhausted && !zero.matches);
        }
    }

    /// What a step costs: a glob's worst case (the inner loop is the cheapest step there is) over
    /// a value and pattern that make it walk, timed and printed (`--nocapture`); the constant
    /// above is set from it. Not an assertion on time.
    #[test]
    fn a_step_is_a_few_nanoseconds() {
        let value = "a".repeat(4_000);
        let pattern = super::super::Glob::like(&format!("%{}b", "a".repeat(200)));
        let budget = u64::MAX / 2;
        let started = std::time::Instant::now();
        let ((matched, spent), out) = measured(budget, || (pattern.matches(&value), budget - left().unwrap_or(0)));
        let took = started.elapsed();
        assert!(!matched && !out);
        assert!(spent > 100_000, "the worst case walks: {spent} steps");
        println!("glob worst case: {spent} steps in {took:?}, {:.2} ns a step", took.as_nanos() as f64 / spent as f64);
    }
}
