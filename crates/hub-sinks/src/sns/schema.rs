//! What the API takes for this sink: its OpenAPI schema, which the request is read into (the
//! checks serde cannot make are in `config.rs`).

use serde::Deserialize;
use utoipa::ToSchema;

use crate::aws::schema::AwsCredentials;
use crate::fields::Given;

/// An SNS topic: the body is the message, the `ce-*` attributes message attributes (as for
/// SQS); FIFO topics get a message group (the ordering key, else the tenant) and deduplication
/// id (the event id).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:lerian-events", "region": "us-east-1"}))]
pub struct SnsSink {
    /// In the region given.
    pub topic_arn: String,
    pub region: String,
    #[schema(format = Uri)]
    pub endpoint_url: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<AwsCredentials>)]
    pub credentials: Given<AwsCredentials>,
}
