use std::cmp::Reverse;
use std::collections::BinaryHeap;

use proptest::prelude::*;

use super::*;

#[test]
fn limits_parse_and_name_the_field() {
    let ok = |v: serde_json::Value| Limits::parse(&v).expect("valid");
    assert_eq!(ok(serde_json::Value::Null), Limits::default());
    assert_eq!(ok(serde_json::json!({})), Limits::default());
    assert_eq!(
        ok(serde_json::json!({"max_in_flight": 10, "per_second": 2.5})),
        Limits { max_in_flight: Some(10), per_second: Some(2.5) }
    );
    assert_eq!(ok(serde_json::json!({"max_in_flight": null, "per_second": null})), Limits::default());
    for (bad, field) in [
        (serde_json::json!({"max_in_flight": 0}), "limits.max_in_flight"),
        (serde_json::json!({"max_in_flight": 2049}), "limits.max_in_flight"),
        (serde_json::json!({"max_in_flight": 1.5}), "limits.max_in_flight"),
        (serde_json::json!({"max_in_flight": "4"}), "limits.max_in_flight"),
        (serde_json::json!({"per_second": 0}), "limits.per_second"),
        (serde_json::json!({"per_second": 0.001}), "limits.per_second"),
        (serde_json::json!({"per_second": 10000.5}), "limits.per_second"),
        (serde_json::json!({"per_second": true}), "limits.per_second"),
        (serde_json::json!({"rate": 1}), "limits"),
        (serde_json::json!([1]), "limits"),
        (serde_json::json!(5), "limits"),
    ] {
        let e = Limits::parse(&bad).expect_err(&bad.to_string());
        assert_eq!(e.field, field, "{bad}");
    }
}

#[test]
fn the_lower_of_own_and_declared_rate_applies() {
    let l = Limits { max_in_flight: None, per_second: Some(10.0) };
    assert_eq!(l.rate(None), Some(10.0));
    assert_eq!(l.rate(Some(120.0)), Some(2.0), "120 a minute is 2 a second");
    assert_eq!(l.rate(Some(6000.0)), Some(10.0));
    assert_eq!(Limits::default().rate(Some(60.0)), Some(1.0));
    assert_eq!(Limits::default().rate(None), None);
    assert_eq!(Limits::default().rate(Some(0.0)), None, "a zero declared rate is ignored");
    assert_eq!(parse_allowed_rate(" 120 "), Some(120.0));
    assert_eq!(parse_allowed_rate("*"), None);
    assert_eq!(parse_allowed_rate("-1"), None);
    assert_eq!(parse_allowed_rate("NaN"), None);
    assert_eq!(parse_allowed_rate(&"9".repeat(40)), None);
}

/// A declared rate below the slowest a subscription may set is honoured as declared, not raised:
/// 0.06 a minute is one start per 1 000 s.
#[test]
fn any_positive_declared_rate_is_honoured_exactly() {
    let rate = Limits::default().rate(parse_allowed_rate("0.06")).expect("a rate");
    assert!((rate - 0.001).abs() < 1e-12, "{rate}");
    let t0 = Instant::now();
    let mut pace = Pace::default();
    assert!(pace.take(rate, t0).is_ok());
    let when = pace.take(rate, t0 + Duration::from_secs(215)).expect_err("too soon");
    assert!(when >= t0 + Duration::from_secs(999), "{:?}", when - t0);
    assert!(pace.take(rate, when).is_ok());
    // Rates no number can turn into an interval hold starts a century apart, never panic.
    for rate in [f64::MIN_POSITIVE, 1e-300, 0.0, -1.0, f64::NAN] {
        let mut pace = Pace::default();
        assert!(pace.take(rate, t0).is_ok());
        let when = pace.take(rate, t0).expect_err("held");
        assert_eq!(when - t0, LONGEST_INTERVAL, "{rate}");
    }
}

/// A changed rate applies from the last start: lowered, the next start waits the new interval;
/// raised, it does not wait out the old one.
#[test]
fn a_changed_rate_applies_from_the_last_start() {
    let t0 = Instant::now();
    let mut pace = Pace::default();
    assert!(pace.take(10.0, t0).is_ok());
    let when = pace.take(1.0, t0 + Duration::from_millis(200)).expect_err("lowered to 1/s");
    assert_eq!(when, t0 + Duration::from_secs(1));
    let mut pace = Pace::default();
    assert!(pace.take(1.0 / 86_400.0, t0).is_ok());
    let when = pace.take(2.0, t0 + Duration::from_millis(100)).expect_err("raised to 2/s");
    assert_eq!(when, t0 + Duration::from_millis(500));
    assert!(pace.take(2.0, when).is_ok());
}

