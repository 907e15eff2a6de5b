//! The Kafka sink: produces to a topic of the tenant's own cluster with the CloudEvents Kafka
//! binding in binary mode: the body is the record's value, each attribute a `ce_<name>` header,
//! the media type the `content-type` header; the record key is the ordering key (`partitionkey`,
//! else `subject`, else the tenant), hashed to a partition as Kafka's Java client does. A delivery
//! counts only once every in-sync replica has the record (`acks=all`), through an idempotent
//! producer.
//!
//! The producer speaks the Kafka protocol itself (`protocol.rs`, `conn.rs`, `producer.rs`) rather
//! than through librdkafka, because every connection must go through the address guard: a
//! cluster names its brokers in its metadata, and each of those names is resolved, checked and
//! dialled at exactly the checked addresses, which librdkafka's own resolver cannot be made to do.

pub mod config;
pub mod schema;
mod conn;
mod producer;
pub mod protocol;
pub mod sasl;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use uuid::Uuid;

use self::conn::Dialer;
use crate::sink::failure;
use self::producer::Producer;
use self::protocol::Record;
use crate::cache::BoundedCache;
use crate::message::{Message, attributes};
use crate::sink::{Failure, FailureKind, Outcome, Probed, Secrets, Settings, TypedSink};

/// A Kafka topic, with how to reach and log in to its cluster.
#[derive(Debug, Clone)]
pub struct KafkaTarget {
    pub topic: String,
    pub bootstrap: Vec<(String, u16)>,
    pub dialer: Dialer,
}

impl KafkaTarget {
    /// The producer's key: a digest, since it carries the login.
    fn cache_key(&self) -> [u8; 32] {
        let d = &self.dialer;
        crate::cache::digest(&(&self.topic, &self.bootstrap, d.tls, d.allow_private, d.timeout, &d.sasl))
    }
}

/// The Kafka sink: one producer (and its connections) per destination.
#[derive(Debug)]
pub struct KafkaSink {
    allow_private: bool,
    producers: tokio::sync::Mutex<BoundedCache<[u8; 32], Producer>>,
}

impl KafkaSink {
    pub fn new(allow_private: bool) -> Self {
        Self { allow_private, producers: Default::default() }
    }

    async fn producer(&self, target: &KafkaTarget) -> Producer {
        let key = target.cache_key();
        let mut producers = self.producers.lock().await;
        if let Some(p) = producers.get(&key, Instant::now()) {
            return p;
        }
        let p = Producer::start(target.dialer.clone(), target.bootstrap.clone(), target.topic.clone());
        producers.insert(key, p.clone(), Instant::now());
        p
    }

    async fn send(&self, target: &KafkaTarget, record: Record) -> Result<(), Failure> {
        self.producer(target).await.send(record, target.dialer.timeout).await
    }
}

/// The record of a message: key, value and the binding's headers.
pub fn record(m: &Message<'_>) -> Record {
    let headers = attributes(m)
        .into_iter()
        .map(|(name, value)| {
            let name = match name.strip_prefix("ce-") {
                Some("datacontenttype") => "content-type".to_owned(),
                Some(attribute) => format!("ce_{attribute}"),
                None => name,
            };
            (name, value.into_bytes())
        })
        .collect();
    Record { key: m.record_key().as_bytes().to_vec(), value: m.payload.to_vec(), headers }
}

#[async_trait]
impl TypedSink for KafkaSink {
    const NAME: &'static str = "kafka";
    const SUMMARY: &'static str = "{topic} at {brokers}{tls? (TLS)}";
    type Config = config::KafkaConfig;
    type Request = schema::KafkaSink;
    type Target = KafkaTarget;


    fn build(settings: &Settings) -> Result<Self, String> {
        Ok(Self::new(settings.allow_private))
    }

    fn target(
        &self,
        config: &config::KafkaConfig,
        secrets: &Secrets,
        max_timeout: Duration,
    ) -> Result<KafkaTarget, Failure> {
        let c = config;
        let sasl = match &c.sasl {
            None => None,
            Some(s) => {
                let password = secrets.credentials.as_ref().and_then(|c| c["password"].as_str()).ok_or_else(|| {
                    failure(true, FailureKind::Unauthorized, "no SASL password is configured for this destination")
                })?;
                Some((s.mechanism, s.username.clone(), password.to_owned()))
            }
        };
        let dialer = Dialer {
            tls: c.tls,
            sasl,
            allow_private: self.allow_private,
            timeout: crate::sink::BROKER_TIMEOUT.min(max_timeout),
        };
        Ok(KafkaTarget { topic: c.topic.clone(), bootstrap: c.bootstrap(), dialer })
    }

    async fn attempt(&self, target: &KafkaTarget, m: &Message<'_>) -> Outcome {
        match self.send(target, record(m)).await {
            Ok(()) => Outcome::Delivered { status: None, response: None, stalled: false },
            Err(f) => Outcome::Failed(f),
        }
    }

    /// Produces a verification record (`ce_type: streaming_hub.verification`) to the topic.
    async fn check(&self, target: &KafkaTarget, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        let value = json!({"type": "streaming_hub.verification", "subscription_id": subscription_id});
        let headers = [
            ("ce_specversion", "1.0".to_owned()),
            ("ce_id", Uuid::now_v7().to_string()),
            ("ce_source", "streaming-hub".to_owned()),
            ("ce_type", "streaming_hub.verification".to_owned()),
            ("ce_tenantid", tenant.to_owned()),
            ("content-type", "application/json".to_owned()),
        ];
        let record = Record {
            key: tenant.as_bytes().to_vec(),
            value: value.to_string().into_bytes(),
            headers: headers.into_iter().map(|(k, v)| (k.to_owned(), v.into_bytes())).collect(),
        };
        self.send(target, record).await.map(|()| Probed::default())
    }
}
