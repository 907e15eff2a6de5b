use proptest::prelude::*;
use serde_json::json;

use std::time::{Duration, Instant};

use super::*;
use crate::sandbox::Sandbox;
use std::cell::RefCell;

/// Runs `code`'s handler on `event` (a JSON object) within `limits`, on this thread's own cache
/// (for this crate's tests; the hub runs transforms on a [`crate::Pool`]).
fn run(code: &str, event: &Json, limits: &Limits) -> Run {
    thread_local! {
        static KEPT: RefCell<Cache> = RefCell::new(Cache::new(CACHE_BYTES));
    }
    KEPT.with(|cache| cache.borrow_mut().run(&Code::new("", code), &Input::from(event), limits))
}

fn event() -> Json {
    json!({"type": "payment.settled", "source": "//lender", "subject": "c-1", "id": "e1", "time": "2026-12-05T00:00:00Z",
           "extensions": {}, "data": {"amount": 100, "customer": {"name": "Ana"}}, "headers": {}, "path": ""})
}

fn input() -> Input {
    Input::from(&event())
}

fn limits() -> Limits {
    Limits { cpu: Duration::from_millis(50), memory: 8 << 20 }
}

fn out(code: &str) -> Result<Output, Failure> {
    run(code, &event(), &limits()).output
}

