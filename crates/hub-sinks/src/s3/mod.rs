//! The S3 sink: one `PutObject` per attempt, with the official AWS SDK. Each event is one object,
//! the CloudEvent in structured JSON form (`application/cloudevents+json`), at
//! `<prefix><tenant>/<resourcetype>.<eventtype>/<yyyy>/<mm>/<dd>/<ce-id>.json` by the event's
//! time in UTC: a repeated delivery overwrites the same object.

pub mod config;
pub mod schema;

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::primitives::ByteStream;
use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

use crate::aws::{AwsEndpoint, AwsSettings, Clients, classify};
use crate::message::{Message, structured};
use crate::sink::{Failure, Outcome, Probed, Secrets, Settings, TypedSink};

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
#[derive(Debug)]
pub struct S3Sink {
    clients: Clients<aws_sdk_s3::Client>,
}

/// The object key of an event (SPEC §9): the event's time decides the day; one that does not
/// read (never, for an accepted event) files it under the day it is delivered.
pub fn object_key(prefix: &str, m: &Message<'_>) -> String {
    let day = DateTime::parse_from_rfc3339(m.time).map(|t| t.with_timezone(&Utc)).unwrap_or_else(|_| Utc::now());
    format!("{prefix}{}/{}.{}/{}/{}.json", m.tenant, m.resource_type, m.event_type, day.format("%Y/%m/%d"), m.ce_id)
}

impl S3Sink {
    pub fn new(settings: AwsSettings) -> Self {
        Self { clients: Clients::new(settings) }
    }

    async fn put(&self, target: &S3Target, key: String, body: Vec<u8>) -> Result<(), Failure> {
        // A named endpoint (an S3-compatible store, an emulator, a VPC endpoint) is addressed by
        // path: virtual-host buckets need DNS that such endpoints seldom have.
        let path_style = target.endpoint.endpoint_url.is_some();
        let client = self
            .clients
            .get(&target.endpoint, |sdk| {
                let conf = aws_sdk_s3::config::Builder::from(sdk).force_path_style(path_style).build();
                aws_sdk_s3::Client::from_conf(conf)
            })
            .await?;
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
impl TypedSink for S3Sink {
    const NAME: &'static str = "s3";
    const SUMMARY: &'static str = "s3://{bucket}/{prefix}";
    type Config = config::S3Config;
    type Request = schema::S3Sink;
    type Target = S3Target;


    fn build(settings: &Settings) -> Result<Self, String> {
        Ok(Self::new(settings.into()))
    }

    fn target(&self, config: &config::S3Config, secrets: &Secrets, max_timeout: Duration) -> Result<S3Target, Failure> {
        let c = config;
        let timeout = crate::sink::BROKER_TIMEOUT.min(max_timeout);
        let endpoint = self.clients.settings.endpoint(
            &c.region,
            c.endpoint_url.as_deref(),
            c.credentials.as_ref(),
            secrets,
            timeout,
        );
        Ok(S3Target { bucket: c.bucket.clone(), prefix: c.prefix.clone(), endpoint })
    }

    async fn attempt(&self, target: &S3Target, m: &Message<'_>) -> Outcome {
        let body = structured(m).to_string().into_bytes();
        match self.put(target, object_key(&target.prefix, m), body).await {
            Ok(()) => Outcome::Delivered { status: None, response: None, stalled: false },
            Err(f) => Outcome::Failed(f),
        }
    }

    /// Writes (and on each probe overwrites) one verification object of the subscription.
    async fn check(&self, target: &S3Target, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        let key = format!("{}{tenant}/streaming_hub.verification/{subscription_id}.json", target.prefix);
        let body =
            json!({"type": "streaming_hub.verification", "tenantid": tenant, "subscription_id": subscription_id});
        self.put(target, key, body.to_string().into_bytes()).await.map(|()| Probed::default())
    }
}
