//! The SNS sink: one `Publish` per attempt, with the official AWS SDK. The body is the message;
//! the CloudEvents attributes are message attributes, packed as for SQS (the ten SNS allows); a
//! FIFO topic gets the ordering key (else the tenant) as `MessageGroupId` and the event id as
//! `MessageDeduplicationId`.

pub mod config;
pub mod schema;

use std::collections::HashMap;

use async_trait::async_trait;
use aws_config::SdkConfig;
use uuid::Uuid;

use crate::aws::sink::{AwsSink, Service};
use crate::aws::{AwsEndpoint, Verification, classify, packed_attributes, text_body};
use crate::message::{Message, attributes};
use crate::sink::Failure;

/// Error codes retrying cannot help: no such topic, a message SNS never takes.
const PERMANENT: &[&str] = &["NotFound", "InvalidParameter", "InvalidParameterValue"];

/// An SNS topic.
#[derive(Debug, Clone)]
pub struct SnsTarget {
    pub topic_arn: String,
    pub fifo: bool,
    pub endpoint: AwsEndpoint,
}

/// The SNS sink.
pub type SnsSink = AwsSink<Sns>;

/// SNS, as [`AwsSink`] speaks to it.
#[derive(Debug)]
pub struct Sns;

impl Sns {
    async fn publish(
        client: &aws_sdk_sns::Client,
        target: &SnsTarget,
        body: String,
        attrs: Vec<(String, String)>,
        group: &str,
        dedup: &str,
    ) -> Result<(), Failure> {
        use aws_sdk_sns::types::MessageAttributeValue;
        let attributes = packed_attributes(attrs)
            .into_iter()
            .filter_map(|(k, v)| {
                let value = MessageAttributeValue::builder().data_type("String").string_value(v).build().ok()?;
                Some((k, value))
            })
            .collect::<HashMap<_, _>>();
        let mut request =
            client.publish().topic_arn(&target.topic_arn).message(body).set_message_attributes(Some(attributes));
        if target.fifo {
            request = request.message_group_id(group).message_deduplication_id(dedup);
        }
        request.send().await.map(|_| ()).map_err(|e| classify(&e, target.endpoint.timeout, "SNS", PERMANENT))
    }
}

#[async_trait]
impl Service for Sns {
    const NAME: &'static str = "sns";
    const SUMMARY: &'static str = "{topic_arn}";
    type Config = config::SnsConfig;
    type Request = schema::SnsSink;
    type Target = SnsTarget;
    type Client = aws_sdk_sns::Client;

    fn client(config: &SdkConfig, _: &AwsEndpoint) -> aws_sdk_sns::Client {
        aws_sdk_sns::Client::new(config)
    }

    fn target(config: &config::SnsConfig, endpoint: AwsEndpoint) -> SnsTarget {
        SnsTarget { topic_arn: config.topic_arn.clone(), fifo: config.is_fifo(), endpoint }
    }

    fn endpoint(target: &SnsTarget) -> &AwsEndpoint {
        &target.endpoint
    }

    async fn send(client: &aws_sdk_sns::Client, target: &SnsTarget, m: &Message<'_>) -> Result<(), Failure> {
        let mut attrs = attributes(m);
        let body = text_body(m.payload, &mut attrs);
        // A FIFO topic keeps order per message group: the ordering key's, else the tenant's.
        let group = m.ordering_key.unwrap_or(m.tenant);
        Self::publish(client, target, body, attrs, group, &m.ce_id.to_string()).await
    }

    async fn verify(client: &aws_sdk_sns::Client, target: &SnsTarget, tenant: &str, subscription: Uuid) -> Result<(), Failure> {
        let v = Verification::new(tenant, subscription);
        Self::publish(client, target, v.body, v.attributes, tenant, &v.id).await
    }
}
