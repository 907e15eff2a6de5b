//! What the API takes for this sink: its OpenAPI schema, which the request is read into (the
//! checks serde cannot make are in `config.rs`).

use serde::Deserialize;
use utoipa::ToSchema;

use super::config::Mechanism as KafkaMechanism;
use crate::fields::Given;

/// A topic of the tenant's own Kafka cluster, written with the CloudEvents Kafka binding in
/// binary mode (`ce_*` headers, the body as the value, `content-type`); the record key is the
/// `partitionkey`, else the `subject`, else the tenant. Acknowledged by every in-sync replica,
/// through an idempotent producer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "kafka", "brokers": "kafka-1.example.com:9093,kafka-2.example.com:9093", "topic": "lerian.events", "tls": true, "sasl": {"mechanism": "SCRAM-SHA-512", "username": "hub", "password": "secret"}}))]
pub struct KafkaSink {
    /// Bootstrap brokers, `host:port`, comma-separated (at most 16).
    pub brokers: String,
    /// 1 to 249 letters, digits, `.`, `_` and `-`; it must exist (it is never created).
    #[schema(min_length = 1, max_length = 249, pattern = "^[A-Za-z0-9._-]+$")]
    pub topic: String,
    /// TLS to every broker (required with `sasl` unless private sinks are allowed).
    pub tls: Option<bool>,
    /// `null` removes the login on `PATCH`; omitted keeps it.
    #[serde(default)]
    #[schema(value_type = Option<KafkaSasl>)]
    pub sasl: Given<KafkaSasl>,
}

/// A SASL login; the password is sealed at rest and never shown.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaSasl {
    pub mechanism: KafkaMechanism,
    #[schema(min_length = 1, max_length = 255)]
    pub username: String,
    /// Omitted on `PATCH` keeps the stored one.
    #[schema(write_only)]
    pub password: Option<String>,
}
