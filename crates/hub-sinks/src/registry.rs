//! The one registry of sinks: every destination type with the sink that serves it.
//!
//! Adding a sink registers it here, once; the dispatcher and verification hold the registry as a
//! `&dyn Sink` and never switch on the type.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hub_core::SinkKind;
use uuid::Uuid;

use crate::{
    AwsSettings, Destination, EventBridgeSink, Failure, KafkaSink, KinesisSink, Message, Outcome, Probed, RabbitSink,
    S3Sink, Secrets, Sink, SnsSink, SqsSink, TokenIssuer, WebhookSink,
};

/// Every sink of a process (each pools its connections), by the destination type it serves.
#[derive(Debug, Clone)]
pub struct Sinks {
    registry: Vec<(SinkKind, Arc<dyn Sink>)>,
}

impl Sinks {
    /// The sinks of a process. `allow_private`: sinks may connect to private addresses; the
    /// rest is how the AWS sinks' clients get their credentials and endpoint (`issuer`: the hub's
    /// OIDC issuer, for destinations that assume a role).
    pub fn new(
        allow_private: bool,
        aws_default_credentials: bool,
        aws_endpoint_url: Option<String>,
        issuer: Option<Arc<dyn TokenIssuer>>,
    ) -> Result<Self, String> {
        let aws = AwsSettings {
            default_chain: aws_default_credentials,
            endpoint_url: aws_endpoint_url,
            allow_private,
            issuer,
        };
        let registry: Vec<(SinkKind, Arc<dyn Sink>)> = vec![
            (SinkKind::Webhook, Arc::new(WebhookSink::new(allow_private)?)),
            (SinkKind::Sqs, Arc::new(SqsSink::new(aws.clone()))),
            (SinkKind::Eventbridge, Arc::new(EventBridgeSink::new(aws.clone()))),
            (SinkKind::Rabbitmq, Arc::new(RabbitSink::new(allow_private))),
            (SinkKind::Kafka, Arc::new(KafkaSink::new(allow_private))),
            (SinkKind::Sns, Arc::new(SnsSink::new(aws.clone()))),
            (SinkKind::Kinesis, Arc::new(KinesisSink::new(aws.clone()))),
            (SinkKind::S3, Arc::new(S3Sink::new(aws))),
        ];
        Ok(Self { registry })
    }

    /// The sink of a destination type; `None` for one that is not pushed (pull).
    pub fn sink(&self, kind: SinkKind) -> Option<&dyn Sink> {
        self.registry.iter().find(|(k, _)| *k == kind).map(|(_, sink)| sink.as_ref())
    }
}

#[async_trait]
impl Sink for Sinks {
    async fn deliver(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        message: &Message<'_>,
        max_timeout: Duration,
    ) -> Outcome {
        match self.sink(destination.kind()) {
            Some(sink) => sink.deliver(destination, secrets, message, max_timeout).await,
            None => Outcome::Failed(crate::misconfigured("a pull subscription has no push destination")),
        }
    }

    /// A pull destination has nothing to verify.
    async fn probe(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        tenant: &str,
        subscription: Uuid,
        max_timeout: Duration,
    ) -> Result<Probed, Failure> {
        match self.sink(destination.kind()) {
            Some(sink) => sink.probe(destination, secrets, tenant, subscription, max_timeout).await,
            None => Ok(Probed::default()),
        }
    }

    fn headers(&self, destination: &Destination, message: &Message<'_>) -> Vec<(String, String)> {
        self.sink(destination.kind()).map(|sink| sink.headers(destination, message)).unwrap_or_default()
    }
}
