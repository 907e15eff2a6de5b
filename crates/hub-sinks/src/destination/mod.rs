//! A subscription's destination, typed, and the one place that dispatches on its type.
//!
//! The API validates a `sink` object into a [`Destination`]; the store keeps it as its own JSON
//! ([`Destination::to_stored`]); the dispatcher and verification read it back once per attempt
//! ([`Destination::from_stored`]) and hand it, with the subscription's opened [`Secrets`], to
//! [`Sinks::deliver`] or [`Sinks::probe`]. Nothing outside this crate switches on the sink type:
//! adding a sink is a variant here, its config type, and its module.

pub mod request;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hub_core::SinkKind;
use hub_core::signature::Scheme;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    AwsCredentials, AwsEndpoint, EventBridgeSink, EventBridgeTarget, Failure, FailureKind, Message, Outcome,
    RabbitSink, RabbitTarget, Sink, SqsSink, SqsTarget, WebhookSink, WebhookTarget,
};

/// The default request timeout of a webhook.
pub const DEFAULT_WEBHOOK_TIMEOUT_MS: u64 = 10_000;
/// Timeout of one broker or AWS call.
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(10);

fn default_timeout_ms() -> u64 {
    DEFAULT_WEBHOOK_TIMEOUT_MS
}

/// Where a subscription's events go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Destination {
    Webhook(WebhookConfig),
    Sqs(SqsConfig),
    Rabbitmq(RabbitConfig),
    Eventbridge(EventBridgeConfig),
    Pull,
}

/// A webhook: a signed `POST` to `url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookConfig {
    pub url: String,
    /// Static headers sent with every delivery.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// How requests are signed (`lerian`, the default, or `standard-webhooks`).
    #[serde(default)]
    pub signature: Scheme,
}

/// An SQS queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqsConfig {
    pub queue_url: String,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
}

/// An EventBridge bus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventBridgeConfig {
    pub event_bus: String,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
}

/// A RabbitMQ exchange; the URL never holds the password (a credential, kept sealed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RabbitConfig {
    pub url: String,
    pub exchange: String,
    #[serde(default)]
    pub routing_key: String,
}

/// The scheme, host and port of a URL a destination connects through.
pub type Origin = Option<(String, String, Option<u16>)>;

fn origin(url: Option<&str>) -> Origin {
    let url = url::Url::parse(url?).ok()?;
    Some((url.scheme().to_owned(), url.host_str()?.to_owned(), url.port_or_known_default()))
}

impl Destination {
    /// Reads a destination as the store keeps it.
    pub fn from_stored(value: &Value) -> Result<Self, String> {
        Self::deserialize(value).map_err(|e| format!("the stored destination is not readable: {e}"))
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
            Self::Pull => SinkKind::Pull,
        }
    }

    /// What identifies the destination for the breaker and the per-destination worker cap: the
    /// same URL (or queue, bus, exchange) is one destination, whichever subscription points at
    /// it. A pull subscription is its own (`subscription`).
    pub fn key(&self, subscription: Uuid) -> String {
        match self {
            Self::Webhook(c) => format!("webhook {}", c.url),
            Self::Sqs(c) => format!("sqs {}", c.queue_url),
            Self::Eventbridge(c) => format!("eventbridge {} {}", c.region, c.event_bus),
            Self::Rabbitmq(c) => format!("rabbitmq {} {}", c.url, c.exchange),
            Self::Pull => format!("pull {subscription}"),
        }
    }

    /// Whether `other` connects to the same place in the same way (what a probe proved, which
    /// for a webhook includes how it is signed); timeouts and static headers do not count.
    pub fn same_connection(&self, other: &Destination) -> bool {
        match (self, other) {
            (Self::Webhook(a), Self::Webhook(b)) => (&a.url, a.signature) == (&b.url, b.signature),
            (Self::Sqs(a), Self::Sqs(b)) => {
                (&a.queue_url, &a.region, &a.endpoint_url) == (&b.queue_url, &b.region, &b.endpoint_url)
            }
            (Self::Eventbridge(a), Self::Eventbridge(b)) => {
                (&a.event_bus, &a.region, &a.endpoint_url) == (&b.event_bus, &b.region, &b.endpoint_url)
            }
            (Self::Rabbitmq(a), Self::Rabbitmq(b)) => {
                (&a.url, &a.exchange, &a.routing_key) == (&b.url, &b.exchange, &b.routing_key)
            }
            (Self::Pull, Self::Pull) => true,
            _ => false,
        }
    }

    /// The scheme, host and port of each URL the destination's credentials are sent to: stored
    /// credentials may follow a change only while these stay the same.
    pub fn credential_origins(&self) -> Vec<Origin> {
        match self {
            Self::Rabbitmq(c) => vec![origin(Some(&c.url))],
            Self::Sqs(c) => vec![origin(Some(&c.queue_url)), origin(c.endpoint_url.as_deref())],
            Self::Eventbridge(c) => vec![origin(c.endpoint_url.as_deref())],
            Self::Webhook(_) | Self::Pull => Vec::new(),
        }
    }
}

/// A subscription's secrets, opened in memory for one attempt or probe.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Webhook signing secrets: the current one first, the previous one during a rotation.
    pub signing: Vec<String>,
    /// Sink credentials, as the API took them (a JSON object).
    pub credentials: Option<Value>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("signing", &self.signing.len())
            .field("credentials", &self.credentials.is_some())
            .finish()
    }
}

