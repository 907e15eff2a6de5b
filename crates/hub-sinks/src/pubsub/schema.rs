//! What the API takes for this sink: its OpenAPI schema, which the request is read into (the
//! checks serde cannot make are in `config.rs`).

use serde::Deserialize;
use utoipa::ToSchema;

use crate::fields::Given;

/// A Google Cloud Pub/Sub topic: each event one message, the body as its data, the CloudEvents
/// attributes as message attributes (`ce-*`); with the subscription's `"ordering": "key"`, the
/// event's ordering key as the message's. Acknowledged when Pub/Sub has stored it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "pubsub", "project": "lerian-prod", "topic": "lerian-events",
                          "endpoint_url": "http://127.0.0.1:8085"}))]
pub struct PubsubSink {
    /// The project id.
    #[schema(min_length = 6, max_length = 30)]
    pub project: String,
    /// The topic id (it must exist; it is never created).
    #[schema(min_length = 3, max_length = 255)]
    pub topic: String,
    /// A service account key: the text of the JSON file Google issues (its object is taken too),
    /// sealed at rest and never shown; `null` removes it on `PATCH`, omitted keeps it. Required
    /// for Google's endpoints (`*.googleapis.com`); omit it for an emulator named by
    /// `endpoint_url` (as in the example).
    #[serde(default)]
    #[schema(write_only, content_media_type = "application/json", value_type = Option<String>)]
    pub credentials_json: Given<serde_json::Value>,
    /// Another endpoint: an emulator, or a regional or private one (`https`; `http` only with
    /// private sinks allowed and no key).
    #[schema(format = Uri)]
    pub endpoint_url: Option<String>,
}
