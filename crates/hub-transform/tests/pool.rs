//! The pool of worker processes, against this crate's worker binary: runs, turns, and the hostile
//! suite (SPEC §11, "Containment of tenant-supplied code"): whatever a handler does inside the
//! engine, its worker is stopped within twice its CPU budget plus 10 ms of CPU time, only its run
//! fails with a reason naming what happened, and nothing it started outlives it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hub_transform::{CACHE_BYTES, Code, Failure, Input, Limits, Output, Pool, WorkerCommand};
use serde_json::json;

fn command() -> WorkerCommand {
    WorkerCommand { program: env!("CARGO_BIN_EXE_hub-transform-worker").into(), args: Vec::new() }
}

fn pool(workers: usize, limits: Limits) -> Pool {
    Pool::new(command(), workers, limits, CACHE_BYTES).expect("pool")
}

fn limits() -> Limits {
    Limits { cpu: Duration::from_millis(20), memory: 8 << 20 }
}

fn input() -> Input {
    Input::from(&json!({"type": "payment.settled", "id": "e1", "data": {"amount": 100}, "headers": {}, "path": ""}))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// Whether a process still exists (a zombie, not yet reaped, counts).
fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Polls until `done` holds, for at most ten seconds.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every worker the pool ever showed is gone once the pool is dropped, and while it lives no
/// more are alive than it has threads.
struct Seen(std::collections::BTreeSet<u32>);

impl Seen {
    fn new() -> Self {
        Self(Default::default())
    }
    fn look(&mut self, pool: &Pool, workers: usize) {
        let pids = pool.worker_pids();
        assert!(pids.len() <= workers, "{pids:?}");
        let alive: Vec<u32> = self.0.iter().copied().filter(|p| exists(*p) && !pids.contains(p)).collect();
        assert!(alive.is_empty(), "workers no longer the pool's still run: {alive:?}");
        self.0.extend(pids);
    }
    fn all_gone_after(self, pool: Pool) {
        drop(pool);
        eventually("every worker ends with its pool", || self.0.iter().all(|p| !exists(*p)));
    }
}

#[test]
fn a_pool_runs_code_in_workers_and_keeps_its_runtime() {
    let pool = pool(2, limits());
    runtime().block_on(async {
        let counting = Code::new("s", "var seen = 0; function handler(e) { seen += 1; e.data = {seen}; return e; }");
        let mut seen = Vec::new();
        for _ in 0..6 {
            let run = pool.run("t", counting.clone(), input()).await;
            match run.output {
                Ok(Output::Event(answer)) => seen.push(answer.json()["data"]["seen"].as_i64().expect("seen")),
                other => panic!("{other:?}"),
            }
        }
        // One worker took them all (the other thread's worker was never needed) or both did:
        // either way each worker's runtime counted on from its last run.
        assert!(seen.windows(2).any(|w| w[1] == w[0] + 1), "a kept runtime counts on: {seen:?}");
        let skip = pool.run("t", Code::new("s2", "function handler(e) { return null; }"), input()).await;
        assert_eq!(skip.output, Ok(Output::Skip));
        let once = pool.run_once("t", "function handler(e) { console.log('once'); return e; }".into(), input()).await;
        assert!(matches!(once.output, Ok(Output::Event(_))), "{:?}", once.output);
        assert_eq!(once.logs, vec!["once".to_owned()]);
        let refused = pool.check("t", "function handler(e) {".into()).await.expect_err("a syntax error");
        assert!(refused.line.is_some(), "{refused:?}");
        pool.check("t", "function handler(e) { return e; }".into()).await.expect("valid");
    });
    assert!(pool.health().alive <= 2);
}

/// A tenant with a backlog of slow runs delays another tenant's run by what the worker already
/// holds (the runs dealt to it before, and one run or one batch of light runs), not by its
/// backlog: free workers take the tenants in turn.
#[test]
fn a_pool_takes_tenants_in_turn() {
    let pool = pool(1, limits());
    let slow = Code::new("a/1", "function handler(e) { for (let i = 0; i < 100000; i++) {} return e; }");
    let quick = Code::new("b/1", "function handler(e) { return e; }");
    let done = Arc::new(std::sync::Mutex::new(Vec::new()));
    // How many of a's runs had been dealt to the worker when b's run was queued, at most.
    let dealt = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    runtime().block_on(async {
        // The worker keeps both codes first: a run whose code it does not hold is sent again with
        // it at the end of its batch, which would put b's run behind the rest of that batch.
        for (tenant, code) in [("a", &slow), ("b", &quick)] {
            let run = pool.run(tenant, code.clone(), input()).await;
            assert!(matches!(run.output, Ok(Output::Event(_))), "{:?}", run.output);
        }
        let mut tasks = Vec::new();
        // Spawned in order on one thread: each run is queued at its task's first poll, so a's 30
        // runs are all queued before b's.
        for (tenant, code) in std::iter::repeat_n(("a", &slow), 30).chain([("b", &quick)]) {
            let (pool, code, done, dealt) = (pool.clone(), code.clone(), Arc::clone(&done), Arc::clone(&dealt));
            tasks.push(tokio::spawn(async move {
                let mut run = std::pin::pin!(pool.run(tenant, code, input()));
                let first = std::future::poll_fn(|cx| std::task::Poll::Ready(run.as_mut().poll(cx))).await;
                if tenant == "b" {
                    // Queued now. a's runs waiting now are at most those waiting when it was
                    // queued (nothing of a's is queued after it); the count holds b's unless dealt.
                    let waiting = pool.health().waiting;
                    dealt.store(31usize.saturating_sub(waiting), std::sync::atomic::Ordering::SeqCst);
                    done.lock().expect("done").push("b queued");
                }
                let run = match first {
                    std::task::Poll::Ready(run) => run,
                    std::task::Poll::Pending => run.await,
                };
                assert!(matches!(run.output, Ok(Output::Event(_))), "{:?}", run.output);
                done.lock().expect("done").push(tenant);
            }));
        }
        for task in tasks {
            task.await.expect("run");
        }
    });
    let done = done.lock().expect("done").clone();
    let dealt = dealt.load(std::sync::atomic::Ordering::SeqCst);
    let ran = done.iter().position(|t| *t == "b").expect("b ran");
    let before = done[..ran].iter().filter(|t| **t == "a").count();
    // Runs of one worker end in the order they were dealt. After b was queued, a is first in
    // turn once more: one run of a's goes before b's (alone, or b's batch starts with it).
    assert!(before <= dealt + 1, "tenant b waited behind {before} runs of tenant a, {dealt} dealt before it: {done:?}");
}

/// Runs waiting while a worker is busy go to it together; a hostile run among them stops its
/// worker and fails alone: the runs sent after it had not started, and a new worker runs them.
/// Its tenant's runs then go alone (each new run of theirs fails, the others' all succeed).
#[test]
fn runs_sent_together_fail_only_the_one_that_stopped_the_worker() {
    let pool = pool(1, limits());
    let blocker = Code::new("z/1", "function handler(e) { for (let i = 0; i < 50000; i++) {} return e; }");
    // Past the engine's own stop (a native built-in): the worker must be killed.
    let hostile = Code::new("a/1", HOSTILE[1].1);
    let quick =
        |tenant: &str| Code::new(&format!("{tenant}/1"), "function handler(e) { e.data = {fine: true}; return e; }");
    runtime().block_on(async {
        let warm = pool.run("b", quick("b"), input()).await;
        assert!(matches!(warm.output, Ok(Output::Event(_))), "{:?}", warm.output);
        let first = pool.worker_pids();
        // The blocker must be seen holding the worker; on a busy machine it may end before this
        // thread looks, and is then run again.
        let busy = loop {
            let (runner, blocker) = (pool.clone(), blocker.clone());
            let task = tokio::spawn(async move { runner.run("z", blocker, input()).await });
            eventually_async(|| pool.health().busy == 1 || task.is_finished()).await;
            if !task.is_finished() {
                break task;
            }
            let ended = task.await.expect("blocker");
            assert!(matches!(ended.output, Ok(Output::Event(_))), "{:?}", ended.output);
        };
        // Queued behind the blocker, in this order: they go to the worker together.
        let mut waiting = Vec::new();
        for (tenant, code) in [("b", quick("b")), ("a", hostile.clone()), ("b", quick("b")), ("c", quick("c"))]
            .into_iter()
            .chain(std::iter::repeat_with(|| ("c", quick("c"))).take(6))
        {
            let pool = pool.clone();
            waiting.push((tenant, tokio::spawn(async move { pool.run(tenant, code, input()).await })));
        }
        let blocked = busy.await.expect("blocker");
        assert!(matches!(blocked.output, Ok(Output::Event(_))), "{:?}", blocked.output);
        for (tenant, task) in waiting {
            let run = task.await.expect("run");
            match tenant {
                "a" => assert_eq!(run.output, Err(Failure::Cpu(20)), "the hostile run"),
                _ => assert!(matches!(run.output, Ok(Output::Event(_))), "{tenant}: {:?}", run.output),
            }
        }
        let second = pool.worker_pids();
        assert_eq!(second.len(), 1);
        assert_ne!(first, second, "the worker the hostile run held was replaced");
        assert!(!exists(first[0]), "and reaped");
        // Its tenant again beside others: only its run fails.
        let (a, c) = tokio::join!(pool.run("a", hostile.clone(), input()), pool.run("c", quick("c"), input()));
        assert_eq!(a.output, Err(Failure::Cpu(20)));
        assert!(matches!(c.output, Ok(Output::Event(_))), "{:?}", c.output);
    });
    // A worker is given back just after its last answer.
    eventually("the worker is free", || pool.health().busy == 0);
    let health = pool.health();
    assert_eq!((health.killed_cpu, health.crashed, health.waiting), (2, 0, 0), "{health:?}");
}

async fn eventually_async(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "not within 10 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// What a hostile handler may end as.
#[derive(Debug, Clone, Copy)]
enum Ends {
    Cpu,
    /// The budget or the memory, whichever the engine meets first.
    CpuOrMemory,
    /// Thrown, its message holding this.
    Thrown(&'static str),
}

const HOSTILE: &[(&str, &str, Ends)] = &[
    ("endless loop", "function handler(e) { for (;;) {} }", Ends::Cpu),
    (
        "reverse on a huge array-like",
        "function handler(e) { [].reverse.call({length: 2**53 - 1}); return e; }",
        Ends::Cpu,
    ),
    (
        "copyWithin on a huge array-like",
        "function handler(e) { [].copyWithin.call({length: 2**53 - 1}, 0, 1); return e; }",
        Ends::Cpu,
    ),
    (
        "join on a 2^32-long array-like",
        "function handler(e) { [].join.call({length: 2**32}); return e; }",
        Ends::CpuOrMemory,
    ),
    (
        "sort on a huge array-like",
        "function handler(e) { [].sort.call({length: 2**32 - 1, 0: 2, 1: 1}); return e; }",
        Ends::CpuOrMemory,
    ),
    (
        "fill on a huge array-like",
        "function handler(e) { [].fill.call({length: 2**53 - 1}, 0); return e; }",
        Ends::CpuOrMemory,
    ),
    (
        "replaceAll on a large string",
        "function handler(e) { let s = 'a'.repeat(1 << 20); for (let i = 0; i < 64; i++) s = s.replaceAll('a', 'a'); return e; }",
        Ends::CpuOrMemory,
    ),
    ("repeat past memory", "function handler(e) { e.data = 'x'.repeat(2**28); return e; }", Ends::CpuOrMemory),
    ("padStart past memory", "function handler(e) { e.data = ''.padStart(2**28, 'ab'); return e; }", Ends::CpuOrMemory),
    (
        "catastrophic regex",
        "function handler(e) { e.data = /^(a+)+$/.test('a'.repeat(40) + 'b'); return e; }",
        Ends::Cpu,
    ),
    (
        "runaway recursion",
        "function f(n) { return f(n + 1) + 1; } function handler(e) { f(0); return e; }",
        Ends::Thrown("stack"),
    ),
    (
        "memory kept in globals",
        "var kept = []; function handler(e) { for (;;) kept.push('x'.repeat(1 << 16) + kept.length); }",
        Ends::CpuOrMemory,
    ),
    ("huge output", "function handler(e) { e.data = 'x'.repeat(6 << 20); return e; }", Ends::CpuOrMemory),
    ("toJSON trap", "function handler(e) { return {toJSON() { for (;;) {} }}; }", Ends::Cpu),
    ("getter trap", "function handler(e) { return {get data() { for (;;) {} }}; }", Ends::Cpu),
    ("Proxy", "function handler(e) { return new Proxy(e, {}); }", Ends::Thrown("Proxy")),
    ("throw null", "function handler(e) { throw null; }", Ends::Thrown("null")),
    ("throw undefined", "function handler(e) { throw undefined; }", Ends::Thrown("undefined")),
];

fn judge(name: &str, output: &Result<Output, Failure>, ends: Ends) {
    let fits = match (ends, output) {
        (Ends::Cpu | Ends::CpuOrMemory, Err(Failure::Cpu(_))) => true,
        (Ends::CpuOrMemory, Err(Failure::Memory(_))) => true,
        // Memory that ran out mid-throw, its frames freed before the throw was read.
        (Ends::CpuOrMemory, Err(Failure::Thrown(m))) => m.contains("memory running out"),
        (Ends::Thrown(what), Err(Failure::Thrown(m))) => m.contains(what),
        _ => false,
    };
    assert!(fits, "{name}: expected {ends:?}, got {output:?}");
}

#[test]
fn hostile_handlers_fail_alone_within_their_cpu_bound_at_check_try_and_run() {
    let limits = limits();
    let workers = 2;
    let pool = pool(workers, limits);
    let fine = Code::new("b/1", "function handler(e) { e.data = {fine: true}; return e; }");
    runtime().block_on(async {
        for (i, (name, code, ends)) in HOSTILE.iter().enumerate() {
            let started = Instant::now();
            let run = pool.run("a", Code::new(&format!("a/{i}"), code), input()).await;
            judge(name, &run.output, *ends);
            let once = pool.run_once("a", (*code).to_owned(), input()).await;
            judge(name, &once.output, *ends);
            // Another tenant's run right after is delivered.
            let other = pool.run("b", fine.clone(), input()).await;
            assert!(matches!(other.output, Ok(Output::Event(_))), "after {name}: {:?}", other.output);
            assert!(started.elapsed() < Duration::from_secs(20), "{name} held the pool");
        }
        // At a check, a top level that never ends is refused with the budget named.
        let at_load = pool
            .check("a", "[].reverse.call({length: 2**53 - 1}); function handler(e) { return e; }".into())
            .await
            .expect_err("refused");
        assert!(at_load.message.contains("CPU budget"), "{at_load:?}");
    });
    let health = pool.health();
    assert!(health.killed_cpu > 0, "{health:?}");
    let bound = limits.cpu * 2 + Duration::from_millis(10);
    assert!(health.most_cpu_killed <= bound, "a killed run spent {:?} of CPU, over {bound:?}", health.most_cpu_killed);
    let mut seen = Seen::new();
    seen.look(&pool, workers);
    seen.all_gone_after(pool);
}

#[test]
fn hostile_tries_whose_callers_hang_up_leave_nothing_behind() {
    let workers = 2;
    let pool = pool(workers, limits());
    let mut seen = Seen::new();
    runtime().block_on(async {
        for i in 0..100 {
            seen.look(&pool, workers);
            let code = if i % 2 == 0 { "function handler(e) { for (;;) {} }" } else { HOSTILE[1].1 };
            let _ = tokio::time::timeout(Duration::from_millis(1), pool.run_once("a", code.into(), input())).await;
        }
        // The queue drains: runs nobody waits for are not run, the one under way ends at its bound.
        let fine = pool.run("b", Code::new("b/1", "function handler(e) { return e; }"), input()).await;
        assert!(matches!(fine.output, Ok(Output::Event(_))), "{:?}", fine.output);
    });
    eventually("the pool drains", || {
        let health = pool.health();
        (health.busy, health.waiting) == (0, 0)
    });
    seen.look(&pool, workers);
    seen.all_gone_after(pool);
}

#[test]
fn a_worker_killed_from_outside_fails_only_the_run_it_held() {
    let limits = Limits { cpu: Duration::from_secs(1), memory: 8 << 20 };
    let pool = pool(1, limits);
    runtime().block_on(async {
        let warm = pool.run("a", Code::new("a/0", "function handler(e) { return e; }"), input()).await;
        assert!(matches!(warm.output, Ok(Output::Event(_))));
        let before = pool.worker_pids();
        assert_eq!(before.len(), 1, "one worker: {before:?}");
        let held = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run("a", Code::new("a/1", "function handler(e) { for (;;) {} }"), input()).await
            })
        };
        // Once the worker is busy with it, kill -9.
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.health().busy == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        std::process::Command::new("kill").arg("-9").arg(before[0].to_string()).status().expect("kill");
        let run = held.await.expect("run");
        assert!(matches!(run.output, Err(Failure::Worker(ref m)) if m.contains("signal 9")), "{:?}", run.output);
        // The next run gets a new worker.
        let after = pool.run("b", Code::new("b/1", "function handler(e) { return e; }"), input()).await;
        assert!(matches!(after.output, Ok(Output::Event(_))), "{:?}", after.output);
        assert!(!exists(before[0]), "the killed worker was reaped");
        assert_eq!(pool.worker_pids().len(), 1);
    });
    assert_eq!(pool.health().crashed, 1);
}

