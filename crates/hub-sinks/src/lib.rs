//! Streaming Hub sinks: where events are pushed.
//!
//! A [`Sink`] makes exactly one attempt and classifies its outcome; it never retries, sleeps or
//! decides about backoff, breakers or dead letters (the dispatcher does, from `hub-core`'s
//! decisions). This is the only crate that speaks to destinations. Every sink passes the one
//! contract harness in `tests/it`.
//!
//! One folder per sink (`webhook/`, `sqs/`, `rabbitmq/`, `eventbridge/`, `kafka/`, `sns/`,
//! `kinesis/`, `s3/`) holds its configuration
//! and validation (`config.rs`) and its [`TypedSink`]; [`Sinks`] (`registry.rs`) is the one
//! registry, and the rest of the hub holds it as a `&dyn Sink`.
#![forbid(unsafe_code)]

pub mod aws;
pub mod cache;
pub mod destination;
pub mod eventbridge;
pub mod fields;
pub mod guard;
pub mod kafka;
pub mod kinesis;
pub mod message;
pub mod rabbitmq;
pub mod registry;
pub mod s3;
pub mod sns;
pub mod sqs;
pub mod webhook;

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

pub use aws::web_identity::TokenIssuer;
pub use aws::{AwsCredentials, AwsEndpoint, AwsSettings};
pub use destination::{Destination, Owner, Secrets};
pub use eventbridge::{EventBridgeSink, EventBridgeTarget};
pub use kafka::{KafkaSink, KafkaTarget};
pub use kinesis::{KinesisSink, KinesisTarget};
pub use message::{Message, attributes, structured};
pub use rabbitmq::{RabbitSink, RabbitTarget};
pub use registry::Sinks;
pub use s3::{S3Sink, S3Target};
pub use sns::{SnsSink, SnsTarget};
pub use sqs::{SqsSink, SqsTarget};
pub use webhook::{WebhookSink, WebhookTarget};

/// Timeout of one broker or AWS call.
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest part of a destination's response kept with an attempt.
pub const RESPONSE_CAP: usize = 4096;

/// Why an attempt failed, classified for the dispatcher. Never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// False when retrying cannot help (the dispatcher still follows its policy).
    pub retryable: bool,
    pub kind: FailureKind,
    pub reason: String,
    pub status: Option<u16>,
    pub response: Option<String>,
    /// How long the destination asked to be left alone (`Retry-After` on a `429` or `503`).
    pub retry_after: Option<Duration>,
}

/// What a tenant is told of a destination that could not be reached or is not allowed,
/// whatever the cause: "does not resolve", "resolves to a private address" and "refused the
/// connection" would let a tenant map the operator's internal network by trying names. The
/// cause goes to the operator's log and metrics.
pub const NOT_REACHED: &str = "the destination could not be reached, or is not allowed";

impl Failure {
    /// The failure's kind as a tenant sees it: unreachable and refused by the guard are one.
    pub fn tenant_kind(&self) -> &'static str {
        match self.kind {
            FailureKind::Unreachable | FailureKind::Forbidden => FailureKind::Unreachable.as_str(),
            other => other.as_str(),
        }
    }

    /// The reason as a tenant sees it (verification results, attempts, dead letters):
    /// [`NOT_REACHED`] for every destination that could not be reached or is not allowed.
    pub fn tenant_reason(&self) -> &str {
        match self.kind {
            FailureKind::Unreachable | FailureKind::Forbidden => NOT_REACHED,
            _ => &self.reason,
        }
    }
}

/// The class of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The destination answered and refused (non-2xx, nack, API error).
    Refused,
    /// It could not be reached (DNS, connection, TLS).
    Unreachable,
    /// It did not answer in time.
    Timeout,
    /// It refused the credentials.
    Unauthorized,
    /// The hub's guard refused the destination (private address).
    Forbidden,
    /// The subscription's transform threw, ran out of its budget or answered something that
    /// cannot be sent (SPEC §10): the destination was not reached.
    Transform,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::Transform => "transform_failed",
        }
    }
}

