//! The dispatcher's scheduling rules against a fake sink: attempts in flight (a destination's
//! allowance, a subscription's `max_in_flight` and pace, a tenant's share, a `Retry-After`) with
//! parking, the breaker, and the drain at shutdown. The store is the embedded one (a fresh file
//! per test); the sink is in-process and holds attempts until the test lets them go, so every
//! rule is proved by what the sink saw and what the store holds, without sleeps or HTTP.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use hub_core::SinkKind;
use hub_core::delivery::inflight::{INITIAL_ALLOWANCE, Limits};
use hub_core::delivery::{BreakerConfig, JobState, RetryPolicy};
use hub_sinks::{Destination, Failure, FailureKind, Message, Outcome, Probed, Secrets, Sink};
use hub_store::prelude::*;
use hub_store::{ClaimRequest, IngestRecord, SqliteStore, SubscriptionRecord};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{BreakerBoard, Dispatcher, FlightBoard, Parts, Settings, Stall, lock};
use crate::clock::SystemClock;
use crate::operational::Notices;
use crate::secrets::Sealer;

const WAIT: Duration = Duration::from_secs(20);

/// A sink that counts what it is given, per destination URL: attempts, how many run at once, and
/// the most that ever ran at once. Attempts to a held URL wait for the test to let them go.
#[derive(Debug, Default)]
struct FakeSink {
    state: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    attempts: HashMap<String, usize>,
    running: HashMap<String, usize>,
    most: HashMap<String, usize>,
    failing: HashSet<String>,
    /// URLs whose attempts panic (a fault injected where a sink reads a third party's answer).
    panicking: HashSet<String>,
    /// URLs that answer `429` with this `Retry-After`.
    pausing: HashMap<String, Duration>,
    gates: HashMap<String, Arc<Semaphore>>,
    /// When each attempt reached each URL.
    arrivals: HashMap<String, Vec<std::time::Instant>>,
    /// URLs whose attempts take this long to answer.
    slow: HashMap<String, Duration>,
    /// URLs that take each message but whose answer stalls.
    stalling: HashSet<String>,
}

impl FakeSink {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Attempts to `url` wait until the returned gate gives them a permit.
    fn hold(&self, url: &str) -> Arc<Semaphore> {
        let gate = Arc::new(Semaphore::new(0));
        self.seen().gates.insert(url.to_owned(), Arc::clone(&gate));
        gate
    }

    fn fail(&self, url: &str) {
        self.seen().failing.insert(url.to_owned());
    }

    fn panic_on(&self, url: &str) {
        self.seen().panicking.insert(url.to_owned());
    }

    fn slow(&self, url: &str, answer_in: Duration) {
        self.seen().slow.insert(url.to_owned(), answer_in);
    }

    fn stall(&self, url: &str) {
        self.seen().stalling.insert(url.to_owned());
    }

    fn pause(&self, url: &str, retry_after: Duration) {
        self.seen().pausing.insert(url.to_owned(), retry_after);
    }

    fn arrivals(&self, url: &str) -> Vec<std::time::Instant> {
        self.seen().arrivals.get(url).cloned().unwrap_or_default()
    }

    fn attempts(&self, url: &str) -> usize {
        self.seen().attempts.get(url).copied().unwrap_or(0)
    }

    fn running(&self, url: &str) -> usize {
        self.seen().running.get(url).copied().unwrap_or(0)
    }

    fn most(&self, url: &str) -> usize {
        self.seen().most.get(url).copied().unwrap_or(0)
    }
}

fn url_of(destination: &Destination) -> String {
    match destination {
        Destination::Webhook(c) => c.url.clone(),
        other => format!("{other:?}"),
    }
}