/// A light handler's run stopped at its CPU budget is run once more on a fresh runtime, says so,
/// and is counted by the pool (`streaming_hub_transform_runs_again_total`); a handler that spends
/// its budget on every run is never run twice. The handler here counts its runs in its globals and
/// spins from its ninth on: its fresh runtime's first run answers.
#[test]
fn a_light_handlers_run_stopped_at_its_budget_runs_again_and_is_counted() {
    let pool = pool(1, limits());
    runtime().block_on(async {
        let turns = Code::new(
            "turns",
            "var runs = 0; function handler(e) { runs += 1; if (e.data.spin && runs > 8) { for (;;) {} } return e; }",
        );
        for _ in 0..10 {
            let run = pool.run("t", turns.clone(), input()).await;
            assert!(matches!(run.output, Ok(Output::Event(_))) && !run.again, "{run:?}");
        }
        assert_eq!(pool.health().ran_again, 0);
        let spin = Input::from(&json!({"type": "t", "id": "e2", "data": {"spin": true}, "headers": {}, "path": ""}));
        let run = pool.run("t", turns.clone(), spin).await;
        assert!(matches!(run.output, Ok(Output::Event(_))), "the second try, on a fresh runtime, answers: {run:?}");
        assert!(run.again, "{run:?}");
        assert_eq!(pool.health().ran_again, 1);
        assert_eq!(pool.health().killed_cpu, 0, "both tries were held by the engine, within the worker's bound");

        let always = Code::new("always", "function handler(e) { for (;;) {} }");
        for _ in 0..3 {
            let run = pool.run("t", always.clone(), input()).await;
            assert!(matches!(run.output, Err(Failure::Cpu(_))), "{run:?}");
            assert!(!run.again, "{run:?}");
        }
        assert_eq!(pool.health().ran_again, 1);
    });
}

