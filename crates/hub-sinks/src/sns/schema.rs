//! What the API takes for this sink (its OpenAPI schema): read by the registry, checked against the
//! parse by the tests that create a subscription from each schema's example.
#![allow(dead_code)]

use serde::Deserialize;
use utoipa::ToSchema;

use crate::aws::schema::AwsCredentials;

/// An SNS topic: the body is the message, the `ce-*` attributes message attributes (as for
/// SQS); FIFO topics get a message group (the ordering key, else the tenant) and deduplication
/// id (the event id).
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:lerian-events", "region": "us-east-1"}))]
pub struct SnsSink {
    /// In the region given.
    pub topic_arn: String,
    pub region: String,
    #[schema(format = Uri)]
    pub endpoint_url: Option<String>,
    pub credentials: Option<AwsCredentials>,
}
