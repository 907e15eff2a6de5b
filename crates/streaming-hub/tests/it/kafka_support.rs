//! Real Kafka-protocol peers for tests: librdkafka's in-process mock cluster, or a private
//! `tansu` broker process per test. Producing with headers, creating topics, reading committed
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
    Tansu,
}

/// A running broker, stopped when dropped.
pub struct KafkaPeer {
    pub brokers: String,
    mock: Option<MockCluster<'static, rdkafka::producer::DefaultProducerContext>>,
    tansu: Option<std::process::Child>,
}

impl Drop for KafkaPeer {
    fn drop(&mut self) {
        if let Some(child) = &mut self.tansu {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The tansu binary `scripts/test` installs.
pub fn tansu_binary() -> std::path::PathBuf {
    std::env::var("STREAMING_HUB_TEST_TANSU").map(Into::into).unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".to_owned());
        std::path::PathBuf::from(home).join(".cache/streaming-hub/tansu/bin/tansu")
    })
}

impl KafkaPeer {
    pub async fn start(broker: Broker) -> Self {
        match broker {
            Broker::Mock => {
                let mock = MockCluster::new(1).expect("mock cluster");
                Self { brokers: mock.bootstrap_servers(), mock: Some(mock), tansu: None }
            }
            Broker::Tansu => {
                let bin = tansu_binary();
                assert!(
                    bin.is_file(),
                    "tansu is required for these tests ({}); scripts/test installs it",
                    bin.display()
                );
                let port = crate::support::free_port();
                let url = format!("tcp://127.0.0.1:{port}");
                let child = std::process::Command::new(&bin)
                    .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
                    .args(["--storage-engine", "memory://tansu/"])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .expect("start tansu");
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
                    assert!(tokio::time::Instant::now() < deadline, "tansu did not start");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Self { brokers: format!("127.0.0.1:{port}"), mock: None, tansu: Some(child) }
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
    }

    pub fn producer(&self) -> FutureProducer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("message.timeout.ms", "30000")
            .set("linger.ms", "5")
            .create()
            .expect("producer")
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

    /// Each partition's high watermark (the offset after its last record).
    pub fn high_watermarks(&self, topic: &str, partitions: i32) -> Vec<i64> {
        let consumer = self.inspector("watermarks");
        (0..partitions)
            .map(|p| consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).expect("watermarks").1)
            .collect()
    }

    /// Polls until the group has committed every partition to its end.
    pub async fn wait_all_committed(&self, group: &str, topic: &str, partitions: i32, deadline: Duration) {
        let end = tokio::time::Instant::now() + deadline;
        loop {
            let high = self.high_watermarks(topic, partitions);
            let committed = self.committed(group, topic, partitions);
            if committed.iter().zip(&high).all(|(c, h)| c.unwrap_or(0) == *h) {
                return;
            }
            assert!(tokio::time::Instant::now() < end, "{topic}: committed {committed:?}, high watermarks {high:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
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

/// Produces records in order, waiting for each to be acknowledged.
pub async fn produce(producer: &FutureProducer, records: &[Record]) {
    let mut pending = Vec::new();
    for r in records {
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
        }
        let record = FutureRecord::<(), [u8]>::to(&r.topic).partition(r.partition).payload(&r.body).headers(headers);
        pending.push(producer.send(record, Duration::from_secs(30)));
        if pending.len() >= 500 {
            for p in pending.drain(..) {
                p.await.map_err(|(e, _)| e).expect("produce");
            }
        }
    }
    for p in pending {
        p.await.map_err(|(e, _)| e).expect("produce");
    }
}