/// The budget is CPU time: under a saturated CPU, code that needs well under its budget of CPU is
/// never refused, however long it waits for a core.
#[test]
fn a_busy_machine_never_refuses_code_within_its_cpu_budget() {
    let limits = Limits { cpu: Duration::from_millis(20), memory: 8 << 20 };
    let pool = pool(2, limits);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..6)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            })
        })
        .collect();
    // About a quarter of the budget of work.
    let code = Code::new(
        "a/1",
        "function handler(e) { let x = 0; for (let i = 0; i < 20000; i++) x += i; e.data = x; return e; }",
    );
    let refused = runtime().block_on(async {
        let mut refused = Vec::new();
        for _ in 0..300 {
            let run = pool.run("a", code.clone(), input()).await;
            if !matches!(run.output, Ok(Output::Event(_))) {
                refused.push(run.output);
            }
        }
        refused
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in spinners {
        s.join().expect("spinner");
    }
    assert!(refused.is_empty(), "refused under a busy CPU: {refused:?}");
}

/// A worker that cannot be started fails its run with why, and the pool says so (what `/readyz`
/// and `streaming_hub_transform_workers_unavailable` read); one that starts clears it.
#[test]
fn a_worker_that_cannot_start_is_named_and_reported() {
    let missing = WorkerCommand { program: "/nonexistent/streaming-hub".into(), args: Vec::new() };
    let quits = WorkerCommand { program: "/bin/false".into(), args: Vec::new() };
    for (command, says) in [(missing, "could not be started"), (quits, "stopped at its start")] {
        let pool = Pool::new(command, 1, limits(), CACHE_BYTES).expect("pool");
        let run = runtime().block_on(pool.run("a", Code::new("a/1", "function handler(e) { return e; }"), input()));
        assert!(matches!(run.output, Err(Failure::Worker(ref m)) if m.contains(says)), "{:?}", run.output);
        let health = pool.health();
        assert!(health.cannot_start.is_some() && health.alive == 0, "{health:?}");
    }
    let pool = pool(1, limits());
    let run = runtime().block_on(pool.run("a", Code::new("a/1", "function handler(e) { return e; }"), input()));
    assert!(matches!(run.output, Ok(Output::Event(_))), "{:?}", run.output);
    assert_eq!(pool.health().cannot_start, None);
}
