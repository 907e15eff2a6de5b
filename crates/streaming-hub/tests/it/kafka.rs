//! Kafka ingest and the DLQ plane against real Kafka-protocol peers: librdkafka's mock cluster
//! and an Apache Kafka broker process.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use hub_store::prelude::*;
use hub_store::{QuarantineFilter, Store};
use rdkafka::Message;
use serde_json::json;
use streaming_hub::testing::kafka::{self, BatchWriter};
use tokio_util::sync::CancellationToken;

use crate::kafka_support::{Broker, KafkaPeer, Record, ends, produce};
use crate::support::{Backend, TestHub};

const WAIT: Duration = Duration::from_secs(90);
const GROUP: &str = "streaming-hub.local";

macro_rules! on_both_brokers {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mock_cluster() {
                super::$name(crate::kafka_support::Broker::Mock).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn apache_kafka() {
                super::$name(crate::kafka_support::Broker::Kafka).await;
            }
        }
    )*};
}

/// Records that once stopped Kafka ingest for every tenant, each quarantined with its reason while
/// the records around them are accepted and every offset is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_records_are_quarantined_and_ingest_goes_on() {
    let peer = KafkaPeer::start(Broker::Kafka).await;
    let topic = "lerian.streaming.lender";
    peer.create_topic(topic, 1).await;
    let hub = hub_on(&peer, Backend::Postgres, &[]).await;
    let before = Record::event("lender", 0, "t1");
    let poison = vec![
        Record::event("lender", 0, "t1").set("ce-datacontenttype", "x€json"),
        Record::event("lender", 0, "t1").set("ce-datacontenttype", "application/€json").body(b"\xff"),
        Record::event("lender", 0, "t1").body(b"{\"a\":\"\xff\"}"),
    ];
    produce(&peer.producer(), std::slice::from_ref(&before)).await;
    produce(&peer.producer(), &poison).await;
    // A header key that is not UTF-8, which no client library will build.
    let bad_key = Record::event("lender", 0, "t1");
    let mut headers: Vec<(&[u8], &[u8])> = bad_key.headers.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())).collect();
    headers.push((b"ce-\xff\xfe", b"x"));
    let code = crate::kafka_support::produce_raw(&peer.brokers, topic, 0, &headers, &bad_key.body).await;
    assert_eq!(code, 0, "the broker took the raw record");
    let after = Record::event("lender", 0, "t1");
    produce(&peer.producer(), std::slice::from_ref(&after)).await;

    let stored = until("the records around the poison", async || {
        let events = hub.store.events_after("t1", 0, 100).await.expect("read");
        (events.len() >= 4).then_some(events)
    })
    .await;
    let ids: Vec<String> = stored.iter().map(|e| e.ce_id.to_string()).collect();
    // `x€json` and `application/€json` are not JSON types: those bodies are taken as they are.
    assert_eq!(ids, vec![before.id(), poison[0].id(), poison[1].id(), after.id()]);
    let quarantined = until("the poison in quarantine", async || {
        let q = hub.store.list_quarantine(&QuarantineFilter { limit: 100, ..Default::default() }).await.expect("list");
        (q.len() >= 2).then_some(q)
    })
    .await;
    let mut fields: Vec<&str> = quarantined.iter().map(|q| q.reason_field.as_str()).collect();
    fields.sort_unstable();
    assert_eq!(fields, vec!["body", "headers"], "{quarantined:#?}");
    peer.wait_committed(GROUP, topic, &[6], WAIT).await;
    let (status, ready) = hub.send(hub.client.get(hub.url("/readyz"))).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{ready}");
}

