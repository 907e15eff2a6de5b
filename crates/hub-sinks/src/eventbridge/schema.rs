//! What the API takes for this sink: its OpenAPI schema, which the request is read into (the
//! checks serde cannot make are in `config.rs`).

use serde::Deserialize;
use utoipa::ToSchema;

use crate::aws::schema::AwsCredentials;
use crate::fields::Given;

/// An EventBridge bus.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "eventbridge", "event_bus": "lerian-bus", "region": "us-east-1"}))]
pub struct EventbridgeSink {
    /// A bus name or ARN.
    pub event_bus: String,
    pub region: String,
    #[schema(format = Uri)]
    pub endpoint_url: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<AwsCredentials>)]
    pub credentials: Given<AwsCredentials>,
}
