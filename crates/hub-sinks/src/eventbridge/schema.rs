//! What the API takes for this sink (its OpenAPI schema): read by the registry, checked against the
//! parse by the tests that create a subscription from each schema's example.
#![allow(dead_code)]

use serde::Deserialize;
use utoipa::ToSchema;

use crate::aws::schema::AwsCredentials;

/// An EventBridge bus.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"type": "eventbridge", "event_bus": "lerian-bus", "region": "us-east-1"}))]
pub struct EventbridgeSink {
    /// A bus name or ARN.
    pub event_bus: String,
    pub region: String,
    #[schema(format = Uri)]
    pub endpoint_url: Option<String>,
    pub credentials: Option<AwsCredentials>,
}
