//! Chaos: a dependency goes away under load and comes back. Each scenario counts the events the
//! producer was told were accepted, and of those the ones delivered, lost and delivered twice.
//!
//! The outage is made by a TCP proxy between the hub and the dependency, which drops every open
//! connection and refuses new ones for the outage (what the hub sees of a PostgreSQL restart or a
//! broker going down), so the suite's shared services stay up for the other tests.

use std::collections::HashSet;
use std::time::Duration;

use hub_testkit::forwarder::Forwarder;
use lapin::options::{BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use reqwest::StatusCode;
use serde_json::json;

use crate::receiver::{Receiver, Script};
use crate::support::{Backend, Event, HubProcess, TestHub, fresh_schema, http_client, postgres_dsn};

/// The outage's proxy: the test kit's forwarder, started in front of `upstream`.
async fn proxy(upstream: &str) -> Forwarder {
    Forwarder::start(upstream.parse().expect("an address")).await.expect("forwarder")
}

/// 100 ms, then 29 retries a second apart.
const RETRIES_OUTLIVING_THE_OUTAGE: &str =
    "100ms,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s";

/// What a scenario counted (every field is reported through `Debug`).
#[derive(Debug)]
#[allow(dead_code)]
pub(crate) struct Count {
    pub accepted: usize,
    pub refused: usize,
    pub delivered: usize,
    pub lost: usize,
    pub duplicated: usize,
}

impl Count {
    fn of(accepted: &[String], refused: usize, got: &[String]) -> Self {
        let distinct: HashSet<&String> = got.iter().collect();
        Count {
            accepted: accepted.len(),
            refused,
            delivered: accepted.iter().filter(|id| distinct.contains(id)).count(),
            lost: accepted.iter().filter(|id| !distinct.contains(id)).count(),
            duplicated: got.len() - distinct.len(),
        }
    }
}

/// Waits (up to 90 s) until the webhook `receiver` has every accepted event, and counts.
pub(crate) async fn delivered_to(receiver: &Receiver, accepted: &[String], refused: usize) -> Count {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let got: Vec<String> = receiver.deliveries().iter().map(|d| d.header("x-lerian-event-id")).collect();
        let count = Count::of(accepted, refused, &got);
        if count.lost == 0 || tokio::time::Instant::now() >= deadline {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Posts `n` events at about `per_second`, cutting `proxy` for `outage` once a third were sent.
/// Returns the ids accepted (202), how many posts were refused or failed, and the longest a post
/// took.
async fn post_through_an_outage(
    base: &str,
    key: &str,
    n: usize,
    per_second: u64,
    proxy: &Forwarder,
    outage: Duration,
) -> (Vec<String>, usize, Duration) {
    let client = http_client();
    let cut = tokio::sync::Notify::new();
    // The outage ends on its own clock, whether or not a post is waiting on it.
    let restorer = async {
        cut.notified().await;
        tokio::time::sleep(outage).await;
        proxy.restore();
    };
    let poster = async {
        let (mut accepted, mut refused, mut slowest) = (Vec::new(), 0, Duration::ZERO);
        for i in 0..n {
            if i == n / 3 {
                proxy.cut();
                cut.notify_one();
            }
            let event = Event::new("t1");
            let sent = tokio::time::Instant::now();
            match crate::support::post_accepted(&client, base, key, &event, Duration::from_secs(15)).await {
                true => accepted.push(event.id().to_string()),
                false => refused += 1,
            }
            slowest = slowest.max(sent.elapsed());
            tokio::time::sleep(Duration::from_millis(1000 / per_second)).await;
        }
        (accepted, refused, slowest)
    };
    let (counted, ()) = tokio::join!(poster, restorer);
    proxy.restore();
    counted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_outage_mid_burst_loses_no_accepted_event() {
    let proxy = proxy("127.0.0.1:5432").await;
    let mut dsn = url::Url::parse(&postgres_dsn()).expect("dsn");
    dsn.set_port(Some(proxy.addr.port())).expect("port");
    let admin = format!("admin-{}", uuid::Uuid::now_v7().simple());
    let vars: Vec<(&str, String)> = vec![
        ("STREAMING_HUB_POSTGRES_DSN", dsn.to_string()),
        ("STREAMING_HUB_POSTGRES_SCHEMA", fresh_schema().await),
        ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ("STREAMING_HUB_DISPATCH_LEASE", "5s".to_owned()),
        ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "50".to_owned()),
    ];
    let receiver = Receiver::start(Script::Ok).await;
    let mut hub = HubProcess::start(&vars).await;
    let (key, _, _) = hub.verified_webhook(&admin, &receiver).await;

    let (accepted, refused, slowest) =
        post_through_an_outage(&hub.base, &key, 300, 60, &proxy, Duration::from_secs(3)).await;
    // A write waits out an outage shorter than its retry window: producers see a slow answer,
    // never an error (and the slow answer shows the outage happened).
    assert!(slowest >= Duration::from_secs(1), "the outage was not felt at all ({slowest:?}): it proved nothing");
    assert_eq!(refused, 0, "a post was refused during a 3 s outage; hub log: {}", hub.log.display());
    assert_eq!(accepted.len(), 300);

    let count = delivered_to(&receiver, &accepted, refused).await;
    eprintln!("chaos: PostgreSQL outage of 3 s mid-burst: {count:?}");
    assert_eq!(count.lost, 0, "{count:?}; hub log: {}", hub.log.display());
    assert!(hub.child.try_wait().expect("status").is_none(), "the hub kept running; log: {}", hub.log.display());
    let ready = http_client().get(format!("{}/readyz", hub.base)).send().await.expect("readyz");
    assert_eq!(ready.status(), StatusCode::OK);
}

crate::on_both_backends!(
    a_rabbitmq_outage_loses_no_accepted_event,
    a_kafka_broker_crash_and_restart_loses_no_acknowledged_record
);

async fn a_rabbitmq_outage_loses_no_accepted_event(backend: Backend) {
    let connection = Connection::connect("amqp://guest:guest@127.0.0.1:5672/%2f", ConnectionProperties::default())
        .await
        .expect("RabbitMQ is required for this test");
    let channel = connection.create_channel().await.expect("channel");
    let tag = uuid::Uuid::now_v7().simple().to_string();
    let (exchange, queue) = (format!("sh-chaos-{tag}"), format!("sh-chaos-{tag}"));
    let opts = ExchangeDeclareOptions { auto_delete: true, ..Default::default() };
    channel
        .exchange_declare(ShortString::from(exchange.as_str()), ExchangeKind::Topic, opts, FieldTable::default())
        .await
        .expect("exchange");
    let qopts = QueueDeclareOptions { auto_delete: true, ..Default::default() };
    channel.queue_declare(ShortString::from(queue.as_str()), qopts, FieldTable::default()).await.expect("queue");
    channel
        .queue_bind(
            ShortString::from(queue.as_str()),
            ShortString::from(exchange.as_str()),
            ShortString::from("#"),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");

    let proxy = proxy("127.0.0.1:5672").await;
    let hub = TestHub::start_with(
        backend,
        &[
            ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"),
            // Short delays, but attempts for about 30 s: the curve's length is the number of
            // retries, and a job must outlive the outage rather than be dead-lettered in it.
            ("STREAMING_HUB_RETRY_CURVE", RETRIES_OUTLIVING_THE_OUTAGE),
            ("STREAMING_HUB_BREAKER_COOLDOWN", "500ms"),
        ],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let url = format!("amqp://guest:guest@127.0.0.1:{}/%2f", proxy.addr.port());
    let sub = hub
        .subscribe(&key, json!({"name": "r", "event_types": ["*.*"], "sink": {"type": "rabbitmq", "url": url, "exchange": exchange}}))
        .await;
    hub.wait_until_active(&key, sub["id"].as_str().expect("id")).await;

    let (accepted, refused, _) = post_through_an_outage(&hub.base, &key, 150, 50, &proxy, Duration::from_secs(3)).await;
    assert_eq!(refused, 0, "ingest does not need RabbitMQ");

    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let count = loop {
        while let Some(m) =
            channel.basic_get(ShortString::from(queue.as_str()), BasicGetOptions { no_ack: true }).await.expect("get")
        {
            let id = m.delivery.properties.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default();
            got.push(id);
        }
        let count = Count::of(&accepted, refused, &got);
        if count.lost == 0 || tokio::time::Instant::now() >= deadline {
            break count;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("chaos: RabbitMQ outage of 3 s under load ({backend:?}): {count:?}");
    if count.lost > 0 {
        let (_, page) = hub
            .get(&key, &format!("/v1/subscriptions/{}/deliveries?state=dead", sub["id"].as_str().expect("id")))
            .await;
        panic!("{count:?}; dead jobs: {page}");
    }
    assert_eq!(count.accepted, 150);
    // Every outcome recorded (the recorder writes them just after the broker confirms): each job
    // succeeded, none dead, none left leased.
    let path = format!("/v1/subscriptions/{}/deliveries?limit=1000", sub["id"].as_str().expect("id"));
    let settled = tokio::time::Instant::now() + Duration::from_secs(20);
    let page = loop {
        let (_, page) = hub.get(&key, &path).await;
        let done = page["items"].as_array().expect("items").iter().all(|d| d["state"] == "succeeded");
        if done || tokio::time::Instant::now() >= settled {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let items = page["items"].as_array().expect("items");
    assert!(items.iter().all(|d| d["state"] == "succeeded"), "every job delivered, none dead: {page}");
    // The outage was felt: some deliveries failed and were retried.
    let retried = items.iter().filter(|d| d["attempts"].as_i64() > Some(1)).count();
    assert!(retried > 0, "no delivery failed during the outage: it proved nothing");
    eprintln!("chaos: RabbitMQ outage: {retried} deliveries needed more than one attempt");
}

async fn a_kafka_broker_crash_and_restart_loses_no_acknowledged_record(backend: Backend) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::FutureRecord;

    use crate::kafka_support::{KafkaPeer, Record};

    let home = hub_testkit::kafka::kafka_home();
    let mut broker = hub_testkit::kafka::Broker::apache(&home, true).await.expect("Apache Kafka is required");
    let peer = KafkaPeer::on(broker.brokers.clone());
    peer.create_topic("lerian.streaming.lender", 2).await;
    let receiver = Receiver::start(Script::Ok).await;
    let hub = TestHub::start_with(
        backend,
        &[
            ("STREAMING_HUB_KAFKA_BROKERS", broker.brokers.as_str()),
            ("STREAMING_HUB_KAFKA_TOPIC_REFRESH", "1s"),
            ("STREAMING_HUB_KAFKA_BATCH_WAIT", "20ms"),
            ("STREAMING_HUB_KAFKA_SESSION_TIMEOUT", "6s"),
            ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20"),
        ],
    )
    .await;
    let key = hub.tenant_key("t1").await;
    let sub = hub
        .subscribe(&key, json!({"name": "w", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    receiver.trust(sub["signing_secret"].as_str().expect("secret"));
    hub.wait_until_active(&key, sub["id"].as_str().expect("id")).await;

    // 300 records at about 100/s; the broker is killed after the first 100 and started again 3 s
    // later. The producer keeps them queued meanwhile (a 120 s delivery timeout).
    let producer: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.brokers)
        .set("message.timeout.ms", "120000")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let mut pending = Vec::new();
    for i in 0..300 {
        if i == 100 {
            broker.kill();
            tokio::time::sleep(Duration::from_secs(3)).await;
            broker.start_again(true).await.expect("the broker starts again");
        }
        let r = Record::event("lender", i % 2, "t1");
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
        }
        let record = FutureRecord::<(), [u8]>::to(&r.topic).partition(r.partition).payload(&r.body).headers(headers);
        let delivery = producer.send_result(record).map_err(|(e, _)| e).expect("enqueued");
        pending.push((r.id(), delivery));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (mut accepted, mut refused) = (Vec::new(), 0);
    for (id, delivery) in pending {
        match delivery.await {
            Ok(Ok(_)) => accepted.push(id),
            _ => refused += 1,
        }
    }
    assert!(accepted.len() >= 200, "{} acknowledged, {refused} not", accepted.len());

    let count = delivered_to(&receiver, &accepted, refused).await;
    eprintln!("chaos: Kafka broker killed for 3 s and started again under load ({backend:?}): {count:?}");
    assert_eq!(count.lost, 0, "{count:?}");
    assert_eq!(count.duplicated, 0, "the inbox keeps each ce-id once: {count:?}");
    let (status, ready) = hub.send(hub.client.get(hub.url("/readyz"))).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
}

/// Ordering by key through crashes and a failing receiver, on two replicas of one PostgreSQL:
/// 20 keys × 10 events posted to both replicas, the receiver failing every delivery for a while,
/// one replica killed with SIGKILL mid-delivery and started again. Every accepted event is
/// delivered, and no key ever sees an event (a failed attempt included) before an earlier one of
/// its key was delivered: 0 order violations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_delivery_survives_a_killed_replica_and_a_failing_receiver() {
    const KEYS: usize = 20;
    const PER_KEY: usize = 10;
    let admin = format!("admin-{}", uuid::Uuid::now_v7().simple());
    let vars: Vec<(&str, String)> = vec![
        ("STREAMING_HUB_POSTGRES_DSN", postgres_dsn()),
        ("STREAMING_HUB_POSTGRES_SCHEMA", fresh_schema().await),
        ("STREAMING_HUB_ADMIN_TOKEN", admin.clone()),
        ("STREAMING_HUB_DEV_KEK", "4b".repeat(32)),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true".to_owned()),
        ("STREAMING_HUB_DISPATCH_LEASE", "3s".to_owned()),
        ("STREAMING_HUB_DISPATCH_IDLE_INTERVAL_MS", "20".to_owned()),
        // 100 ms, then 29 retries 2 s apart: about a minute of failures before a dead letter,
        // however slowly the events go in on a busy machine.
        ("STREAMING_HUB_RETRY_CURVE", RETRIES_OUTLIVING_THE_OUTAGE.replace("1s", "2s")),
        // The failing receiver is retried, not shut off by the breaker (which would only pause).
        ("STREAMING_HUB_BREAKER_FAILURES", "10000".to_owned()),
    ];
    let receiver = Receiver::start(Script::Ok).await;
    let a = HubProcess::start(&vars).await;
    let b = HubProcess::start(&vars).await;
    let client = http_client();
    let key: serde_json::Value = client
        .post(format!("{}/admin/api-keys", a.base))
        .bearer_auth(&admin)
        .json(&json!({"tenant_id": "t1"}))
        .send()
        .await
        .expect("key")
        .json()
        .await
        .expect("json");
    let key = key["key"].as_str().expect("key").to_owned();
    let sub: serde_json::Value = client
        .post(format!("{}/v1/subscriptions", a.base))
        .bearer_auth(&key)
        .json(&json!({"name": "ordered", "event_types": ["*.*"], "ordering": "key",
                      "sink": {"type": "webhook", "url": receiver.url}}))
        .send()
        .await
        .expect("subscribe")
        .json()
        .await
        .expect("json");
    receiver.trust(sub["signing_secret"].as_str().expect("secret"));
    receiver.set_script(Script::Fail);
    let id = sub["id"].as_str().expect("id").to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let read: serde_json::Value = client
            .get(format!("{}/v1/subscriptions/{id}", a.base))
            .bearer_auth(&key)
            .send()
            .await
            .expect("read")
            .json()
            .await
            .expect("json");
        if read["verification_state"] == "active" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never verified: {read}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Events n = 1..10 of each key, alternating between the replicas: the keys posted side by side,
    // each key's events one after the other (so their seqs are in n order).
    let per_key = (0..KEYS).map(|k| {
        let (a, b, key) = (&a, &b, &key);
        async move {
            let mut ids = Vec::new();
            for n in 1..=PER_KEY {
                let event = Event::new("t1")
                    .set("ce-partitionkey", &format!("key-{k}"))
                    .body(json!({ "key": format!("key-{k}"), "n": n }).to_string().into_bytes());
                let hub = if (n + k) % 2 == 0 { a } else { b };
                hub.post_event(key, &event).await;
                ids.push(event.id().to_string());
            }
            ids
        }
    });
    let accepted: Vec<String> = futures_util::future::join_all(per_key).await.into_iter().flatten().collect();
    // The receiver fails every delivery for a while (retries pile up: without ordering, every
    // event of a key would be waiting at once, and go out in any order when it recovers).
    receiver.wait_for(60, Duration::from_secs(30)).await;
    receiver.set_script(Script::Ok);
    // Mid-delivery, kill one replica; start it again.
    receiver.wait_for(80, Duration::from_secs(30)).await;
    b.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = HubProcess::start(&vars).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let ok = loop {
        let ok: HashSet<String> = receiver.accepted().iter().map(|d| d.header("x-lerian-event-id")).collect();
        if accepted.iter().all(|id| ok.contains(id)) || tokio::time::Instant::now() >= deadline {
            break ok;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let lost = accepted.iter().filter(|id| !ok.contains(*id)).count();
    let delivered_twice = receiver.accepted().len() - ok.len();
    // Every arrival, failed ones included: per key, n never goes back.
    let mut violations = 0;
    let mut last: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    for d in receiver.deliveries() {
        let body: serde_json::Value = serde_json::from_slice(&d.body).expect("json");
        let (k, n) = (body["key"].as_str().expect("key").to_owned(), body["n"].as_u64().expect("n"));
        let seen = last.entry(k).or_insert(0);
        if n < *seen {
            violations += 1;
        }
        *seen = n.max(*seen);
    }
    eprintln!(
        "chaos: ordered delivery, {} keys x {PER_KEY} events, receiver failing a while, a replica killed: accepted {}, \
         lost {lost}, delivered twice {delivered_twice}, order violations {violations}, attempts {}",
        KEYS,
        accepted.len(),
        receiver.deliveries().len()
    );
    assert_eq!(lost, 0, "logs: {} {}", a.log.display(), b.log.display());
    assert_eq!(violations, 0, "logs: {} {}", a.log.display(), b.log.display());
}
