//! What the API takes for this sink: its OpenAPI schema, which the request is read into (the
//! checks serde cannot make are in `config.rs`).

use serde::Deserialize;
use utoipa::ToSchema;

/// A RabbitMQ exchange; the password in `url` is sealed at rest and removed from the shown URL.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "rabbitmq", "url": "amqps://hub:secret@mq.example.com/vhost", "exchange": "lerian.events", "routing_key": "{resource}.{event}"}))]
pub struct RabbitmqSink {
    /// `amqps` (or `amqp` with private sinks allowed).
    // `x-secret`: it holds a secret (the password), so forms never show it back.
    #[schema(extensions(("x-secret" = json!(true))))]
    pub url: String,
    pub exchange: String,
    /// May use `{resource}`, `{event}` and `{source}`.
    pub routing_key: Option<String>,
}
