//! The benchmark topic on a Kafka broker: created, read back by a plain consumer, produced to.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::{Broker, TOPIC, body, ce_headers, now_us};

/// The benchmark topic on a broker: created, read back by a plain consumer, produced to.
pub trait BenchTopic {
    /// Creates the benchmark topic and waits until every partition is served.
    async fn create_topic(&self, partitions: i32) -> anyhow::Result<()>;
    /// Reads `n` records of the topic with a plain consumer; returns how long it took.
    async fn read_all(&self, n: usize) -> anyhow::Result<Duration>;
    /// Produces `n` benchmark events of `tenants` in turn over `partitions`; returns how long it took.
    async fn produce(&self, tenants: &[String], partitions: i32, n: usize) -> anyhow::Result<Duration>;
}

impl BenchTopic for Broker {
    /// Creates the benchmark topic and waits until every partition is served.
    async fn create_topic(&self, partitions: i32) -> anyhow::Result<()> {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &self.brokers).create()?;
        let topic = NewTopic::new(TOPIC, partitions, TopicReplication::Fixed(1));
        for r in admin.create_topics(&[topic], &AdminOptions::new()).await? {
            if let Err((t, e)) = r {
                anyhow::ensure!(e == rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists, "creating {t}: {e}");
            }
        }
        let consumer: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", &self.brokers).set("group.id", "bench-metadata").create()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = consumer.fetch_metadata(Some(TOPIC), Duration::from_secs(5)).ok().and_then(|m| {
                m.topics().first().map(|t| t.error().is_none() && t.partitions().len() == partitions as usize)
            });
            if ready == Some(true) {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "topic {TOPIC} never became visible");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Reads the benchmark topic from the start with a plain consumer until it has `n` records;
    /// returns how long it took: the rate at which this broker serves the topic, a ceiling for
    /// any consumer of it.
    async fn read_all(&self, n: usize) -> anyhow::Result<Duration> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", format!("bench-reader-{}", uuid::Uuid::now_v7().simple()))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()?;
        consumer.subscribe(&[TOPIC])?;
        tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + Duration::from_secs(600);
            let (mut read, mut started) = (0usize, None);
            while read < n {
                anyhow::ensure!(Instant::now() < deadline, "the broker served {read} of {n} records");
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(_)) => {
                        started.get_or_insert_with(Instant::now);
                        read += 1;
                    }
                    Some(Err(e)) => anyhow::bail!("reading the topic: {e}"),
                    None => {}
                }
            }
            // From the first record on: the group join is not reading.
            Ok(started.map_or(Duration::ZERO, |s| s.elapsed()))
        })
        .await?
    }

    /// Produces `n` events, tenants and partitions taken round-robin; returns how long it took.
    async fn produce(&self, tenants: &[String], partitions: i32, n: usize) -> anyhow::Result<Duration> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("message.timeout.ms", "60000")
            .set("linger.ms", "5")
            .set("queue.buffering.max.messages", "1000000");
        if self.is_tansu() {
            // tansu 0.6 under-reports its high watermark after a multi-record batch, and then stops
            // serving fetches there: one record per batch keeps it exact.
            config.set("batch.num.messages", "1");
        }
        let producer: FutureProducer = config.create()?;
        let started = Instant::now();
        let mut pending = std::collections::VecDeque::new();
        for i in 0..n {
            let tenant = &tenants[i % tenants.len()];
            let mut headers = OwnedHeaders::new();
            let attributes = ce_headers(tenant);
            for (k, v) in &attributes {
                headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
            }
            headers = headers.insert(Header { key: "content-type", value: Some("application/json".as_bytes()) });
            let payload = body(now_us());
            let record = FutureRecord::<(), str>::to(TOPIC)
                .partition((i % partitions.max(1) as usize) as i32)
                .payload(&payload)
                .headers(headers);
            let delivery = producer.send_result(record).map_err(|(e, _)| anyhow::anyhow!("producing: {e}"))?;
            pending.push_back(delivery);
            if pending.len() >= 10_000 {
                if let Some(d) = pending.pop_front() {
                    d.await?.map_err(|(e, _)| anyhow::anyhow!("producing: {e}"))?;
                }
            }
        }
        for d in pending {
            d.await?.map_err(|(e, _)| anyhow::anyhow!("producing: {e}"))?;
        }
        Ok(started.elapsed())
    }
}
