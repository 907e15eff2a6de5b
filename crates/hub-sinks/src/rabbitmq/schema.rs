//! What the API takes for this sink (its OpenAPI schema): read by the registry, checked against the
//! parse by the tests that create a subscription from each schema's example.
#![allow(dead_code)]

use serde::Deserialize;
use utoipa::ToSchema;

/// A RabbitMQ exchange; the password in `url` is sealed at rest and removed from the shown URL.
#[derive(Debug, Deserialize, ToSchema)]
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
