//! The Kafka sink against Apache Kafka: a broker per test, started from the jars `scripts/services`
//! installs, with a plain listener and a SASL one. Records are read back with librdkafka's
//! consumer, an independent client.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use hub_sinks::kafka::config::{KafkaConfig, Mechanism, Sasl};
use hub_sinks::kafka::protocol::partition_for;
use hub_sinks::kafka::{KafkaSink, KafkaTarget};
use hub_sinks::{FailureKind, Outcome, Secrets, TypedSink};
use hub_testkit::kafka::{Broker, ReadRecord, SASL_PASSWORD, SASL_USER};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use serde_json::json;
use uuid::Uuid;

use crate::contract::{self, Case, Fixture, message};

async fn broker() -> Broker {
    let home = hub_testkit::kafka::kafka_home();
    assert!(home.join("lib").is_dir(), "Apache Kafka is required ({}); scripts/test installs it", home.display());
    Broker::apache(&home, true).await.expect("start Apache Kafka")
}

async fn create_topic(brokers: &str, partitions: i32) -> String {
    let name = format!("sink-{}", Uuid::now_v7().simple());
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", brokers).create().expect("admin");
    let topic = NewTopic::new(&name, partitions, TopicReplication::Fixed(1));
    for r in admin.create_topics(&[topic], &AdminOptions::new()).await.expect("create topics") {
        r.unwrap_or_else(|(t, e)| panic!("creating {t}: {e}"));
    }
    name
}

fn target(
    sink: &KafkaSink,
    brokers: &str,
    topic: &str,
    sasl: Option<(Mechanism, &str)>,
    timeout: Duration,
) -> KafkaTarget {
    let config = KafkaConfig {
        brokers: brokers.to_owned(),
        topic: topic.to_owned(),
        tls: false,
        sasl: sasl.map(|(mechanism, _)| Sasl { mechanism, username: SASL_USER.to_owned() }),
    };
    let secrets = Secrets {
        signing: Vec::new(),
        credentials: sasl.map(|(_, password)| json!({"password": password})),
        owner: None,
    };
    sink.target(&config, &secrets, timeout).expect("a Kafka target")
}

/// Reads every record of `topic` until `expected` arrived (or a deadline passed).
async fn read_back(brokers: &str, topic: &str, expected: usize) -> Vec<ReadRecord> {
    hub_testkit::kafka::read_topic(brokers, topic, expected, Duration::from_secs(30)).await
}

struct KafkaFixture {
    sink: KafkaSink,
    broker: Broker,
    topic: String,
    silent: String,
}

impl Fixture for KafkaFixture {
    type S = KafkaSink;

    fn sink(&self) -> &KafkaSink {
        &self.sink
    }

    async fn target(&self, case: Case) -> KafkaTarget {
        let t = Duration::from_secs(5);
        let sasl = self.broker.sasl_brokers.as_deref().expect("a SASL listener");
        match case {
            Case::Healthy => target(&self.sink, &self.broker.brokers, &self.topic, None, t),
            Case::Refusing => target(&self.sink, &self.broker.brokers, "no-such-topic", None, t),
            Case::Unreachable => target(&self.sink, &crate::receiver::closed_addr(), &self.topic, None, t),
            Case::BadCredentials => {
                target(&self.sink, sasl, &self.topic, Some((Mechanism::ScramSha256, "not-the-password")), t)
            }
            Case::Slow => target(&self.sink, &self.silent, &self.topic, None, Duration::from_millis(500)),
        }
    }

    async fn received(&self, expected: usize) -> Vec<(Uuid, Vec<u8>)> {
        read_back(&self.broker.brokers, &self.topic, expected)
            .await
            .into_iter()
            .filter(|r| r.headers.get("ce_type").map(String::as_str) != Some("streaming_hub.verification"))
            .map(|r| (r.headers["ce_id"].parse().expect("ce_id"), r.value))
            .collect()
    }

    fn secrets(&self) -> Vec<String> {
        vec![SASL_PASSWORD.to_owned(), "not-the-password".to_owned()]
    }