#[async_trait]
impl Sink for FakeSink {
    async fn deliver(&self, destination: &Destination, _: &Secrets, _: &Message<'_>, _: Duration) -> Outcome {
        let url = url_of(destination);
        let gate = {
            let mut seen = self.seen();
            *seen.attempts.entry(url.clone()).or_default() += 1;
            seen.arrivals.entry(url.clone()).or_default().push(std::time::Instant::now());
            let running = seen.running.entry(url.clone()).or_default();
            *running += 1;
            let now = *running;
            let most = seen.most.entry(url.clone()).or_default();
            *most = (*most).max(now);
            (seen.gates.get(&url).cloned(), seen.slow.get(&url).copied())
        };
        let (gate, slow) = gate;
        if let Some(slow) = slow {
            tokio::time::sleep(slow).await;
        }
        if let Some(gate) = gate
            && let Ok(permit) = gate.acquire().await
        {
            permit.forget();
        }
        let mut seen = self.seen();
        *seen.running.entry(url.clone()).or_default() -= 1;
        if seen.panicking.contains(&url) {
            drop(seen);
            panic!("a sink panicked (injected)");
        }
        if let Some(pause) = seen.pausing.get(&url) {
            Outcome::Failed(Failure {
                retryable: true,
                kind: FailureKind::Refused,
                reason: "HTTP 429".to_owned(),
                status: Some(429),
                response: None,
                retry_after: Some(*pause),
            })
        } else if seen.failing.contains(&url) {
            Outcome::Failed(Failure {
                retryable: true,
                kind: FailureKind::Refused,
                reason: "HTTP 503".to_owned(),
                status: Some(503),
                response: None,
                retry_after: None,
            })
        } else {
            Outcome::Delivered { status: Some(200), response: None, stalled: seen.stalling.contains(&url) }
        }
    }

    async fn probe(&self, _: &Destination, _: &Secrets, _: &str, _: Uuid, _: Duration) -> Result<Probed, Failure> {
        Ok(Probed::default())
    }
}

/// A dispatcher over a fresh embedded store and a fake sink.
struct Rig {
    store: Arc<dyn Store>,
    sink: Arc<FakeSink>,
    board: BreakerBoard,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
    run: Option<JoinHandle<()>>,
    path: std::path::PathBuf,
    dispatcher: Arc<Dispatcher>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.shutdown.cancel();
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
        }
    }
}

fn settings(max_in_flight: u32, idle_interval: Duration) -> Settings {
    Settings {
        max_in_flight,
        tenant_share: 0.5,
        claim_batch: 8,
        idle_interval,
        lease: Duration::from_secs(30),
        poison_threshold: 3,
        retry: RetryPolicy { curve: vec![Duration::from_secs(60); 8], deadline: Duration::from_secs(86_400) },
        breaker: BreakerConfig::default(),
        auto_disable: None,
    }
}

impl Rig {
    async fn start(workers: u32, sink: FakeSink, drain: Duration) -> Self {
        Self::with_idle(workers, sink, drain, Duration::from_millis(100)).await
    }

