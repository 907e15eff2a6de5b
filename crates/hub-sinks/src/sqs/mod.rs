//! The SQS sink (SPEC §3.7): one `SendMessage` per attempt, with the official AWS SDK.

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

/// The tenth attribute: every other header, as a JSON object.
pub const SQS_EXTRA_HEADERS: &str = crate::aws::EXTRA_HEADERS;

/// An SQS queue.
#[derive(Debug, Clone)]
pub struct SqsTarget {
    pub queue_url: String,
    pub endpoint: AwsEndpoint,
}

/// The SQS sink.
pub type SqsSink = AwsSink<Sqs>;

/// SQS, as [`AwsSink`] speaks to it.
#[derive(Debug)]
pub struct Sqs;

impl Sqs {
    async fn send(
        client: &aws_sdk_sqs::Client,
        target: &SqsTarget,
        body: String,
        attrs: Vec<(String, String)>,
        group: &str,
        dedup: &str,
    ) -> Result<(), Failure> {
        use aws_sdk_sqs::types::MessageAttributeValue;
        let native = packed_attributes(attrs)
            .into_iter()
            .filter_map(|(k, v)| {
                let value = MessageAttributeValue::builder().data_type("String").string_value(v).build().ok()?;
                Some((k, value))
            })
            .collect::<HashMap<_, _>>();
        let mut request =
            client.send_message().queue_url(&target.queue_url).message_body(body).set_message_attributes(Some(native));
        if target.queue_url.ends_with(".fifo") {
            request = request.message_group_id(group).message_deduplication_id(dedup);
        }
        request.send().await.map(|_| ()).map_err(|e| classify(&e, target.endpoint.timeout, "SQS", &[]))
    }
}

#[async_trait]
impl Service for Sqs {
    const NAME: &'static str = "sqs";
    const SUMMARY: &'static str = "{queue_url}";
    type Config = config::SqsConfig;
    type Request = schema::SqsSink;
    type Target = SqsTarget;
    type Client = aws_sdk_sqs::Client;

    fn client(config: &SdkConfig, _: &AwsEndpoint) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(config)
    }

    fn target(config: &config::SqsConfig, endpoint: AwsEndpoint) -> SqsTarget {
        SqsTarget { queue_url: config.queue_url.clone(), endpoint }
    }

    fn endpoint(target: &SqsTarget) -> &AwsEndpoint {
        &target.endpoint
    }

    async fn send(client: &aws_sdk_sqs::Client, target: &SqsTarget, m: &Message<'_>) -> Result<(), Failure> {
        let mut attrs = attributes(m);
        let body = text_body(m.payload, &mut attrs);
        // A FIFO queue keeps order per message group: the ordering key's, else the tenant's.
        let group = m.ordering_key.unwrap_or(m.tenant);
        Self::send(client, target, body, attrs, group, &m.ce_id.to_string()).await
    }

    async fn verify(client: &aws_sdk_sqs::Client, target: &SqsTarget, tenant: &str, subscription: Uuid) -> Result<(), Failure> {
        let v = Verification::new(tenant, subscription);
        Self::send(client, target, v.body, v.attributes, tenant, &v.id).await
    }
}
