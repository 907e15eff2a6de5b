//! The SNS sink: one `Publish` per attempt, with the official AWS SDK. The body is the message;
//! the CloudEvents attributes are message attributes, packed as for SQS (the ten SNS allows); a
//! FIFO topic gets the ordering key (else the tenant) as `MessageGroupId` and the event id as
//! `MessageDeduplicationId`.

pub mod config;
pub mod schema;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use crate::aws::{AwsEndpoint, AwsSettings, Clients, Verification, classify, packed_attributes, text_body};
use crate::message::{Message, attributes};
use crate::sink::{Failure, Outcome, Probed, Secrets, Settings, TypedSink};

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
#[derive(Debug)]
pub struct SnsSink {
    clients: Clients<aws_sdk_sns::Client>,
}

impl SnsSink {
    pub fn new(settings: AwsSettings) -> Self {
        Self { clients: Clients::new(settings) }
    }

    async fn publish(
        &self,
        target: &SnsTarget,
        body: String,
        attrs: Vec<(String, String)>,
        group: &str,
        dedup: &str,
    ) -> Result<(), Failure> {
        use aws_sdk_sns::types::MessageAttributeValue;
        let client = self.clients.get(&target.endpoint, aws_sdk_sns::Client::new).await?;
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
impl TypedSink for SnsSink {
    const NAME: &'static str = "sns";
    const SUMMARY: &'static str = "{topic_arn}";
    type Config = config::SnsConfig;
    type Request = schema::SnsSink;
    type Target = SnsTarget;


    fn build(settings: &Settings) -> Result<Self, String> {
        Ok(Self::new(settings.into()))
    }

    fn target(
        &self,
        config: &config::SnsConfig,
        secrets: &Secrets,
        max_timeout: Duration,
    ) -> Result<SnsTarget, Failure> {
        let c = config;
        let timeout = crate::sink::BROKER_TIMEOUT.min(max_timeout);
        let endpoint = self.clients.settings.endpoint(
            &c.region,
            c.endpoint_url.as_deref(),
            c.credentials.as_ref(),
            secrets,
            timeout,
        );
        Ok(SnsTarget { topic_arn: c.topic_arn.clone(), fifo: c.is_fifo(), endpoint })
    }

    async fn attempt(&self, target: &SnsTarget, m: &Message<'_>) -> Outcome {
        let mut attrs = attributes(m);
        let body = text_body(m.payload, &mut attrs);
        let group = m.ordering_key.unwrap_or(m.tenant);
        match self.publish(target, body, attrs, group, &m.ce_id.to_string()).await {
            Ok(()) => Outcome::Delivered { status: None, response: None, stalled: false },
            Err(f) => Outcome::Failed(f),
        }
    }

    async fn check(&self, target: &SnsTarget, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        let v = Verification::new(tenant, subscription_id);
        self.publish(target, v.body, v.attributes, tenant, &v.id).await.map(|()| Probed::default())
    }
}
