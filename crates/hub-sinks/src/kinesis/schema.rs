//! What the API takes for this sink (its OpenAPI schema): read by the registry, checked against the
//! parse by the tests that create a subscription from each schema's example.
#![allow(dead_code)]

use serde::Deserialize;
use utoipa::ToSchema;

use crate::aws::schema::AwsCredentials;

/// A Kinesis data stream: each event one record, the CloudEvent in structured JSON, its
/// partition key the event's `partitionkey`, else its `subject`, else the tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"type": "kinesis", "stream_name": "lerian-events", "region": "us-east-1"}))]
pub struct KinesisSink {
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._-]+$")]
    pub stream_name: String,
    pub region: String,
    #[schema(format = Uri)]
    pub endpoint_url: Option<String>,
    pub credentials: Option<AwsCredentials>,
}
