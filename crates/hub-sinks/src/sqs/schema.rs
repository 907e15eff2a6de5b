//! What the API takes for this sink: its OpenAPI schema, which the request is read into (the
//! checks serde cannot make are in `config.rs`).

use serde::Deserialize;
use utoipa::ToSchema;

use crate::aws::schema::AwsCredentials;
use crate::fields::Given;

/// An SQS queue; FIFO queues get a message group and deduplication id.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/lerian-events", "region": "us-east-1"}))]
pub struct SqsSink {
    #[schema(format = Uri)]
    pub queue_url: String,
    pub region: String,
    /// Another SQS-compatible endpoint.
    #[schema(format = Uri)]
    pub endpoint_url: Option<String>,
    /// `null` removes stored credentials on `PATCH`; omitted keeps them.
    #[serde(default)]
    #[schema(value_type = Option<AwsCredentials>)]
    pub credentials: Given<AwsCredentials>,
}
