//! The S3 sink: one `PutObject` per attempt, with the official AWS SDK. Each event is one object,
//! the CloudEvent in structured JSON form (`application/cloudevents+json`), at
//! `<prefix><tenant>/<resourcetype>.<eventtype>/<yyyy>/<mm>/<dd>/<ce-id>.json` by the event's
//! time in UTC: a repeated delivery overwrites the same object.

pub mod config;
pub mod schema;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_s3::primitives::ByteStream;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::aws::sink::{AwsSink, Service};
use crate::aws::{AwsEndpoint, Verification, classify};
use crate::message::{Message, structured};
use crate::sink::Failure;

/// Error codes retrying cannot help: no such bucket, an object S3 never takes.
const PERMANENT: &[&str] = &["NoSuchBucket", "InvalidBucketName", "EntityTooLarge", "KeyTooLongError"];

/// The media type of every object written.
pub const CONTENT_TYPE: &str = "application/cloudevents+json";

/// An S3 bucket.
#[derive(Debug, Clone)]
pub struct S3Target {
    pub bucket: String,
    pub prefix: String,
    pub endpoint: AwsEndpoint,
}

/// The S3 sink.
pub type S3Sink = AwsSink<S3>;

/// S3, as [`AwsSink`] speaks to it.
#[derive(Debug)]
pub struct S3;

/// The object key of an event (SPEC §9): the event's time decides the day; one that does not
/// read (never, for an accepted event) files it under the day it is delivered.
pub fn object_key(prefix: &str, m: &Message<'_>) -> String {
    let day = DateTime::parse_from_rfc3339(m.time).map(|t| t.with_timezone(&Utc)).unwrap_or_else(|_| Utc::now());
    format!("{prefix}{}/{}.{}/{}/{}.json", m.tenant, m.resource_type, m.event_type, day.format("%Y/%m/%d"), m.ce_id)
}

impl S3 {
    async fn put(client: &aws_sdk_s3::Client, target: &S3Target, key: String, body: Vec<u8>) -> Result<(), Failure> {
        client
            .put_object()
            .bucket(&target.bucket)
            .key(key)
            .content_type(CONTENT_TYPE)
            .body(ByteStream::from(body))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify(&e, target.endpoint.timeout, "S3", PERMANENT))
    }
}

#[async_trait]
impl Service for S3 {
    const NAME: &'static str = "s3";
    const SUMMARY: &'static str = "s3://{bucket}/{prefix}";
    type Config = config::S3Config;
    type Request = schema::S3Sink;
    type Target = S3Target;
    type Client = aws_sdk_s3::Client;

    /// A named endpoint (an S3-compatible store, an emulator, a VPC endpoint) is addressed by
    /// path: virtual-host buckets need DNS that such endpoints seldom have.
    fn client(config: &SdkConfig, endpoint: &AwsEndpoint) -> aws_sdk_s3::Client {
        let path_style = endpoint.endpoint_url.is_some();
        aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(config).force_path_style(path_style).build())
    }

    fn target(config: &config::S3Config, endpoint: AwsEndpoint) -> S3Target {
        S3Target { bucket: config.bucket.clone(), prefix: config.prefix.clone(), endpoint }
    }

    fn endpoint(target: &S3Target) -> &AwsEndpoint {
        &target.endpoint
    }

    async fn send(client: &aws_sdk_s3::Client, target: &S3Target, m: &Message<'_>) -> Result<(), Failure> {
        let body = structured(m).to_string().into_bytes();
        Self::put(client, target, object_key(&target.prefix, m), body).await
    }

    /// Writes (and on each probe overwrites) one verification object of the subscription.
    async fn verify(client: &aws_sdk_s3::Client, target: &S3Target, tenant: &str, subscription: Uuid) -> Result<(), Failure> {
        let key = format!("{}{tenant}/streaming_hub.verification/{subscription}.json", target.prefix);
        Self::put(client, target, key, Verification::record(tenant, subscription).into_bytes()).await
    }
}