/// Every metric the shipped Grafana dashboard and Prometheus alert rules read is one a hub
/// exports once it has done the work they watch: Kafka ingest (consumer lag, write latency), a
/// delivery (attempt latency), a failed verification, the store's pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alerts_read_only_exported_metrics() {
    let peer = KafkaPeer::start(Broker::Kafka).await;
    let topic = "lerian.streaming.lender";
    peer.create_topic(topic, 1).await;
    let hub = hub_on(&peer, Backend::Postgres, &[]).await;
    let key = hub.tenant_key("t1").await;
    let receiver = crate::receiver::Receiver::start(crate::receiver::Script::Ok).await;
    let hook = hub
        .subscribe(&key, json!({"name": "m", "event_types": ["*.*"], "sink": {"type": "webhook", "url": receiver.url}}))
        .await;
    receiver.trust(hook["signing_secret"].as_str().expect("secret"));
    hub.wait_until_active(&key, hook["id"].as_str().expect("id")).await;
    produce(&peer.producer(), &[Record::event("lender", 0, "t1")]).await;
    receiver.wait_for(1, WAIT).await;
    let closed = crate::support::closed_url();
    let nowhere = hub
        .subscribe(&key, json!({"name": "n", "event_types": ["*.*"], "sink": {"type": "webhook", "url": closed}}))
        .await;
    let path = format!("/v1/subscriptions/{}/verify", nowhere["id"].as_str().expect("id"));
    assert_eq!(hub.post_json(&key, &path, &json!({})).await.0, reqwest::StatusCode::UNPROCESSABLE_ENTITY);

    let root = crate::sdk::repo();
    let mut used = std::collections::BTreeSet::new();
    for file in ["deploy/grafana/streaming-hub.json", "deploy/prometheus/streaming-hub-rules.yaml"] {
        let text = std::fs::read_to_string(root.join(file)).expect("deploy file");
        let mut rest = text.as_str();
        while let Some(at) = rest.find("streaming_hub_") {
            let name: String = rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            rest = &rest[at + name.len()..];
            used.insert(name);
        }
    }
    assert!(used.len() > 10, "{used:?}");
    let missing = until("every metric the dashboard and the alerts read", async || {
        let text = hub.client.get(hub.url("/metrics")).send().await.ok()?.text().await.ok()?;
        let missing: Vec<&String> = used.iter().filter(|name| !text.contains(&format!("\n{name}"))).collect();
        missing.is_empty().then_some(missing)
    })
    .await;
    assert!(missing.is_empty());
}

on_both_brokers!(
    records_get_their_verdicts_and_offsets_are_committed,
    the_dlq_plane_stores_dead_letters_and_never_delivers_them
);

fn kafka_vars(peer: &KafkaPeer) -> Vec<(&'static str, String)> {
    vec![
        ("STREAMING_HUB_KAFKA_BROKERS", peer.brokers.clone()),
        ("STREAMING_HUB_KAFKA_TOPIC_REFRESH", "1s".to_owned()),
        ("STREAMING_HUB_KAFKA_BATCH_WAIT", "20ms".to_owned()),
        ("STREAMING_HUB_KAFKA_SESSION_TIMEOUT", "6s".to_owned()),
        ("STREAMING_HUB_METRICS_INTERVAL", "200ms".to_owned()),
    ]
}

async fn hub_on(peer: &KafkaPeer, backend: Backend, extra: &[(&'static str, &'static str)]) -> TestHub {
    let vars: Vec<(&str, String)> = kafka_vars(peer);
    let mut all: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.extend_from_slice(extra);
    TestHub::start_with(backend, &all).await
}

async fn until<T>(what: &str, probe: impl AsyncFnMut() -> Option<T>) -> T {
    crate::support::until(what, WAIT, probe).await
}

