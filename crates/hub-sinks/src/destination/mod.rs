//! A subscription's destination, typed, and where it is switched on.
//!
//! The API validates a `sink` object into a [`Destination`] (`request.rs`, which hands each type
//! to its sink's `config.rs`); the store keeps it as its own JSON ([`Destination::to_stored`]);
//! the dispatcher and verification read it back once per claim ([`Destination::from_stored`])
//! and hand it, with the subscription's opened [`Secrets`], to the registry
//! ([`crate::Sinks`]), which gives it to its sink. Nothing outside this crate switches on the
//! sink type. Each sink's folder holds its configuration type with its [`SinkConfig`] (identity,
//! what counts as the same connection, where its credentials go), its validation, and its
//! [`crate::TypedSink`] (target, attempt, probe).

pub mod request;

use hub_core::SinkKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

pub use crate::eventbridge::config::EventBridgeConfig;
pub use crate::fields::{Origin, SinkConfig};
pub use crate::kafka::config::{KafkaConfig, Mechanism, Sasl};
pub use crate::kinesis::config::KinesisConfig;
pub use crate::rabbitmq::config::RabbitConfig;
pub use crate::s3::config::S3Config;
pub use crate::sns::config::SnsConfig;
pub use crate::sqs::config::SqsConfig;
pub use crate::webhook::config::{DEFAULT_WEBHOOK_TIMEOUT_MS, WebhookConfig};

/// Where a subscription's events go: one variant per sink type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Destination {
    Webhook(WebhookConfig),
    Sqs(SqsConfig),
    Rabbitmq(RabbitConfig),
    Eventbridge(EventBridgeConfig),
    Kafka(KafkaConfig),
    Sns(SnsConfig),
    Kinesis(KinesisConfig),
    S3(S3Config),
    Pull,
}

/// Calls `$body` with the configuration of any push destination as `$c` (a `&dyn`-free way of
/// reaching each variant's [`SinkConfig`]); `$pull` for a pull destination.
macro_rules! each_config {
    ($d:expr, $c:ident => $body:expr, pull => $pull:expr) => {
        match $d {
            Destination::Webhook($c) => $body,
            Destination::Sqs($c) => $body,
            Destination::Rabbitmq($c) => $body,
            Destination::Eventbridge($c) => $body,
            Destination::Kafka($c) => $body,
            Destination::Sns($c) => $body,
            Destination::Kinesis($c) => $body,
            Destination::S3($c) => $body,
            Destination::Pull => $pull,
        }
    };
}

impl Destination {
    /// Reads a destination as the store keeps it.
    pub fn from_stored(value: &Value) -> Result<Self, String> {
        Self::deserialize(value).map_err(|e| format!("the stored destination is not readable: {e}"))
    }

    /// How a webhook signs (`None` for other sinks).
    pub fn signature(&self) -> Option<hub_core::signature::Scheme> {
        match self {
            Self::Webhook(c) => Some(c.signature),
            _ => None,
        }
    }

    /// The signature scheme of a stored destination (`None` for other sinks or when unreadable).
    pub fn stored_signature(value: &Value) -> Option<hub_core::signature::Scheme> {
        Self::from_stored(value).ok()?.signature()
    }

    /// The destination as the store keeps it and the API shows it (it holds no secret).
    pub fn to_stored(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    pub fn kind(&self) -> SinkKind {
        match self {
            Self::Webhook(_) => SinkKind::Webhook,
            Self::Sqs(_) => SinkKind::Sqs,
            Self::Rabbitmq(_) => SinkKind::Rabbitmq,
            Self::Eventbridge(_) => SinkKind::Eventbridge,
            Self::Kafka(_) => SinkKind::Kafka,
            Self::Sns(_) => SinkKind::Sns,
            Self::Kinesis(_) => SinkKind::Kinesis,
            Self::S3(_) => SinkKind::S3,
            Self::Pull => SinkKind::Pull,
        }
    }

    /// [`SinkConfig::key`]; a pull subscription is its own destination (`subscription`).
    pub fn key(&self, subscription: Uuid) -> String {
        each_config!(self, c => c.key(), pull => format!("pull {subscription}"))
    }

    /// [`SinkConfig::same_connection`]; destinations of two types never are.
    pub fn same_connection(&self, other: &Destination) -> bool {
        match (self, other) {
            (Self::Webhook(a), Self::Webhook(b)) => a.same_connection(b),
            (Self::Sqs(a), Self::Sqs(b)) => a.same_connection(b),
            (Self::Eventbridge(a), Self::Eventbridge(b)) => a.same_connection(b),
            (Self::Rabbitmq(a), Self::Rabbitmq(b)) => a.same_connection(b),
            (Self::Kafka(a), Self::Kafka(b)) => a.same_connection(b),
            (Self::Sns(a), Self::Sns(b)) => a.same_connection(b),
            (Self::Kinesis(a), Self::Kinesis(b)) => a.same_connection(b),
            (Self::S3(a), Self::S3(b)) => a.same_connection(b),
            (Self::Pull, Self::Pull) => true,
            _ => false,
        }
    }

    /// [`SinkConfig::credentials_field`]; a pull destination has no credentials.
    pub fn credentials_field(&self) -> &'static str {
        each_config!(self, c => c.credentials_field(), pull => "sink")
    }

