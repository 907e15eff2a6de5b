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
    _kafka: Option<hub_testkit::kafka::Broker>,
}

impl KafkaPeer {
    pub async fn start(broker: Broker) -> Self {
        match broker {
            Broker::Mock => {
                let mock = MockCluster::new(1).expect("mock cluster");
                Self { brokers: mock.bootstrap_servers(), mock: Some(mock), _kafka: None }
            }
            Broker::Kafka => {
                let home = hub_testkit::kafka::kafka_home();
                assert!(
                    home.join("lib").is_dir(),
                    "Apache Kafka is required for these tests ({}); scripts/test installs it",
                    home.display()
                );
                let kafka = hub_testkit::kafka::Broker::apache(&home, true).await.expect("start Apache Kafka");
                Self { brokers: kafka.brokers.clone(), mock: None, _kafka: Some(kafka) }
            }
        }
    }

    /// A peer on a broker someone else runs (and stops).
    pub fn on(brokers: String) -> Self {
        Self { brokers, mock: None, _kafka: None }
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

    /// What the broker says of `group` and of `topic`: the group's state and each member's
    /// assignment size, and each partition's high watermark; for a test that waited in vain.
    pub fn describe(&self, group: &str, topic: &str) -> String {
        let consumer = self.inspector("describe");
        let timeout = Duration::from_secs(5);
        let groups = match consumer.fetch_group_list(Some(group), timeout) {
            Ok(list) => list
                .groups()
                .iter()
                .map(|g| {
                    let members: Vec<String> = g
                        .members()
                        .iter()
                        .map(|m| {
                            format!("{} ({} bytes assigned)", m.client_id(), m.assignment().map_or(0, <[u8]>::len))
                        })
                        .collect();
                    format!("group {} {} {}: {members:?}", g.name(), g.state(), g.protocol())
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(e) => format!("group list: {e}"),
        };
        let marks = match consumer.fetch_metadata(Some(topic), timeout) {
            Ok(m) => m
                .topics()
                .iter()
                .flat_map(|t| t.partitions().iter().map(|p| p.id()))
                .map(|p| format!("{p}: {:?}", consumer.fetch_watermarks(topic, p, timeout)))
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => format!("metadata: {e}"),
        };
        format!("{groups}; {topic} watermarks {marks}")
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
        hub_testkit::header(&self.headers, key)
    }

    pub fn set(mut self, key: &str, value: &str) -> Self {
        hub_testkit::set_header(&mut self.headers, key, value);
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

/// Produces one record over the Kafka protocol itself (Produce v3, a v2 record batch), so that a
/// test can send what every client library refuses to build — a header key that is not UTF-8.
/// The broker must lead the partition (a single-node broker does). Returns the broker's error
/// code for the partition (0 is success).
pub async fn produce_raw(brokers: &str, topic: &str, partition: i32, headers: &[(&[u8], &[u8])], value: &[u8]) -> i16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn varint(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            if z < 0x80 {
                out.push(z as u8);
                return;
            }
            out.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
    }
    fn crc32c(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for byte in data {
            crc ^= u32::from(*byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
            }
        }
        !crc
    }
    let mut record = vec![0u8]; // attributes
    varint(&mut record, 0); // timestamp delta
    varint(&mut record, 0); // offset delta
    varint(&mut record, -1); // no key
    varint(&mut record, value.len() as i64);
    record.extend_from_slice(value);
    varint(&mut record, headers.len() as i64);
    for (k, v) in headers {
        varint(&mut record, k.len() as i64);
        record.extend_from_slice(k);
        varint(&mut record, v.len() as i64);
        record.extend_from_slice(v);
    }
    let now = chrono::Utc::now().timestamp_millis();
    let mut after_crc = Vec::new();
    after_crc.extend_from_slice(&0i16.to_be_bytes()); // attributes
    after_crc.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
    after_crc.extend_from_slice(&now.to_be_bytes());
    after_crc.extend_from_slice(&now.to_be_bytes());
    after_crc.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    after_crc.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    after_crc.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    after_crc.extend_from_slice(&1i32.to_be_bytes()); // one record
    varint(&mut after_crc, record.len() as i64);
    after_crc.extend_from_slice(&record);
    let mut batch_tail = Vec::new();
    batch_tail.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    batch_tail.push(2); // magic
    batch_tail.extend_from_slice(&crc32c(&after_crc).to_be_bytes());
    batch_tail.extend_from_slice(&after_crc);
    let mut batch = Vec::new();
    batch.extend_from_slice(&0i64.to_be_bytes()); // base offset
    batch.extend_from_slice(&(batch_tail.len() as i32).to_be_bytes());
    batch.extend_from_slice(&batch_tail);

    let mut request = Vec::new();
    request.extend_from_slice(&0i16.to_be_bytes()); // Produce
    request.extend_from_slice(&3i16.to_be_bytes()); // v3
    request.extend_from_slice(&7i32.to_be_bytes()); // correlation id
    request.extend_from_slice(&(b"raw".len() as i16).to_be_bytes());
    request.extend_from_slice(b"raw");
    request.extend_from_slice(&(-1i16).to_be_bytes()); // no transactional id
    request.extend_from_slice(&1i16.to_be_bytes()); // acks
    request.extend_from_slice(&10_000i32.to_be_bytes());
    request.extend_from_slice(&1i32.to_be_bytes()); // one topic
    request.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    request.extend_from_slice(topic.as_bytes());
    request.extend_from_slice(&1i32.to_be_bytes()); // one partition
    request.extend_from_slice(&partition.to_be_bytes());
    request.extend_from_slice(&(batch.len() as i32).to_be_bytes());
    request.extend_from_slice(&batch);

    let mut tcp = tokio::net::TcpStream::connect(brokers).await.expect("connect to the broker");
    tcp.write_all(&(request.len() as i32).to_be_bytes()).await.expect("write");
    tcp.write_all(&request).await.expect("write");
    let size = tcp.read_i32().await.expect("response size");
    let mut response = vec![0u8; size as usize];
    tcp.read_exact(&mut response).await.expect("response");
    // correlation id (4), topics (4), topic name (2 + n), partitions (4), partition (4), error (2)
    let at = 4 + 4 + 2 + topic.len() + 4 + 4;
    i16::from_be_bytes([response[at], response[at + 1]])
}
