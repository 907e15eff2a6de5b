//! One hub, several replicas on one PostgreSQL (docs/SCALING.md): what a receiver was promised —
//! a declared rate, a subscription's limits, a `Retry-After`, its capacity — holds for the
//! cluster, not per replica, and a replica killed with SIGKILL hands its destinations on within
//! seconds, losing nothing. Each replica is a process of its own; events are posted to every
//! replica in turn, so every replica's ingest writes jobs the one that paces them must claim.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};

use hub_store::prelude::*;

use crate::receiver::{Receiver, Script};
use crate::support::{Event, HubProcess, fresh_schema, http_client, postgres_dsn};

/// The buckets destinations fall in (`hub_core::delivery::owners::BUCKETS`).
const BUCKETS: f64 = 1024.0;

struct Cluster {
    replicas: Vec<HubProcess>,
    /// One client for every request (a client per post would spend the test's CPU loading
    /// certificates).
    client: reqwest::Client,
    vars: Vec<(&'static str, String)>,
    admin: String,
    store: hub_store::PgStore,
}

impl Cluster {
    /// `n` delivering replicas on a fresh schema, each seeing the others and pacing its share.
    async fn start(n: usize, extra: &[(&'static str, &str)]) -> Self {
        let schema = fresh_schema().await;
        let store = hub_store::PgStore::connect(&postgres_dsn(), Some(&schema), 2).await.expect("connect");
        store.migrate().await.expect("migrate");
        let admin = format!("admin-{}", uuid::Uuid::now_v7().simple());
        let mut vars = vec![
            ("STREAMING_HUB_POSTGRES_DSN", postgres_dsn()),
            ("STREAMING_HUB_POSTGRES_SCHEMA", schema),
            ("STREAMING_HUB_POSTGRES_MAX_CONNECTIONS", "8".to_owned()),
            ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
            ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
            ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
            ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20".to_owned()),
            ("STREAMING_HUB_RETRY_CURVE", "0s,50ms,50ms,50ms,50ms,50ms,50ms,50ms".to_owned()),
        ];
        vars.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let mut cluster = Self { replicas: Vec::new(), client: http_client(), vars, admin, store };
        for _ in 0..n {
            cluster.replicas.push(HubProcess::start(&cluster.vars).await);
        }
        cluster.settled().await;
        cluster
    }

    /// Waits until every replica sees all the others and the buckets they pace add up to every
    /// bucket, each replica pacing some.
    async fn settled(&self) {
        let n = self.replicas.len() as f64;
        crate::support::until("the replicas to share the destinations", Duration::from_secs(30), async || {
            let mut owned = Vec::new();
            for r in &self.replicas {
                let m = metrics(r).await;
                if metric(&m, "streaming_hub_replicas_live", "delivery") != n {
                    return None;
                }
                owned.push(metric(&m, "streaming_hub_destination_buckets_owned", ""));
            }
            (owned.iter().sum::<f64>() == BUCKETS && owned.iter().all(|o| *o > 0.0)).then_some(())
        })
        .await;
    }

    /// A key of tenant `t1`.
    async fn key(&self) -> String {
        let body: Value = http_client()
            .post(format!("{}/admin/api-keys", self.replicas[0].base))
            .bearer_auth(&self.admin)
            .json(&json!({"tenant_id": "t1"}))
            .send()
            .await
            .expect("key")
            .json()
            .await
            .expect("json");
        body["key"].as_str().expect("key").to_owned()
    }

    /// A verified webhook subscription to `url` (a path of `receiver`), created through one
    /// replica, with these limits; `receiver` trusts its secret.
    async fn webhook(&self, key: &str, receiver: &Receiver, url: &str, limits: Value) -> String {
        let body: Value = http_client()
            .post(format!("{}/v1/subscriptions", self.replicas[0].base))
            .bearer_auth(key)
            .json(&json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": url}, "limits": limits}))
            .send()
            .await
            .expect("subscribe")
            .json()
            .await
            .expect("json");
        receiver.trust(body["signing_secret"].as_str().unwrap_or_else(|| panic!("not created: {body}")));
        let id = body["id"].as_str().expect("id").to_owned();
        crate::support::until("the subscription to be verified", Duration::from_secs(20), async || {
            let read = self.get(0, key, &format!("/v1/subscriptions/{id}")).await;
            (read["verification_state"] == "active").then_some(())
        })
        .await;
        id
    }

    async fn get(&self, replica: usize, key: &str, path: &str) -> Value {
        let r = http_client()
            .get(format!("{}{path}", self.replicas[replica].base))
            .bearer_auth(key)
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), StatusCode::OK);
        r.json().await.expect("json")
    }

    /// Posts `events`, each to the next replica in turn, 16 at a time.
    async fn post_round_robin(&self, key: &str, events: &[Event]) {
        futures_util::stream::iter(
            events.iter().enumerate().map(|(i, e)| self.post(&self.replicas[i % self.replicas.len()], key, e)),
        )
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    }

    /// Posts one event in binary mode to `replica` and expects it accepted.
    async fn post(&self, replica: &HubProcess, key: &str, event: &Event) {
        let mut request = self.client.post(format!("{}/v1/events", replica.base)).bearer_auth(key);
        for (k, v) in &event.headers {
            request = request.header(k.as_str(), v.as_str());
        }
        let status = request.body(event.body.clone()).send().await.expect("post").status();
        assert_eq!(status, StatusCode::ACCEPTED);
    }
}

async fn metrics(replica: &HubProcess) -> String {
    http_client().get(format!("{}/metrics", replica.base)).send().await.expect("metrics").text().await.expect("text")
}

/// The value of a gauge (with `label` in its labels, when given).
fn metric(metrics: &str, name: &str, label: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `receiver` accepted every one of `events`; returns how many times each was.
async fn all_accepted(receiver: &Receiver, events: &[Event], within: Duration) -> HashMap<String, usize> {
    let end = tokio::time::Instant::now() + within;
    loop {
        if receiver.accepted_len() < events.len() {
            assert!(
                tokio::time::Instant::now() < end,
                "{} of {} delivered in time",
                receiver.accepted_len(),
                events.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let mut counts: HashMap<String, usize> = HashMap::new();
        for d in receiver.accepted() {
            *counts.entry(d.header("x-lerian-event-id")).or_default() += 1;
        }
        if events.iter().all(|e| counts.contains_key(&e.id().to_string())) {
            return counts;
        }
        assert!(tokio::time::Instant::now() < end, "{} of {} delivered in time", counts.len(), events.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The most deliveries in any stretch of `at` beyond what `per_second` allows over it (at most
/// one at its start): positive means the rate was passed.
fn most_over_rate(at: &[Instant], per_second: f64) -> f64 {
    let mut worst = f64::MIN;
    for (i, first) in at.iter().enumerate() {
        for (k, last) in at.iter().enumerate().skip(i + 1) {
            let span = last.duration_since(*first).as_secs_f64();
            worst = worst.max((k - i + 1) as f64 - (span * per_second + 1.0));
        }
    }
    worst
}

/// A receiver that declared `WebHook-Allowed-Rate: 600` gets at most 10 a second from three
/// replicas together; every replica's listing names the same replica as its pacer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_keep_a_receivers_declared_rate_together() {
    let cluster = Cluster::start(3, &[]).await;
    let key = cluster.key().await;
    let rx = Receiver::start(Script::Ok).await;
    rx.declare_rate("600");
    let id = cluster.webhook(&key, &rx, &rx.url, Value::Null).await;
    let events: Vec<Event> = (0..300).map(|_| Event::new("t1")).collect();
    let started = Instant::now();
    cluster.post_round_robin(&key, &events).await;
    let counts = all_accepted(&rx, &events, Duration::from_secs(90)).await;
    let at: Vec<Instant> = rx.accepted().iter().map(|d| d.received_at).collect();
    let over = most_over_rate(&at, 10.0);
    let span = at.last().expect("last").duration_since(at[0]).as_secs_f64();
    let overall = (at.len() - 1) as f64 / span;
    eprintln!(
        "declared 600/min, 3 replicas: {} deliveries in {span:.1} s ({overall:.2}/s), worst stretch {over:+.2} over 10/s, \
         {:.1} s from the first post",
        at.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(counts.values().all(|n| *n == 1), "each once");
    assert!(overall <= 10.5, "{overall:.2}/s in total");
    // Arrival times carry the loopback's jitter: a stretch may look one delivery over, never more
    // (three replicas pacing alone would send up to 30/s).
    assert!(over <= 1.0, "a stretch passed 10/s by {over:.2} deliveries");

    // Who paces it, as every replica tells it.
    let mut pacers = Vec::new();
    for i in 0..3 {
        let listed = cluster.get(i, &key, "/v1/subscriptions").await;
        let read =
            listed["items"].as_array().expect("items").iter().find(|s| s["id"] == id.as_str()).expect("listed").clone();
        let delivery = &read["health"]["delivery"];
        assert_eq!(delivery["rate_per_second"], json!(10.0), "{read}");
        pacers.push(delivery["paced_by"].as_str().unwrap_or_else(|| panic!("no pacer: {read}")).to_owned());
    }
    assert!(pacers.iter().all(|p| *p == pacers[0]), "{pacers:?}");
}

/// `limits.max_in_flight: 5` holds at the receiver across three replicas, and
/// `limits.per_second: 20` holds in total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_keep_a_subscriptions_limits_together() {
    let cluster = Cluster::start(3, &[]).await;
    let key = cluster.key().await;
    let slow = Receiver::start(Script::Slow(Duration::from_millis(150))).await;
    cluster.webhook(&key, &slow, &slow.url, json!({"max_in_flight": 5})).await;
    let events: Vec<Event> = (0..150).map(|_| Event::new("t1")).collect();
    cluster.post_round_robin(&key, &events).await;
    let counts = all_accepted(&slow, &events, Duration::from_secs(60)).await;
    eprintln!("max_in_flight 5, 3 replicas: {} at most at the receiver", slow.max_in_flight());
    assert!(counts.values().all(|n| *n == 1), "each once");
    assert_eq!(slow.max_in_flight(), 5, "never more than 5 at once, and the limit used");

    let key = cluster.key().await;
    let paced = Receiver::start(Script::Ok).await;
    cluster.webhook(&key, &paced, &paced.url, json!({"per_second": 20})).await;
    let events: Vec<Event> = (0..200).map(|_| Event::new("t1")).collect();
    cluster.post_round_robin(&key, &events).await;
    all_accepted(&paced, &events, Duration::from_secs(60)).await;
    let at: Vec<Instant> = paced.accepted().iter().map(|d| d.received_at).collect();
    let span = at.last().expect("last").duration_since(at[0]).as_secs_f64();
    let overall = (at.len() - 1) as f64 / span;
    let over = most_over_rate(&at, 20.0);
    eprintln!("per_second 20, 3 replicas: {overall:.2}/s over {span:.1} s, worst stretch {over:+.2}");
    assert!(overall <= 21.0, "{overall:.2}/s in total");
    assert!(over <= 1.0, "a stretch passed 20/s by {over:.2} deliveries");
}

/// A `429` with `Retry-After: 3` that one replica saw keeps every replica away from the
/// destination for 3 s, whichever replica took the events in; then everything is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_seen_by_one_replica_holds_for_all() {
    let cluster = Cluster::start(3, &[]).await;
    let key = cluster.key().await;
    let rx = Receiver::start(Script::TooManyFirst(1, 3)).await;
    cluster.webhook(&key, &rx, &rx.url, Value::Null).await;
    let first = Event::new("t1");
    cluster.post(&cluster.replicas[0], &key, &first).await;
    crate::support::until("the 429", Duration::from_secs(20), async || (rx.refused() == 1).then_some(())).await;
    let refused_at = rx.deliveries()[0].received_at;
    // Posted to every replica while the destination is paused.
    let mut events: Vec<Event> = (0..60).map(|_| Event::new("t1")).collect();
    cluster.post_round_robin(&key, &events).await;
    events.push(first);
    let counts = all_accepted(&rx, &events, Duration::from_secs(60)).await;
    let all = rx.deliveries();
    let next = all[1].received_at.duration_since(refused_at);
    eprintln!("Retry-After 3 s, 3 replicas: the next delivery came {:.3} s after the 429", next.as_secs_f64());
    assert_eq!(rx.refused(), 1);
    assert!(counts.values().all(|n| *n == 1), "each accepted once");
    assert!(next >= Duration::from_millis(2_950), "a replica sent {:.3} s after the 429", next.as_secs_f64());
}

/// A receiver that serves 10 at once and answers 503 beyond: the three replicas together keep
/// within its capacity (one adaptive allowance, not three), refuse few, deliver everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_one_adaptive_allowance() {
    let cluster = Cluster::start(3, &[]).await;
    let key = cluster.key().await;
    let rx = Receiver::start(Script::Capacity(10, Duration::from_millis(200))).await;
    cluster.webhook(&key, &rx, &rx.url, Value::Null).await;
    let events: Vec<Event> = (0..600).map(|_| Event::new("t1")).collect();
    cluster.post_round_robin(&key, &events).await;
    let counts = all_accepted(&rx, &events, Duration::from_secs(120)).await;
    let attempts = rx.deliveries().len();
    let refused = rx.refused();
    let share = refused as f64 / attempts as f64;
    eprintln!(
        "capacity 10, 3 replicas: {} at most in flight, {refused} of {attempts} attempts refused ({:.1} %)",
        rx.max_in_flight(),
        share * 100.0
    );
    assert!(counts.values().all(|n| *n == 1), "each once");
    assert!(rx.max_in_flight() <= 12, "{} in flight at the receiver", rx.max_in_flight());
    assert!(share < 0.05, "{refused} of {attempts} refused");
}

/// A replica killed with SIGKILL during a run against receivers that take 200 ms: its
/// destinations deliver again within 10 s (not when its 90 s leases expire), nothing is lost,
/// and the duplicates (attempts out at the kill) are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_destinations_move_within_seconds_and_nothing_is_lost() {
    let mut cluster = Cluster::start(3, &[("STREAMING_HUB_DISPATCH_LEASE", "90s")]).await;
    let key = cluster.key().await;
    let rx = Receiver::start(Script::Slow(Duration::from_millis(200))).await;
    // Twelve destinations (paths of one receiver), spread over the replicas.
    let mut paths = Vec::new();
    for d in 0..12 {
        let url = format!("{}/d{d}", rx.url);
        cluster.webhook(&key, &rx, &url, Value::Null).await;
        paths.push(format!("/hook/d{d}"));
    }
    let events: Vec<Event> = (0..4000 / 12).map(|_| Event::new("t1")).collect();
    let want = events.len() * paths.len();
    // Posted to the two replicas that stay while the third delivers its share; once a quarter
    // is delivered, the third dies.
    let victim = cluster.replicas.pop().expect("replica");
    let kill = async {
        crate::support::until("deliveries under way", Duration::from_secs(60), async || {
            (rx.accepted_len() >= want / 4).then_some(())
        })
        .await;
        let at = (Instant::now(), rx.accepted_len());
        victim.kill();
        at
    };
    let ((killed, delivered_at_kill), ()) = tokio::join!(kill, cluster.post_round_robin(&key, &events));
    // Every destination delivers again: the gap in each one's deliveries around the kill.
    let mut counts = HashMap::new();
    let end = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if rx.accepted_len() < want {
            assert!(tokio::time::Instant::now() < end, "{} of {want} delivered", rx.accepted_len());
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        counts.clear();
        for d in rx.accepted() {
            *counts.entry((d.path.clone(), d.header("x-lerian-event-id"))).or_insert(0usize) += 1;
        }
        if counts.len() == want {
            break;
        }
        assert!(tokio::time::Instant::now() < end, "{} of {want} delivered", counts.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let accepted = rx.accepted();
    let mut worst = Duration::ZERO;
    for path in &paths {
        let of: Vec<Instant> = accepted.iter().filter(|d| &d.path == path).map(|d| d.received_at).collect();
        let before = of.iter().filter(|t| **t <= killed).max();
        let after = of.iter().filter(|t| **t > killed).min();
        if let (Some(_), Some(after)) = (before, after) {
            worst = worst.max(after.duration_since(killed));
        }
    }
    let twice = counts.values().filter(|n| **n > 1).count();
    let lost = want - counts.len();
    eprintln!(
        "kill -9 of 1 of 3 replicas with {delivered_at_kill} of {want} delivered: lost {lost}, delivered twice {twice}, \
         every destination delivering again within {:.1} s",
        worst.as_secs_f64()
    );
    assert_eq!(lost, 0);
    assert!(worst <= Duration::from_secs(10), "a destination waited {:.1} s", worst.as_secs_f64());
    assert!(counts.values().all(|n| *n <= 2), "an event delivered more than twice");
    // The two that are left pace every destination between them.
    cluster.settled().await;
    drop(cluster.store);
}

/// A hot destination that promised nothing (no limits, no declared rate) and answers well is not
/// held to one replica: its pacer shares it, the other replicas attempt its jobs too, and every
/// event is still delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_destination_is_delivered_by_more_than_one_replica() {
    let cluster = Cluster::start(3, &[]).await;
    let key = cluster.key().await;
    // Answers in 2 s: whatever the pace of the posts (a loaded machine posts slowly), attempts
    // pile up at the receiver and its allowance grows large and used, for several heartbeats.
    let rx = Receiver::start(Script::Slow(Duration::from_secs(2))).await;
    cluster.webhook(&key, &rx, &rx.url, Value::Null).await;
    let events: Vec<Event> = (0..4_000).map(|_| Event::new("t1")).collect();
    cluster.post_round_robin(&key, &events).await;
    let counts = all_accepted(&rx, &events, Duration::from_secs(180)).await;
    let mut attempts = Vec::new();
    for r in &cluster.replicas {
        attempts.push(metric(&metrics(r).await, "streaming_hub_delivery_attempts_total", ""));
    }
    eprintln!(
        "a hot destination, 3 replicas: attempts per replica {attempts:?}, {} at most in flight at the receiver",
        rx.max_in_flight()
    );
    assert!(counts.values().all(|n| *n == 1), "each once");
    assert!(attempts.iter().filter(|a| **a > 0.0).count() >= 2, "one replica alone delivered: {attempts:?}");
}
