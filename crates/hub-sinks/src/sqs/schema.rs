//! What the API takes for this sink (its OpenAPI schema): read by the registry, checked against the
//! parse by the tests that create a subscription from each schema's example.
#![allow(dead_code)]

use serde::Deserialize;
use utoipa::ToSchema;

use crate::aws::schema::AwsCredentials;

/// An SQS queue; FIFO queues get a message group and deduplication id.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/lerian-events", "region": "us-east-1"}))]
pub struct SqsSink {
    #[schema(format = Uri)]
    pub queue_url: String,
    pub region: String,
    /// Another SQS-compatible endpoint.
    #[schema(format = Uri)]
    pub endpoint_url: Option<String>,
    /// `null` removes stored credentials on `PATCH`; omitted keeps them.
    pub credentials: Option<AwsCredentials>,
}
