//! The Kinesis sink: one `PutRecord` per attempt, with the official AWS SDK. The record is the
//! CloudEvent in structured JSON form; its partition key is the event's `partitionkey`, else its
//! `subject`, else the tenant, so a key's events land on one shard in order.

pub mod config;
pub mod schema;

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::primitives::Blob;
use serde_json::json;
use uuid::Uuid;

use crate::aws::{AwsEndpoint, AwsSettings, Clients, classify};
use crate::message::{Message, structured};
use crate::sink::{Failure, Outcome, Probed, Secrets, Settings, TypedSink};

/// Error codes retrying cannot help: no such stream, a record Kinesis never takes.
const PERMANENT: &[&str] = &["ResourceNotFoundException", "InvalidArgumentException", "ValidationException"];

/// A Kinesis data stream.
#[derive(Debug, Clone)]
pub struct KinesisTarget {
    pub stream_name: String,
    pub endpoint: AwsEndpoint,
}

/// The Kinesis sink.
#[derive(Debug)]
pub struct KinesisSink {
    clients: Clients<aws_sdk_kinesis::Client>,
}

impl KinesisSink {
    pub fn new(settings: AwsSettings) -> Self {
        Self { clients: Clients::new(settings) }
    }

    async fn put(&self, target: &KinesisTarget, data: Vec<u8>, partition_key: &str) -> Result<(), Failure> {
        let client = self.clients.get(&target.endpoint, aws_sdk_kinesis::Client::new).await?;
        client
            .put_record()
            .stream_name(&target.stream_name)
            .data(Blob::new(data))
            .partition_key(partition_key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify(&e, target.endpoint.timeout, "Kinesis", PERMANENT))
    }
}

#[async_trait]
impl TypedSink for KinesisSink {
    const NAME: &'static str = "kinesis";
    const SUMMARY: &'static str = "{stream_name} ({region})";
    type Config = config::KinesisConfig;
    type Request = schema::KinesisSink;
    type Target = KinesisTarget;


    fn build(settings: &Settings) -> Result<Self, String> {
        Ok(Self::new(settings.into()))
    }

    fn target(
        &self,
        config: &config::KinesisConfig,
        secrets: &Secrets,
        max_timeout: Duration,
    ) -> Result<KinesisTarget, Failure> {
        let c = config;
        let timeout = crate::sink::BROKER_TIMEOUT.min(max_timeout);
        let endpoint = self.clients.settings.endpoint(
            &c.region,
            c.endpoint_url.as_deref(),
            c.credentials.as_ref(),
            secrets,
            timeout,
        );
        Ok(KinesisTarget { stream_name: c.stream_name.clone(), endpoint })
    }

    async fn attempt(&self, target: &KinesisTarget, m: &Message<'_>) -> Outcome {
        let record = structured(m).to_string().into_bytes();
        match self.put(target, record, m.record_key()).await {
            Ok(()) => Outcome::Delivered { status: None, response: None, stalled: false },
            Err(f) => Outcome::Failed(f),
        }
    }

    async fn check(&self, target: &KinesisTarget, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        let record =
            json!({"type": "streaming_hub.verification", "tenantid": tenant, "subscription_id": subscription_id});
        self.put(target, record.to_string().into_bytes(), tenant).await.map(|()| Probed::default())
    }
}
