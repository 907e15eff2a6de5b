//! The Kinesis sink: one `PutRecord` per attempt, with the official AWS SDK. The record is the
//! CloudEvent in structured JSON form; its partition key is the event's `partitionkey`, else its
//! `subject`, else the tenant, so a key's events land on one shard in order.

pub mod config;
pub mod schema;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_kinesis::primitives::Blob;
use uuid::Uuid;

use crate::aws::sink::{AwsSink, Service};
use crate::aws::{AwsEndpoint, Verification, classify};
use crate::message::{Message, structured};
use crate::sink::Failure;

/// Error codes retrying cannot help: no such stream, a record Kinesis never takes.
const PERMANENT: &[&str] = &["ResourceNotFoundException", "InvalidArgumentException", "ValidationException"];

/// A Kinesis stream.
#[derive(Debug, Clone)]
pub struct KinesisTarget {
    pub stream_name: String,
    pub endpoint: AwsEndpoint,
}

/// The Kinesis sink.
pub type KinesisSink = AwsSink<Kinesis>;

/// Kinesis, as [`AwsSink`] speaks to it.
#[derive(Debug)]
pub struct Kinesis;

impl Kinesis {
    async fn put(
        client: &aws_sdk_kinesis::Client,
        target: &KinesisTarget,
        data: Vec<u8>,
        partition_key: &str,
    ) -> Result<(), Failure> {
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
impl Service for Kinesis {
    const NAME: &'static str = "kinesis";
    const SUMMARY: &'static str = "{stream_name} ({region})";
    type Config = config::KinesisConfig;
    type Request = schema::KinesisSink;
    type Target = KinesisTarget;
    type Client = aws_sdk_kinesis::Client;

    fn client(config: &SdkConfig, _: &AwsEndpoint) -> aws_sdk_kinesis::Client {
        aws_sdk_kinesis::Client::new(config)
    }

    fn target(config: &config::KinesisConfig, endpoint: AwsEndpoint) -> KinesisTarget {
        KinesisTarget { stream_name: config.stream_name.clone(), endpoint }
    }

    fn endpoint(target: &KinesisTarget) -> &AwsEndpoint {
        &target.endpoint
    }

    async fn send(client: &aws_sdk_kinesis::Client, target: &KinesisTarget, m: &Message<'_>) -> Result<(), Failure> {
        let record = structured(m).to_string().into_bytes();
        Self::put(client, target, record, m.record_key()).await
    }

    async fn verify(
        client: &aws_sdk_kinesis::Client,
        target: &KinesisTarget,
        tenant: &str,
        subscription: Uuid,
    ) -> Result<(), Failure> {
        Self::put(client, target, Verification::record(tenant, subscription).into_bytes(), tenant).await
    }
}
