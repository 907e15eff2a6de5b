//! What the API takes for this sink: its OpenAPI schema, which the request is read into (the
//! checks serde cannot make are in `config.rs`).

use serde::Deserialize;
use utoipa::ToSchema;

use crate::aws::schema::AwsCredentials;
use crate::fields::Given;

/// A Kinesis data stream: each event one record, the CloudEvent in structured JSON, its
/// partition key the event's `partitionkey`, else its `subject`, else the tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"type": "kinesis", "stream_name": "lerian-events", "region": "us-east-1"}))]
pub struct KinesisSink {
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._-]+$")]
    pub stream_name: String,
    pub region: String,
    #[schema(format = Uri)]
    pub endpoint_url: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<AwsCredentials>)]
    pub credentials: Given<AwsCredentials>,
}