    fn refusal_is_permanent(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn the_kafka_sink_passes_the_contract() {
    let broker = broker().await;
    let topic = create_topic(&broker.brokers, 3).await;
    let fixture =
        KafkaFixture { sink: KafkaSink::new(true), topic, broker, silent: crate::receiver::silent_addr().await };
    contract::run(&fixture).await;
}

/// A thousand events, sent side by side, read back one each: the body as the value, the binding's
/// headers, the key (partitionkey, else subject, else tenant) and the partition Kafka's Java
/// client would pick for that key.
#[tokio::test]
async fn a_thousand_events_are_read_back_with_their_headers_keys_and_partitions() {
    let broker = broker().await;
    let topic = create_topic(&broker.brokers, 4).await;
    let sink = std::sync::Arc::new(KafkaSink::new(true));
    let target = std::sync::Arc::new(target(&sink, &broker.brokers, &topic, None, Duration::from_secs(10)));
    let mut sent = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1000u32 {
        let id = Uuid::now_v7();
        let body = format!(r#"{{"n":{i}}}"#).into_bytes();
        // A third carry a partitionkey, a third only a subject, a third neither.
        let (partition_key, subject) = match i % 3 {
            0 => (Some(format!("account-{}", i % 17)), Some(format!("loan-{i}"))),
            1 => (None, Some(format!("loan-{}", i % 23))),
            _ => (None, None),
        };
        let key = partition_key.clone().or(subject.clone()).unwrap_or_else(|| "tenant-a".to_owned());
        sent.insert(id, (body.clone(), key));
        let (sink, target) = (sink.clone(), target.clone());
        tasks.spawn(async move {
            let mut ext = BTreeMap::from([("partner".to_owned(), "acme".to_owned())]);
            if let Some(k) = partition_key {
                ext.insert("partitionkey".to_owned(), k);
            }
            let mut m = message(&body, &ext, id);
            m.subject = subject.as_deref();
            sink.attempt(&target, &m).await
        });
    }
    while let Some(outcome) = tasks.join_next().await {
        assert!(matches!(outcome.expect("task"), Outcome::Delivered { .. }), "every attempt is acknowledged");
    }
    let got = read_back(&broker.brokers, &topic, 1000).await;
    assert_eq!(got.len(), 1000, "each event once");
    let mut seen = std::collections::HashSet::new();
    for r in got {
        let id: Uuid = r.headers["ce_id"].parse().expect("ce_id");
        assert!(seen.insert(id), "{id} twice");
        let (body, key) = &sent[&id];
        assert_eq!(&r.value, body);
        assert_eq!(r.key, key.as_bytes(), "the record key of {id}");
        assert_eq!(r.partition as usize, partition_for(key.as_bytes(), 4), "the partition of {key}");
        assert_eq!(r.headers["ce_specversion"], "1.0");
        assert_eq!(r.headers["ce_source"], "lender");
        assert_eq!(r.headers["ce_type"], "studio.lerian.lender.loan_application.approved");
        assert_eq!(r.headers["ce_tenantid"], "tenant-a");
        assert_eq!(r.headers["ce_partner"], "acme");
        assert_eq!(r.headers["content-type"], "application/json");
        assert_eq!(r.headers["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert!(!r.headers.contains_key("ce_datacontenttype"), "the media type is content-type in binary mode");
    }
}

/// Every SASL mechanism logs in, delivers and verifies; a wrong password is refused as such, and
/// never shown.
#[tokio::test]
async fn every_sasl_mechanism_logs_in_and_a_wrong_password_is_refused() {
    let broker = broker().await;
    let topic = create_topic(&broker.brokers, 1).await;
    let sasl = broker.sasl_brokers.clone().expect("a SASL listener");
    let sink = KafkaSink::new(true);
    let ext = BTreeMap::new();
    for mechanism in Mechanism::ALL {
        let t = target(&sink, &sasl, &topic, Some((mechanism, SASL_PASSWORD)), Duration::from_secs(10));
        let outcome = sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await;
        assert!(outcome.is_delivered(), "{}: {outcome:?}", mechanism.as_str());
        sink.check(&t, "tenant-a", Uuid::now_v7()).await.unwrap_or_else(|f| panic!("{}: {f:?}", mechanism.as_str()));
        let wrong = target(&sink, &sasl, &topic, Some((mechanism, "wrong-password-123")), Duration::from_secs(10));
        match sink.attempt(&wrong, &message(b"{}", &ext, Uuid::now_v7())).await {
            Outcome::Failed(f) => {
                assert_eq!(f.kind, FailureKind::Unauthorized, "{}: {f:?}", mechanism.as_str());
                assert!(!format!("{f:?}").contains("wrong-password-123"));
            }
            other => panic!("{}: a wrong password delivered: {other:?}", mechanism.as_str()),
        }
    }
    assert_eq!(read_back(&broker.brokers, &topic, 6).await.len(), 6, "three events and three verifications");
}

/// A broker that goes down fails attempts as unreachable (retried); once it is back, the same
/// producer reconnects and delivers, and nothing acknowledged is lost.
#[tokio::test]
async fn a_broker_that_goes_down_and_comes_back_is_delivered_to_again() {
    let mut broker = broker().await;
    let topic = create_topic(&broker.brokers, 2).await;
    let sink = KafkaSink::new(true);
    let t = target(&sink, &broker.brokers, &topic, None, Duration::from_secs(3));
    let ext = BTreeMap::new();
    let mut delivered = Vec::new();
    for _ in 0..5 {
        let id = Uuid::now_v7();
        assert!(sink.attempt(&t, &message(b"{}", &ext, id)).await.is_delivered());
        delivered.push(id);
    }
    broker.kill();
    match sink.attempt(&t, &message(b"{}", &ext, Uuid::now_v7())).await {
        Outcome::Failed(f) => {
            assert!(f.retryable, "{f:?}");
            assert!(matches!(f.kind, FailureKind::Unreachable | FailureKind::Timeout), "{f:?}");
        }
        other => panic!("a dead broker acknowledged: {other:?}"),
    }
    broker.start_again(true).await.expect("the broker again");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let id = Uuid::now_v7();
        if sink.attempt(&t, &message(b"{}", &ext, id)).await.is_delivered() {
            delivered.push(id);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never delivered after the broker came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let got: Vec<Uuid> = read_back(&broker.brokers, &topic, delivered.len() + 1)
        .await
        .iter()
        .map(|r| r.headers["ce_id"].parse().expect("ce_id"))
        .collect();
    for id in delivered {
        assert!(got.contains(&id), "an acknowledged record was lost: {id}");
    }
}