    /// A rig whose claimers look for work only every `idle` unless woken.
    async fn with_idle(workers: u32, sink: FakeSink, drain: Duration, idle: Duration) -> Self {
        let dir = std::env::temp_dir().join("streaming-hub-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(format!("dispatcher-{}.db", Uuid::now_v7()));
        let sqlite = SqliteStore::open(&path).await.expect("open sqlite");
        sqlite.migrate().await.expect("migrate");
        let store: Arc<dyn Store> = Arc::new(sqlite);
        let sink = Arc::new(sink);
        let board = BreakerBoard::default();
        let wake = Arc::new(Notify::new());
        let (notices, mut queue) = Notices::channel();
        tokio::spawn(async move { while queue.recv().await.is_some() {} });
        let parts = Parts {
            store: Arc::clone(&store),
            sealer: Arc::new(Sealer::new(None)),
            sinks: Arc::clone(&sink) as Arc<dyn Sink>,
            clock: Arc::new(SystemClock),
            wake: Arc::clone(&wake),
            notices,
            breakers: board.clone(),
            flights: FlightBoard::new(workers as usize, 0.5),
        };
        let dispatcher = Arc::new(Dispatcher::new(parts, settings(workers, idle)));
        let shutdown = CancellationToken::new();
        let run = Some(tokio::spawn(Arc::clone(&dispatcher).run(shutdown.clone(), drain)));
        Self { store, sink, board, wake, shutdown, run, path, dispatcher }
    }

    /// A webhook subscription of tenant `t1` to `url`, for events of type `loan.<event>`.
    async fn subscribe(&self, url: &str, event: &str) -> SubscriptionRecord {
        self.subscribe_with("t1", url, event, Limits::default()).await
    }

    /// A webhook subscription of `tenant` to `url` with `limits`.
    async fn subscribe_with(&self, tenant: &str, url: &str, event: &str, limits: Limits) -> SubscriptionRecord {
        let mut sub = hub_testkit::subscription(tenant, SinkKind::named("webhook"), &[&format!("loan.{event}")], None);
        sub.name = url.to_owned();
        sub.sink_config = serde_json::json!({"type": "webhook", "url": url});
        sub.limits = limits;
        self.store.create_subscription(&sub).await.expect("create subscription");
        sub
    }

    /// Ingests `n` events of type `loan.<event>` for tenant `t1`.
    async fn ingest(&self, event: &str, n: usize) {
        self.ingest_for("t1", event, n).await;
    }

    /// Ingests `n` events of type `loan.<event>` for `tenant`.
    async fn ingest_for(&self, tenant: &str, event: &str, n: usize) {
        let batch = events_for(tenant, event, n);
        self.store.write_batch(&batch).await.expect("write");
        self.wake.notify_one();
    }

    async fn jobs(&self, sub: &SubscriptionRecord) -> Vec<hub_store::DeliveryJob> {
        self.store.list_jobs(&sub.tenant_id, sub.id, None, None, 1000).await.expect("jobs")
    }

    async fn count(&self, sub: &SubscriptionRecord, state: JobState) -> usize {
        self.jobs(sub).await.iter().filter(|j| j.state == state).count()
    }

    /// Stops the dispatcher and waits for its drain to end.
    async fn stop(&mut self) {
        self.shutdown.cancel();
        let run = self.run.take().expect("running");
        tokio::time::timeout(WAIT, run).await.expect("the dispatcher stops").expect("no panic");
    }
}

/// `n` accepted events of type `loan.<event>` for tenant `t1`.
fn events(event: &str, n: usize) -> Vec<IngestRecord> {
    events_for("t1", event, n)
}

fn events_for(tenant: &str, event: &str, n: usize) -> Vec<IngestRecord> {
    (0..n)
        .map(|_| hub_testkit::accepted_with(hub_testkit::event_headers(tenant, Uuid::now_v7(), "loan", event), b"{}"))
        .collect()
}

/// Polls `check` until it holds, or fails the test with `what` after [`WAIT`].
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const A: &str = "https://a.example/hook";
const B: &str = "https://b.example/hook";
const C: &str = "https://c.example/hook";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_destination_holds_its_initial_allowance_and_others_go_past_it() {
    let sink = FakeSink::default();
    let gate = sink.hold(A);
    let mut rig = Rig::start(64, sink, Duration::from_secs(5)).await;
    let slow = rig.subscribe(A, "approved").await;
    let fast = rig.subscribe(B, "declined").await;
    rig.ingest("approved", 20).await;
    rig.ingest("declined", 1).await;

    // B is delivered while A's first attempts hang; the rest of A's jobs wait (parked).
    let initial = INITIAL_ALLOWANCE as usize;
    until("B is delivered and A has its allowance out", || async {
        rig.sink.running(A) == initial && rig.count(&fast, JobState::Succeeded).await == 1
    })
    .await;
    assert_eq!(rig.sink.attempts(A), initial, "no attempt to A beyond its allowance while none has ended");

    gate.add_permits(100);
    until("every job of A succeeded", || async { rig.count(&slow, JobState::Succeeded).await == 20 }).await;
    assert_eq!(rig.sink.attempts(A), 20, "each job of A attempted exactly once");
    assert_eq!(rig.sink.most(A), initial, "never more than the allowance while attempts were held");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_never_passes_its_own_max_in_flight() {
    let sink = FakeSink::default();
    let gate = sink.hold(A);
    let mut rig = Rig::start(64, sink, Duration::from_secs(5)).await;
    let capped = rig.subscribe_with("t1", A, "approved", Limits { max_in_flight: Some(2), per_second: None }).await;
    rig.ingest("approved", 6).await;
    until("A runs two attempts", || async { rig.sink.running(A) == 2 }).await;
    // Let them go one at a time: each end lets exactly one more in.
    for done in 1..=4 {
        gate.add_permits(1);
        until("the next attempt starts", || async { rig.sink.attempts(A) == 2 + done }).await;
        assert!(rig.sink.running(A) <= 2);
    }
    gate.add_permits(100);
    until("every job succeeded", || async { rig.count(&capped, JobState::Succeeded).await == 6 }).await;
    assert_eq!(rig.sink.most(A), 2, "never more than max_in_flight at once");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_receivers_hang_leaves_slots_for_another() {
    let sink = FakeSink::default();
    // Sixteen slots: a tenant's share is eight; beyond it one leaves two free (the reserve).
    let urls: Vec<String> = (0..4).map(|i| format!("https://hang{i}.example/hook")).collect();
    let gates: Vec<_> = urls.iter().map(|u| sink.hold(u)).collect();
    let mut rig = Rig::start(16, sink, Duration::from_secs(5)).await;
    for (i, url) in urls.iter().enumerate() {
        rig.subscribe_with("hanging", url, &format!("e{i}"), Limits::default()).await;
    }
    let other = rig.subscribe_with("other", B, "declined", Limits::default()).await;
    for i in 0..4 {
        rig.ingest_for("hanging", &format!("e{i}"), 10).await;
    }
    let running = |rig: &Rig| urls.iter().map(|u| rig.sink.running(u)).sum::<usize>();
    until("the hanging tenant holds all but the reserve", || async { running(&rig) == 14 }).await;
    // Another tenant's jobs start at once, every one of them.
    rig.ingest_for("other", "declined", 5).await;
    until("the other tenant is delivered", || async { rig.count(&other, JobState::Succeeded).await == 5 }).await;
    assert_eq!(running(&rig), 14, "the hanging tenant took nothing more");
    for gate in &gates {
        gate.add_permits(100);
    }
    rig.stop().await;
}

/// SPEC §11: a panic in an attempt (here injected in the sink, where a third party's answer is
/// read) gives back its slot, its ledger entry and the in-flight gauge; with sixteen slots, a
/// thousand panicking attempts leave nothing held, each is recorded as a failure to retry (which
/// moves no breaker: the hub failed, not the destination), and another tenant is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_attempts_give_back_everything_they_took() {
    let sink = FakeSink::default();
    sink.panic_on(A);
    let mut rig = Rig::start(16, sink, Duration::from_secs(5)).await;
    let panicking = rig.subscribe_with("hostile", A, "approved", Limits::default()).await;
    let other = rig.subscribe_with("other", B, "declined", Limits::default()).await;
    let n = 1000;
    rig.ingest_for("hostile", "approved", n).await;
    rig.ingest_for("other", "declined", 20).await;
    // Retries come on the curve's jittered delays: some jobs are on their second or third.
    until("every panicking attempt is recorded as a failure to retry", || async {
        let jobs = rig.jobs(&panicking).await;
        let retried = jobs.iter().filter(|j| {
            j.state == JobState::Pending
                && j.attempts >= 1
                && j.last_error.as_deref().is_some_and(|e| e.contains("failed unexpectedly"))
        });
        rig.sink.attempts(A) >= n && retried.count() == n
    })
    .await;
    until("the other tenant is delivered", || async { rig.count(&other, JobState::Succeeded).await == 20 }).await;
    rig.sink.seen().panicking.clear();
    // Every slot came back: sixteen attempts run at once again.
    let gate = rig.sink.hold(C);
    rig.subscribe_with("third", C, "held", Limits::default()).await;
    rig.ingest_for("third", "held", 4).await;
    until("new attempts start", || async { rig.sink.running(C) == 4 }).await;
    gate.add_permits(100);
    rig.stop().await;
    assert_eq!(rig.dispatcher.flights.lock().in_flight(), 0, "nothing is held in flight");
    assert!(lock(&rig.dispatcher.in_flight).is_empty(), "no job is left counted as in flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_pauses_its_destination_only_without_spending_attempts() {
    let sink = FakeSink::default();
    sink.pause(A, Duration::from_secs(120));
    let mut rig = Rig::start(64, sink, Duration::from_secs(5)).await;
    let paused = rig.subscribe_with("t1", A, "approved", Limits { max_in_flight: Some(1), per_second: None }).await;
    let fine = rig.subscribe(B, "declined").await;
    let asked = Utc::now();
    rig.ingest("approved", 5).await;
    rig.ingest("declined", 3).await;
    until("B is delivered", || async { rig.count(&fine, JobState::Succeeded).await == 3 }).await;
    until("A's jobs are all back in the store", || async {
        rig.count(&paused, JobState::Pending).await == 5 && rig.sink.running(A) == 0
    })
    .await;
    assert_eq!(rig.sink.attempts(A), 1, "one attempt asked for the pause; no other was made");
    let jobs = rig.jobs(&paused).await;
    assert_eq!(jobs.iter().map(|j| j.attempts).sum::<i32>(), 1, "the others spent no attempt");
    for job in jobs.iter().filter(|j| j.attempts == 0) {
        assert!(
            job.due_at >= asked + chrono::Duration::seconds(100),
            "put back until the pause ends: due {}",
            job.due_at
        );
    }
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_is_never_sent_to_faster_than_its_rate() {
    let mut rig = Rig::start(64, FakeSink::default(), Duration::from_secs(5)).await;
    let rate = 20.0;
    let paced = rig.subscribe_with("t1", A, "approved", Limits { max_in_flight: None, per_second: Some(rate) }).await;
    rig.ingest("approved", 12).await;
    until("every job succeeded", || async { rig.count(&paced, JobState::Succeeded).await == 12 }).await;
    let arrivals = rig.sink.arrivals(A);
    assert_eq!(arrivals.len(), 12);
    // Over any stretch of arrivals, no more than the rate allows (a burst of one).
    for (i, first) in arrivals.iter().enumerate() {
        for (k, last) in arrivals.iter().enumerate().skip(i + 1) {
            let span = last.duration_since(*first).as_secs_f64();
            let allowed = span * rate + 1.0 + 0.05;
            assert!(((k - i + 1) as f64) <= allowed, "{} arrivals in {span:.3} s at {rate}/s", k - i + 1);
        }
    }
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_puts_jobs_back_without_spending_their_attempts() {
    let sink = FakeSink::default();
    sink.fail(A);
    let mut rig = Rig::start(4, sink, Duration::from_secs(5)).await;
    let broken = rig.subscribe(A, "approved").await;
    rig.ingest("approved", 12).await;

    until("the breaker opens", || async { rig.board.state(broken.id) == "open" }).await;
    let opened = Utc::now();
    // Every job goes back to pending: the attempted ones for their retry, the others to wait
    // out the breaker's cool-down.
    until("no job of A is leased", || async {
        rig.count(&broken, JobState::Pending).await == 12 && rig.sink.running(A) == 0
    })
    .await;
    let jobs = rig.jobs(&broken).await;
    let attempted: i32 = jobs.iter().map(|j| j.attempts).sum();
    let threshold = BreakerConfig::default().failure_threshold as usize;
    // The failure that opened it, plus at most the one attempt already running beside it.
    assert!((threshold..=threshold + 1).contains(&rig.sink.attempts(A)), "{} attempts", rig.sink.attempts(A));
    assert_eq!(attempted as usize, rig.sink.attempts(A), "the store counts exactly the attempts made");
    for job in jobs.iter().filter(|j| j.attempts == 0) {
        assert!(
            job.due_at >= opened + chrono::Duration::seconds(20),
            "a job put back by the open breaker waits out its cool-down: due {} opened {opened}",
            job.due_at
        );
    }
    assert!(jobs.iter().filter(|j| j.attempts == 0).count() >= 12 - threshold - 1);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_an_attempt_in_flight_finish_and_records_it() {
    let sink = FakeSink::default();
    let gate = sink.hold(A);
    let mut rig = Rig::start(2, sink, Duration::from_secs(10)).await;
    let sub = rig.subscribe(A, "approved").await;
    rig.ingest("approved", 1).await;
    until("the attempt is in flight", || async { rig.sink.running(A) == 1 }).await;

    rig.shutdown.cancel();
    // The attempt ends only after the shutdown began.
    gate.add_permits(1);
    rig.stop().await;
    let jobs = rig.jobs(&sub).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!((jobs[0].state, jobs[0].attempts), (JobState::Succeeded, 1), "the outcome was recorded in the drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_that_outlives_the_drain_gives_its_job_back_at_once() {
    let sink = FakeSink::default();
    let _gate = sink.hold(A);
    let mut rig = Rig::start(2, sink, Duration::from_millis(300)).await;
    let sub = rig.subscribe(A, "approved").await;
    rig.ingest("approved", 1).await;
    until("the attempt is in flight", || async { rig.sink.running(A) == 1 }).await;

    rig.stop().await;
    let jobs = rig.jobs(&sub).await;
    assert_eq!((jobs[0].state, jobs[0].attempts), (JobState::Pending, 0), "released, not left leased");
    // Another replica takes it now, not when the 30 s lease would have expired.
    let now = Utc::now();
    let claim = rig
        .store
        .claim_jobs(&ClaimRequest {
            now,
            lease_until: now + chrono::Duration::seconds(30),
            token: Uuid::now_v7(),
            limit: 10,
            after_tenant: None,
            exclude_subscriptions: Vec::new(),
            owned: Default::default(),
        })
        .await
        .expect("claim");
    assert_eq!(claim.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![jobs[0].id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_leased_at_ingest_are_attempted_without_a_claim() {
    // Claimers that would look for work only once an hour, and are never woken: only the
    // handover can bring the jobs to the workers.
    let mut rig = Rig::with_idle(4, FakeSink::default(), Duration::from_secs(5), Duration::from_secs(3600)).await;
    let sub = rig.subscribe(A, "approved").await;
    // The claimers' first look happens at start; wait until it found nothing.
    until("the dispatcher takes ingest", || async { rig.dispatcher.reserve(1).is_some() }).await;
    let batch = events("approved", 3);
    let reservation = rig.dispatcher.reserve(batch.len()).expect("room");
    let (outcomes, leased) = rig.store.write_batch_leased(&batch, &reservation.lease).await.expect("write");
    assert_eq!((leased.jobs.len(), leased.pending), (3, 0));
    assert_eq!(leased.subscriptions.iter().map(|s| s.id).collect::<Vec<_>>(), vec![sub.id], "read by the write");
    let events = crate::ingest::leased_events(&batch, &outcomes, &leased.jobs);
    assert_eq!(events.len(), 3, "every leased job has its event from the write");
    rig.dispatcher.hand_over(reservation, leased, events).await;
    until("the three jobs succeeded", || async { rig.count(&sub, JobState::Succeeded).await == 3 }).await;
    assert_eq!(rig.sink.attempts(A), 3);

    rig.stop().await;
    assert!(rig.dispatcher.reserve(1).is_none(), "a stopped dispatcher takes nothing from ingest");
}

/// Attempts that never end filling the slots are a stall the readiness check reports; the
/// stall is over once they end, and a dispatcher that stopped is not stalled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_filling_the_slots_without_ending_are_a_stall() {
    let sink = FakeSink::default();
    let gate = sink.hold(A);
    let mut rig = Rig::start(4, sink, Duration::from_secs(5)).await;
    let held = rig.subscribe(A, "approved").await;
    rig.ingest("approved", 6).await;
    // One tenant fills all but the reserve (one of four).
    until("the slots are full", || async { rig.sink.running(A) == 3 }).await;
    let after = Duration::from_secs(120);
    let past = std::time::Instant::now() + after + Duration::from_secs(1);
    // The slots as they would look then, the loop still turning.
    let slots_then = || {
        let mut ledger = rig.dispatcher.flights.lock();
        ledger.turned(Some(past));
        ledger.stall(past, after)
    };
    assert_eq!(slots_then(), Some(Stall::Slots));
    assert_eq!(rig.dispatcher.flights.stall(after), None, "not for long yet");
    gate.add_permits(100);
    until("the attempts end", || async { rig.count(&held, JobState::Succeeded).await == 6 }).await;
    assert_eq!(slots_then(), None, "attempts ended: progress");
    rig.stop().await;
    assert_eq!(rig.dispatcher.flights.lock().stall(past + after, after), None, "stopped by design");
}

/// A destination whose answers stall after a `2xx` head is delivered to, but its allowance is
/// cut as for timeouts, never grown: it never holds more than its initial allowance, while a
/// healthy destination of the same latency grows past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_stall_cut_the_allowance_instead_of_growing_it() {
    let sink = FakeSink::default();
    sink.slow(A, Duration::from_millis(30));
    sink.stall(A);
    sink.slow(B, Duration::from_millis(30));
    let mut rig = Rig::start(256, sink, Duration::from_secs(5)).await;
    let stalling = rig.subscribe(A, "approved").await;
    let healthy = rig.subscribe(B, "declined").await;
    rig.ingest("approved", 200).await;
    rig.ingest("declined", 200).await;
    until("both are delivered", || async {
        rig.count(&stalling, JobState::Succeeded).await == 200 && rig.count(&healthy, JobState::Succeeded).await == 200
    })
    .await;
    let initial = INITIAL_ALLOWANCE as usize;
    assert!(rig.sink.most(A) <= initial, "the stalling destination held {} at once", rig.sink.most(A));
    assert!(rig.sink.most(B) > initial, "the healthy one grew to {}", rig.sink.most(B));
    rig.stop().await;
}

/// A rate lowered while jobs wait in the process applies to them within a second, and a pause
/// sends them back to the store: the backlog is not sent at the old rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_rate_or_a_pause_reaches_jobs_already_waiting() {
    let mut rig = Rig::start(64, FakeSink::default(), Duration::from_secs(5)).await;
    let paced = rig.subscribe_with("t1", A, "approved", Limits { max_in_flight: None, per_second: Some(20.0) }).await;
    rig.ingest("approved", 400).await;
    until("the backlog is being sent at 20/s", || async { rig.sink.attempts(A) >= 20 }).await;
    let patch = |limits: Option<Limits>, enabled: Option<bool>| hub_store::SubscriptionPatch {
        limits,
        enabled,
        disabled_reason: enabled.filter(|e| !e).map(|_| "paused by its owner".to_owned()),
        now: Utc::now(),
        ..hub_store::SubscriptionPatch::default()
    };
    let lowered = Limits { max_in_flight: None, per_second: Some(2.0) };
    rig.store.patch_subscription("t1", paced.id, &patch(Some(lowered), None)).await.expect("patch").expect("found");
    let changed = std::time::Instant::now();
    // From a second after the change, over four seconds: the new rate (and its burst of one).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let arrivals = rig.sink.arrivals(A);
    let from = changed + Duration::from_secs(1);
    let window = arrivals.iter().filter(|t| **t >= from && **t < from + Duration::from_secs(4)).count();
    assert!(window <= 4 * 2 + 1, "{window} attempts in 4 s after lowering the rate to 2/s");
    assert!(window >= 4, "the backlog goes on at the new rate ({window} in 4 s)");
    // Paused: the waiting jobs go back to the store within a second and no attempt starts.
    rig.store.patch_subscription("t1", paced.id, &patch(None, Some(false))).await.expect("patch").expect("found");
    let paused = std::time::Instant::now();
    until("no job of the paused subscription is leased", || async {
        let jobs = rig.jobs(&paced).await;
        jobs.iter().all(|j| j.state != JobState::Leased)
    })
    .await;
    let after = rig.sink.arrivals(A).iter().filter(|t| **t > paused + Duration::from_secs(1)).count();
    assert_eq!(after, 0, "attempts started more than a second after the pause");
    rig.stop().await;
}

/// Jobs waiting in the process whose events an erasure reached are dropped once their lease is
/// taken away: none of them is attempted with the payload the process still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_waiting_here_are_dropped_when_an_erasure_takes_their_lease() {
    let mut rig = Rig::start(64, FakeSink::default(), Duration::from_secs(5)).await;
    let paced = rig.subscribe_with("t1", A, "approved", Limits { max_in_flight: None, per_second: Some(2.0) }).await;
    rig.ingest("approved", 30).await;
    until("the backlog waits for its pace", || async {
        rig.sink.attempts(A) >= 1 && lock(&rig.dispatcher.in_flight).len() >= 10
    })
    .await;
    let seqs: Vec<i64> = rig.jobs(&paced).await.iter().map(|j| j.event_seq).collect();
    let now = Utc::now();
    let step = hub_store::ErasureStep {
        erasure: Uuid::now_v7(),
        tenant_id: "t1",
        seqs: &seqs,
        tombstone: b"{}",
        scanned_to: seqs.iter().copied().max().unwrap_or(0),
        scanned: 0,
        now,
        lease_until: now,
    };
    rig.store.erase_events(&step).await.expect("erase");
    let at_erasure = rig.sink.attempts(A);
    until("the waiting jobs are dropped", || async { lock(&rig.dispatcher.in_flight).is_empty() }).await;
    assert!(rig.sink.attempts(A) <= at_erasure + 1, "{} attempts after the erasure", rig.sink.attempts(A) - at_erasure);
    let jobs = rig.jobs(&paced).await;
    assert!(jobs.iter().all(|j| matches!(j.state, JobState::Cancelled | JobState::Succeeded)), "{jobs:?}");
    rig.stop().await;
}