#[test]
fn slow_start_doubles_per_round_trip_while_steady_and_used() {
    let now = Instant::now();
    let mut a = Allowance::new(2048);
    assert_eq!(a.current(), 8);
    // One round trip at the allowance: every success adds one.
    for _ in 0..8 {
        let n = a.current();
        a.on(Signal::Success(Duration::from_millis(200)), n, now);
    }
    assert_eq!(a.current(), 16);
    // Unused allowance does not grow.
    for _ in 0..100 {
        a.on(Signal::Success(Duration::from_millis(200)), 1, now);
    }
    assert_eq!(a.current(), 16);
    // A latency far above the steady one does not grow it either.
    a.on(Signal::Success(Duration::from_millis(900)), 16, now);
    assert_eq!(a.current(), 16);
}

#[test]
fn overload_cuts_by_half_once_per_round_trip_then_grows_additively() {
    let t0 = Instant::now();
    let mut a = Allowance::new(2048);
    for _ in 0..56 {
        let n = a.current();
        a.on(Signal::Success(Duration::from_millis(200)), n, t0);
    }
    assert_eq!(a.current(), 64);
    // Refused with 63 others out: halved from those.
    assert!(a.on(Signal::Overload, 64, t0));
    assert_eq!(a.current(), 31);
    assert!(!a.on(Signal::Overload, 20, t0 + Duration::from_millis(50)), "same round trip: no second cut");
    assert_eq!(a.current(), 19, "but no more than what is still out beside the refusal");
    assert!(a.on(Signal::Overload, 20, t0 + Duration::from_millis(250)));
    assert_eq!(a.current(), 9);
    assert!(!a.slow_start());
    // Additive: a round trip of successes (and one more, for rounding) adds one.
    for _ in 0..10 {
        a.on(Signal::Success(Duration::from_millis(200)), 9, t0);
    }
    assert_eq!(a.current(), 10);
    // Other failures say nothing about load.
    assert!(!a.on(Signal::Other, 16, t0 + Duration::from_secs(10)));
    assert_eq!(a.current(), 10);
    // It never goes below one.
    for i in 0..20 {
        a.on(Signal::Overload, 1, t0 + Duration::from_secs(20 + i));
    }
    assert_eq!(a.current(), 1);
}

#[test]
fn the_ceiling_bounds_it() {
    let now = Instant::now();
    let mut a = Allowance::new(3);
    assert_eq!(a.current(), 3);
    for _ in 0..50 {
        a.on(Signal::Success(Duration::from_millis(5)), 3, now);
    }
    assert_eq!(a.current(), 3);
    a.set_ceiling(1);
    assert_eq!(a.current(), 1);
}

#[test]
fn signals() {
    let ms = Duration::from_millis(3);
    assert_eq!(Signal::of(true, ms, Some(200), false), Signal::Success(ms));
    assert_eq!(Signal::of(false, ms, Some(429), false), Signal::Overload);
    assert_eq!(Signal::of(false, ms, Some(503), false), Signal::Overload);
    assert_eq!(Signal::of(false, ms, None, true), Signal::Overload);
    assert_eq!(Signal::of(false, ms, Some(500), false), Signal::Other);
    assert_eq!(Signal::of(false, ms, None, false), Signal::Other);
}

/// A receiver that serves `capacity` requests at once in `service` and answers `503` at once
/// beyond, driven by a dispatcher that keeps the allowance full: answers (attempts refused,
/// attempts, the greatest and the mean number in flight after the first five seconds).
fn drive(capacity: usize, service: Duration, attempts: usize) -> (usize, usize, usize, f64) {
    let t0 = Instant::now();
    let mut a = Allowance::new(2048);
    // (end, accepted)
    let mut out: BinaryHeap<Reverse<(Duration, bool, Duration)>> = BinaryHeap::new();
    let mut now = Duration::ZERO;
    let (mut refused, mut started) = (0, 0);
    let (mut peak, mut sum, mut samples) = (0usize, 0usize, 0usize);
    while started < attempts || !out.is_empty() {
        while started < attempts && out.len() < a.current() {
            let serving = out.iter().filter(|Reverse((_, ok, _))| *ok).count();
            let ok = serving < capacity;
            let took = if ok { service } else { Duration::from_millis(1) };
            out.push(Reverse((now + took, ok, took)));
            started += 1;
            if !ok {
                refused += 1;
            }
        }
        if now > Duration::from_secs(5) {
            peak = peak.max(out.len());
            sum += out.len();
            samples += 1;
        }
        let Some(Reverse((end, ok, took))) = out.pop() else { break };
        now = end;
        let signal = if ok { Signal::Success(took) } else { Signal::Overload };
        a.on(signal, out.len() + 1, t0 + now);
    }
    (refused, started, peak, sum as f64 / samples.max(1) as f64)
}

#[test]
fn a_receiver_of_ten_at_once_settles_near_ten_with_few_refused() {
    let (refused, total, peak, mean) = drive(10, Duration::from_millis(200), 20_000);
    assert!(refused * 100 < total * 5, "{refused} of {total} refused");
    assert!(mean <= 12.0, "mean in flight {mean}");
    assert!(peak <= 24, "peak in flight {peak}");
}

