//! Streaming Hub sinks: where events are pushed.
//!
//! A [`Sink`] makes exactly one attempt and classifies its outcome; it never retries, sleeps or
//! decides about backoff, breakers or dead letters (the dispatcher does, from `hub-core`'s
//! decisions). This is the only crate that speaks to destinations. Every sink passes the one
//! contract harness in `tests/it`.
#![forbid(unsafe_code)]

pub mod aws;
pub mod cache;
pub mod destination;
pub mod guard;
pub mod rabbitmq;
pub mod webhook;

use std::collections::BTreeMap;

use async_trait::async_trait;
use uuid::Uuid;

pub use aws::{AwsCredentials, AwsEndpoint, EventBridgeSink, EventBridgeTarget, SqsSink, SqsTarget};
pub use destination::{Destination, Secrets, Sinks};
pub use rabbitmq::{RabbitSink, RabbitTarget};
pub use webhook::{WebhookSink, WebhookTarget};

/// Largest part of a destination's response kept with an attempt.
pub const RESPONSE_CAP: usize = 4096;

/// One event to deliver, with the attempt's identity.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    pub tenant: &'a str,
    pub subscription_id: Uuid,
    pub ce_id: Uuid,
    pub source: &'a str,
    pub ce_type: &'a str,
    pub resource_type: &'a str,
    pub event_type: &'a str,
    pub time: &'a str,
    pub schema_version: &'a str,
    pub subject: Option<&'a str>,
    /// The body's media type (`ce-datacontenttype`, default `application/json`).
    pub content_type: &'a str,
    pub data_schema: Option<&'a str>,
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
    pub extensions: &'a BTreeMap<String, String>,
    /// The body exactly as received.
    pub payload: &'a [u8],
    /// 1-based.
    pub attempt: u32,
    /// New for every attempt.
    pub delivery_id: Uuid,
}

impl Message<'_> {
    /// The event key `<resourcetype>.<eventtype>`.
    pub fn event_key(&self) -> String {
        format!("{}.{}", self.resource_type, self.event_type)
    }
}

/// Why an attempt failed, classified for the dispatcher. Never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// False when retrying cannot help (the dispatcher still follows its policy).
    pub retryable: bool,
    pub kind: FailureKind,
    pub reason: String,
    pub status: Option<u16>,
    pub response: Option<String>,
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
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
        }
    }
}

/// The outcome of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Delivered { status: Option<u16>, response: Option<String> },
    Failed(Failure),
}

impl Outcome {
    pub fn is_delivered(&self) -> bool {
        matches!(self, Outcome::Delivered { .. })
    }
}

/// A destination type.
#[async_trait]
pub trait Sink: Send + Sync {
    /// Where and how to deliver: the subscription's destination with its secrets opened.
    type Target: Send + Sync;

    /// Makes exactly one delivery attempt.
    async fn deliver(&self, target: &Self::Target, message: &Message<'_>) -> Outcome;

    /// Verifies the destination (SPEC §2.2): `Ok` when it acknowledged a test message.
    async fn probe(&self, target: &Self::Target, tenant: &str, subscription_id: Uuid) -> Result<(), Failure>;
}

/// Cuts text at a character boundary at most `max` bytes long.
pub fn cap_text(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned();
    text.trim_end_matches('\u{fffd}').to_owned()
}