/// The outcome of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Delivered {
        status: Option<u16>,
        response: Option<String>,
    },
    Failed(Failure),
    /// The subscription's transform skipped the event (SPEC §10): nothing was sent.
    Skipped,
}

impl Outcome {
    pub fn is_delivered(&self) -> bool {
        matches!(self, Outcome::Delivered { .. })
    }
}

/// What a successful probe learned of the destination.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Probed {
    /// The rate the receiver declared (`WebHook-Allowed-Rate`, requests per minute).
    pub allowed_rate: Option<f64>,
}

/// Delivers to destinations: what the dispatcher and verification hold (as `&dyn Sink`), and
/// what [`Sinks`] is for every destination type at once.
#[async_trait]
pub trait Sink: Send + Sync + std::fmt::Debug {
    /// Makes exactly one delivery attempt; `max_timeout` caps the destination's own timeout (an
    /// attempt must end well inside its lease).
    async fn deliver(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        message: &Message<'_>,
        max_timeout: Duration,
    ) -> Outcome;

    /// Verifies the destination (SPEC §2.2): `Ok` when it acknowledged a test message.
    async fn probe(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        tenant: &str,
        subscription: Uuid,
        max_timeout: Duration,
    ) -> Result<Probed, Failure>;

    /// The headers (or message attributes) a delivery of `message` would carry, before any
    /// signature: what a transform is shown (SPEC §10). By default the CloudEvents attributes.
    fn headers(&self, _destination: &Destination, message: &Message<'_>) -> Vec<(String, String)> {
        attributes(message)
    }
}

/// One destination type's own side: how it reads its destination into a target, and one attempt
/// or probe against a target. Every `TypedSink` is a [`Sink`].
#[async_trait]
pub trait TypedSink: Send + Sync + std::fmt::Debug {
    /// Where and how to deliver: the destination with its secrets opened.
    type Target: Send + Sync;

    /// The target of `destination` (one of this sink's type), its timeouts capped at
    /// `max_timeout`.
    fn target(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        max_timeout: Duration,
    ) -> Result<Self::Target, Failure>;

    /// Makes exactly one delivery attempt.
    async fn attempt(&self, target: &Self::Target, message: &Message<'_>) -> Outcome;

    /// Verifies the destination: `Ok` when it acknowledged a test message.
    async fn check(&self, target: &Self::Target, tenant: &str, subscription_id: Uuid) -> Result<Probed, Failure>;

    /// The headers or attributes a delivery carries before any signature: by default the
    /// CloudEvents attributes ([`attributes`]), as the brokers' headers and AWS message attributes
    /// carry them.
    fn headers(&self, _destination: &Destination, message: &Message<'_>) -> Vec<(String, String)> {
        attributes(message)
    }
}

#[async_trait]
impl<T: TypedSink> Sink for T {
    async fn deliver(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        message: &Message<'_>,
        max_timeout: Duration,
    ) -> Outcome {
        match self.target(destination, secrets, max_timeout) {
            Ok(target) => self.attempt(&target, message).await,
            Err(failure) => Outcome::Failed(failure),
        }
    }

    async fn probe(
        &self,
        destination: &Destination,
        secrets: &Secrets,
        tenant: &str,
        subscription: Uuid,
        max_timeout: Duration,
    ) -> Result<Probed, Failure> {
        let target = self.target(destination, secrets, max_timeout)?;
        self.check(&target, tenant, subscription).await
    }

    fn headers(&self, destination: &Destination, message: &Message<'_>) -> Vec<(String, String)> {
        TypedSink::headers(self, destination, message)
    }
}

/// A destination the hub cannot use as stored: retried (an operator may fix the key or data).
pub(crate) fn misconfigured(reason: &str) -> Failure {
    refused(reason)
}

/// A refusal worth retrying, with nothing more to tell than its reason.
pub(crate) fn refused(reason: &str) -> Failure {
    Failure {
        retryable: true,
        kind: FailureKind::Refused,
        reason: reason.to_owned(),
        status: None,
        response: None,
        retry_after: None,
    }
}

/// Cuts text at a character boundary at most `max` bytes long.
pub fn cap_text(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned();
    text.trim_end_matches('\u{fffd}').to_owned()
}
