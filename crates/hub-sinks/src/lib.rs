//! Streaming Hub sinks: where events are pushed.
//!
//! A sink makes exactly one attempt and classifies its outcome; it never retries, sleeps or
//! decides about backoff, breakers or dead letters (the dispatcher does, from `hub-core`'s
//! decisions). This is the only crate that speaks to destinations. Every sink passes the one
//! contract harness in `tests/it`.
//!
//! **A sink describes itself.** Its folder holds its request (`schema.rs`: the OpenAPI schema
//! a `sink` object is read into), its configuration and the checks from one to the other
//! (`config.rs`), and its [`TypedSink`]: name, configuration type, request type, constructor,
//! attempt and probe. The list below names every sink, once; the registry
//! (`registry.rs`) derives from it the [`Destination`] enum, the parse dispatch, the sinks of a
//! process ([`Sinks`]) and the OpenAPI schema of a `sink`. Adding a sink is one folder and one
//! line here. The arrows run one way: this list → `registry` → each sink's folder → the base
//! modules (`sink`, `fields`, `message`, `guard`, `cache`, `aws`), which name no sink.
#![forbid(unsafe_code)]

pub mod aws;
pub mod cache;
pub mod fields;
pub mod guard;
pub mod message;
pub mod sink;

/// Declares each sink's folder and `with_sinks!`, which hands the list to a macro of the
/// registry's (so the list is written once).
macro_rules! sinks {
    ($($variant:ident: $module:ident :: $sink:ident),* $(,)?) => {
        sinks!(@ ($) $($variant: $module::$sink),*);
    };
    (@ ($d:tt) $($variant:ident: $module:ident :: $sink:ident),*) => {
        $(pub mod $module;)*
        macro_rules! with_sinks {
            ($d then:ident) => { $d then! { $($variant: $module::$sink),* } };
        }
    };
}

// The sinks: the `Destination` variant, the folder and the sink type of each.
sinks! {
    Webhook: webhook::WebhookSink,
    Sqs: sqs::SqsSink,
    Rabbitmq: rabbitmq::RabbitSink,
    Eventbridge: eventbridge::EventBridgeSink,
    Kafka: kafka::KafkaSink,
    Sns: sns::SnsSink,
    Kinesis: kinesis::KinesisSink,
    S3: s3::S3Sink,
    Nats: nats::NatsSink,
    Pubsub: pubsub::PubSubSink,
}

pub mod destination;
pub mod registry;

pub use aws::{AwsCredentials, AwsEndpoint, AwsSettings};
pub use message::{Message, attributes, structured};
pub use registry::{Destination, Sink, SinkSchema, Sinks};
pub use sink::{
    BROKER_TIMEOUT, Failure, FailureKind, NOT_REACHED, Outcome, Owner, Probed, RESPONSE_CAP, Secrets, Settings,
    TokenIssuer, TypedSink, cap_text, install_crypto_provider,
};
