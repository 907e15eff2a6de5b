//! The EventBridge sink (SPEC §3.7): one `PutEvents` entry per attempt, the CloudEvent in
//! structured JSON form as its detail.

pub mod config;
pub mod schema;

use async_trait::async_trait;
use aws_config::SdkConfig;
use uuid::Uuid;

use crate::aws::sink::{AwsSink, Service};
use crate::aws::{AwsEndpoint, Verification, classify};
use crate::message::{Message, structured};
use crate::sink::{Failure, FailureKind};

/// An EventBridge bus.
#[derive(Debug, Clone)]
pub struct EventBridgeTarget {
    /// A bus name or ARN.
    pub event_bus: String,
    pub endpoint: AwsEndpoint,
}

/// The EventBridge sink.
pub type EventBridgeSink = AwsSink<EventBridge>;

/// EventBridge, as [`AwsSink`] speaks to it.
#[derive(Debug)]
pub struct EventBridge;

impl EventBridge {
    async fn put(
        client: &aws_sdk_eventbridge::Client,
        target: &EventBridgeTarget,
        source: &str,
        detail_type: &str,
        time: Option<i64>,
        detail: String,
    ) -> Result<(), Failure> {
        use aws_sdk_eventbridge::types::PutEventsRequestEntry;
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
impl Service for EventBridge {
    const NAME: &'static str = "eventbridge";
    const SUMMARY: &'static str = "{event_bus} ({region})";
    type Config = config::EventBridgeConfig;
    type Request = schema::EventbridgeSink;
    type Target = EventBridgeTarget;
    type Client = aws_sdk_eventbridge::Client;

    fn client(config: &SdkConfig, _: &AwsEndpoint) -> aws_sdk_eventbridge::Client {
        aws_sdk_eventbridge::Client::new(config)
    }

    fn target(config: &config::EventBridgeConfig, endpoint: AwsEndpoint) -> EventBridgeTarget {
        EventBridgeTarget { event_bus: config.event_bus.clone(), endpoint }
    }

    fn endpoint(target: &EventBridgeTarget) -> &AwsEndpoint {
        &target.endpoint
    }

    async fn send(client: &aws_sdk_eventbridge::Client, target: &EventBridgeTarget, m: &Message<'_>) -> Result<(), Failure> {
        let time = chrono::DateTime::parse_from_rfc3339(m.time).ok().map(|t| t.timestamp());
        Self::put(client, target, m.source, m.ce_type, time, structured(m).to_string()).await
    }

    async fn verify(
        client: &aws_sdk_eventbridge::Client,
        target: &EventBridgeTarget,
        tenant: &str,
        subscription: Uuid,
    ) -> Result<(), Failure> {
        let detail = Verification::record(tenant, subscription);
        Self::put(client, target, "streaming-hub", "streaming_hub.verification", None, detail).await
    }
}