async fn records_get_their_verdicts_and_offsets_are_committed(broker: Broker) {
    let peer = KafkaPeer::start(broker).await;
    for (topic, partitions) in
        [("lerian.streaming.lender", 3), ("lerian.streaming.crm", 3), ("lerian.streaming.lender.commands", 1)]
    {
        peer.create_topic(topic, partitions).await;
    }
    let hub = hub_on(&peer, Backend::Sqlite, &[]).await;
    let key = hub.tenant_key("t1").await;
    let pull = hub
        .subscribe(&key, json!({"name": "p", "event_types": ["loan_application.*"], "sink": {"type": "pull"}}))
        .await;

    let mut valid = Vec::new();
    for p in 0..3 {
        for i in 0..4 {
            valid.push(Record::event("lender", p, if i % 2 == 0 { "t1" } else { "t2" }));
        }
        for _ in 0..2 {
            valid.push(Record::event("crm", p, "t1"));
        }
    }
    let duplicate = Record { partition: 1, ..valid[0].clone() };
    let system = Record::event("lender", 2, "t1").without("ce-tenantid").set("ce-systemevent", "true");
    let malformed = vec![
        Record::event("lender", 0, "t1").set("ce-id", "9b2c6d1e-4c3f-4d7a-9a55-1f2e3d4c5b6a"),
        Record::event("lender", 1, "t1").without("ce-tenantid"),
        Record::event("lender", 2, "t1")
            .set("ce-source", "crm")
            .set("ce-type", "studio.lerian.crm.loan_application.approved"),
        Record::event("lender", 0, "t1").body(b"{not json"),
        Record::event("lender", 1, "t1").set("ce-type", "studio.lerian.lender.loan_application.rejected"),
        Record::event("crm", 2, "t1").set("ce-time", "yesterday"),
    ];
    let commands: Vec<Record> = (0..2)
        .map(|_| Record { topic: "lerian.streaming.lender.commands".into(), ..Record::event("lender", 0, "t1") })
        .collect();
    let producer = peer.producer();
    let mut all = valid.clone();
    all.push(duplicate);
    all.push(system);
    all.extend(malformed.clone());
    all.extend(commands.clone());
    produce(&producer, &all).await;

    let stored = until("every valid record in the inbox", async || {
        let t1 = hub.store.events_after("t1", 0, 1000).await.expect("read");
        let t2 = hub.store.events_after("t2", 0, 1000).await.expect("read");
        (t1.len() + t2.len() >= valid.len()).then_some((t1, t2))
    })
    .await;
    let (t1, t2) = stored;
    let ids: HashSet<String> = t1.iter().chain(&t2).map(|e| e.ce_id.to_string()).collect();
    let expected: HashSet<String> = valid.iter().map(Record::id).collect();
    assert_eq!(ids, expected, "exactly the valid records, the duplicate once");
    for c in &commands {
        assert!(!ids.contains(&c.id()), ".commands topics are never read");
    }
    // Per-tenant seq follows arrival order within each partition.
    for events in [&t1, &t2] {
        let mut last: HashMap<(String, i32), i64> = HashMap::new();
        for e in events.iter() {
            let hub_store::Origin::Kafka { topic, partition, offset } = &e.origin else { panic!("not from Kafka") };
            let prev = last.insert((topic.clone(), *partition), *offset);
            assert!(prev.is_none_or(|p| p < *offset), "seq order broke offset order in {topic}/{partition}");
        }
        assert!(events.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    }

    let quarantined = until("the malformed records in quarantine", async || {
        let q = hub.store.list_quarantine(&QuarantineFilter { limit: 100, ..Default::default() }).await.expect("list");
        (q.len() >= malformed.len()).then_some(q)
    })
    .await;
    assert_eq!(quarantined.len(), malformed.len());
    let reasons: HashSet<&str> = quarantined.iter().map(|q| q.reason_code.as_str()).collect();
    for code in ["invalid_id", "missing_header", "source_mismatch", "invalid_body", "type_mismatch", "invalid_header"] {
        assert!(reasons.contains(code), "{code} missing from {reasons:?}");
    }
    assert!(quarantined.iter().all(|q| matches!(q.origin, hub_store::Origin::Kafka { .. })));

    for topic in ["lerian.streaming.lender", "lerian.streaming.crm"] {
        peer.wait_committed(GROUP, topic, &ends(&all, topic, 3), WAIT).await;
    }
    assert!(
        peer.committed(GROUP, "lerian.streaming.lender.commands", 1)[0].is_none(),
        "nothing was ever committed there"
    );

    // Consumer lag is reported per partition, and reaches zero.
    until("consumer lag at zero in /metrics", async || {
        let text = hub.client.get(hub.url("/metrics")).send().await.ok()?.text().await.ok()?;
        let lags: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.starts_with("streaming_hub_kafka_consumer_lag{") && l.contains("topic=\"lerian.streaming.lender\"")
            })
            .collect();
        (lags.len() == 3 && lags.iter().all(|l| l.ends_with(" 0"))).then_some(())
    })
    .await;

    // Matching happened at Kafka ingest too: the pull subscription holds t1's loan events.
    let (_, page) =
        hub.get(&key, &format!("/v1/subscriptions/{}/events?limit=1000", pull["id"].as_str().expect("id"))).await;
    let t1_valid = valid.iter().filter(|r| r.header("ce-tenantid") == Some("t1")).count();
    assert_eq!(page["items"].as_array().expect("items").len(), t1_valid);
}

