//! Real Kafka peers for tests: librdkafka's in-process mock cluster, or a private Apache Kafka
//! broker process per test (the hub subscribes by topic pattern, so tests cannot share one). Producing with headers, creating topics, reading committed
//! offsets and high watermarks.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

/// Which broker a test runs against.
#[derive(Debug, Clone, Copy)]
pub enum Broker {
    Mock,
    Kafka,
}

/// A running broker, stopped when dropped.
pub struct KafkaPeer {
    pub brokers: String,
    mock: Option<MockCluster<'static, rdkafka::producer::DefaultProducerContext>>,
    /// Keeps the broker process running while the peer lives.
    _kafka: Option<streaming_hub::bench::Broker>,
}

impl KafkaPeer {
    pub async fn start(broker: Broker) -> Self {
        match broker {
            Broker::Mock => {
                let mock = MockCluster::new(1).expect("mock cluster");
                Self { brokers: mock.bootstrap_servers(), mock: Some(mock), _kafka: None }
            }
            Broker::Kafka => {
                let home = streaming_hub::bench::kafka_home();
                assert!(
                    home.join("lib").is_dir(),
                    "Apache Kafka is required for these tests ({}); scripts/test installs it",
                    home.display()
                );
                let kafka = streaming_hub::bench::Broker::apache(&home, true).await.expect("start Apache Kafka");
                Self { brokers: kafka.brokers.clone(), mock: None, _kafka: Some(kafka) }
            }
        }
    }

    pub async fn create_topic(&self, name: &str, partitions: i32) {
        if let Some(mock) = &self.mock {
            // The mock cluster does not serve the admin API; it creates topics itself.
            mock.create_topic(name, partitions, 1).expect("create topic");
            return;
        }
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &self.brokers).create().expect("admin");
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let results = admin.create_topics(&[topic], &AdminOptions::new()).await.expect("create topics");
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("creating {t}: {e}"));
        }
        // Wait until the broker serves the new topic's metadata with every partition.
        let consumer = self.inspector("metadata");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let known = consumer.fetch_metadata(Some(name), Duration::from_secs(5)).ok().and_then(|m| {
                m.topics().first().map(|t| t.error().is_none() && t.partitions().len() == partitions as usize)
            });
            if known == Some(true) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "topic {name} never became visible");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn producer(&self) -> FutureProducer {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers).set("message.timeout.ms", "30000").set("linger.ms", "5");
        config.create().expect("producer")
    }

    fn inspector(&self, group: &str) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer")
    }

    /// The group's committed offset of each partition (`None` when nothing is committed).
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
        let consumer = self.inspector(group);
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        let committed = consumer.committed_offsets(tpl, Duration::from_secs(10)).expect("committed offsets");
        (0..partitions)
            .map(|p| match committed.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                _ => None,
            })
            .collect()
    }

    /// Polls until the group has committed each partition up to `ends` (the offset after the
    /// partition's last record, which a test knows from what it produced).
    pub async fn wait_committed(&self, group: &str, topic: &str, ends: &[i64], deadline: Duration) {
        let end = tokio::time::Instant::now() + deadline;
        loop {
            let committed = self.committed(group, topic, ends.len() as i32);
            if committed.iter().zip(ends).all(|(c, e)| c.unwrap_or(0) == *e) {
                return;
            }
            assert!(tokio::time::Instant::now() < end, "{topic}: committed {committed:?}, expected {ends:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The offset after the last record of each of `partitions` partitions of `topic`.
pub fn ends(records: &[Record], topic: &str, partitions: i32) -> Vec<i64> {
    (0..partitions).map(|p| records.iter().filter(|r| r.topic == topic && r.partition == p).count() as i64).collect()
}

/// A record to produce.
#[derive(Debug, Clone)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Record {
    /// A valid event for `source`'s topic (whose name is `lerian.streaming.<source>`).
    pub fn event(source: &str, partition: i32, tenant: &str) -> Self {
        let mut e = crate::support::Event::new(tenant);
        e = e.set("ce-source", source).set("ce-type", &format!("studio.lerian.{source}.loan_application.approved"));
        e.headers.retain(|(k, _)| k != "content-type");
        Self { topic: format!("lerian.streaming.{source}"), partition, headers: e.headers, body: e.body }
    }

    pub fn id(&self) -> String {
        self.header("ce-id").unwrap_or_default().to_owned()
    }

    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.headers.retain(|(k, _)| k != key);
        self.headers.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn without(mut self, key: &str) -> Self {
        self.headers.retain(|(k, _)| k != key);
        self
    }

    pub fn body(mut self, body: &[u8]) -> Self {
        self.body = body.to_vec();
        self
    }
}

/// Produces records in order (enqueued at once, so they travel in batches) and waits until every
/// one is acknowledged.
pub async fn produce(producer: &FutureProducer, records: &[Record]) {
    let mut pending = Vec::with_capacity(records.len());
    for r in records {
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
        }
        let mut record =
            FutureRecord::<(), [u8]>::to(&r.topic).partition(r.partition).payload(&r.body).headers(headers);
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    pending.push(delivery);
                    break;
                }
                // The local queue is full: let deliveries drain, then enqueue again.
                Err((_, back)) => {
                    record = back;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    }
    for delivery in pending {
        delivery.await.expect("delivery").map_err(|(e, _)| e).expect("produce");
    }
}
