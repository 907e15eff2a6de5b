//! The SQS sink (SPEC §3.7): one `SendMessage` per attempt, with the official AWS SDK.

pub mod config;
pub mod schema;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use crate::aws::{AwsEndpoint, AwsSettings, Clients, Verification, classify, packed_attributes, text_body};
use crate::message::{Message, attributes};
use crate::sink::{Failure, Outcome, Probed, Secrets, Settings, TypedSink};

/// The tenth attribute: every other header, as a JSON object.
pub const SQS_EXTRA_HEADERS: &str = crate::aws::EXTRA_HEADERS;

/// An SQS queue.
#[derive(Debug, Clone)]
pub struct SqsTarget {
    pub queue_url: String,
    pub endpoint: AwsEndpoint,
}

/// The SQS sink.
#[derive(Debug)]
pub struct SqsSink {
    clients: Clients<aws_sdk_sqs::Client>,
}

impl SqsSink {
    pub fn new(settings: AwsSettings) -> Self {
        Self { clients: Clients::new(settings) }
    }

    async fn client(&self, e: &AwsEndpoint) -> Result<aws_sdk_sqs::Client, Failure> {
        self.clients.get(e, aws_sdk_sqs::Client::new).await
    }

    async fn send(
        &self,
        target: &SqsTarget,
        body: String,
        attrs: Vec<(String, String)>,
        group: &str,
        dedup: &str,
    ) -> Result<(), Failure> {
        use aws_sdk_sqs::types::MessageAttributeValue;
        let client = self.client(&target.endpoint).await?;
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
impl TypedSink for SqsSink {
    const NAME: &'static str = "sqs";
    const SUMMARY: &'static str = "{queue_url}";
    type Config = config::SqsConfig;
    type Request = schema::SqsSink;
    type Target = SqsTarget;


    fn build(settings: &Settings) -> Result<Self, String> {
        Ok(Self::new(settings.into()))
    }

    fn target(
        &self,
        config: &config::SqsConfig,
        secrets: &Secrets,
        max_timeout: Duration,
    ) -> Result<SqsTarget, Failure> {
        let c = config;
        let timeout = crate::sink::BROKER_TIMEOUT.min(max_timeout);
        let endpoint = self.clients.settings.endpoint(
            &c.region,
            c.endpoint_url.as_deref(),
            c.credentials.as_ref(),
            secrets,
            timeout,
        );
        Ok(SqsTarget { queue_url: c.queue_url.clone(), endpoint })
    }

    async fn attempt(&self, target: &SqsTarget, m: &Message<'_>) -> Outcome {
        let mut attrs = attributes(m);
        let body = text_body(m.payload, &mut attrs);
        // A FIFO queue keeps order per message group: the ordering key's, else the tenant's.
        let group = m.ordering_key.unwrap_or(m.tenant);
        match self.send(target, body, attrs, group, &m.ce_id.to_string()).await {
            Ok(()) => Outcome::Delivered { status: None, response: None, stalled: false },
            Err(f) => Outcome::Failed(f),
        }
    }

    async fn check(&self, target: &SqsTarget, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        let v = Verification::new(tenant, subscription_id);
        self.send(target, v.body, v.attributes, tenant, &v.id).await.map(|()| Probed::default())
    }
}