async fn the_dlq_plane_stores_dead_letters_and_never_delivers_them(broker: Broker) {
    let peer = KafkaPeer::start(broker).await;
    peer.create_topic("lerian.streaming.lender", 1).await;
    peer.create_topic("lerian.streaming.lender.dlq", 1).await;
    let hub = hub_on(&peer, Backend::Sqlite, &[]).await;
    let key = hub.tenant_key("t1").await;
    hub.subscribe(&key, json!({"name": "p", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;

    let dlq = |r: Record| Record { topic: "lerian.streaming.lender.dlq".into(), ..r };
    let producer_side = dlq(Record::event("lender", 0, "t1"))
        .set("x-lerian-dlq-source-topic", "lerian.streaming.lender")
        .set("x-lerian-dlq-error-class", "broker_unavailable")
        .set("x-lerian-dlq-error-message", "all brokers down")
        .set("x-lerian-dlq-retry-count", "5")
        .set("x-lerian-dlq-first-failure-at", "2026-11-30T09:00:00Z")
        .set("x-lerian-dlq-producer-id", "lender-7");
    let consumer_side = dlq(Record::event("lender", 0, "t2"))
        .set("x-lerian-dlq-error-class", "handler_failed")
        .set("x-lerian-dlq-source-partition", "2")
        .set("x-lerian-dlq-source-offset", "991")
        .set("x-lerian-dlq-cause-kind", "timeout");
    let omitted = dlq(Record::event("lender", 0, "t1"))
        .set("x-lerian-dlq-error-class", "payload_too_large")
        .set("x-lerian-dlq-payload-omitted", "true")
        .set("x-lerian-dlq-payload-bytes", "2000000")
        .body(b"");
    let dead = [producer_side.clone(), consumer_side, omitted];
    produce(&peer.producer(), &dead).await;

    let items = until("the dead letters listed", async || {
        let (_, page) = hub.admin_get("/admin/dlq").await;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        (items.len() >= 3).then_some(items)
    })
    .await;
    assert_eq!(items.len(), 3);
    let by_class: BTreeMap<String, serde_json::Value> =
        items.iter().map(|i| (i["error_class"].as_str().expect("class").to_owned(), i.clone())).collect();
    let p = &by_class["broker_unavailable"];
    assert_eq!(p["source"], "lender");
    assert_eq!(p["tenant_id"], "t1");
    assert_eq!(p["ce_id"], producer_side.id().as_str());
    assert_eq!(p["error_message"], "all brokers down");
    for h in [
        "x-lerian-dlq-source-topic",
        "x-lerian-dlq-retry-count",
        "x-lerian-dlq-first-failure-at",
        "x-lerian-dlq-producer-id",
        "ce-type",
    ] {
        assert!(p["headers"][h].is_string(), "{h} kept: {p}");
    }
    assert_eq!(p["body"], r#"{"amount":100}"#);
    let c = &by_class["handler_failed"];
    for h in ["x-lerian-dlq-source-partition", "x-lerian-dlq-source-offset", "x-lerian-dlq-cause-kind"] {
        assert!(c["headers"][h].is_string(), "{h} kept: {c}");
    }
    let o = &by_class["payload_too_large"];
    assert_eq!((o["payload_omitted"].clone(), o["body_bytes"].clone()), (json!(true), json!(2_000_000)));

    let (_, filtered) = hub.admin_get("/admin/dlq?error_class=handler_failed&tenant=t2&source=lender").await;
    assert_eq!(filtered["items"].as_array().expect("items").len(), 1);
    let (_, none) = hub.admin_get("/admin/dlq?tenant=t9").await;
    assert_eq!(none["items"], json!([]));

    peer.wait_committed("streaming-hub-dlq.local", "lerian.streaming.lender.dlq", &[3], WAIT).await;
    // A dead letter never becomes an event, a job or a pull entry.
    assert!(hub.store.events_after("t1", 0, 10).await.expect("read").is_empty());
    assert!(hub.store.events_after("t2", 0, 10).await.expect("read").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_after_start_is_consumed() {
    let peer = KafkaPeer::start(Broker::Kafka).await;
    let hub = hub_on(&peer, Backend::Sqlite, &[]).await;
    // Let the consumer join with no matching topic at all.
    tokio::time::sleep(Duration::from_millis(500)).await;
    peer.create_topic("lerian.streaming.latecomer", 2).await;
    let record = Record::event("latecomer", 1, "t1");
    produce(&peer.producer(), std::slice::from_ref(&record)).await;
    let id: uuid::Uuid = record.id().parse().expect("uuid");
    let end = tokio::time::Instant::now() + WAIT;
    while hub.store.event_by_ce_id("t1", id).await.expect("read").is_none() {
        // A failure says what the broker saw of the hub's consumer group.
        assert!(
            tokio::time::Instant::now() < end,
            "the late topic's event was not stored: {}",
            peer.describe(GROUP, "lerian.streaming.latecomer")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Events of tenant `t1`, `per_partition` (ten unless said) on each partition of a fresh
/// three-partition topic, read by `kafka::run` (batches of 5) and written through `wrap` around
/// the ingest consumer's writer on a fresh SQLite store: for tests that hold back one partition's
/// writes.
struct PartitionRun {
    peer: KafkaPeer,
    store: Arc<dyn Store>,
    records: Vec<Record>,
    per_partition: i64,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

const PARTITION_TOPIC: &str = "lerian.streaming.lender";
/// The records of a partition batch, at most, in a `PartitionRun`.
const PARTITION_BATCH: usize = 5;

impl PartitionRun {
    async fn start<W: BatchWriter + 'static>(wrap: impl FnOnce(streaming_hub::testing::KafkaEvents) -> W) -> Self {
        Self::start_with(10, wrap).await
    }

    async fn start_with<W: BatchWriter + 'static>(
        per_partition: i64,
        wrap: impl FnOnce(streaming_hub::testing::KafkaEvents) -> W,
    ) -> Self {
        let peer = KafkaPeer::start(Broker::Mock).await;
        peer.create_topic(PARTITION_TOPIC, 3).await;
        let (store, kafka_config, events) = partition_writer(&peer).await;
        let records: Vec<Record> =
            (0..per_partition * 3).map(|i| Record::event("lender", (i % 3) as i32, "t1")).collect();
        produce(&peer.producer(), &records).await;
        let consumer = kafka::subscribe(&kafka_config, "ingest", GROUP, kafka::INGEST_PATTERN).expect("consumer");
        let shutdown = CancellationToken::new();
        let batching = kafka::Batching { size: PARTITION_BATCH, wait: Duration::from_millis(20) };
        let task = tokio::spawn(kafka::run("ingest", consumer, wrap(events), batching, shutdown.clone()));
        Self { peer, store, records, per_partition, shutdown, task }
    }

    /// Each partition's committed offset.
    fn committed(&self) -> Vec<Option<i64>> {
        self.peer.committed(GROUP, PARTITION_TOPIC, 3)
    }

    async fn wait_all_committed(&self) {
        let n = self.per_partition;
        self.peer.wait_committed(GROUP, PARTITION_TOPIC, &[n, n, n], WAIT).await;
    }

    /// The offsets of partition 1's stored events, in seq order.
    async fn partition_1_offsets(&self) -> Vec<i64> {
        let stored = self.store.events_after("t1", 0, 1000).await.expect("read");
        assert_eq!(stored.len() as i64, self.per_partition * 3);
        stored
            .iter()
            .filter_map(|e| match e.origin {
                hub_store::Origin::Kafka { partition: 1, offset, .. } => Some(offset),
                _ => None,
            })
            .collect()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("consumer stops");
    }
}

/// A fresh SQLite store, the Kafka configuration of `peer`, and the ingest consumer's writer on
/// that store, for tests that drive `kafka::run` with a writer of their own around it.
async fn partition_writer(
    peer: &KafkaPeer,
) -> (Arc<dyn Store>, streaming_hub::config::KafkaConfig, streaming_hub::testing::KafkaEvents) {
    let db = crate::support::temp_sqlite_path();
    let store = hub_store::SqliteStore::open(&db).await.expect("open");
    store.migrate().await.expect("migrate");
    let store: Arc<dyn Store> = Arc::new(store);
    let vars: std::collections::HashMap<String, String> =
        kafka_vars(peer).into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    let config = streaming_hub::config::Config::from_vars(vars).expect("config");
    let events = streaming_hub::testing::KafkaEvents {
        store: Arc::clone(&store),
        policy: Arc::new(hub_core::IngestPolicy::default()),
        catalog: Arc::new(streaming_hub::testing::EventCatalog::new(
            Arc::clone(&store),
            streaming_hub::testing::payloads::Mode::Off,
        )),
        clock: Arc::new(streaming_hub::testing::SystemClock),
        wake: Arc::new(tokio::sync::Notify::new()),
        fast: None,
    };
    (store, config.kafka.expect("kafka"), events)
}

/// Writes like the hub, but fails every batch of one partition while `failing` is set.
struct FlakyWriter {
    inner: streaming_hub::testing::KafkaEvents,
    partition: i32,
    failing: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
}

impl BatchWriter for FlakyWriter {
    async fn write(&self, records: &[rdkafka::message::OwnedMessage]) -> Result<(), String> {
        if self.failing.load(Ordering::SeqCst) && records.iter().any(|r| r.partition() == self.partition) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err("injected store failure".to_owned());
        }
        self.inner.write(records).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_holds_back_only_its_partition() {
    let failing = Arc::new(AtomicBool::new(true));
    let refused = Arc::new(AtomicUsize::new(0));
    let run = PartitionRun::start(|events| FlakyWriter {
        inner: events,
        partition: 1,
        failing: Arc::clone(&failing),
        refused: Arc::clone(&refused),
    })
    .await;
    let (store, records) = (&run.store, &run.records);

    // Partitions 0 and 2 are written and committed while partition 1 keeps failing.
    until("partitions 0 and 2 committed", async || {
        let c = run.committed();
        (c[0] == Some(10) && c[2] == Some(10) && refused.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    assert_eq!(run.committed()[1], None, "the failing partition's offset is not committed");
    let stored = store.events_after("t1", 0, 100).await.expect("read");
    assert_eq!(stored.len(), 20);
    assert!(stored.iter().all(|e| !matches!(e.origin, hub_store::Origin::Kafka { partition: 1, .. })));

    // The store recovers: the held records are written, once, and committed.
    failing.store(false, Ordering::SeqCst);
    run.wait_all_committed().await;
    let stored = store.events_after("t1", 0, 100).await.expect("read");
    let ids: HashSet<String> = stored.iter().map(|e| e.ce_id.to_string()).collect();
    assert_eq!(stored.len(), 30);
    assert_eq!(ids, records.iter().map(Record::id).collect::<HashSet<_>>());
    run.stop().await;
}

/// Holds every write of one partition until the gate opens, and counts the records of the
/// largest write it was given.
struct GatedWriter {
    inner: streaming_hub::testing::KafkaEvents,
    partition: i32,
    gate: Arc<tokio::sync::Semaphore>,
    held: Arc<AtomicUsize>,
    largest: Arc<AtomicUsize>,
}

impl GatedWriter {
    fn on_partition_1(events: streaming_hub::testing::KafkaEvents) -> (Self, Gate) {
        let gate =
            Gate { gate: Arc::new(tokio::sync::Semaphore::new(0)), held: Arc::default(), largest: Arc::default() };
        let writer = Self {
            inner: events,
            partition: 1,
            gate: Arc::clone(&gate.gate),
            held: Arc::clone(&gate.held),
            largest: Arc::clone(&gate.largest),
        };
        (writer, gate)
    }
}

/// What a test sees of a `GatedWriter`.
#[derive(Clone)]
struct Gate {
    gate: Arc<tokio::sync::Semaphore>,
    held: Arc<AtomicUsize>,
    largest: Arc<AtomicUsize>,
}

impl BatchWriter for GatedWriter {
    async fn write(&self, records: &[rdkafka::message::OwnedMessage]) -> Result<(), String> {
        self.largest.fetch_max(records.len(), Ordering::SeqCst);
        if records.iter().any(|r| r.partition() == self.partition) {
            self.held.fetch_add(1, Ordering::SeqCst);
            let _open = self.gate.acquire().await.map_err(|e| e.to_string())?;
        }
        self.inner.write(records).await
    }
}

/// A `PartitionRun` of `per_partition` records a partition with partition 1's writes held
/// (`GatedWriter`), once partitions 0 and 2 are written and committed and partition 1's first
/// write is waiting.
async fn held_partition_1(per_partition: i64) -> (PartitionRun, Gate) {
    let mut seen = None;
    let run = PartitionRun::start_with(per_partition, |events| {
        let (writer, gate) = GatedWriter::on_partition_1(events);
        seen = Some(gate);
        writer
    })
    .await;
    let gate = seen.expect("the writer was made");
    until("partitions 0 and 2 committed while partition 1's write is held", async || {
        let c = run.committed();
        (c[0] == Some(per_partition) && c[2] == Some(per_partition) && gate.held.load(Ordering::SeqCst) >= 1)
            .then_some(())
    })
    .await;
    (run, gate)
}

/// Partitions are written concurrently: a partition whose write takes long holds back neither
/// the other partitions' writes nor their commits, and its own records still go in offset
/// order, one batch at a time, and are committed once written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_partition_write_holds_back_no_other_partition() {
    let (run, gate) = held_partition_1(10).await;
    assert_eq!(gate.held.load(Ordering::SeqCst), 1, "one batch of a partition is written at a time");
    assert_eq!(run.committed()[1], None, "nothing of the held partition is committed");

    gate.gate.add_permits(1_000);
    run.wait_all_committed().await;
    assert_eq!(
        run.partition_1_offsets().await,
        (0..10).collect::<Vec<i64>>(),
        "partition 1 in offset order, each once"
    );
    run.stop().await;
}

/// What a partition reads while its write is held waits for later writes of at most a batch
/// each, so a slow write never makes the next one (and what it holds in memory) larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_never_writes_more_than_a_batch_at_once() {
    // By the time the other partitions are written, the consumer holds the rest of partition 1's
    // records, three batches' worth.
    let (run, gate) = held_partition_1(20).await;
    gate.gate.add_permits(1_000);
    run.wait_all_committed().await;
    assert!(gate.held.load(Ordering::SeqCst) >= 4, "partition 1 took at least four writes");
    assert!(gate.largest.load(Ordering::SeqCst) <= PARTITION_BATCH, "no write holds more than a batch");
    assert_eq!(
        run.partition_1_offsets().await,
        (0..20).collect::<Vec<i64>>(),
        "partition 1 in offset order, each once"
    );
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_brokers() {
    let peer = KafkaPeer::start(Broker::Kafka).await;
    let hub = hub_on(&peer, Backend::Sqlite, &[]).await;
    let ready = async || hub.client.get(hub.url("/readyz")).send().await.expect("readyz").status();
    assert_eq!(ready().await, reqwest::StatusCode::OK);
    drop(peer);
    until("/readyz at 503 with the brokers gone", async || {
        (ready().await == reqwest::StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await;
    let (_, body) = hub.send(hub.client.get(hub.url("/readyz"))).await;
    assert_eq!(body["status"], "kafka unreachable");
}

/// Two cells (docs/SCALING.md): complete installs, each with its own database and consumer
/// group, reading the same topics of one Apache Kafka cluster. Each stores exactly its tenants'
/// events, once; a third tenant's are in neither; another cell's malformed record is skipped, not
/// quarantined; both groups commit every offset; HTTP ingest for another cell's tenant is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_cells_share_the_topics_and_each_stores_only_its_tenants() {
    let peer = KafkaPeer::start(Broker::Kafka).await;
    // A topic of its own: the consumer-lag gauges are the test process's, shared by every test.
    let topic = "lerian.streaming.cells";
    peer.create_topic(topic, 3).await;
    peer.create_topic("lerian.streaming.cells.dlq", 1).await;
    let east = hub_on(
        &peer,
        Backend::Postgres,
        &[
            ("STREAMING_HUB_TENANTS", "t-a1,t-a2"),
            ("STREAMING_HUB_KAFKA_GROUP_ID", "cell-east"),
            ("STREAMING_HUB_KAFKA_DLQ_GROUP_ID", "cell-east-dlq"),
        ],
    )
    .await;
    let west = hub_on(
        &peer,
        Backend::Postgres,
        &[
            ("STREAMING_HUB_TENANTS", "t-b"),
            ("STREAMING_HUB_KAFKA_GROUP_ID", "cell-west"),
            ("STREAMING_HUB_KAFKA_DLQ_GROUP_ID", "cell-west-dlq"),
        ],
    )
    .await;
    let tenants = ["t-a1", "t-b", "t-a2", "t-c"];
    let records: Vec<Record> = (0..120).map(|i| Record::event("cells", i % 3, tenants[i as usize % 4])).collect();
    // Malformed: one of west's (a bad id), one naming no tenant.
    let west_poison = Record::event("cells", 0, "t-b").set("ce-id", "not-a-uuid");
    let nobody = Record::event("cells", 1, "t-a1").without("ce-tenantid");
    let mut all = records.clone();
    all.extend([west_poison.clone(), nobody.clone()]);
    // Dead letters: each cell keeps its tenants' and the one naming no tenant.
    let dead: Vec<Record> = ["t-a1", "t-b", "t-c"]
        .map(|t| Record { topic: "lerian.streaming.cells.dlq".into(), ..Record::event("cells", 0, t) })
        .into_iter()
        .chain([Record { topic: "lerian.streaming.cells.dlq".into(), partition: 0, ..nobody.clone() }])
        .collect();
    all.extend(dead.iter().cloned());
    produce(&peer.producer(), &all).await;

    let ids_of = |tenant: &str| -> Vec<String> {
        records.iter().filter(|r| r.header("ce-tenantid") == Some(tenant)).map(Record::id).collect()
    };
    for (cell, own, others) in
        [(&east, &["t-a1", "t-a2"][..], &["t-b", "t-c"][..]), (&west, &["t-b"], &["t-a1", "t-a2", "t-c"])]
    {
        for tenant in own {
            let stored = until(&format!("{tenant}'s events"), async || {
                let events = cell.store.events_after(tenant, 0, 1000).await.expect("read");
                (events.len() >= 30).then_some(events)
            })
            .await;
            let got: Vec<String> = stored.iter().map(|e| e.ce_id.to_string()).collect();
            let mut expected = ids_of(tenant);
            let mut sorted = got.clone();
            sorted.sort();
            expected.sort();
            assert_eq!(sorted, expected, "{tenant}: each of its events, once");
        }
        // Every offset committed in this cell's group, so everything it will ever store is stored.
        let group = if own.contains(&"t-b") { "cell-west" } else { "cell-east" };
        peer.wait_committed(group, topic, &ends(&all, topic, 3), WAIT).await;
        for tenant in others {
            assert!(
                cell.store.events_after(tenant, 0, 10).await.expect("read").is_empty(),
                "{tenant} is another cell's"
            );
        }
    }
    let quarantined = |hub: &TestHub| {
        let store = Arc::clone(&hub.store);
        async move {
            let q = store.list_quarantine(&QuarantineFilter { limit: 100, ..Default::default() }).await.expect("list");
            let mut fields: Vec<String> = q.iter().map(|q| q.reason_field.clone()).collect();
            fields.sort();
            fields
        }
    };
    assert_eq!(quarantined(&west).await, vec!["ce-id", "ce-tenantid"], "its own bad record and the unattributable one");
    assert_eq!(quarantined(&east).await, vec!["ce-tenantid"], "west's bad record is not east's to quarantine");
    for (cell, group, tenant) in [(&east, "cell-east-dlq", "t-a1"), (&west, "cell-west-dlq", "t-b")] {
        peer.wait_committed(group, "lerian.streaming.cells.dlq", &[4], WAIT).await;
        let kept = cell.store.list_dlq(&hub_store::DlqFilter { limit: 100, ..Default::default() }).await.expect("list");
        let mut tenants: Vec<Option<String>> = kept.iter().map(|d| d.record.tenant_id.clone()).collect();
        tenants.sort();
        assert_eq!(tenants, vec![None, Some(tenant.to_owned())], "{group}");
    }

    let event = crate::support::Event::new("t-b");
    let (status, body) = east.post_event(&east.admin, &event).await;
    assert_eq!((status, body["title"].as_str()), (reqwest::StatusCode::FORBIDDEN, Some("tenant_not_served")), "{body}");
    let (status, body) = west.post_event(&west.admin, &event).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
}