/// Every sink of a process (each pools its connections), dispatching on the destination.
#[derive(Debug, Clone)]
pub struct Sinks {
    webhook: WebhookSink,
    sqs: Arc<SqsSink>,
    eventbridge: Arc<EventBridgeSink>,
    rabbitmq: Arc<RabbitSink>,
    /// Used by SQS and EventBridge destinations that name no endpoint (the operator's own).
    aws_endpoint_url: Option<String>,
    /// Whether sinks may connect to private addresses (each sink's guard reads it).
    allow_private: bool,
}

/// A destination's target, built for one attempt: its sink and what that sink needs.
enum Target {
    Webhook(WebhookTarget),
    Sqs(SqsTarget),
    Eventbridge(EventBridgeTarget),
    Rabbitmq(RabbitTarget),
}

impl Sinks {
    pub fn new(
        allow_private: bool,
        aws_default_credentials: bool,
        aws_endpoint_url: Option<String>,
    ) -> Result<Self, String> {
        Ok(Self {
            webhook: WebhookSink::new(allow_private)?,
            sqs: Arc::new(SqsSink::new(aws_default_credentials)),
            eventbridge: Arc::new(EventBridgeSink::new(aws_default_credentials)),
            rabbitmq: Arc::new(RabbitSink::new()),
            aws_endpoint_url,
            allow_private,
        })
    }

    /// Makes exactly one delivery attempt; `max_timeout` caps the destination's own timeout
    /// (an attempt must end well inside its lease).
    pub async fn deliver(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        message: &Message<'_>,
        max_timeout: Duration,
    ) -> Outcome {
        match self.target(destination, secrets, max_timeout) {
            Ok(Target::Webhook(t)) => self.webhook.deliver(&t, message).await,
            Ok(Target::Sqs(t)) => self.sqs.deliver(&t, message).await,
            Ok(Target::Eventbridge(t)) => self.eventbridge.deliver(&t, message).await,
            Ok(Target::Rabbitmq(t)) => self.rabbitmq.deliver(&t, message).await,
            Err(failure) => Outcome::Failed(failure),
        }
    }

    /// Verifies the destination (SPEC §2.2); a pull destination has nothing to verify.
    pub async fn probe(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        tenant: &str,
        subscription: Uuid,
        max_timeout: Duration,
    ) -> Result<(), Failure> {
        if *destination == Destination::Pull {
            return Ok(());
        }
        match self.target(destination, secrets, max_timeout)? {
            Target::Webhook(t) => self.webhook.probe(&t, tenant, subscription).await,
            Target::Sqs(t) => self.sqs.probe(&t, tenant, subscription).await,
            Target::Eventbridge(t) => self.eventbridge.probe(&t, tenant, subscription).await,
            Target::Rabbitmq(t) => self.rabbitmq.probe(&t, tenant, subscription).await,
        }
    }

    fn target(&self, destination: &Destination, secrets: &Secrets, max_timeout: Duration) -> Result<Target, Failure> {
        let broker_timeout = BROKER_TIMEOUT.min(max_timeout);
        Ok(match destination {
            Destination::Webhook(c) => Target::Webhook(WebhookTarget {
                url: c.url.parse().map_err(|_| misconfigured("the webhook url is not valid"))?,
                headers: c.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                timeout: Duration::from_millis(c.timeout_ms).min(max_timeout),
                scheme: c.signature,
                secrets: if secrets.signing.is_empty() {
                    return Err(misconfigured("the subscription has no signing secret"));
                } else {
                    secrets.signing.clone()
                },
            }),
            Destination::Sqs(c) => Target::Sqs(SqsTarget {
                queue_url: c.queue_url.clone(),
                endpoint: self.aws_endpoint(&c.region, c.endpoint_url.as_deref(), secrets, broker_timeout),
            }),
            Destination::Eventbridge(c) => Target::Eventbridge(EventBridgeTarget {
                event_bus: c.event_bus.clone(),
                endpoint: self.aws_endpoint(&c.region, c.endpoint_url.as_deref(), secrets, broker_timeout),
            }),
            Destination::Rabbitmq(c) => Target::Rabbitmq(RabbitTarget {
                url: c.url.clone(),
                password: secrets.credentials.as_ref().and_then(|v| v["password"].as_str().map(str::to_owned)),
                exchange: c.exchange.clone(),
                routing_key: c.routing_key.clone(),
                timeout: broker_timeout,
                allow_private: self.allow_private,
            }),
            Destination::Pull => return Err(misconfigured("a pull subscription has no push destination")),
        })
    }

    fn aws_endpoint(&self, region: &str, endpoint: Option<&str>, secrets: &Secrets, timeout: Duration) -> AwsEndpoint {
        let text = |c: &Value, name: &str| c[name].as_str().unwrap_or_default().to_owned();
        AwsEndpoint {
            region: region.to_owned(),
            check_endpoint: endpoint.is_some() && !self.allow_private,
            endpoint_url: endpoint.map(str::to_owned).or_else(|| self.aws_endpoint_url.clone()),
            credentials: secrets.credentials.as_ref().map(|c| AwsCredentials {
                access_key_id: text(c, "access_key_id"),
                secret_access_key: text(c, "secret_access_key"),
                session_token: c["session_token"].as_str().map(str::to_owned),
            }),
            timeout,
        }
    }
}

/// A destination the hub cannot use as stored: retried (an operator may fix the key or data).
fn misconfigured(reason: &str) -> Failure {
    Failure { retryable: true, kind: FailureKind::Refused, reason: reason.to_owned(), status: None, response: None }
}

#[cfg(test)]
mod tests {
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
            })
        };
        assert!(hook("https://a/h", 100).same_connection(&hook("https://a/h", 5000)));
        let standard = Destination::Webhook(WebhookConfig {
            url: "https://a/h".into(),
            headers: BTreeMap::new(),
            timeout_ms: 100,
            signature: Scheme::StandardWebhooks,
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