#[test]
fn a_healthy_slow_receiver_gets_hundreds_at_once_within_seconds() {
    // Unbounded capacity at 200 ms: the allowance reaches 512 within about a second of attempts.
    let now = Instant::now();
    let mut a = Allowance::new(2048);
    let mut round_trips = 0;
    while a.current() < 512 {
        let n = a.current();
        for _ in 0..n {
            a.on(Signal::Success(Duration::from_millis(200)), n, now);
        }
        round_trips += 1;
    }
    assert!(round_trips <= 7, "{round_trips} round trips");
}

proptest! {
    /// Whatever the rate and the times asked at, a pace never lets more starts through in a
    /// window than the rate allows plus its burst.
    #[test]
    fn a_pace_is_never_faster_than_its_rate(
        rate in prop_oneof![1e-9f64..0.01, 0.01f64..5.0, 5.0f64..500.0, 500.0f64..10_000.0],
        gaps in proptest::collection::vec(0u64..50_000, 1..400),
    ) {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        let mut now = t0;
        let mut starts = Vec::new();
        for gap in gaps {
            now += Duration::from_micros(gap);
            match pace.take(rate, now) {
                Ok(()) => starts.push(now),
                Err(when) => {
                    prop_assert!(when > now);
                    // Waiting until then is enough.
                    prop_assert!(pace.take(rate, when).is_ok());
                    starts.push(when);
                    now = when;
                }
            }
        }
        let burst = (rate / 100.0).floor().max(1.0);
        let span = starts.last().unwrap().duration_since(starts[0]).as_secs_f64();
        prop_assert!((starts.len() as f64) <= span * rate + burst + 1e-3,
            "{} starts in {span} s at {rate}/s", starts.len());
    }

    /// A tenant beyond its share never takes the reserve nor starts while another waits.
    #[test]
    fn a_tenant_beyond_its_share_leaves_the_reserve(
        max in 1usize..4096, held in 0usize..4096, free in 0usize..4096, share in 0.05f64..1.0, waiting: bool,
    ) {
        let free = free.min(max);
        let may = tenant_may_start(held, max, free, share, waiting);
        if free == 0 { prop_assert!(!may); }
        let within = ((max as f64 * share).floor() as usize).max(1);
        if may && held >= within {
            prop_assert!(!waiting);
            prop_assert!(free > reserve(max));
        }
        if free > 0 && held < within { prop_assert!(may); }
    }

    /// However outcomes arrive, the allowance stays within one and its ceiling.
    #[test]
    fn the_allowance_stays_within_its_bounds(
        ceiling in 1usize..3000,
        steps in proptest::collection::vec((0u8..3, 0u64..2_000, 0usize..3000), 1..300),
    ) {
        let t0 = Instant::now();
        let mut a = Allowance::new(ceiling);
        let mut t = Duration::ZERO;
        for (kind, ms, in_flight) in steps {
            t += Duration::from_millis(ms);
            let signal = match kind {
                0 => Signal::Success(Duration::from_millis(ms)),
                1 => Signal::Overload,
                _ => Signal::Other,
            };
            a.on(signal, in_flight, t0 + t);
            prop_assert!(a.current() >= 1 && a.current() <= ceiling);
        }
    }
}

fn hot() -> ShareFacts {
    ShareFacts {
        allowance: 512,
        calm: true,
        in_flight: 400,
        limited: false,
        paused: false,
        breaker_closed: true,
        replicas: 3,
    }
}

#[test]
fn a_hot_calm_unlimited_destination_is_shared_in_equal_parts() {
    assert_eq!(helper_share(&hot()), Some(170));
    // Anything promised, any sign of trouble, or nothing to share: not shared.
    for f in [
        ShareFacts { limited: true, ..hot() },
        ShareFacts { paused: true, ..hot() },
        ShareFacts { breaker_closed: false, ..hot() },
        ShareFacts { calm: false, ..hot() },
        ShareFacts { replicas: 1, ..hot() },
        ShareFacts { allowance: HOT_ALLOWANCE - 1, in_flight: HOT_ALLOWANCE - 1, ..hot() },
        ShareFacts { in_flight: 255, ..hot() },
    ] {
        assert_eq!(helper_share(&f), None, "{f:?}");
    }
}

#[test]
fn an_allowance_is_calm_only_long_after_its_last_cut() {
    let t0 = Instant::now();
    let mut a = Allowance::new(2048);
    assert!(a.calm(t0), "never cut");
    a.on(Signal::Overload, 8, t0);
    assert!(!a.calm(t0 + CALM_FOR - Duration::from_millis(1)));
    assert!(a.calm(t0 + CALM_FOR));
}

proptest! {
    /// Whatever the facts, the helpers together never get more than the pacer's allowance.
    #[test]
    fn helpers_together_never_pass_the_allowance(allowance in 1usize..4096, in_flight in 0usize..4096, replicas in 1usize..16) {
        let f = ShareFacts { allowance, in_flight, replicas, ..hot() };
        if let Some(each) = helper_share(&f) {
            prop_assert!(each >= 1);
            prop_assert!(each * (replicas - 1) <= allowance);
        }
    }
}