/// The answer of a run as a JSON value.
fn answered(output: Result<Output, Failure>) -> Json {
    match output {
        Ok(Output::Event(answer)) => answer.json(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_handler_reshapes_the_event_or_skips_it() {
    let renamed = out("function handler(e) { e.data = {value: e.data.amount, who: e.data.customer.name}; return e; }");
    let Ok(Output::Event(e)) = renamed else { panic!("{renamed:?}") };
    let e = e.json();
    assert_eq!(e["data"], json!({"value": 100, "who": "Ana"}));
    assert_eq!(e["type"], "payment.settled");
    assert_eq!(out("function handler(e) { return null; }"), Ok(Output::Skip));
    let Ok(Output::Event(ordered)) = out("function handler(e) { e.data = {z: 1, a: 2}; return e; }") else {
        panic!("no answer")
    };
    assert!(ordered.text().contains(r#""data":{"z":1,"a":2}"#), "the handler's key order: {}", ordered.text());
    assert!(matches!(out("function handler(e) { }"), Err(Failure::Invalid(_))));
    assert!(matches!(out("function handler(e) { return 7; }"), Err(Failure::Invalid(_))));
    assert!(matches!(out("function handler(e) { return [e]; }"), Err(Failure::Invalid(_))));
}

#[test]
fn logs_are_captured_and_bounded() {
    let first = run(
        "function handler(e) { console.log('amount', e.data.amount, {a: 1}); for (let i = 0; i < 500; i++) console.log('x'.repeat(5000)); return e; }",
        &event(),
        &limits(),
    );
    assert!(matches!(first.output, Ok(Output::Event(_))), "{:?}", first.output);
    assert_eq!(first.logs[0], r#"amount 100 {"a":1}"#);
    assert_eq!(first.logs.len(), MAX_LOG_LINES);
    assert!(first.logs[1].len() <= MAX_LOG_LINE + '…'.len_utf8());
    // Each run's lines are its own.
    let again = run("function handler(e) { return e; }", &event(), &limits());
    assert!(again.logs.is_empty());
    // Run once, uncached, the same.
    let once = run_once("function handler(e) { console.log('once'); return null; }", &input(), &limits());
    assert_eq!((once.output, once.logs), (Ok(Output::Skip), vec!["once".to_owned()]));
    let refused = run_once("function handler(e) {", &input(), &limits());
    assert!(matches!(refused.output, Err(Failure::Compile(_))), "{:?}", refused.output);
}

#[test]
fn code_that_does_not_compile_is_refused_with_its_position() {
    let e = check("function handler(e) {\n  return e.;\n}", &limits()).expect_err("a syntax error");
    assert_eq!(e.line, Some(2), "{e}");
    assert!(e.column.is_some(), "{e}");
    let missing = check("function transform(e) { return e; }", &limits()).expect_err("no handler");
    assert!(missing.message.contains("handler"), "{missing}");
    let long = check(&"x".repeat(MAX_CODE + 1), &limits()).expect_err("too long");
    assert!(long.message.contains("bytes"));
    check("function handler(e) { return e; }", &limits()).expect("valid");
}

#[test]
fn hostile_handlers_fail_within_their_budget() {
    let started = Instant::now();
    assert_eq!(out("function handler(e) { for (;;) {} }"), Err(Failure::Cpu(50)));
    assert!(started.elapsed() < Duration::from_secs(2), "stopped near its budget: {:?}", started.elapsed());
    // A loop at the top level runs at load: refused the same way.
    let at_load = check("for (;;) {} function handler(e) { return e; }", &limits()).expect_err("loops");
    assert!(at_load.message.contains("CPU"), "{at_load}");
    let bomb = out("function handler(e) { const a = []; for (;;) a.push('x'.repeat(1000) + a.length); }");
    assert!(
        matches!(bomb, Err(Failure::Memory(_) | Failure::Cpu(_)))
            || matches!(bomb, Err(Failure::Thrown(ref m)) if m.contains("memory running out")),
        "{bomb:?}"
    );
    let deep = out("function handler(e) { const f = (n) => f(n + 1) + 1; return f(0); }");
    assert!(matches!(deep, Err(Failure::Thrown(_) | Failure::Memory(_))), "{deep:?}");
    assert!(
        matches!(out("function handler(e) { throw new Error('no'); }"), Err(Failure::Thrown(m)) if m.contains("no"))
    );
    // The same code runs again cleanly after a failure.
    assert!(matches!(out("function handler(e) { for (;;) {} }"), Err(Failure::Cpu(_))));
}

/// A light handler's run stopped at its budget (what a busy machine's interrupts charged to the
/// worker can do) is run once more on a fresh runtime; a second stop is final, and a handler that
/// is not light (too few runs yet, or needing its budget) is never run twice.
#[test]
fn a_light_handlers_run_stopped_at_its_budget_is_run_once_more() {
    let limits = limits();
    let mut cache = Cache::new(CACHE_BYTES);
    // Runs that said they were tried a second time, so far.
    let again = std::cell::Cell::new(0);
    let run = |cache: &mut Cache, code: &Code, spin: bool| {
        let event = json!({"type": "t", "id": "e1", "data": {"spin": spin}, "headers": {}, "path": ""});
        let ran = cache.run(code, &Input::from(&event), &limits);
        again.set(again.get() + u32::from(ran.again));
        ran.output
    };
    // Stopped on its ninth run only: the second try, on a fresh runtime (its count back at one),
    // is the answer.
    let ninth =
        Code::new("a", "var n = 0; function handler(e) { n++; if (n == 9) for (;;) {} e.data = {n}; return e; }");
    for i in 1..=8 {
        assert_eq!(answered(run(&mut cache, &ninth, false))["data"]["n"], i);
    }
    assert_eq!(answered(run(&mut cache, &ninth, false))["data"]["n"], 1, "run again on a fresh runtime");
    assert_eq!(again.get(), 1);
    // Stopped on both tries: that stop is final.
    let spins = Code::new("b", "function handler(e) { if (e.data.spin) for (;;) {} return e; }");
    for _ in 0..8 {
        assert!(matches!(run(&mut cache, &spins, false), Ok(Output::Event(_))));
    }
    assert_eq!(run(&mut cache, &spins, true), Err(Failure::Cpu(50)));
    assert_eq!(again.get(), 2, "tried twice");
    // Its runtime is new again: not light until it has run within its budget again.
    assert_eq!(run(&mut cache, &spins, true), Err(Failure::Cpu(50)));
    assert_eq!(again.get(), 2, "not light after a stop");
    // A handler that never ends within its budget is never light.
    let heavy = Code::new("c", "function handler(e) { for (;;) {} }");
    for _ in 0..10 {
        assert_eq!(run(&mut cache, &heavy, false), Err(Failure::Cpu(50)));
    }
    assert_eq!(again.get(), 2, "a handler that never ended within its budget");
}

#[test]
fn nothing_outside_the_language_is_reachable() {
    let reach = out(
        "function handler(e) { e.data = [typeof fetch, typeof require, typeof process, typeof Date, typeof performance,
           typeof Math.random, typeof setTimeout, typeof XMLHttpRequest, typeof import_meta]; return e; }",
    );
    let Ok(Output::Event(e)) = reach else { panic!("{reach:?}") };
    let e = e.json();
    assert!(e["data"].as_array().expect("array").iter().all(|t| t == "undefined"), "{e}");
    // Modules cannot be loaded.
    assert!(check("import x from 'fs'; function handler(e) { return e; }", &limits()).is_err());
    assert!(matches!(out("function handler(e) { return eval('import(\"fs\")'); }"), Err(_)));
}

#[test]
fn prototype_tampering_stays_in_its_own_code() {
    // A handler that poisons Object.prototype changes only what it returns itself.
    let poisoned = "Object.prototype.toJSON = function () { return {hijacked: true}; };
                    function handler(e) { return e; }";
    let got = out(poisoned);
    assert!(matches!(got, Ok(Output::Event(_)) | Err(Failure::Invalid(_))), "{got:?}");
    // Another code is a runtime of its own: untouched.
    let clean = out("function handler(e) { return e; }");
    assert_eq!(answered(clean), event());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Arbitrary code and arbitrary events: an answer every time, never a panic.
    #[test]
    fn arbitrary_code_and_events_never_panic(code in ".{0,200}", body in "[ -~]{0,60}", n in any::<i64>()) {
        let event = json!({"data": body, "n": n, "extensions": {}});
        let limits = Limits { cpu: Duration::from_millis(5), memory: 4 << 20 };
        let _ = run(&code, &event, &limits);
        let wrapped = format!("function handler(e) {{ {code}\n return e; }}");
        let _ = run(&wrapped, &event, &limits);
    }
}

/// `import()` makes a promise the sandbox rejects (no module resolves); its runtime, dropped after
/// (here, and at the thread's end), must leave nothing behind: QuickJS aborts the process when it
/// frees a runtime that still holds objects, as it did without the Promise intrinsic.
#[test]
fn an_import_is_refused_and_its_runtime_is_freed_cleanly() {
    let code = "function handler(e) { import('fs'); return e; }";
    assert_eq!(answered(out(code)), event());
    let sandbox = Sandbox::new(code, &limits()).expect("compiles");
    let (answer, _, _) = sandbox.call(&input(), &limits());
    assert_eq!(answered(answer), event());
    drop(sandbox);
    // A promise is not an event.
    let returned = out("function handler(e) { return eval('import(\"fs\")'); }");
    assert!(matches!(returned, Err(Failure::Invalid(ref m)) if m.contains("synchronous")), "{returned:?}");
}

#[test]
fn a_cache_keeps_within_its_bytes_and_never_shares_a_runtime_between_owners() {
    let limits = limits();
    let counting = "var seen = 0; function handler(e) { seen += 1; e.data = {seen}; return e; }";
    let mut cache = Cache::new(CACHE_BYTES);
    let seen = |run: Run| match run.output {
        Ok(Output::Event(e)) => e.json()["data"]["seen"].as_i64().expect("seen"),
        other => panic!("{other:?}"),
    };
    let a = Code::new("subscription-a", counting);
    let b = Code::new("subscription-b", counting);
    assert_eq!(seen(cache.run(&a, &input(), &limits)), 1);
    assert_eq!(seen(cache.run(&a, &input(), &limits)), 2, "a code's runtime is reused");
    assert_eq!(seen(cache.run(&b, &input(), &limits)), 1, "another owner's same code has a runtime of its own");
    assert_eq!(cache.len(), 2);
    let one = cache.bytes() / 2;
    assert!(one > 0);

    // Room for three: the least recently used goes first.
    let mut small = Cache::new(one * 3 + one / 2);
    let codes: Vec<Code> = (0..5).map(|i| Code::new(&format!("s{i}"), counting)).collect();
    for code in &codes[..3] {
        seen(small.run(code, &input(), &limits));
    }
    seen(small.run(&codes[0], &input(), &limits));
    for code in &codes[3..] {
        seen(small.run(code, &input(), &limits));
    }
    assert!(small.len() <= 3 && small.bytes() <= one * 3 + one / 2, "{small:?}");
    assert_eq!(seen(small.run(&codes[0], &input(), &limits)), 3, "the most recently used stayed");
    assert_eq!(seen(small.run(&codes[1], &input(), &limits)), 1, "the least recently used was dropped");

    // A runtime that ran out of its budget is made again.
    let endless = Code::new(
        "s",
        "var seen = 0; function handler(e) { seen += 1; if (seen == 2) for(;;){} e.data = {seen}; return e; }",
    );
    assert_eq!(seen(cache.run(&endless, &input(), &limits)), 1);
    assert!(matches!(cache.run(&endless, &input(), &limits).output, Err(Failure::Cpu(_))));
    assert_eq!(seen(cache.run(&endless, &input(), &limits)), 1, "a fresh runtime after the budget ran out");
}

/// The frames of a worker's are a third party's to the hub (a worker's engine may be subverted):
/// any bytes give an answer or an error, never a panic, and what either end writes reads back
/// as it was.
mod wire_frames {
    use proptest::prelude::*;

    use crate::wire::{Reply, Request};
    use crate::{Answer, CompileError, Failure, Limits, Output, Run};

    fn limits() -> impl Strategy<Value = Limits> {
        (0u64..u64::MAX / 2, any::<u32>())
            .prop_map(|(us, memory)| Limits { cpu: std::time::Duration::from_micros(us), memory: memory as usize })
    }

    fn failure() -> impl Strategy<Value = Failure> {
        prop_oneof![
            ".{0,40}".prop_map(Failure::Thrown),
            any::<u64>().prop_map(|ms| Failure::Cpu(u128::from(ms))),
            any::<u32>().prop_map(|b| Failure::Memory(b as usize)),
            ".{0,40}".prop_map(Failure::Invalid),
            (".{0,40}", any::<Option<u32>>(), any::<Option<u32>>())
                .prop_map(|(message, line, column)| Failure::Compile(CompileError { message, line, column })),
            ".{0,40}".prop_map(Failure::Worker),
            Just(Failure::Stopped),
        ]
    }

    fn reply() -> impl Strategy<Value = Reply> {
        let output = prop_oneof![
            ".{0,60}".prop_map(|t| Ok(Output::Event(Answer::from_text(t)))),
            Just(Ok(Output::Skip)),
            failure().prop_map(Err),
        ];
        prop_oneof![
            Just(Reply::Ready),
            Just(Reply::NeedCode),
            (output, proptest::collection::vec(".{0,20}", 0..crate::MAX_LOG_LINES), any::<u32>(), any::<bool>())
                .prop_map(|(output, logs, us, again)| Reply::Ran(Run {
                    output,
                    logs,
                    duration: std::time::Duration::from_micros(u64::from(us)),
                    again,
                })),
            Just(Reply::Checked(Ok(()))),
            (".{0,40}", any::<Option<u32>>(), any::<Option<u32>>())
                .prop_map(|(message, line, column)| Reply::Checked(Err(CompileError { message, line, column }))),
        ]
    }

    /// A frame's body (its length prefix off).
    fn body(frame: &[u8]) -> &[u8] {
        let len = u32::from_le_bytes(frame[..4].try_into().expect("a length")) as usize;
        assert_eq!(len, frame.len() - 4, "the length prefix counts the body");
        &frame[4..]
    }

    proptest! {
        #[test]
        fn any_bytes_are_a_message_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Reply::decode(&bytes);
            let _ = Request::decode(&bytes);
        }

        /// Valid answers cut short or with bytes changed: still an answer or an error.
        #[test]
        fn a_changed_reply_is_an_answer_or_an_error(
            reply in reply(),
            cut in any::<prop::sample::Index>(),
            changes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        ) {
            let frame = reply.frame(std::time::Duration::from_nanos(7));
            let mut bytes = body(&frame).to_vec();
            for (at, value) in changes {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            bytes.truncate(cut.index(bytes.len() + 1));
            let _ = Reply::decode(&bytes);
        }

        #[test]
        fn a_reply_reads_back_as_written(reply in reply(), cpu in any::<u32>()) {
            let cpu = std::time::Duration::from_nanos(u64::from(cpu));
            let frame = reply.frame(cpu);
            prop_assert_eq!(Reply::decode(body(&frame)).expect("decodes"), (cpu, reply));
        }

        #[test]
        fn a_request_reads_back_as_written(
            key in any::<[u8; 32]>(),
            code in proptest::option::of(".{0,60}"),
            input in ".{0,60}",
            limits in limits(),
            kind in 0u8..3,
        ) {
            let request = match kind {
                0 => Request::Run { key, code: code.as_deref(), input: &input, limits },
                1 => Request::Once { code: code.as_deref().unwrap_or(""), input: &input, limits },
                _ => Request::Check { code: code.as_deref().unwrap_or(""), limits },
            };
            let frame = request.frame();
            prop_assert_eq!(Request::decode(body(&frame)).expect("decodes"), request);
        }
    }
}
