//! The EventBridge sink (SPEC §3.7): one `PutEvents` entry per attempt, the CloudEvent in
//! structured JSON form as its detail.

pub mod config;
pub mod schema;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use uuid::Uuid;

use crate::aws::{AwsEndpoint, AwsSettings, Clients, classify};
use crate::message::{Message, structured};
use crate::sink::{Failure, FailureKind, Outcome, Probed, Secrets, Settings, TypedSink};

/// An EventBridge bus.
#[derive(Debug, Clone)]
pub struct EventBridgeTarget {
    /// A bus name or ARN.
    pub event_bus: String,
    pub endpoint: AwsEndpoint,
}

/// The EventBridge sink.
#[derive(Debug)]
pub struct EventBridgeSink {
    clients: Clients<aws_sdk_eventbridge::Client>,
}

impl EventBridgeSink {
    pub fn new(settings: AwsSettings) -> Self {
        Self { clients: Clients::new(settings) }
    }

    async fn client(&self, e: &AwsEndpoint) -> Result<aws_sdk_eventbridge::Client, Failure> {
        self.clients.get(e, aws_sdk_eventbridge::Client::new).await
    }

    async fn put(
        &self,
        target: &EventBridgeTarget,
        source: &str,
        detail_type: &str,
        time: Option<i64>,
        detail: String,
    ) -> Result<(), Failure> {
        use aws_sdk_eventbridge::types::PutEventsRequestEntry;
        let client = self.client(&target.endpoint).await?;
        let mut entry = PutEventsRequestEntry::builder()
            .source(source)
            .detail_type(detail_type)
            .detail(detail)
            .event_bus_name(&target.event_bus);
        if let Some(secs) = time {
            entry = entry.time(aws_sdk_eventbridge::primitives::DateTime::from_secs(secs));
        }
        let out = client
            .put_events()
            .entries(entry.build())
            .send()
            .await
            .map_err(|e| classify(&e, target.endpoint.timeout, "EventBridge", &[]))?;
        if out.failed_entry_count() > 0 {
            let entry = out.entries().first();
            let code = entry.and_then(|e| e.error_code()).unwrap_or("Unknown");
            let message = entry.and_then(|e| e.error_message()).unwrap_or_default();
            return Err(Failure {
                retryable: true,
                kind: FailureKind::Refused,
                reason: format!("EventBridge refused the entry: {code}: {message}"),
                status: None,
                response: None,
                retry_after: None,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl TypedSink for EventBridgeSink {
    const NAME: &'static str = "eventbridge";
    const SUMMARY: &'static str = "{event_bus} ({region})";
    type Config = config::EventBridgeConfig;
    type Request = schema::EventbridgeSink;
    type Target = EventBridgeTarget;


    fn build(settings: &Settings) -> Result<Self, String> {
        Ok(Self::new(settings.into()))
    }

    fn target(
        &self,
        config: &config::EventBridgeConfig,
        secrets: &Secrets,
        max_timeout: Duration,
    ) -> Result<EventBridgeTarget, Failure> {
        let c = config;
        let timeout = crate::sink::BROKER_TIMEOUT.min(max_timeout);
        let endpoint = self.clients.settings.endpoint(
            &c.region,
            c.endpoint_url.as_deref(),
            c.credentials.as_ref(),
            secrets,
            timeout,
        );
        Ok(EventBridgeTarget { event_bus: c.event_bus.clone(), endpoint })
    }

    async fn attempt(&self, target: &EventBridgeTarget, m: &Message<'_>) -> Outcome {
        let time = chrono::DateTime::parse_from_rfc3339(m.time).ok().map(|t| t.timestamp());
        match self.put(target, m.source, m.ce_type, time, structured(m).to_string()).await {
            Ok(()) => Outcome::Delivered { status: None, response: None, stalled: false },
            Err(f) => Outcome::Failed(f),
        }
    }

    async fn check(&self, target: &EventBridgeTarget, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure> {
        let detail =
            json!({"type": "streaming_hub.verification", "tenantid": tenant, "subscription_id": subscription_id});
        self.put(target, "streaming-hub", "streaming_hub.verification", None, detail.to_string())
            .await
            .map(|()| Probed::default())
    }
}
