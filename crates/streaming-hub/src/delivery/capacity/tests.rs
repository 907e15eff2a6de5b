use std::time::{Duration, Instant};

use hub_core::delivery::inflight::{Limits, Signal, reserve};
use proptest::prelude::*;
use uuid::Uuid;

use super::{Admit, Blocked, Ledger, Stall};

const TENANTS: [&str; 3] = ["a", "b", "c"];
const DESTS: [&str; 4] = ["d0", "d1", "d2", "d3"];

#[derive(Debug, Clone)]
enum Step {
    /// A job of tenant `t`, destination `d`, subscription `d` (capped at `cap`).
    Arrive(usize, usize),
    /// The `i`-th attempt in flight ends with this signal.
    End(usize, u8),
    /// Time passes.
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..3usize, 0..4usize).prop_map(|(t, d)| Step::Arrive(t, d)),
        3 => (0..64usize, 0..3u8).prop_map(|(i, s)| Step::End(i, s)),
        1 => (0..500u64).prop_map(Step::Wait),
    ]
}

fn subs() -> [Uuid; 4] {
    [Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3), Uuid::from_u128(4)]
}

proptest! {
    /// Whatever arrives and ends, in any order: the slots are never overdrawn; a destination's
    /// attempts never pass its allowance when they start; a subscription never passes its own
    /// cap; a tenant beyond its share started only while no other tenant waited for a slot and a
    /// reserve stayed free; the ledger's count is the attempts started and not ended.
    #[test]
    fn the_ledger_keeps_every_bound(
        max in 1usize..40,
        share in prop_oneof![Just(0.5), 0.1f64..1.0],
        caps in proptest::collection::vec(prop_oneof![Just(None), (1u32..6).prop_map(Some)], 4),
        steps in proptest::collection::vec(step(), 1..300),
    ) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut ledger = Ledger::new(max, share);
        let subs = subs();
        // (tenant, dest)
        let mut running: Vec<(usize, usize)> = Vec::new();
        // Jobs waiting for a slot, by tenant (as the loop parks them).
        let mut starved = [0usize; 3];
        let admit = |t: usize, d: usize| Admit {
            tenant: TENANTS[t],
            subscription: subs[d],
            dest: DESTS[d],
            limits: Limits { max_in_flight: caps[d], per_second: None },
            allowed_rate: None,
        };
        for st in steps {
            match st {
                Step::Arrive(t, d) => {
                    let held = running.iter().filter(|(u, _)| *u == t).count();
                    let others = starved.iter().enumerate().any(|(u, n)| u != t && *n > 0);
                    let free = max - running.len();
                    match ledger.try_enter(&admit(t, d), now) {
                        Ok(()) => {
                            prop_assert!(free > 0, "entered with no slot free");
                            let within = ((max as f64 * share).floor() as usize).max(1);
                            if held >= within {
                                prop_assert!(!others, "beyond its share while another tenant waited");
                                prop_assert!(free > reserve(max), "beyond its share into the reserve");
                            }
                            let sub_running = running.iter().filter(|(_, e)| *e == d).count();
                            if let Some(cap) = caps[d] {
                                prop_assert!(sub_running < cap as usize, "past the subscription's cap");
                            }
                            running.push((t, d));
                        }
                        Err(Blocked::Slots) => {
                            starved[t] += 1;
                            ledger.parked(&admit(t, d), true, 1, now);
                        }
                        Err(_) => {}
                    }
                }
                Step::End(i, s) => {
                    if running.is_empty() { continue; }
                    let (t, d) = running.remove(i % running.len());
                    let signal = match s {
                        0 => Signal::Success(Duration::from_millis(20)),
                        1 => Signal::Overload,
                        _ => Signal::Other,
                    };
                    ledger.leave(&admit(t, d), Some(signal), None, now);
                    // The loop tries a starved job of some tenant when a slot frees.
                    if let Some(u) = (0..3).find(|u| starved[*u] > 0) {
                        starved[u] -= 1;
                        ledger.parked(&admit(u, 0), true, -1, now);
                    }
                }
                Step::Wait(ms) => now += Duration::from_millis(ms),
            }
            prop_assert_eq!(ledger.in_flight(), running.len());
            prop_assert!(running.len() <= max);
        }
    }
}