    /// The role an AWS destination assumes with the hub's own token, when it does.
    pub fn web_identity(&self) -> Option<&crate::aws::config::WebIdentity> {
        let access = match self {
            Self::Sqs(c) => &c.credentials,
            Self::Sns(c) => &c.credentials,
            Self::Eventbridge(c) => &c.credentials,
            Self::Kinesis(c) => &c.credentials,
            Self::S3(c) => &c.credentials,
            _ => return None,
        };
        access.as_ref().map(|a| &a.web_identity)
    }

    /// [`SinkConfig::credential_origins`].
    pub fn credential_origins(&self) -> Vec<Origin> {
        each_config!(self, c => c.credential_origins(), pull => Vec::new())
    }
}

/// A subscription's secrets, opened in memory for one attempt or probe.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Webhook signing secrets: the current one first, the previous one during a rotation.
    pub signing: Vec<String>,
    /// Sink credentials, as the API took them (a JSON object).
    pub credentials: Option<Value>,
    /// Whose destination it is: what the hub's web identity tokens name (AWS sinks that assume
    /// a role).
    pub owner: Option<Owner>,
}

/// The subscription a destination belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub tenant: String,
    pub subscription: Uuid,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("signing", &self.signing.len())
            .field("credentials", &self.credentials.is_some())
            .field("owner", &self.owner)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hub_core::signature::Scheme;

    use super::*;

    #[test]
    fn stored_destinations_round_trip() {
        let cases = [
            serde_json::json!({"type": "webhook", "url": "https://a.example/h", "headers": {"X-Team": "risk"}, "timeout_ms": 2000, "signature": "lerian"}),
            serde_json::json!({"type": "webhook", "url": "https://a.example/h", "headers": {}, "timeout_ms": 2000, "signature": "standard-webhooks"}),
            serde_json::json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "us-east-1"}),
            serde_json::json!({"type": "eventbridge", "event_bus": "b", "region": "eu-west-1", "endpoint_url": "http://127.0.0.1:5000/"}),
            serde_json::json!({"type": "rabbitmq", "url": "amqps://hub@mq.example/vh", "exchange": "e", "routing_key": "{event}"}),
            serde_json::json!({"type": "pull"}),
        ];
        for stored in cases {
            let d = Destination::from_stored(&stored).expect("readable");
            assert_eq!(d.to_stored(), stored);
            assert_eq!(d.kind().as_str(), stored["type"]);
        }
        let old_webhook = serde_json::json!({"type": "webhook", "url": "https://a.example/h"});
        let d = Destination::from_stored(&old_webhook).expect("readable");
        assert!(matches!(
            d,
            Destination::Webhook(WebhookConfig {
                timeout_ms: DEFAULT_WEBHOOK_TIMEOUT_MS,
                signature: Scheme::Lerian,
                ..
            })
        ));
        assert!(Destination::from_stored(&serde_json::json!({"type": "ftp"})).is_err());
    }

    #[test]
    fn a_connection_is_where_and_how_not_timeouts_or_headers() {
        let hook = |url: &str, timeout_ms| {
            Destination::Webhook(WebhookConfig {
                url: url.into(),
                headers: BTreeMap::new(),
                timeout_ms,
                signature: Scheme::Lerian,
                auth: None,
                tls: None,
            })
        };
        assert!(hook("https://a/h", 100).same_connection(&hook("https://a/h", 5000)));
        let standard = Destination::Webhook(WebhookConfig {
            url: "https://a/h".into(),
            headers: BTreeMap::new(),
            timeout_ms: 100,
            signature: Scheme::StandardWebhooks,
            auth: None,
            tls: None,
        });
        assert!(!hook("https://a/h", 100).same_connection(&standard), "receivers verify another way");
        assert!(!hook("https://a/h", 100).same_connection(&hook("https://b/h", 100)));
        assert!(!hook("https://a/h", 100).same_connection(&Destination::Pull));
        let mq = |url: &str| {
            Destination::Rabbitmq(RabbitConfig { url: url.into(), exchange: "e".into(), routing_key: String::new() })
        };
        assert_eq!(mq("amqps://h@a.example/x").credential_origins(), mq("amqps://h@a.example/y").credential_origins());
        assert_ne!(mq("amqps://h@a.example/x").credential_origins(), mq("amqps://h@b.example/x").credential_origins());
        assert_ne!(mq("amqps://h@a.example/x").credential_origins(), mq("amqp://h@a.example/x").credential_origins());
    }
}