#[test]
fn a_paused_destination_refuses_until_its_pause_ends_and_others_go_on() {
    let t0 = Instant::now();
    let mut ledger = Ledger::new(16, 0.5);
    let subs = subs();
    let a = Admit { tenant: "a", subscription: subs[0], dest: "d0", limits: Limits::default(), allowed_rate: None };
    let b = Admit { tenant: "a", subscription: subs[1], dest: "d1", limits: Limits::default(), allowed_rate: None };
    ledger.try_enter(&a, t0).expect("free");
    ledger.leave(&a, Some(Signal::Overload), Some(Duration::from_secs(30)), t0);
    assert_eq!(ledger.try_enter(&a, t0 + Duration::from_secs(1)), Err(Blocked::Paused(t0 + Duration::from_secs(30))));
    assert!(ledger.saturated(32, Duration::from_secs(90), t0).contains(&subs[0]), "paused: not claimed");
    ledger.try_enter(&b, t0 + Duration::from_secs(1)).expect("its neighbour goes on");
    ledger.try_enter(&a, t0 + Duration::from_secs(31)).expect("the pause is over");
}

#[test]
fn a_paced_subscription_waits_for_its_next_start() {
    let t0 = Instant::now();
    let mut ledger = Ledger::new(16, 0.5);
    let a = Admit {
        tenant: "a",
        subscription: subs()[0],
        dest: "d0",
        limits: Limits { max_in_flight: None, per_second: Some(10.0) },
        allowed_rate: Some(120.0),
    };
    // The declared 120 a minute (2 a second) is lower than its own 10 a second.
    ledger.try_enter(&a, t0).expect("first");
    match ledger.try_enter(&a, t0) {
        Err(Blocked::Rate(when)) => assert_eq!(when, t0 + Duration::from_millis(500)),
        other => panic!("{other:?}"),
    }
    ledger.try_enter(&a, t0 + Duration::from_millis(500)).expect("at its pace");
}

#[test]
fn delivery_is_stalled_when_every_slot_is_held_with_none_ending_or_the_loop_stops() {
    let t0 = Instant::now();
    let after = Duration::from_secs(120);
    let later = |s: u64| t0 + Duration::from_secs(s);
    // Sixteen slots, two of them the reserve: one tenant fills them with fourteen.
    let mut ledger = Ledger::new(16, 1.0);
    let subs = subs();
    let dests: Vec<String> = (0..16).map(|i| format!("d{i}")).collect();
    let admit = |i: usize| Admit {
        tenant: "a",
        subscription: subs[i % 4],
        dest: &dests[i],
        limits: Limits::default(),
        allowed_rate: None,
    };
    for i in 0..13 {
        ledger.try_enter(&admit(i), t0).expect("free");
    }
    assert_eq!(ledger.stall(later(1_000), after), None, "not full");
    ledger.try_enter(&admit(13), later(10)).expect("free");
    assert_eq!(ledger.stall(later(130), after), None, "full for 120 s, not more");
    assert_eq!(ledger.stall(later(131), after), Some(Stall::Slots));
    // An attempt that ends is progress, and the count starts again once full again.
    ledger.leave(&admit(0), Some(Signal::Success(Duration::from_millis(5))), None, later(131));
    assert_eq!(ledger.stall(later(131), after), None);
    ledger.try_enter(&admit(0), later(200)).expect("free");
    assert_eq!(ledger.stall(later(300), after), None);
    assert_eq!(ledger.stall(later(321), after), Some(Stall::Slots));
    // A loop that stopped turning is a stall whatever the slots; one that stopped by design is not.
    let mut idle = Ledger::new(2, 1.0);
    idle.turned(Some(t0));
    assert_eq!(idle.stall(later(120), after), None);
    assert_eq!(idle.stall(later(121), after), Some(Stall::Loop));
    idle.turned(None);
    assert_eq!(idle.stall(later(10_000), after), None);
}
